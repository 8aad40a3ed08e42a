//! `shellgate local --sandbox`: every command of the run goes to one
//! container of shellgate's own engine, kept for the whole run (so
//! background services survive between commands). Inside it the host's
//! files are read-only, the working directory is writable (as the user:
//! the invoking user is the sandbox user), the data directory is hidden,
//! and there is no network but the names `--allow-net` gives.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use shellgate_sandbox::backend::{limits, CommandResult, ContainerSpec, HostBind, RunRequest};
use shellgate_sandbox::{LocalEngine, SandboxBackend};

use crate::oneshot::{egress_for, open_engine, sandbox_dir, Lane};
use crate::quote::shell_quote;

/// Top-level host directories not shown as they are: the image provides
/// the system ones (and a filtered `/etc`), the container has its own
/// `/proc`, `/dev`, `/tmp`.
const NOT_BOUND: &[&str] = &[
    "proc",
    "sys",
    "dev",
    "run",
    "tmp",
    "usr",
    "bin",
    "sbin",
    "lib",
    "lib32",
    "lib64",
    "libx32",
    "etc",
    "boot",
    "lost+found",
];

/// Top-level directories the container has its own entries in
/// (`/home/user`: the engine's `SANDBOX_HOME`, `/mnt/data`, `/mnt/skills`).
const SHARED_PARENTS: &[(&str, &[&str])] = &[("home", &["user"]), ("mnt", &["data", "skills"])];

pub struct Sandbox {
    engine: LocalEngine,
    _lane: Lane,
    id: String,
    cwd: PathBuf,
}

impl Sandbox {
    pub async fn open(
        data_dir: Option<PathBuf>,
        cwd: &Path,
        allow_net: &[String],
        config: Option<&Path>,
    ) -> Result<Self> {
        let cwd = std::fs::canonicalize(cwd).context("no current directory")?;
        let sandbox_dir = sandbox_dir(data_dir);
        let (network, egress) = egress_for(allow_net, config)?;
        let (engine, lane) = open_engine(sandbox_dir.clone(), egress, true).await?;
        let mut host_binds = Vec::new();
        for entry in std::fs::read_dir("/").context("read /")?.flatten() {
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if NOT_BOUND.contains(&name.as_str()) || !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            match SHARED_PARENTS.iter().find(|(parent, _)| *parent == name) {
                // The container mounts its own directories in these: show
                // the host's entries one by one, beside them.
                Some((_, own)) => {
                    for child in std::fs::read_dir(entry.path())
                        .into_iter()
                        .flatten()
                        .flatten()
                    {
                        let Some(child_name) = child.file_name().to_str().map(str::to_owned) else {
                            continue;
                        };
                        if !own.contains(&child_name.as_str())
                            && child.file_type().is_ok_and(|t| t.is_dir())
                        {
                            host_binds.push(HostBind {
                                source: child.path(),
                                target: format!("/{name}/{child_name}"),
                                writable: false,
                            });
                        }
                    }
                }
                None => host_binds.push(HostBind {
                    source: entry.path(),
                    target: format!("/{name}"),
                    writable: false,
                }),
            }
        }
        host_binds.push(HostBind {
            source: cwd.clone(),
            target: cwd.to_string_lossy().into_owned(),
            writable: true,
        });
        // The data directory holds the API keys' store and every
        // container's files: never shown.
        let data = std::fs::canonicalize(sandbox_dir.parent().unwrap_or(&sandbox_dir))
            .unwrap_or_else(|_| sandbox_dir.clone());
        // Nor the one-shot engines' state, wherever it is kept.
        let lanes = lane.root().to_path_buf();
        let id = format!("local-{}", std::process::id());
        let spec = ContainerSpec {
            image: shellgate_sandbox::image::HOST_IMAGE.to_owned(),
            ephemeral: true,
            network,
            host_binds,
            hidden: vec![
                data.to_string_lossy().into_owned(),
                lanes.to_string_lossy().into_owned(),
            ],
            ..ContainerSpec::default()
        };
        engine
            .create(&id, spec)
            .await
            .context("cannot create the sandbox")?;
        Ok(Self {
            engine,
            _lane: lane,
            id,
            cwd,
        })
    }

    /// Runs one shell command in the working directory; echoes its output
    /// to stderr as it comes unless `quiet`.
    pub async fn run(
        &self,
        command: &str,
        timeout: Duration,
        max_output_length: usize,
        quiet: bool,
    ) -> CommandResult {
        let request = RunRequest {
            commands: vec![format!(
                "cd {} || exit 125\n{command}",
                shell_quote(&self.cwd.to_string_lossy())
            )],
            timeout_ms: (timeout.as_millis() as u64).clamp(1, limits::MAX_TIMEOUT_MS),
            max_output_length: max_output_length.clamp(1, limits::MAX_OUTPUT_LENGTH),
            deadline_ms: None,
        };
        let (sink, mut deltas) =
            tokio::sync::mpsc::unbounded_channel::<shellgate_sandbox::backend::OutputDelta>();
        let printer = tokio::spawn(async move {
            use std::io::Write;
            while let Some(delta) = deltas.recv().await {
                if !quiet {
                    let _ = std::io::stderr().write_all(delta.text.as_bytes());
                }
            }
        });
        let result = self.engine.run_streaming(&self.id, request, sink).await;
        let _ = printer.await;
        match result {
            Ok(mut results) if !results.is_empty() => results.remove(0),
            Ok(_) => failed("the sandbox returned no result".to_owned()),
            Err(e) => failed(format!("the sandbox failed: {e}")),
        }
    }

    pub async fn close(self) {
        let _ = self.engine.destroy(&self.id).await;
        self.engine.shutdown().await;
    }
}

/// The sandbox itself failed (125, as `exec` says it).
fn failed(message: String) -> CommandResult {
    super::runner::not_run(format!("shellgate local: {message}\n"), 125)
}

#[cfg(test)]
mod tests {
    use super::SHARED_PARENTS;
    use shellgate_sandbox::engine::SANDBOX_HOME;

    #[test]
    fn the_containers_own_home_is_not_shown_from_the_host() {
        let own = SHARED_PARENTS
            .iter()
            .flat_map(|(parent, children)| children.iter().map(move |c| format!("/{parent}/{c}")))
            .collect::<Vec<_>>();
        assert!(own.iter().any(|dir| dir == SANDBOX_HOME), "{own:?}");
    }
}
