//! The Responses API on the wire: the create request ([`CreateResponse`]),
//! conversation items ([`Item`]) and their content parts, tools and
//! `tool_choice`, the response object ([`Response`]) and its stream events
//! ([`StreamEvent`]); compaction's request, answer and item ([`compaction`]).
//!
//! Shapes follow the official `openai` SDK's models
//! (`openai.types.responses.*`); `crates/wire/fixtures/responses/` holds a
//! fixture per type that the SDK itself produced (`generate.py`), and the
//! tests below read each and write it back. Tagged unions with an open set
//! of `type`s (items, content parts, tools, environments) keep a member of
//! an unknown `type` whole (`Other`), so the server decides what to refuse
//! and with which message; a wrong type of a named field is an error that
//! names it ([`from_value`] gives its `param` path).

pub mod compaction;
pub mod events;
pub mod items;
pub mod request;
pub mod response;
pub mod tools;

pub use compaction::{
    CompactRequest, CompactedResponse, Compaction, CompactionType, COMPACTED_OBJECT,
    COMPACT_CARRIED,
};
pub use events::{
    ClientEventType, Event, ShellOutputDelta, SocketErrorEvent, StreamEvent, RESPONSE_CREATE,
};
pub use items::*;
pub use request::{
    CreateResponse, Input, InputTokenCount, InputTokensRequest, ReasoningParam, TextFormatParam,
    TextParam, CARRIED, INPUT_TOKENS_CARRIED,
};
pub use response::*;
pub use tools::*;

/// A value that could not be read as its type: where (`param`, as the
/// error envelope names it: `tools[0].parameters.engine`) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub param: String,
    pub message: String,
}

/// Marks, in an error's message, the path inside a member read by a tagged
/// union's own `Deserialize` (serde's path stops at the union):
/// `MARK path MARK message` for this module's own messages (given as they
/// are), `MARK path SERDE message` for serde's (prefixed with the param).
/// The marks are `param`'s, so the Messages API's errors nest in these.
use crate::param::{PATH_MARK as MARK, SERDE_MARK as SERDE};

/// `outer` then `inner`, as a param path.
fn join_path(outer: &str, inner: &str) -> String {
    match (outer, inner) {
        ("" | ".", inner) => inner.to_owned(),
        (outer, "" | ".") => outer.to_owned(),
        (outer, inner) if inner.starts_with('[') => format!("{outer}{inner}"),
        (outer, inner) => format!("{outer}.{inner}"),
    }
}

/// An error of this module's own, about the field at `path` inside what
/// is being read (`""`: itself).
pub(crate) fn custom<E: serde::de::Error>(path: &str, message: impl std::fmt::Display) -> E {
    E::custom(format!("{MARK}{path}{MARK}{message}"))
}

/// The param path and message of a failed read.
fn field_error(error: serde_path_to_error::Error<serde_json::Error>) -> FieldError {
    let outer = error.path().to_string();
    let message = error.into_inner().to_string();
    // serde_json appends " at line 1 column 2" to errors read from text.
    let message = message
        .rsplit_once(" at line ")
        .map_or(message.as_str(), |(head, _)| head);
    let (inner, own, message) = match message.strip_prefix(MARK) {
        Some(rest) => match rest.find([MARK, SERDE]) {
            Some(at) => (&rest[..at], rest[at..].starts_with(MARK), &rest[at + 1..]),
            None => ("", false, rest),
        },
        None => ("", false, message),
    };
    let param = join_path(&outer, inner);
    let message = if own {
        message.to_owned()
    } else {
        format!("Invalid value for '{param}': {message}")
    };
    FieldError { param, message }
}

/// Reads `T` from `value`; an error names the field it is about.
pub fn from_value<T: serde::de::DeserializeOwned>(
    value: serde_json::Value,
) -> Result<T, FieldError> {
    serde_path_to_error::deserialize(value).map_err(field_error)
}

/// [`from_value`] inside a union's own `Deserialize`, of the member at
/// `path` (`""`: the value itself): the path inside is marked in the
/// message, for [`from_value`] to join to its own.
pub(crate) fn nested<T: serde::de::DeserializeOwned, E: serde::de::Error>(
    path: &str,
    value: serde_json::Value,
) -> Result<T, E> {
    serde_path_to_error::deserialize(value).map_err(|error| {
        let inner = join_path(path, &error.path().to_string());
        let message = error.into_inner().to_string();
        match message.strip_prefix(MARK) {
            // Marked deeper: its path goes after this one.
            Some(rest) => {
                let at = rest.find([MARK, SERDE]).unwrap_or(0);
                let deep = join_path(&inner, &rest[..at]);
                E::custom(format!("{MARK}{deep}{}", &rest[at..]))
            }
            None => E::custom(format!("{MARK}{inner}{SERDE}{message}")),
        }
    })
}

/// Each member of a list read with [`nested`] (an error names its index).
pub(crate) fn nested_list<T: serde::de::DeserializeOwned, E: serde::de::Error>(
    values: Vec<serde_json::Value>,
) -> Result<Vec<T>, E> {
    values
        .into_iter()
        .enumerate()
        .map(|(index, value)| nested(&format!("[{index}]"), value))
        .collect()
}

#[cfg(test)]
mod tests;
