//! `shellgate local`: the seeds' local shell mode, client side. A loop
//! against any Responses API (shellgate's or a provider's) with the `shell`
//! tool in the `local` environment (or the legacy `local_shell` tool): each
//! call the model makes is judged (a policy, the user, or both), run on
//! this machine, echoed live, written to an audit log, and sent back with
//! `previous_response_id` until the model answers.

mod client;
pub mod policy;
pub mod runner;
mod sandbox;

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::{json, Value};
use shellgate_sandbox::backend::{limits, CommandResult};
use shellgate_sandbox::Outcome;

use policy::{Policy, Verdict};
use runner::Program;

#[derive(clap::Args)]
pub struct LocalArgs {
    /// The Responses API's base URL, e.g. http://127.0.0.1:8080/v1 or
    /// https://api.openai.com/v1.
    #[arg(long, env = "OPENAI_BASE_URL")]
    base_url: String,
    /// The model to ask.
    #[arg(long)]
    model: String,
    /// The API key (sent as a Bearer token).
    #[arg(long, env = "OPENAI_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// Speak the legacy `local_shell` tool (argv commands) instead of
    /// `shell`.
    #[arg(long)]
    legacy: bool,
    /// Who approves each command: `ask` (y/n on the terminal; the default
    /// on a terminal), `auto` (only what the policy allows; the default
    /// elsewhere), `never-ask` (everything the policy does not deny).
    #[arg(long, value_enum)]
    approve: Option<Approve>,
    /// Allow and deny rules (TOML: `allow = [{ prefix = "ls" }, { regex =
    /// "^git (status|diff)" }]`, `deny = [...]`), matched on every simple
    /// command of a line's bash syntax tree: a line is allowed only if each
    /// of them is. Deny wins, and destructive commands (`rm -rf /`, `mkfs`,
    /// `dd of=/dev/...`, fork bombs) are always denied.
    #[arg(long)]
    policy: Option<PathBuf>,
    /// A local skill: a folder with a SKILL.md (its name and description
    /// are read from it); repeat for more.
    #[arg(long = "skill", value_name = "DIR")]
    skills: Vec<PathBuf>,
    /// Where every command, decision and outcome is appended (JSON lines).
    #[arg(long, default_value_os_t = default_audit_path())]
    audit: PathBuf,
    /// Longest a command may run when the model names no timeout.
    #[arg(long, default_value_t = limits::DEFAULT_TIMEOUT_MS)]
    timeout_ms: u64,
    /// Characters kept per stream of a command when the model names no cap.
    #[arg(long, default_value_t = limits::DEFAULT_MAX_OUTPUT_LENGTH)]
    max_output_length: usize,
    /// Most model turns before giving up.
    #[arg(long, default_value_t = 50)]
    max_turns: usize,
    /// Print the final response (JSON) instead of streaming text.
    #[arg(long)]
    json: bool,
    /// Run every command in one shellgate sandbox kept for the run: the
    /// host's files read-only, the working directory writable, no network.
    #[arg(long)]
    sandbox: bool,
    /// With --sandbox: let commands reach this host name (or `*.domain`)
    /// on ports 80 and 443; repeat for more.
    #[arg(long = "allow-net", value_name = "DOMAIN", requires = "sandbox")]
    allow_net: Vec<String>,
    /// With --sandbox: a shellgate config file (egress settings).
    #[arg(long, env = "SHELLGATE_CONFIG", requires = "sandbox")]
    config: Option<PathBuf>,
    /// The task.
    task: String,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Approve {
    Ask,
    Auto,
    NeverAsk,
}

fn default_audit_path() -> PathBuf {
    let state = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
        .unwrap_or_else(|| PathBuf::from("."));
    state.join("shellgate").join("local-audit.jsonl")
}

/// One call of the model's, as this loop runs it.
struct Call {
    call_id: String,
    commands: Vec<Command>,
    timeout: Duration,
    max_output_length: usize,
}

enum Command {
    Shell(String),
    Argv {
        argv: Vec<String>,
        env: Vec<(String, String)>,
        dir: Option<PathBuf>,
    },
}

impl Command {
    /// As one shell string, with a legacy call's working directory and
    /// variables (for the sandbox, which runs shell strings).
    fn in_shell(&self) -> String {
        match self {
            Command::Shell(text) => text.clone(),
            Command::Argv { argv, env, dir } => {
                let mut text = String::new();
                if let Some(dir) = dir {
                    text.push_str(&format!(
                        "cd {} || exit 125\n",
                        crate::quote::shell_quote(&dir.to_string_lossy())
                    ));
                }
                text.push_str("exec ");
                text.push_str(&words(argv, env));
                text
            }
        }
    }

