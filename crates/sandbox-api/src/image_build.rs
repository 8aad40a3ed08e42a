//! The image builder: a [`Dockerfile`] run in a build sandbox and
//! committed as a project image.
//!
//! The build sandbox is an ordinary container of the `FROM` image with
//! `ContainerSpec::build_root`: its commands run as the root of its own
//! user namespace (an unprivileged host id), with a few namespaced
//! capabilities and the same seccomp filter, cgroup limits and egress
//! policy as any container, writing to the whole root through the
//! container's overlay upper layer. When every step has succeeded the
//! container is committed (`SandboxBackend::commit_image`): the upper
//! layer, whiteouts included, applied over the base's tree, the home as
//! the home its containers start with, and the `ENV`, `WORKDIR` and `USER`
//! the steps set as the image's run configuration. The build sandbox is
//! removed whatever happens (success, a failed step, the deadline, a
//! cancellation), and no image is installed unless the build succeeded.
//!
//! `COPY` sources come from a build context tar, unpacked once (by
//! `fs_import`, which refuses absolute and `..` members) into the build
//! sandbox's data directory, which is not part of the image; the copy
//! itself is a shell step run as root (`cp -a`, then `chown`).

use std::time::{Duration, Instant};

use crate::backend::{ContainerSpec, NetworkSpec, Outcome, RunRequest, SandboxBackend};
use crate::dockerfile::{Dockerfile, Instruction};
use crate::error::SandboxError;
use crate::image::{ImageConfig, ImageInfo};

/// Where the build context is unpacked in the build sandbox (its data
/// directory: never part of the image).
const CONTEXT_DIR: &str = "/mnt/data/.shellgate-build-context";
/// Output kept per stream of one step for the log.
const STEP_OUTPUT: usize = 64 << 10;

/// What to build and within what.
pub struct BuildRequest {
    /// The image made (a new one, or a new revision of the project's own).
    pub name: String,
    pub project: String,
    pub dockerfile: Dockerfile,
    /// The build context: tar files on the host, each unpacked under its
    /// directory of the context (`COPY` needs one).
    pub context: Vec<ContextPart>,
    /// What the steps may reach (the build's egress policy).
    pub network: NetworkSpec,
    /// Memory, processes, CPU and disk of the build sandbox.
    pub memory_bytes: u64,
    pub disk_bytes: u64,
    /// The whole build ends by then, steps and commit together.
    pub deadline: Instant,
    /// The `FROM` image's run configuration (its `ENV`, `WORKDIR`), which
    /// the steps start from and the image keeps under theirs.
    pub base_config: ImageConfig,
}

/// A tar file of the build context and where in the context it goes.
#[derive(Debug, Clone)]
pub struct ContextPart {
    pub tar: std::path::PathBuf,
    /// A relative directory of the context (`""`: its top).
    pub dir: String,
}

/// One line of a build's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildLogLine {
    /// The step (0 for the set-up and the commit, else the step's index
    /// from 1), and its Dockerfile line.
    pub step: usize,
    pub line: usize,
    pub level: LogLevel,
    pub message: String,
}

/// How a log line reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLevel {
    Info,
    /// A step's standard error.
    Warn,
    Error,
}

impl LogLevel {
    /// E2B's and the API's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Info => "info",
            Self::Warn => "warn",
            Self::Error => "error",
        }
    }
}

/// Why a build did not make its image.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// A step failed: its index (from 1), Dockerfile line and why.
    #[error("step {step} (line {line}, {keyword}) failed: {message}")]
    Step {
        step: usize,
        line: usize,
        keyword: &'static str,
        message: String,
    },
    /// The build's deadline passed.
    #[error("the build passed its deadline")]
    Deadline,
    /// The build was cancelled.
    #[error("the build was cancelled")]
    Cancelled,
    /// The build sandbox could not be made, or the image installed.
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
}

/// Who the steps run as and where, as the instructions so far set it.
#[derive(Debug, Clone, Default)]
struct StepState {
    env: Vec<(String, String)>,
    workdir: Option<String>,
    user: Option<String>,
}

impl StepState {
    fn set_env(&mut self, name: &str, value: &str) {
        self.env.retain(|(set, _)| set != name);
        self.env.push((name.to_owned(), value.to_owned()));
    }

    /// The directory a step starts in: `WORKDIR`, else `/`.
    fn dir(&self) -> &str {
        self.workdir.as_deref().unwrap_or("/")
    }

    fn is_root(&self) -> bool {
        self.user
            .as_deref()
            .is_none_or(|user| matches!(user, "root" | "0" | "root:root" | "0:0"))
    }

    /// The run configuration the image gets.
    fn config(&self) -> ImageConfig {
        ImageConfig {
            env: self
                .env
                .iter()
                .map(|(name, value)| format!("{name}={value}"))
                .collect(),
            working_dir: self.workdir.clone(),
            user: self.user.clone(),
            ..ImageConfig::default()
        }
    }

