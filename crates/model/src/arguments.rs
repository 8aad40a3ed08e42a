//! The arguments a model writes when it calls a built-in tool (the hosted
//! or `local` `shell`, the `bash` tool, the legacy `local_shell`), typed.
//!
//! A model's arguments are hostile bytes, and a wrong one is the model's
//! mistake, not the client's: it never fails the response. So they are
//! read leniently, each field on its own: a field of the wrong type reads
//! as absent (a `"5000"` timeout is no timeout, so the default), a list
//! keeps its strings only, arguments that are not a JSON object read as
//! no arguments at all. What is then wrong with them (no command, a NUL
//! byte...) the hosted shell answers as the command's output, so the
//! model can correct itself ([`ShellArguments::run_request`]).
//!
//! The same structs write the arguments back when a replayed call becomes
//! the conversation again ([`crate::conversation`]): fields in name order,
//! absent ones left out, as the upstream read them before.

use serde::{Deserialize, Deserializer, Serialize};
use shellgate_sandbox::backend::{limits, RunRequest};

/// A value as the model wrote it, if it has the expected type.
#[derive(Deserialize)]
#[serde(untagged)]
enum Lenient<T> {
    Valid(T),
    /// Anything else, read as absent.
    Invalid(serde::de::IgnoredAny),
}

/// A field of the expected type, or its default.
fn lenient<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(match Lenient::<T>::deserialize(deserializer)? {
        Lenient::Valid(value) => value,
        Lenient::Invalid(_) => T::default(),
    })
}

/// The strings of a list (anything not a list: none).
fn strings<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    Ok(
        match Lenient::<Vec<Lenient<String>>>::deserialize(deserializer)? {
            Lenient::Valid(items) => items
                .into_iter()
                .filter_map(|item| match item {
                    Lenient::Valid(text) => Some(text),
                    Lenient::Invalid(_) => None,
                })
                .collect(),
            Lenient::Invalid(_) => Vec::new(),
        },
    )
}

/// Reads a tool call's `arguments` (JSON text) as `T`; what is not a
/// JSON object of it reads as `T::default()`.
fn read<'a, T: Deserialize<'a> + Default>(arguments: &'a str) -> T {
    // serde would read a JSON array into a struct field by field: only an
    // object's keys are arguments.
    if !arguments.trim_start().starts_with('{') {
        return T::default();
    }
    serde_json::from_str(arguments).unwrap_or_default()
}

/// The `shell` function's arguments.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShellArguments {
    #[serde(default, deserialize_with = "strings")]
    pub commands: Vec<String>,
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_output_length: Option<u64>,
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub timeout_ms: Option<u64>,
}

impl ShellArguments {
    /// Reads a call's arguments.
    pub fn read(arguments: &str) -> Self {
        read(arguments)
    }

    /// The sandbox request these arguments ask for: the limits default
    /// when absent and are clamped into the sandbox's bounds (a model's
    /// `timeout_ms: 0` is a millisecond, not an error); an explanation for
    /// the model if the commands cannot run.
    pub fn run_request(&self) -> Result<RunRequest, String> {
        let max_output_length = self
            .max_output_length
            .map_or(limits::DEFAULT_MAX_OUTPUT_LENGTH, |n| {
                usize::try_from(n).unwrap_or(usize::MAX)
            });
        let request = RunRequest {
            commands: self.commands.clone(),
            timeout_ms: self
                .timeout_ms
                .unwrap_or(limits::DEFAULT_TIMEOUT_MS)
                .clamp(1, limits::MAX_TIMEOUT_MS),
            max_output_length: max_output_length.clamp(1, limits::MAX_OUTPUT_LENGTH),
            deadline_ms: None,
        };
        request.validate().map_err(|e| e.to_string())?;
        Ok(request)
    }
}

fn is_false(value: &bool) -> bool {
    !value
}

/// The `bash` function's arguments: one command, or a restart.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BashArguments {
    #[serde(default, deserialize_with = "lenient")]
    pub command: String,
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "is_false"
    )]
    pub restart: bool,
}

impl BashArguments {
    /// Reads a call's arguments.
    pub fn read(arguments: &str) -> Self {
        read(arguments)
    }
}

/// The `local_shell` function's arguments (an argv the client runs).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalShellArguments {
    #[serde(default, deserialize_with = "strings")]
    pub command: Vec<String>,
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub timeout_ms: Option<u64>,
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub working_directory: Option<String>,
}

impl LocalShellArguments {
    /// Reads a call's arguments.
    pub fn read(arguments: &str) -> Self {
        read(arguments)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_s_arguments_are_read_field_by_field() {
        let read = ShellArguments::read(
            r#"{"commands": ["ls", 3, null, "pwd"], "timeout_ms": "5000", "max_output_length": 100, "other": 1}"#,
        );
        assert_eq!(
            read,
            ShellArguments {
                commands: vec!["ls".into(), "pwd".into()],
                max_output_length: Some(100),
                timeout_ms: None,
            }
        );
        for wrong in [
            "",
            "not json",
            "[[\"ls\"]]",
            "\"ls\"",
            "{\"commands\": \"ls\"}",
        ] {
            assert_eq!(ShellArguments::read(wrong).commands, Vec::<String>::new());
        }
        for number in ["-1", "1.5", "1e30", "null", "true"] {
            let read =
                ShellArguments::read(&format!("{{\"commands\": [], \"timeout_ms\": {number}}}"));
            assert_eq!(read.timeout_ms, None, "{number}");
        }
        assert_eq!(
            BashArguments::read(r#"{"command": 1, "restart": "yes"}"#),
            BashArguments::default()
        );
        assert_eq!(
            LocalShellArguments::read(r#"{"command": ["ls", "-l"], "working_directory": 7}"#),
            LocalShellArguments {
                command: vec!["ls".into(), "-l".into()],
                timeout_ms: None,
                working_directory: None,
            }
        );
    }

    #[test]
    fn arguments_are_written_in_name_order_without_absent_fields() {
        let shell = ShellArguments {
            commands: vec!["ls".into()],
            max_output_length: Some(10),
            timeout_ms: Some(5),
        };
        assert_eq!(
            serde_json::to_string(&shell).unwrap(),
            r#"{"commands":["ls"],"max_output_length":10,"timeout_ms":5}"#
        );
        assert_eq!(
            serde_json::to_string(&BashArguments {
                command: "id".into(),
                restart: false
            })
            .unwrap(),
            r#"{"command":"id"}"#
        );
    }

    #[test]
    fn limits_default_and_are_clamped() {
        let clamped = |timeout_ms, max_output_length| {
            let request = ShellArguments {
                commands: vec!["ls".into()],
                max_output_length,
                timeout_ms,
            }
            .run_request()
            .unwrap();
            (request.timeout_ms, request.max_output_length)
        };
        assert_eq!(
            clamped(None, None),
            (
                limits::DEFAULT_TIMEOUT_MS,
                limits::DEFAULT_MAX_OUTPUT_LENGTH
            )
        );
        assert_eq!(clamped(Some(0), Some(0)), (1, 1));
        assert_eq!(
            clamped(Some(u64::MAX), Some(u64::MAX)),
            (limits::MAX_TIMEOUT_MS, limits::MAX_OUTPUT_LENGTH)
        );
        assert!(ShellArguments::default().run_request().is_err());
    }
}