    /// As shown to the user, judged by the policy and written to the
    /// audit log: a legacy call's directory and variables included, so
    /// what is approved is what runs.
    fn display(&self) -> String {
        match self {
            Command::Shell(text) => text.clone(),
            Command::Argv { argv, env, dir } => {
                let words = words(argv, env);
                match dir {
                    Some(dir) => format!(
                        "cd {} && {words}",
                        crate::quote::shell_quote(&dir.to_string_lossy())
                    ),
                    None => words,
                }
            }
        }
    }
}

/// `env NAME=VALUE ... argv`, each word quoted for bash (`env` only when
/// there are variables).
fn words(argv: &[String], env: &[(String, String)]) -> String {
    let mut words: Vec<String> = Vec::new();
    if !env.is_empty() {
        words.push("env".to_owned());
        words.extend(
            env.iter()
                .map(|(name, value)| crate::quote::shell_quote(&format!("{name}={value}"))),
        );
    }
    words.extend(argv.iter().map(|a| crate::quote::shell_quote(a)));
    words.join(" ")
}

/// The calls in a response's output that this client must run.
fn calls(response: &Value, defaults: &LocalArgs) -> Vec<Call> {
    let items = response["output"].as_array().cloned().unwrap_or_default();
    let number = |v: &Value| v.as_u64();
    items
        .iter()
        .filter_map(|item| {
            let call_id = item["call_id"].as_str()?.to_owned();
            let action = &item["action"];
            let timeout =
                Duration::from_millis(number(&action["timeout_ms"]).unwrap_or(defaults.timeout_ms));
            match item["type"].as_str()? {
                "shell_call" => Some(Call {
                    call_id,
                    commands: action["commands"]
                        .as_array()?
                        .iter()
                        .filter_map(|c| c.as_str().map(|c| Command::Shell(c.to_owned())))
                        .collect(),
                    timeout,
                    // The model's cap, within what a result may carry (a
                    // model asking for more cannot make this client hold
                    // a flood in memory).
                    max_output_length: number(&action["max_output_length"])
                        .map(|n| n.min(limits::MAX_OUTPUT_LENGTH as u64) as usize)
                        .unwrap_or(defaults.max_output_length)
                        .clamp(1, limits::MAX_OUTPUT_LENGTH),
                }),
                "local_shell_call" => {
                    let argv: Vec<String> = action["command"]
                        .as_array()?
                        .iter()
                        .filter_map(|a| a.as_str().map(str::to_owned))
                        .collect();
                    let env = action["env"]
                        .as_object()
                        .map(|m| {
                            m.iter()
                                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                                .collect()
                        })
                        .unwrap_or_default();
                    let dir = action["working_directory"].as_str().map(PathBuf::from);
                    Some(Call {
                        call_id,
                        commands: if argv.is_empty() {
                            Vec::new()
                        } else {
                            vec![Command::Argv { argv, env, dir }]
                        },
                        timeout,
                        max_output_length: defaults
                            .max_output_length
                            .clamp(1, limits::MAX_OUTPUT_LENGTH),
                    })
                }
                _ => None,
            }
        })
        .collect()
}

/// The `by` of a decision the user took at the terminal (every other one
/// is the policy's).
const USER: &str = "user";

/// Who decided, and what.
struct Decision {
    approved: bool,
    by: String,
}

struct Judge {
    mode: Approve,
    policy: Policy,
}

impl Judge {
    fn decide(&self, command: &str) -> Result<Decision> {
        Ok(match (self.policy.judge(command), self.mode) {
            (Verdict::Denied(rule), _) => Decision {
                approved: false,
                by: format!("policy deny {rule}"),
            },
            (Verdict::Allowed(rules), _) => Decision {
                approved: true,
                by: format!("policy allow {rules}"),
            },
            (Verdict::Unknown(_), Approve::NeverAsk) => Decision {
                approved: true,
                by: "never-ask".to_owned(),
            },
            // Deny always wins, and what cannot be read cannot be shown
            // not to be denied.
            (Verdict::Unparsable(why), Approve::NeverAsk) => Decision {
                approved: false,
                by: format!("never-ask: {why}, so it cannot be checked against the deny list"),
            },
            (Verdict::Unknown(why) | Verdict::Unparsable(why), Approve::Auto) => Decision {
                approved: false,
                by: format!("auto: {why}"),
            },
            (Verdict::Unknown(why) | Verdict::Unparsable(why), Approve::Ask) => {
                let approved = ask_user(command, &why)?;
                Decision {
                    approved,
                    by: USER.to_owned(),
                }
            }
        })
    }
}

/// Shows the command on the terminal and reads y/n from it.
fn ask_user(command: &str, why: &str) -> Result<bool> {
    let tty = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
        .context("--approve ask needs a terminal (use --approve auto or never-ask)")?;
    let mut writer = tty.try_clone()?;
    let mut reader = std::io::BufReader::new(tty);
    loop {
        write!(writer, "\nRun this command? ({why})\n  $ {command}\n[y/n] ")?;
        writer.flush()?;
        let mut answer = String::new();
        if reader.read_line(&mut answer)? == 0 {
            return Ok(false);
        }
        match answer.trim().to_ascii_lowercase().as_str() {
            "y" | "yes" => return Ok(true),
            "n" | "no" => return Ok(false),
            _ => {}
        }
    }
}

/// The audit log: one JSON object a line, appended.
struct Audit {
    file: std::fs::File,
}

impl Audit {
    fn open(path: &Path) -> Result<Self> {
        use std::os::unix::fs::OpenOptionsExt;
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(path)
            .with_context(|| format!("cannot open the audit log {}", path.display()))?;
        Ok(Self { file })
    }