    /// The shell script one `RUN` step is: the variables exported, the
    /// directory made and entered, the command run by `sh -c` as the
    /// step's user (`setpriv` from root, the build sandbox's user).
    fn script(&self, command: &str) -> String {
        let mut script = String::from("set -e\n");
        let home = if self.is_root() {
            "/root"
        } else {
            "/home/user"
        };
        script.push_str(&format!("export HOME={}\n", quote(home)));
        for (name, value) in &self.env {
            script.push_str(&format!("export {name}={}\n", quote(value)));
        }
        let dir = quote(self.dir());
        script.push_str(&format!("mkdir -p {dir}\ncd {dir}\n"));
        match &self.user {
            Some(_) if self.is_root() => {
                script.push_str(&format!("exec /bin/sh -c {}\n", quote(command)))
            }
            Some(user) => {
                let (uid, gid) = match user.split_once(':') {
                    Some((uid, gid)) => (uid.to_owned(), quote(gid)),
                    None => (user.clone(), format!("\"$(id -g {})\"", quote(user))),
                };
                // By its path: a busybox shell prefers its own applet of
                // the name, which cannot change ids.
                script.push_str(&format!(
                    "setpriv=\n\
                     for candidate in /usr/bin/setpriv /bin/setpriv /usr/sbin/setpriv /sbin/setpriv; do\n  \
                     if [ -x \"$candidate\" ]; then setpriv=$candidate; break; fi\n\
                     done\n\
                     [ -n \"$setpriv\" ] || {{ echo 'USER {user}: the image has no setpriv (util-linux) to run a step as another user' >&2; exit 127; }}\n\
                     exec \"$setpriv\" --reuid={} --regid={gid} --clear-groups -- /bin/sh -c {}\n",
                    quote(&uid),
                    quote(command)
                ));
            }
            None => script.push_str(&format!("exec /bin/sh -c {}\n", quote(command))),
        }
        script
    }

    /// The script of a `COPY`: each source from the unpacked context to
    /// `dest` (relative to the working directory), as `cp -a` copies a
    /// file, or a directory's contents as Docker does, owned by root or by
    /// `chown`.
    fn copy_script(&self, sources: &[String], dest: &str, chown: Option<&str>) -> String {
        let dest = if dest.starts_with('/') {
            dest.to_owned()
        } else {
            format!("{}/{dest}", self.dir().trim_end_matches('/'))
        };
        let into_dir = sources.len() > 1 || dest.ends_with('/');
        let owner = quote(chown.unwrap_or("0:0"));
        let mut script = format!("set -e\ncd {}\n", quote(CONTEXT_DIR));
        for source in sources {
            let from = quote(source);
            script.push_str(&format!(
                "[ -e {from} ] || [ -L {from} ] || {{ echo 'COPY: '{from}' is not in the build context' >&2; exit 1; }}\n"
            ));
            // A directory's contents are copied, as Docker does; what was
            // copied is owned as asked (a directory destination wholly).
            let name = source.rsplit('/').next().unwrap_or(source);
            let (file_to, dir_to) = if into_dir {
                let dir = dest.trim_end_matches('/');
                (format!("{dir}/{name}"), dir.to_owned())
            } else {
                (dest.clone(), dest.clone())
            };
            let (file_to, dir_to) = (quote(&file_to), quote(&dir_to));
            script.push_str(&format!(
                "if [ -d {from} ] && [ ! -L {from} ]; then\n  mkdir -p {dir_to}\n  cp -a {from}/. {dir_to}/\n  chown -hR {owner} {dir_to}\n\
                 else\n  mkdir -p \"$(dirname {file_to})\"\n  cp -a {from} {file_to}\n  chown -h {owner} {file_to}\nfi\n"
            ));
        }
        script
    }
}

/// `text` quoted for `sh`.
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// Builds `request` in a build sandbox named `sandbox_id`, logging to
/// `log`; `cancelled` resolves when the build is to stop. The sandbox is
/// removed before this returns.
pub async fn build(
    backend: &dyn SandboxBackend,
    sandbox_id: &str,
    request: BuildRequest,
    log: &mut (dyn FnMut(BuildLogLine) + Send),
    cancelled: impl std::future::Future<Output = ()> + Send,
) -> Result<ImageInfo, BuildError> {
    let deadline = request.deadline;
    let outcome = tokio::select! {
        outcome = tokio::time::timeout_at(
            tokio::time::Instant::from_std(deadline),
            run_build(backend, sandbox_id, request, log),
        ) => outcome.unwrap_or(Err(BuildError::Deadline)),
        () = cancelled => Err(BuildError::Cancelled),
    };
    // Whatever happened, the build sandbox goes (a command it still runs
    // is killed with it).
    match backend.destroy(sandbox_id).await {
        Ok(()) | Err(SandboxError::NotFound(_)) => {}
        Err(e) => log(BuildLogLine {
            step: 0,
            line: 0,
            level: LogLevel::Warn,
            message: format!("could not remove the build sandbox {sandbox_id}: {e}"),
        }),
    }
    outcome
}

