//! Running one command on this machine for `shellgate local`: `bash -c`
//! (or an argv, for the legacy tool) in its own process group, stdin
//! closed, no TTY, output captured to a cap (head and tail kept) while it
//! is echoed live to the terminal, and a timeout that kills the whole
//! group.

use std::io::Write;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use shellgate_sandbox::output::CappedOutput;
use shellgate_sandbox::{backend::CommandResult, Outcome};
use tokio::io::AsyncReadExt;

/// A command that did not run (or whose output could not be read): only
/// a stderr saying why, and an exit code.
pub fn not_run(stderr: String, exit_code: i32) -> CommandResult {
    CommandResult {
        stdout: String::new(),
        stderr,
        outcome: Outcome::Exit { exit_code },
        duration_ms: 0,
        bytes_out: 0,
    }
}

/// What to run.
pub enum Program<'a> {
    /// A shell string, run with `/bin/bash -c`.
    Shell(&'a str),
    /// An argv, run as is (the legacy `local_shell` tool).
    Argv(&'a [String]),
}

/// Runs `program` in `dir` with `env` added; echoes its output to stderr
/// as it comes unless `quiet`.
pub async fn run(
    program: Program<'_>,
    dir: &Path,
    env: &[(String, String)],
    timeout: Duration,
    max_output_length: usize,
    quiet: bool,
) -> CommandResult {
    let started = Instant::now();
    let mut command = match program {
        Program::Shell(text) => {
            let mut command = tokio::process::Command::new("/bin/bash");
            command.arg("-c").arg(text);
            command
        }
        Program::Argv(argv) => {
            let mut command = tokio::process::Command::new(&argv[0]);
            command.args(&argv[1..]);
            command
        }
    };
    command
        .current_dir(dir)
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own group, so a timeout kills what it started too.
        .process_group(0)
        .kill_on_drop(true);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            let exit_code = if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            return not_run(format!("cannot run the command: {e}\n"), exit_code);
        }
    };
    let group = child.id().map(|pid| pid as libc::pid_t);
    let (Some(mut stdout), Some(mut stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return not_run("cannot read the command's output\n".to_owned(), 126);
    };
    let mut out = CappedOutput::new(max_output_length);
    let mut err = CappedOutput::new(max_output_length);
    let (mut out_buf, mut err_buf) = (vec![0u8; 16 << 10], vec![0u8; 16 << 10]);
    let (mut out_open, mut err_open) = (true, true);
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let mut timed_out = false;
    while out_open || err_open {
        tokio::select! {
            read = stdout.read(&mut out_buf), if out_open => match read {
                Ok(0) | Err(_) => out_open = false,
                Ok(n) => {
                    out.push(&out_buf[..n]);
                    if !quiet {
                        let _ = std::io::stderr().write_all(&out_buf[..n]);
                    }
                }
            },
            read = stderr.read(&mut err_buf), if err_open => match read {
                Ok(0) | Err(_) => err_open = false,
                Ok(n) => {
                    err.push(&err_buf[..n]);
                    if !quiet {
                        let _ = std::io::stderr().write_all(&err_buf[..n]);
                    }
                }
            },
            () = &mut deadline => {
                timed_out = true;
                break;
            }
        }
    }
    if timed_out {
        if let Some(group) = group {
            // SAFETY: signalling the process group this function created.
            unsafe { libc::kill(-group, libc::SIGKILL) };
        }
    }
    let status = child.wait().await;
    let outcome = if timed_out {
        Outcome::Timeout
    } else {
        use std::os::unix::process::ExitStatusExt;
        let code = match status {
            Ok(status) => status
                .code()
                .or_else(|| status.signal().map(|s| 128 + s))
                .unwrap_or(1),
            Err(_) => 1,
        };
        Outcome::Exit { exit_code: code }
    };
    let bytes_out = out.total_bytes() + err.total_bytes();
    CommandResult {
        stdout: out.finish(),
        stderr: err.finish(),
        outcome,
        duration_ms: started.elapsed().as_millis() as u64,
        bytes_out,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn exit_codes_timeouts_caps_and_a_closed_stdin() {
        let dir = std::env::temp_dir();
        let run_shell = |text: &'static str, timeout_ms: u64, cap: usize| {
            let dir = dir.clone();
            async move {
                run(
                    Program::Shell(text),
                    &dir,
                    &[],
                    Duration::from_millis(timeout_ms),
                    cap,
                    true,
                )
                .await
            }
        };
        let ok = run_shell("echo out; echo err >&2; exit 3", 5000, 1000).await;
        assert_eq!(
            (ok.stdout.as_str(), ok.stderr.as_str(), ok.outcome),
            ("out\n", "err\n", Outcome::Exit { exit_code: 3 })
        );
        // stdin is closed: cat ends at once.
        assert_eq!(
            run_shell("cat; echo done", 5000, 100).await.stdout,
            "done\n"
        );
        // A timeout kills the group, background children included, and
        // keeps what was printed.
        let started = Instant::now();
        let slow = run_shell("echo started; sleep 30 & sleep 30", 300, 100).await;
        assert_eq!(slow.outcome, Outcome::Timeout);
        assert_eq!(slow.stdout, "started\n");
        assert!(started.elapsed() < Duration::from_secs(10));
        let capped = run_shell("seq 1 100000", 5000, 64).await;
        assert!(capped.stdout.chars().count() <= 64, "{}", capped.stdout);
        let argv = [
            "printf".to_owned(),
            "%s|".to_owned(),
            "a b".to_owned(),
            "$HOME".to_owned(),
        ];
        let direct = run(
            Program::Argv(&argv),
            &dir,
            &[],
            Duration::from_secs(5),
            100,
            true,
        )
        .await;
        assert_eq!(direct.stdout, "a b|$HOME|");
        let missing = ["no-such-program-here".to_owned()];
        let missing = run(
            Program::Argv(&missing),
            &dir,
            &[],
            Duration::from_secs(5),
            100,
            true,
        )
        .await;
        assert_eq!(missing.outcome, Outcome::Exit { exit_code: 127 });
    }
}
