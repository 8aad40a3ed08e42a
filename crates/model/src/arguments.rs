//! The arguments a model writes when it calls a built-in tool (the hosted
//! or `local` `shell`, the `bash` tool, the legacy `local_shell`), typed.
//!
//! A model's arguments are hostile bytes, and a wrong one is the model's
//! mistake, not the client's: it never fails the response. So they are
//! read leniently, each field on its own: a list keeps its strings only,
//! a text or flag of the wrong type reads as absent, arguments that are
//! not a JSON object read as no arguments at all; a limit (`timeout_ms`,
//! `max_output_length`) of the wrong type is remembered as wrong
//! ([`Limit`]). What is then wrong with them (no command, a NUL byte, a
//! limit out of range or not a whole number) the hosted shell answers as
//! the command's output, so the model can correct itself
//! ([`ShellArguments::run_request`], by the rule exec follows too).
//!
//! The same structs write the arguments back when a replayed call becomes
//! the conversation again ([`crate::conversation`]): fields in name order,
//! absent ones left out, as the upstream read them before.

use serde::{Deserialize, Deserializer, Serialize};
use shellgate_sandbox_api::backend::RunRequest;

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

/// A limit as the model wrote it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Limit {
    /// Absent or `null`: the default.
    #[default]
    Absent,
    Given(u64),
    /// Not a whole number (`"5000"`, `-1`, `1.5`): refused.
    Wrong,
}

impl Limit {
    pub fn is_absent(&self) -> bool {
        *self == Limit::Absent
    }

    /// The value given, if it is one.
    pub fn given(self) -> Option<u64> {
        match self {
            Limit::Given(value) => Some(value),
            Limit::Absent | Limit::Wrong => None,
        }
    }

    /// The value given, or `None` for the default; `key` is named if it
    /// is not a whole number.
    fn checked(self, key: &str) -> Result<Option<u64>, String> {
        match self {
            Limit::Absent => Ok(None),
            Limit::Given(value) => Ok(Some(value)),
            Limit::Wrong => Err(format!("{key} must be a whole number")),
        }
    }
}

impl From<Option<u64>> for Limit {
    fn from(value: Option<u64>) -> Self {
        value.map_or(Limit::Absent, Limit::Given)
    }
}

impl<'de> Deserialize<'de> for Limit {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(match Lenient::<Option<u64>>::deserialize(deserializer)? {
            Lenient::Valid(value) => value.into(),
            Lenient::Invalid(_) => Limit::Wrong,
        })
    }
}

impl Serialize for Limit {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.given().serialize(serializer)
    }
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
    #[serde(default, skip_serializing_if = "Limit::is_absent")]
    pub max_output_length: Limit,
    #[serde(default, skip_serializing_if = "Limit::is_absent")]
    pub timeout_ms: Limit,
}

impl ShellArguments {
    /// Reads a call's arguments.
    pub fn read(arguments: &str) -> Self {
        read(arguments)
    }

    /// The sandbox request these arguments ask for, by the one rule for
    /// every caller (`RunRequest::from_parts`: a limit absent is the
    /// default, one out of range is refused, never clamped); an
    /// explanation for the model if the commands cannot run.
    pub fn run_request(&self) -> Result<RunRequest, String> {
        let timeout_ms = self.timeout_ms.checked("timeout_ms")?;
        let max_output_length = self.max_output_length.checked("max_output_length")?;
        RunRequest::from_parts(self.commands.clone(), timeout_ms, max_output_length, None)
            .map_err(|e| e.to_string())
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

/// The `code_interpreter` function's arguments: the code to run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InterpreterArguments {
    #[serde(default, deserialize_with = "lenient")]
    pub code: String,
}

impl InterpreterArguments {
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
    #[serde(default, skip_serializing_if = "Limit::is_absent")]
    pub timeout_ms: Limit,
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
    use shellgate_sandbox_api::backend::limits;

    #[test]
    fn a_model_s_arguments_are_read_field_by_field() {
        let read = ShellArguments::read(
            r#"{"commands": ["ls", 3, null, "pwd"], "timeout_ms": "5000", "max_output_length": 100, "other": 1}"#,
        );
        assert_eq!(
            read,
            ShellArguments {
                commands: vec!["ls".into(), "pwd".into()],
                max_output_length: Limit::Given(100),
                timeout_ms: Limit::Wrong,
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
        for (number, read) in [
            ("-1", Limit::Wrong),
            ("1.5", Limit::Wrong),
            ("1e30", Limit::Wrong),
            ("true", Limit::Wrong),
            ("null", Limit::Absent),
            ("0", Limit::Given(0)),
        ] {
            let arguments = format!("{{\"commands\": [], \"timeout_ms\": {number}}}");
            assert_eq!(
                ShellArguments::read(&arguments).timeout_ms,
                read,
                "{number}"
            );
        }
        assert_eq!(
            BashArguments::read(r#"{"command": 1, "restart": "yes"}"#),
            BashArguments::default()
        );
        assert_eq!(
            LocalShellArguments::read(r#"{"command": ["ls", "-l"], "working_directory": 7}"#),
            LocalShellArguments {
                command: vec!["ls".into(), "-l".into()],
                timeout_ms: Limit::Absent,
                working_directory: None,
            }
        );
    }

    #[test]
    fn arguments_are_written_in_name_order_without_absent_fields() {
        let shell = ShellArguments {
            commands: vec!["ls".into()],
            max_output_length: Limit::Given(10),
            timeout_ms: Limit::Given(5),
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
    fn limits_default_and_out_of_range_ones_are_refused() {
        let run = |timeout_ms, max_output_length| {
            ShellArguments {
                commands: vec!["ls".into()],
                max_output_length,
                timeout_ms,
            }
            .run_request()
        };
        let defaults = run(Limit::Absent, Limit::Absent).unwrap();
        assert_eq!(
            (defaults.timeout_ms, defaults.max_output_length),
            (
                limits::DEFAULT_TIMEOUT_MS,
                limits::DEFAULT_MAX_OUTPUT_LENGTH
            )
        );
        let most = run(
            Limit::Given(limits::MAX_TIMEOUT_MS),
            Limit::Given(limits::MAX_OUTPUT_LENGTH as u64),
        )
        .unwrap();
        assert_eq!(
            (most.timeout_ms, most.max_output_length),
            (limits::MAX_TIMEOUT_MS, limits::MAX_OUTPUT_LENGTH)
        );
        for (timeout_ms, max_output_length, named) in [
            (Limit::Given(0), Limit::Absent, "timeout_ms"),
            (
                Limit::Given(limits::MAX_TIMEOUT_MS + 1),
                Limit::Absent,
                "timeout_ms",
            ),
            (
                Limit::Wrong,
                Limit::Absent,
                "timeout_ms must be a whole number",
            ),
            (Limit::Absent, Limit::Given(0), "max_output_length"),
            (Limit::Absent, Limit::Given(u64::MAX), "max_output_length"),
            (
                Limit::Absent,
                Limit::Wrong,
                "max_output_length must be a whole number",
            ),
        ] {
            let refused = run(timeout_ms, max_output_length).unwrap_err();
            assert!(refused.contains(named), "{refused}");
        }
        assert!(ShellArguments::default().run_request().is_err());
    }
}