async fn run_build(
    backend: &dyn SandboxBackend,
    sandbox_id: &str,
    request: BuildRequest,
    log: &mut (dyn FnMut(BuildLogLine) + Send),
) -> Result<ImageInfo, BuildError> {
    let info = |step: usize, line: usize, message: String| BuildLogLine {
        step,
        line,
        level: LogLevel::Info,
        message,
    };
    let Dockerfile { from, steps } = request.dockerfile;
    log(info(0, 1, format!("FROM {from}")));
    let spec = ContainerSpec {
        image: from.clone(),
        memory_bytes: request.memory_bytes,
        disk_bytes: request.disk_bytes,
        network: request.network,
        // Not `ephemeral`: a throwaway disk (tmpfs) cannot be committed.
        build_root: true,
        ..ContainerSpec::default()
    };
    backend.create(sandbox_id, spec).await?;
    let base_config = request.base_config;
    let mut state = StepState {
        env: base_config
            .env
            .iter()
            .filter_map(|entry| entry.split_once('='))
            .map(|(name, value)| (name.to_owned(), value.to_owned()))
            .collect(),
        workdir: base_config.working_dir.clone(),
        user: None,
    };
    let needs_context = steps
        .iter()
        .any(|step| matches!(step.instruction, Instruction::Copy { .. }));
    if needs_context {
        if request.context.is_empty() {
            let first = steps
                .iter()
                .find(|step| matches!(step.instruction, Instruction::Copy { .. }));
            return Err(BuildError::Step {
                step: 0,
                line: first.map_or(0, |step| step.line),
                keyword: "COPY",
                message: "COPY needs a build context, and the build has none".into(),
            });
        }
        for part in &request.context {
            let imported = unpack_context(backend, sandbox_id, part).await?;
            log(info(
                0,
                0,
                format!(
                    "build context: {} entries, {} bytes",
                    imported.entries, imported.bytes
                ),
            ));
        }
    }
    for (index, step) in steps.iter().enumerate() {
        let number = index + 1;
        let keyword = step.instruction.keyword();
        let failed = |message: String| BuildError::Step {
            step: number,
            line: step.line,
            keyword,
            message,
        };
        let script = match &step.instruction {
            Instruction::Run(command) => {
                log(info(number, step.line, format!("RUN {command}")));
                Some(state.script(command))
            }
            Instruction::Copy {
                sources,
                dest,
                chown,
            } => {
                log(info(
                    number,
                    step.line,
                    format!("COPY {} {dest}", sources.join(" ")),
                ));
                Some(state.copy_script(sources, dest, chown.as_deref()))
            }
            Instruction::Env(pairs) => {
                for (name, value) in pairs {
                    state.set_env(name, value);
                }
                log(info(
                    number,
                    step.line,
                    format!("ENV ({} set)", pairs.len()),
                ));
                None
            }
            Instruction::Workdir(dir) => {
                let dir = if dir.starts_with('/') {
                    dir.clone()
                } else {
                    format!("{}/{dir}", state.dir().trim_end_matches('/'))
                };
                log(info(number, step.line, format!("WORKDIR {dir}")));
                state.workdir = Some(dir.clone());
                // Made now, as Docker does, so the image has it.
                Some(format!("mkdir -p {}", quote(&dir)))
            }
            Instruction::User(user) => {
                log(info(number, step.line, format!("USER {user}")));
                state.user = Some(user.clone());
                None
            }
        };
        let Some(script) = script else {
            continue;
        };
        let remaining = request.deadline.saturating_duration_since(Instant::now());
        let timeout_ms = u64::try_from(remaining.as_millis())
            .unwrap_or(u64::MAX)
            .clamp(1, crate::backend::limits::MAX_TIMEOUT_MS);
        let run = RunRequest {
            commands: vec![script],
            timeout_ms,
            max_output_length: STEP_OUTPUT,
            deadline_ms: None,
        };
        let results = backend
            .run(sandbox_id, run)
            .await
            .map_err(|e| failed(e.to_string()))?;
        let Some(result) = results.into_iter().next() else {
            return Err(failed("the step did not run".into()));
        };
        for (text, level) in [
            (&result.stdout, LogLevel::Info),
            (&result.stderr, LogLevel::Warn),
        ] {
            for line in text.lines() {
                log(BuildLogLine {
                    step: number,
                    line: step.line,
                    level,
                    message: line.to_owned(),
                });
            }
        }
        match result.outcome {
            Outcome::Exit { exit_code: 0 } => {}
            Outcome::Exit { exit_code } => {
                let last = result.stderr.lines().last().unwrap_or_default().to_owned();
                return Err(failed(if last.is_empty() {
                    format!("exit code {exit_code}")
                } else {
                    format!("exit code {exit_code}: {last}")
                }));
            }
            Outcome::Timeout => return Err(BuildError::Deadline),
        }
    }
    if needs_context {
        // Not part of the image (the data directory is not committed), but
        // the commit copies the disk: the context goes first.
        let _ = backend.fs_remove(sandbox_id, CONTEXT_DIR, true).await;
    }
    log(info(0, 0, format!("committing image {}", request.name)));
    let image = backend
        .commit_image(
            sandbox_id,
            &request.name,
            &request.project,
            Some(state.config()),
        )
        .await?;
    log(info(
        0,
        0,
        format!(
            "image {} revision {} ({} bytes)",
            image.name,
            image.details.revision.as_deref().unwrap_or("-"),
            image.details.size_bytes.unwrap_or(0)
        ),
    ));
    Ok(image)
}

