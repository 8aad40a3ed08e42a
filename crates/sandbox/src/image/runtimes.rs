//! The runtimes an image holds (Python, Node, Java, ...) and their
//! versions, found by running each one's version command in a throwaway
//! container of the image, and recorded in its `info.json` (what
//! `GET /v1/images` shows). Done at the end of every build (`image build`,
//! and the server's background build of the default image) and by
//! `image verify`, so a listing is never left empty until someone verifies.

use std::collections::BTreeMap;

use crate::backend::{CommandResult, ContainerSpec, Outcome, RunRequest, SandboxBackend};

use crate::engine::LocalEngine;
use crate::error::SandboxError;

/// The runtimes looked for, and the command that prints each one's version
/// (its first word is the program that must be there).
pub const RUNTIMES: &[(&str, &str)] = &[
    ("python", "python3 --version 2>&1 | cut -d' ' -f2"),
    ("node", "node --version | tr -d v"),
    ("npm", "npm --version"),
    ("java", "java -version 2>&1 | head -1 | cut -d'\"' -f2"),
    ("php", "php -r 'echo PHP_VERSION;'"),
    ("ruby", "ruby -e 'print RUBY_VERSION'"),
    ("go", "go env GOVERSION | sed s/^go//"),
    (
        "python data stack",
        "python3 -c 'import numpy, pandas, matplotlib, scipy, sklearn; print(\"pandas \" + pandas.__version__)'",
    ),
];

/// Longest a version command may take (the data stack's first import
/// builds matplotlib's font cache, which is slow on a slow machine).
pub const TIMEOUT_MS: u64 = 120_000;

/// The version commands, in [`RUNTIMES`]'s order. Each runs only if its
/// program is on the `PATH`: a pipeline's status is its last command's, so
/// `java -version 2>&1 | head -1 | cut ...` without java would succeed and
/// print the shell's "command not found" as the version.
pub fn commands() -> Vec<String> {
    RUNTIMES
        .iter()
        .map(|(_, command)| {
            let program = command.split_whitespace().next().unwrap_or_default();
            format!("command -v {program} >/dev/null 2>&1 && {command}")
        })
        .collect()
}

/// Each runtime's version, `None` when it is missing, from the results of
/// [`commands`] (in order; fewer results leave the rest missing).
pub fn versions(results: &[CommandResult]) -> Vec<(&'static str, Option<String>)> {
    RUNTIMES
        .iter()
        .enumerate()
        .map(|(i, (runtime, _))| {
            let version = results.get(i).and_then(|result| {
                let version = result.stdout.trim();
                (result.outcome == Outcome::Exit { exit_code: 0 } && !version.is_empty())
                    .then(|| version.to_owned())
            });
            (*runtime, version)
        })
        .collect()
}

/// The runtimes found, as `info.json` records them.
pub fn found(results: &[CommandResult]) -> BTreeMap<String, String> {
    versions(results)
        .into_iter()
        .filter_map(|(runtime, version)| Some((runtime.to_owned(), version?)))
        .collect()
}

/// Finds the runtimes of image `name` in a throwaway container and records
/// them; answers what was found.
pub async fn record(
    engine: &LocalEngine,
    name: &str,
) -> Result<BTreeMap<String, String>, SandboxError> {
    let id = throwaway_id();
    let spec = ContainerSpec {
        image: name.to_owned(),
        ephemeral: true,
        ..ContainerSpec::default()
    };
    engine.create(&id, spec).await?;
    let request = RunRequest {
        commands: commands(),
        timeout_ms: TIMEOUT_MS,
        max_output_length: 4000,
        deadline_ms: None,
    };
    let results = engine.run(&id, request).await;
    // Gone whatever happened (a restart would remove it too: its id is
    // in no store).
    let _ = engine.destroy(&id).await;
    let found = found(&results?);
    engine.images().set_runtimes(name, found.clone())?;
    Ok(found)
}

/// An id no other container has: this process's and the time's.
fn throwaway_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!("runtimes-{}-{nanos}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(stdout: &str, exit_code: i32) -> CommandResult {
        CommandResult {
            stdout: stdout.to_owned(),
            stderr: String::new(),
            outcome: Outcome::Exit { exit_code },
            duration_ms: 0,
            bytes_out: 0,
        }
    }

    #[test]
    fn each_version_command_first_checks_that_its_program_is_there() {
        let commands = commands();
        assert_eq!(commands.len(), RUNTIMES.len());
        assert!(commands[3].starts_with("command -v java >/dev/null 2>&1 && java -version"));
        assert!(commands[7].starts_with("command -v python3 >/dev/null 2>&1 && python3 -c"));
    }

    #[test]
    fn a_runtime_is_found_when_its_command_succeeds_and_prints_a_version() {
        let results = vec![result("3.11.2\n", 0), result("", 0), result("10.1.0", 127)];
        let found = found(&results);
        assert_eq!(found.get("python").map(String::as_str), Some("3.11.2"));
        assert_eq!(found.len(), 1, "{found:?}");
        let versions = versions(&results);
        assert_eq!(versions.len(), RUNTIMES.len());
        assert_eq!(versions[1], ("node", None));
    }
}
