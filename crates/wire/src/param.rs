//! Request bodies deserialized into typed shapes, with an error that names
//! the `param` at fault (`messages[0].content[1].id`), as the APIs' 400s
//! must.
//!
//! `serde_path_to_error` records where in the document serde failed. Two
//! places it cannot see into are bridged here: an error of a field that is
//! missing (or unknown) is reported at the object holding it, so the field's
//! name is taken from the message; and a tagged enum read through
//! [`Tagged`] (which buffers the object to pick a variant by its `type`)
//! passes the path inside the variant up in the error's text, after
//! [`PATH_MARK`], where [`parse`] joins it to the outer path.

use std::fmt::Display;

use serde::de::{self, DeserializeOwned, Deserializer};
use serde::Deserialize;
use serde_json::{Map, Value};
use serde_path_to_error::Segment;

/// Marks a path inside a buffered variant in the error's text: `MARK path
/// MARK message` (a control character no serde message holds). One mark for
/// both dialects (`responses::nested` writes it too), so either module's
/// errors nest in the other's.
pub(crate) const PATH_MARK: char = '\u{1}';
/// The second mark, before a message of serde's own (which the Responses
/// API words differently): read alike here.
pub(crate) const SERDE_MARK: char = '\u{2}';

/// A request that does not fit its type: where, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamError {
    /// The offending field, as the SDKs name it (`tools[0].name`); empty
    /// for the body as a whole.
    pub param: String,
    pub message: String,
}

impl Display for ParamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.param.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.param, self.message)
        }
    }
}

impl std::error::Error for ParamError {}

/// Deserializes `value` as a `T`, naming the param of the first error.
pub fn parse<T: DeserializeOwned>(value: &Value) -> Result<T, ParamError> {
    serde_path_to_error::deserialize(value).map_err(|error| {
        let path = render(error.path());
        let message = error.into_inner().to_string();
        located(value, path, message)
    })
}

/// `path` from the segments serde went through (`a.b[2].c`).
fn render(path: &serde_path_to_error::Path) -> String {
    let mut rendered = String::new();
    for segment in path.iter() {
        match segment {
            Segment::Seq { index } => rendered.push_str(&format!("[{index}]")),
            Segment::Map { key } => join(&mut rendered, key),
            Segment::Enum { .. } | Segment::Unknown => {}
        }
    }
    rendered
}

/// Appends `key` to `path` with the separator a path needs.
fn join(path: &mut String, key: &str) {
    if !path.is_empty() && !key.starts_with('[') {
        path.push('.');
    }
    path.push_str(key);
}

/// The error at `path` of `document` with its message `message`, its path
/// completed: a buffered variant's inner path, a missing or unknown field's
/// name, an unknown `type` tag.
fn located(document: &Value, mut path: String, message: String) -> ParamError {
    let marked = message.strip_prefix(PATH_MARK).and_then(|rest| {
        rest.find([PATH_MARK, SERDE_MARK])
            .map(|at| (&rest[..at], &rest[at + 1..]))
    });
    let message = match marked {
        Some((inner, rest)) => {
            join(&mut path, inner);
            rest.to_owned()
        }
        None => message,
    };
    for (prefix, replacement) in [
        ("missing field `", "Field required"),
        ("unknown field `", "Extra inputs are not permitted"),
    ] {
        if let Some(field) = message
            .strip_prefix(prefix)
            .and_then(|rest| rest.split('`').next())
        {
            // serde's path already ends at an unknown key, not at a missing one.
            if !(path == field || path.ends_with(&format!(".{field}"))) {
                join(&mut path, field);
            }
            return ParamError {
                param: path,
                message: replacement.to_owned(),
            };
        }
    }
    // A derived tagged enum reports an unknown tag at the object itself.
    if message.starts_with("unknown variant") && at(document, &path).is_some_and(Value::is_object) {
        join(&mut path, "type");
    }
    ParamError {
        param: path,
        message,
    }
}

/// The value at a rendered `path` of `document` (best effort: a key
/// holding `.` or `[` is not found, which only loses the `.type` hint).
fn at<'a>(document: &'a Value, path: &str) -> Option<&'a Value> {
    let mut current = document;
    for part in path.split('.').filter(|p| !p.is_empty()) {
        let (key, indices) = match part.find('[') {
            Some(open) => part.split_at(open),
            None => (part, ""),
        };
        if !key.is_empty() {
            current = current.get(key)?;
        }
        for index in indices.split('[').filter(|i| !i.is_empty()) {
            current = current.get(index.trim_end_matches(']').parse::<usize>().ok()?)?;
        }
    }
    Some(current)
}

/// An error at `path` inside the value being deserialized (joined to the
/// outer path by [`parse`]).
pub(crate) fn nested<E: de::Error>(path: &str, message: impl Display) -> E {
    E::custom(format_args!("{PATH_MARK}{path}{PATH_MARK}{message}"))
}

/// A JSON object buffered to pick a variant of a tagged enum by its `type`
/// (a `type` that may be absent, or an open set of tags, which serde's
/// derived tagged enums cannot express), its variant then read with the
/// path of an error inside it kept.
pub(crate) struct Tagged {
    pub(crate) object: Map<String, Value>,
}

impl<'de> Deserialize<'de> for Tagged {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(Tagged {
            object: Map::deserialize(deserializer)?,
        })
    }
}

impl Tagged {
    /// The `type` tag: absent (or null) is `None`; not a string is an error.
    pub(crate) fn tag<E: de::Error>(&self) -> Result<Option<String>, E> {
        match self.object.get("type") {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(tag)) => Ok(Some(tag.clone())),
            Some(_) => Err(nested("type", "type must be a string")),
        }
    }

    /// The variant's fields (the tag left out: the enum writes it).
    pub(crate) fn variant<T: DeserializeOwned, E: de::Error>(mut self) -> Result<T, E> {
        self.object.remove("type");
        Self::read(Value::Object(self.object))
    }

    /// The whole object, tag included (for a variant that keeps its tag).
    pub(crate) fn whole<T: DeserializeOwned, E: de::Error>(self) -> Result<T, E> {
        Self::read(Value::Object(self.object))
    }

    fn read<T: DeserializeOwned, E: de::Error>(value: Value) -> Result<T, E> {
        serde_path_to_error::deserialize(&value).map_err(|error| {
            let path = render(error.path());
            let located = located(&value, path, error.into_inner().to_string());
            if located.param.is_empty() {
                E::custom(located.message)
            } else {
                nested(&located.param, located.message)
            }
        })
    }
}

/// An error for a `type` this enum does not know.
pub(crate) fn unknown_type<E: de::Error>(tag: Option<&str>, expected: &str) -> E {
    match tag {
        Some(tag) => nested(
            "type",
            format_args!("unknown type '{tag}'; expected {expected}"),
        ),
        None => nested("type", "Field required"),
    }
}