/// Streams one context tar into its directory of the build sandbox's
/// [`CONTEXT_DIR`].
async fn unpack_context(
    backend: &dyn SandboxBackend,
    sandbox_id: &str,
    part: &ContextPart,
) -> Result<crate::fs::ArchiveImported, SandboxError> {
    use tokio::io::AsyncReadExt;
    if part.dir.starts_with('/') || part.dir.split('/').any(|c| c == "..") {
        return Err(SandboxError::InvalidRequest {
            param: "context",
            message: format!("context directory {:?} leaves the context", part.dir),
        });
    }
    let dir = match part.dir.trim_matches('/') {
        "" => CONTEXT_DIR.to_owned(),
        dir => format!("{CONTEXT_DIR}/{dir}"),
    };
    backend.fs_mkdir(sandbox_id, &dir, true, 0o755).await?;
    let mut upload = backend.fs_import(sandbox_id, &dir).await?;
    let context = part.tar.as_path();
    let mut file = tokio::fs::File::open(context)
        .await
        .map_err(|e| SandboxError::io(format!("open {}", context.display()), e))?;
    let mut buffer = vec![0u8; 256 << 10];
    loop {
        let read = file
            .read(&mut buffer)
            .await
            .map_err(|e| SandboxError::io(format!("read {}", context.display()), e))?;
        if read == 0 {
            break;
        }
        if upload.write(&buffer[..read]).await.is_err() {
            // The other side stopped reading: `finish` says why.
            break;
        }
    }
    upload.finish().await
}

/// The longest a build may take unless its caller says otherwise.
pub const DEFAULT_BUILD_DEADLINE: Duration = Duration::from_secs(30 * 60);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_step_exports_enters_and_drops_to_the_steps_user() {
        let mut state = StepState::default();
        let root = state.script("id -u");
        assert!(root.contains("export HOME='/root'"), "{root}");
        assert!(root.contains("cd '/'"), "{root}");
        assert!(root.ends_with("exec /bin/sh -c 'id -u'\n"), "{root}");
        state.set_env("A", "it's");
        state.set_env("A", "again");
        state.workdir = Some("/srv/app".into());
        state.user = Some("user".into());
        let user = state.script("echo $A");
        assert!(user.contains("export A='again'\n"), "{user}");
        assert_eq!(user.matches("export A=").count(), 1, "{user}");
        assert!(user.contains("cd '/srv/app'"), "{user}");
        assert!(
            user.contains("exec \"$setpriv\" --reuid='user' --regid=\"$(id -g 'user')\" --clear-groups -- /bin/sh -c 'echo $A'"),
            "{user}"
        );
        let config = state.config();
        assert_eq!(config.env, vec!["A=again".to_owned()]);
        assert_eq!(config.working_dir.as_deref(), Some("/srv/app"));
        assert_eq!(config.user.as_deref(), Some("user"));
    }

    #[test]
    fn a_copy_is_relative_to_the_working_directory_and_owned_as_asked() {
        let state = StepState {
            workdir: Some("/app".into()),
            ..StepState::default()
        };
        let one = state.copy_script(&["src/main.py".into()], "main.py", None);
        assert!(one.contains("cp -a 'src/main.py' '/app/main.py'"), "{one}");
        assert!(one.contains("chown -h '0:0' '/app/main.py'"), "{one}");
        let many = state.copy_script(&["a".into(), "d/b".into()], "/opt/", Some("user"));
        assert!(many.contains("cp -a 'a' '/opt/a'"), "{many}");
        assert!(many.contains("cp -a 'd/b'/. '/opt'/"), "{many}");
        assert!(many.contains("chown -h 'user' '/opt/b'"), "{many}");
    }
}
