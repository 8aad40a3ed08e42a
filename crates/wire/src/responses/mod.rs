//! The Responses API on the wire: the create request ([`CreateResponse`]),
//! conversation items ([`Item`]) and their content parts, tools and
//! `tool_choice`, the response object ([`Response`]) and its stream events
//! ([`StreamEvent`]).
//!
//! Shapes follow the official `openai` SDK's models
//! (`openai.types.responses.*`); `crates/wire/fixtures/responses/` holds a
//! fixture per type that the SDK itself produced (`generate.py`), and the
//! tests below read each and write it back. Tagged unions with an open set
//! of `type`s (items, content parts, tools, environments) keep a member of
//! an unknown `type` whole (`Other`), so the server decides what to refuse
//! and with which message; a wrong type of a named field is an error that
//! names it ([`from_value`] gives its `param` path).

pub mod events;
pub mod items;
pub mod request;
pub mod response;
pub mod tools;

pub use events::{Event, ShellOutputDelta, StreamEvent};
pub use items::*;
pub use request::{CreateResponse, Input, CARRIED};
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
/// union's own `Deserialize` (serde's path stops at the union): `MARK path
/// MARK message`.
const MARK: char = '\u{1}';

/// `outer` then `inner`, as a param path.
fn join_path(outer: &str, inner: &str) -> String {
    match (outer, inner) {
        ("" | ".", inner) => inner.to_owned(),
        (outer, "" | ".") => outer.to_owned(),
        (outer, inner) if inner.starts_with('[') => format!("{outer}{inner}"),
        (outer, inner) => format!("{outer}.{inner}"),
    }
}

/// Splits a marked message into the inner path and the message.
fn split_marked(message: &str) -> (&str, &str) {
    message
        .strip_prefix(MARK)
        .and_then(|rest| rest.split_once(MARK))
        .unwrap_or(("", message))
}

/// The param path and message of a failed read.
fn field_error(error: serde_path_to_error::Error<serde_json::Error>) -> FieldError {
    let outer = error.path().to_string();
    let message = error.into_inner().to_string();
    let (inner, message) = split_marked(&message);
    // serde_json appends " at line 1 column 2" to errors read from text.
    let message = message
        .rsplit_once(" at line ")
        .map_or(message, |(head, _)| head);
    FieldError {
        param: join_path(&outer, inner),
        message: message.to_owned(),
    }
}

/// Reads `T` from `value`; an error names the field it is about.
pub fn from_value<T: serde::de::DeserializeOwned>(
    value: serde_json::Value,
) -> Result<T, FieldError> {
    serde_path_to_error::deserialize(value).map_err(field_error)
}

/// [`from_value`] inside a tagged union's `Deserialize`: the path inside
/// is marked in the message, for [`from_value`] to join to its own.
pub(crate) fn nested<T: serde::de::DeserializeOwned, E: serde::de::Error>(
    value: serde_json::Value,
) -> Result<T, E> {
    from_value(value).map_err(|e| E::custom(format!("{MARK}{}{MARK}{}", e.param, e.message)))
}

#[cfg(test)]
mod tests;