    fn record(&mut self, entry: Value) -> Result<()> {
        // One write per line: appends from several runs never interleave.
        let mut line = entry.to_string();
        line.push('\n');
        self.file
            .write_all(line.as_bytes())
            .context("cannot write the audit log")
    }
}

fn outcome_json(result: &CommandResult) -> Value {
    match result.outcome {
        Outcome::Exit { exit_code } => json!({"type": "exit", "exit_code": exit_code}),
        Outcome::Timeout => json!({"type": "timeout"}),
    }
}

fn local_skills(dirs: &[PathBuf]) -> Result<Vec<Value>> {
    dirs.iter()
        .map(|dir| {
            let dir = std::fs::canonicalize(dir)
                .with_context(|| format!("no skill folder {}", dir.display()))?;
            let text = std::fs::read_to_string(dir.join("SKILL.md"))
                .with_context(|| format!("{} has no SKILL.md", dir.display()))?;
            let manifest = shellgate_skills::manifest::parse(&text)
                .with_context(|| format!("{}/SKILL.md", dir.display()))?;
            Ok(json!({
                "name": manifest.name,
                "description": manifest.description,
                "path": dir.to_string_lossy(),
            }))
        })
        .collect()
}

/// The exit status of a run off a terminal whose model answered but whose
/// policy rejected some of the commands it asked for: a script (or CI) sees
/// that the task was not done as asked. Not 1 (`shellgate local` failed)
/// nor 2 (clap's, for bad arguments).
pub const REJECTED_STATUS: i32 = 3;

/// Runs the loop; returns the exit status (0: the model answered; off a
/// terminal, [`REJECTED_STATUS`] if the policy rejected a command).
/// `data_dir`: shellgate's data directory (the global `--data-dir`), for
/// `--sandbox`'s engine and images.
pub async fn run(args: LocalArgs, data_dir: Option<PathBuf>) -> Result<i32> {
    let interactive = std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
    let judge = Judge {
        mode: args.approve.unwrap_or(if interactive {
            Approve::Ask
        } else {
            Approve::Auto
        }),
        policy: Policy::load(args.policy.as_deref())?,
    };
    let mut audit = Audit::open(&args.audit)?;
    let client = client::Client::new(&args.base_url, args.api_key.clone())?;
    let tools = if args.legacy {
        json!([{"type": "local_shell"}])
    } else {
        json!([{"type": "shell", "environment": {"type": "local", "skills": local_skills(&args.skills)?}}])
    };
    let cwd = std::env::current_dir().context("no current directory")?;
    let body = json!({
        "model": args.model,
        "tools": tools,
        "input": [{"role": "user", "content": [{"type": "input_text", "text": args.task}]}],
    });
    let sandbox = if args.sandbox {
        Some(sandbox::Sandbox::open(data_dir, &cwd, &args.allow_net, args.config.as_deref()).await?)
    } else {
        None
    };
    let result = run_loop(
        &args,
        &judge,
        &mut audit,
        &client,
        &cwd,
        sandbox.as_ref(),
        body,
    )
    .await;
    if let Some(sandbox) = sandbox {
        sandbox.close().await;
    }
    let rejected = result?;
    if rejected > 0 && !interactive {
        eprintln!(
            "shellgate local: the policy rejected {rejected} command{} (see {}); exit status {REJECTED_STATUS}",
            if rejected == 1 { "" } else { "s" },
            args.audit.display()
        );
        return Ok(REJECTED_STATUS);
    }
    Ok(0)
}

async fn run_loop(
    args: &LocalArgs,
    judge: &Judge,
    audit: &mut Audit,
    client: &client::Client,
    cwd: &Path,
    sandbox: Option<&sandbox::Sandbox>,
    mut body: Value,
) -> Result<usize> {
    let mut stdout = std::io::stdout();
    let mut sink = std::io::sink();
    let dim = crate::terminal::stderr_colours();
    // Commands the policy (not the user) refused to run.
    let mut rejected = 0;
    for _turn in 0..args.max_turns {
        let text: &mut dyn Write = if args.json { &mut sink } else { &mut stdout };
        let response = client.create(&body, text).await?;
        let response_id = response["id"].as_str().unwrap_or_default().to_owned();
        let calls = calls(&response, args);
        if calls.is_empty() {
            if args.json {
                println!("{}", serde_json::to_string_pretty(&response)?);
            } else {
                println!();
            }
            return Ok(rejected);
        }
        let mut outputs = Vec::new();
        for call in &calls {
            let mut results = Vec::new();
            for command in &call.commands {
                let shown = command.display();
                let decision = judge.decide(&shown)?;
                let entry = |stage: &str| {
                    json!({
                        "time": unix_seconds(),
                        "stage": stage,
                        "base_url": args.base_url,
                        "model": args.model,
                        "response_id": response_id,
                        "call_id": call.call_id,
                        "command": shown,
                        "cwd": cwd.to_string_lossy(),
                        "sandbox": sandbox.is_some(),
                        "decision": if decision.approved { "approved" } else { "denied" },
                        "by": decision.by,
                    })
                };
                if decision.approved {
                    // Written before the command runs: one that ends this
                    // process (`kill -9 -1`, a reboot) is still on record.
                    audit.record(entry("decided"))?;
                }
                let result = if decision.approved {
                    if !args.json {
                        // Dimmed on a terminal; a pipe or a file gets no
                        // escape codes.
                        if dim {
                            eprintln!("\x1b[2m$ {shown}\x1b[0m");
                        } else {
                            eprintln!("$ {shown}");
                        }
                    }
                    if let Some(sandbox) = sandbox {
                        sandbox
                            .run(
                                &command.in_shell(),
                                call.timeout,
                                call.max_output_length,
                                args.json,
                            )
                            .await
                    } else {
                        let (program, env, dir) = match command {
                            Command::Shell(text) => (Program::Shell(text), &[][..], cwd.to_owned()),
                            Command::Argv { argv, env, dir } => (
                                Program::Argv(argv),
                                env.as_slice(),
                                dir.clone().unwrap_or_else(|| cwd.to_owned()),
                            ),
                        };
                        runner::run(
                            program,
                            &dir,
                            env,
                            call.timeout,
                            call.max_output_length,
                            args.json,
                        )
                        .await
                    }
                } else {
                    if decision.by != USER {
                        rejected += 1;
                    }
                    if !args.json {
                        eprintln!("shellgate local: not running `{shown}` ({})", decision.by);
                    }
                    runner::not_run(
                        format!(
                            "shellgate local: the command was rejected ({}); it did not run.\n",
                            decision.by
                        ),
                        1,
                    )
                };
                // An approved command's outcome follows its decision; a
                // denied one's decision is its only line.
                let mut done = entry(if decision.approved { "done" } else { "decided" });
                done["outcome"] = if decision.approved {
                    outcome_json(&result)
                } else {
                    json!({"type": "not_run"})
                };
                done["duration_ms"] = json!(result.duration_ms);
                audit.record(done)?;
                results.push(result);
            }
            outputs.push(if args.legacy {
                let text: String = results
                    .iter()
                    .map(|r| format!("{}{}", r.stdout, r.stderr))
                    .collect();
                json!({"type": "local_shell_call_output", "call_id": call.call_id, "output": text})
            } else {
                json!({
                    "type": "shell_call_output",
                    "call_id": call.call_id,
                    "max_output_length": call.max_output_length,
                    "output": results.iter().map(|r| json!({
                        "stdout": r.stdout,
                        "stderr": r.stderr,
                        "outcome": outcome_json(r),
                    })).collect::<Vec<_>>(),
                })
            });
        }
        body = json!({
            "model": args.model,
            "tools": body["tools"].clone(),
            "previous_response_id": response_id,
            "input": outputs,
        });
    }
    anyhow::bail!(
        "the model was still calling commands after {} turns (--max-turns)",
        args.max_turns
    )
}

/// Seconds since the Unix epoch, with fractions.
fn unix_seconds() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_legacy_call_is_shown_and_run_with_its_directory_and_variables() {
        let command = Command::Argv {
            argv: vec!["bash".into(), "-lc".into(), "echo $X".into()],
            env: vec![("X".into(), "a b".into())],
            dir: Some(PathBuf::from("/tmp/it's")),
        };
        assert_eq!(
            command.display(),
            "cd '/tmp/it'\\''s' && env 'X=a b' bash -lc 'echo $X'"
        );
        assert_eq!(
            command.in_shell(),
            "cd '/tmp/it'\\''s' || exit 125\nexec env 'X=a b' bash -lc 'echo $X'"
        );
        let plain = Command::Argv {
            argv: vec!["ls".into(), "-la".into()],
            env: Vec::new(),
            dir: None,
        };
        assert_eq!(plain.display(), "ls -la");
        assert_eq!(plain.in_shell(), "exec ls -la");
    }
}
