//! Command-line parsing and the subcommands.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{CommandFactory, Parser, Subcommand};
use shellgate_sandbox::backend::{
    limits, parse_size, CommandResult, ContainerSpec, RunRequest, SandboxBackend,
};
use shellgate_sandbox::image::runtimes;
use shellgate_sandbox::LocalEngine;

use crate::oneshot::{
    egress_for, env_settings, images_dir, open_engine, sandbox_dir, throwaway_id,
};
use crate::quote::shell_quote;
use crate::terminal::Logging;

/// What `shellgate --version` prints after the name: the package version,
/// then the commit and the date it was built from (build.rs).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("SHELLGATE_BUILD_COMMIT"),
    ", built ",
    env!("SHELLGATE_BUILD_DATE"),
    ")"
);

#[derive(Parser)]
#[command(
    name = "shellgate",
    version = VERSION,
    about = "A hosted, isolated Linux shell for any AI model"
)]
struct Cli {
    /// Where containers, images and disks live.
    #[arg(long, global = true, env = "SHELLGATE_DATA_DIR")]
    data_dir: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the OpenAI-compatible HTTP API.
    #[command(after_help = SERVE_SETTINGS_HELP)]
    Serve(ServeArgs),
    /// Manage API keys.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Run commands in a throwaway container and print a shell_call_output-shaped JSON object.
    Exec(ExecArgs),
    /// Build, import and list images.
    #[command(subcommand)]
    Image(ImageCommand),
    /// List, take and delete a running server's snapshots (through its
    /// HTTP API, with a project's key).
    Snapshot(crate::snapshot::SnapshotArgs),
    /// Read the command audit.
    #[command(subcommand)]
    Audit(AuditCommand),
    /// Drain this cluster node: it takes no new containers, and
    /// the command waits until its containers have ended (or the timeout).
    /// Run beside the node (a Kubernetes preStop hook): it reads the same
    /// settings (`listen`, `cluster_secret`).
    Drain(DrainArgs),
    /// Run an agent on this machine: a model (any Responses API) calls the
    /// shell, each command is approved (by you or a policy), run here, and
    /// its output sent back, until the model answers.
    ///
    /// Exit status: 0 when the model answered; off a terminal, 3 when it
    /// answered but the policy rejected a command it asked for; 1 when the
    /// run failed.
    Local(crate::local::LocalArgs),
    /// The server's settings.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Back up a single box while it serves.
    ///
    /// An online copy of its SQLite store and the data directory's files,
    /// containers and images, into DEST (a new directory). Restore: copy
    /// DEST (`cp -a --sparse=always`) to where the data directory should be
    /// and start `serve` on it. A cluster backs up its Postgres database
    /// and object store instead (docs/operator/backups.md).
    Backup(BackupArgs),
    /// Print a shell's completion script for this command line.
    ///
    /// For bash, elvish, fish, powershell or zsh: e.g. `shellgate
    /// completions bash > /etc/bash_completion.d/shellgate`.
    Completions {
        /// The shell to complete for.
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff) of `shellgate`.
    ///
    /// With `--out-dir`, write one page per command into a directory
    /// instead.
    Man {
        /// Write shellgate.1 and a page for each subcommand
        /// (shellgate-serve.1, ...) into this directory instead.
        #[arg(long, value_name = "DIR")]
        out_dir: Option<PathBuf>,
    },
}

#[derive(clap::Args)]
struct BackupArgs {
    /// The directory to create with the backup (it must not exist).
    dest: PathBuf,
    /// A TOML config file, as `serve` reads it (its data directory and
    /// store are the ones backed up).
    #[arg(long, env = "SHELLGATE_CONFIG")]
    config: Option<PathBuf>,
}

/// Where `serve --help` sends an operator for the settings.
const SERVE_SETTINGS_HELP: &str = "\
Settings: defaults, then the config file (--config), then the environment,
then these flags. Every setting NAME of the file is also the environment
variable SHELLGATE_<NAME> (the name in capitals: default_image is
SHELLGATE_DEFAULT_IMAGE); lists and tables are the file's only.
Every setting, commented, at its default: `shellgate config example`
(deploy/shellgate.toml.example); their reference: `shellgate config
reference` (docs/operator/configuration.md).";

#[derive(Subcommand)]
enum ConfigCommand {
    /// Print the configuration reference: every setting, its environment
    /// variable, default and meaning (a Markdown table, made from the
    /// server's own declaration of its settings).
    Reference {
        /// Write it into this page instead (between its settings markers,
        /// as docs/operator/configuration.md has them).
        #[arg(long, value_name = "PAGE")]
        update: Option<PathBuf>,
    },
    /// Print a config file with every setting commented out at its default.
    ///
    /// Each setting with its meaning and environment variable, as
    /// deploy/shellgate.toml.example has it: a start for your own.
    Example,
}

#[derive(clap::Args)]
struct DrainArgs {
    /// A TOML config file, as `serve` reads it.
    #[arg(long, env = "SHELLGATE_CONFIG")]
    config: Option<PathBuf>,
    /// Seconds to wait for the containers to end (0: do not wait).
    #[arg(long, default_value_t = 3600)]
    timeout: u64,
    /// Take the node back instead (ready for containers again).
    #[arg(long)]
    cancel: bool,
}

#[derive(Subcommand)]
enum AuditCommand {
    /// Write every command run (for exec and for responses) as JSON lines.
    Export {
        /// Only this project's commands.
        #[arg(long)]
        project: Option<String>,
        /// Write the export to the object store as `audit/NAME` (the
        /// configured `object_store`: the data directory or an S3 bucket),
        /// streamed, instead of to stdout. Stored only once complete.
        #[arg(long, value_name = "NAME")]
        to_object: Option<String>,
        /// A TOML config file (the object store's settings); `SHELLGATE_*`
        /// variables override it.
        #[arg(long, env = "SHELLGATE_CONFIG")]
        config: Option<PathBuf>,
    },
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Address to listen on (default 127.0.0.1:8080).
    #[arg(long)]
    listen: Option<std::net::SocketAddr>,
    /// A TOML config file; `SHELLGATE_*` variables override it, flags override both.
    #[arg(long, env = "SHELLGATE_CONFIG")]
    config: Option<PathBuf>,
    /// How the log is written: `text` (for people), `json` (one object a
    /// line, for collectors) or `auto` (text on a terminal or into
    /// systemd's journal, JSON elsewhere; the default). Overrides `log_format` / `SHELLGATE_LOG_FORMAT`.
    #[arg(long, value_enum)]
    log_format: Option<LogFormatArg>,
}

/// `serve --log-format`.
#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormatArg {
    Auto,
    Json,
    Text,
}

impl From<LogFormatArg> for shellgate_server::config::LogFormat {
    fn from(format: LogFormatArg) -> Self {
        match format {
            LogFormatArg::Auto => Self::Auto,
            LogFormatArg::Json => Self::Json,
            LogFormatArg::Text => Self::Text,
        }
    }
}

#[derive(Subcommand)]
enum KeysCommand {
    /// Create an API key for a project and print it (it is stored hashed).
    Create {
        /// The project the key belongs to.
        #[arg(long, default_value = "default")]
        project: String,
        /// Make the key of the shape E2B's SDKs insist on (`e2b_` and 40 hex
        /// digits), for `E2B_API_KEY`.
        #[arg(long)]
        e2b: bool,
        /// An admin key: its own project through the API, and every
        /// project in the web console.
        #[arg(long)]
        admin: bool,
    },
    /// List the keys (their ids, never the keys), oldest first.
    List {
        /// Only this project's keys.
        #[arg(long)]
        project: Option<String>,
    },
    /// Revoke a key by its id (as `keys list` shows it): it opens nothing
    /// from then on (a running server stops taking it within 5 seconds).
    Revoke {
        /// The key's id, `key_` and 16 hex digits.
        id: String,
    },
}

#[derive(clap::Args)]
struct ExecArgs {
    /// Image to run (`host`, or one from `shellgate image list`).
    #[arg(long, default_value = "host")]
    image: String,
    /// Per-command timeout in milliseconds.
    #[arg(long, default_value_t = limits::DEFAULT_TIMEOUT_MS)]
    timeout_ms: u64,
    /// Characters kept per stream of each command.
    #[arg(long, default_value_t = limits::DEFAULT_MAX_OUTPUT_LENGTH)]
    max_output_length: usize,
    /// Memory limit: 1g, 4g, 16g, 64g (or any size such as 512m).
    #[arg(long, default_value = "1g")]
    memory: String,
    /// Let the commands reach this host name (or `*.domain` pattern) on
    /// ports 80 and 443, through the egress proxy; repeat for more. Without
    /// it the sandbox has no network.
    #[arg(long = "allow", value_name = "DOMAIN")]
    allow: Vec<String>,
    /// A TOML config file for the egress settings (organization allowlist,
    /// DNS server, trusted roots); `SHELLGATE_*` variables override it.
    #[arg(long, env = "SHELLGATE_CONFIG")]
    config: Option<PathBuf>,
    /// A shell command, run with `bash -c` in /mnt/data; repeat for more
    /// (they run in order, whatever the previous ones did).
    #[arg(short = 'c', long = "command", value_name = "CMD")]
    shell: Vec<String>,
    /// Print the `shell_call_output` object (as the API returns it) instead
    /// of the commands' output.
    #[arg(long)]
    json: bool,
    /// The program and its arguments, run as one command (as `docker run`,
    /// `ssh` and `bwrap` do): `shellgate exec -- python3 -c 'print(1)'`.
    #[arg(last = true, value_name = "PROGRAM")]
    argv: Vec<String>,
}

impl ExecArgs {
    /// The commands to run: the `-c` strings, or the program and its
    /// arguments quoted into one (`exec`, so that it replaces the shell:
    /// its exit status and signals are the command's own).
    fn commands(&self) -> Result<Vec<String>> {
        match (self.shell.is_empty(), self.argv.is_empty()) {
            (false, true) => Ok(self.shell.clone()),
            (true, false) => Ok(vec![format!(
                "exec {}",
                self.argv
                    .iter()
                    .map(|a| shell_quote(a))
                    .collect::<Vec<_>>()
                    .join(" ")
            )]),
            (true, true) => anyhow::bail!(
                "nothing to run: give a program after `--` (shellgate exec -- python3 -V) \
                 or shell commands with -c"
            ),
            (false, false) => {
                anyhow::bail!("give either -c commands or a program after `--`, not both")
            }
        }
    }
}

/// The exit status `exec` ends with: that of the first command that did
/// not succeed (0 when every one did), 124 for a timeout (as `timeout`).
fn exit_status(results: &[CommandResult]) -> i32 {
    results
        .iter()
        .find_map(|r| match r.outcome {
            shellgate_sandbox::Outcome::Exit { exit_code: 0 } => None,
            shellgate_sandbox::Outcome::Exit { exit_code } => Some(exit_code.clamp(1, 255)),
            shellgate_sandbox::Outcome::Timeout => Some(124),
        })
        .unwrap_or(0)
}

/// Exit status when the sandbox itself failed (as `docker run`'s 125).
const SANDBOX_FAILED: i32 = 125;

#[derive(Subcommand)]
enum ImageCommand {
    /// List images.
    List,
    /// Build an image from its recipe (needs mmdebstrap and curl):
    /// `debian-12` (Python 3.11, Node.js 22, Java 17, PHP 8.2, Ruby 3.1,
    /// Go 1.23, Python's data stack and common tools) or `debian-12-slim`.
    /// Does nothing if the image is built from the recipe as it is now.
    ///
    /// With `--dockerfile`, builds image NAME from a Dockerfile (`FROM`,
    /// `RUN`, `COPY`, `ENV`, `WORKDIR`, `USER`) in a build sandbox whose
    /// steps run as the sandbox's own root.
    Build {
        /// Image to build.
        name: String,
        /// Build it again even if it is up to date.
        #[arg(long)]
        force: bool,
        /// Build NAME from this Dockerfile rather than from a recipe.
        #[arg(long, value_name = "FILE")]
        dockerfile: Option<PathBuf>,
        /// The build context `COPY` reads: a directory or a tar archive
        /// (default: the Dockerfile's directory).
        #[arg(long, value_name = "PATH", requires = "dockerfile")]
        context: Option<PathBuf>,
        /// Let the build's steps reach this host name (or `*.domain`
        /// pattern) through the egress proxy; repeat for more. Without it
        /// the build has no network.
        #[arg(long = "allow", value_name = "DOMAIN", requires = "dockerfile")]
        allow: Vec<String>,
        /// Configuration file (for the egress rules `--allow` is checked
        /// against).
        #[arg(long, value_name = "FILE", requires = "dockerfile")]
        config: Option<PathBuf>,
    },
    /// Print each runtime's version in an image (Python, Node.js, npm,
    /// Java, PHP, Ruby, Go, Python's data stack), the tools it has and
    /// whether `pip install --user` works; fails if a runtime is missing
    /// or, for an image built from a recipe, anything differs from what
    /// the recipe promises (versions, tools, Python modules).
    Verify {
        /// Image to check.
        name: String,
    },
    /// Import an image: an OCI image (layout or archive), a `docker save`
    /// archive, or a root file system tarball.
    Import {
        /// Name of the new image.
        name: String,
        /// An OCI image layout (a directory, or its tar as `buildah push
        /// oci-archive:` writes it), a `docker save`/`podman save` archive,
        /// or a tar archive (optionally compressed) of a root file system.
        tarball: PathBuf,
    },
}

pub fn main() -> i32 {
    let cli = Cli::parse();
    // What the command line says about itself needs nothing else.
    match &cli.command {
        Command::Completions { shell } => {
            clap_complete::generate(
                *shell,
                &mut Cli::command(),
                "shellgate",
                &mut std::io::stdout(),
            );
            return 0;
        }
        Command::Man { out_dir } => {
            return match manual(out_dir.as_deref()) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("shellgate: {e:#}");
                    1
                }
            };
        }
        _ => {}
    }
    // `serve` logs as its flag or config says (a config that cannot be
    // read is reported by `serve` itself, and logs as `auto` meanwhile).
    let logging = match &cli.command {
        Command::Serve(args) => Logging::server(
            args.log_format
                .map(Into::into)
                .or_else(|| {
                    server_config(cli.data_dir.clone(), args.config.as_deref())
                        .ok()
                        .map(|config| config.server.log_format)
                })
                .unwrap_or(shellgate_server::config::LogFormat::Auto),
        ),
        _ => Logging::tool(),
    };
    logging.init();
    // A mistyped setting would otherwise change nothing, silently.
    let names = std::env::vars_os().filter_map(|(name, _)| name.into_string().ok());
    for unknown in shellgate_server::config::unknown_variables(names) {
        tracing::warn!(variable = %unknown.name, "{unknown}");
    }
    let json_logs = logging.json;
    // A one-shot `exec` runs one container's commands: it forks its
    // sandbox helper now, while it has one thread, rather than have the
    // engine execute the binary again later (see `ForkedHelper`), and
    // needs no worker threads, whose start and hand-offs would be most of
    // its runtime's cost.
    let one_shot = matches!(cli.command, Command::Exec(_));
    let forked_helper = one_shot
        .then(shellgate_sandbox::ForkedHelper::fork)
        .flatten();
    let mut builder = if one_shot {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    let runtime = match builder.enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("shellgate: cannot start the runtime: {e}");
            return 1;
        }
    };
    let data_dir = cli.data_dir.clone();
    if let Command::Local(args) = cli.command {
        let data_dir = cli.data_dir.clone();
        return runtime.block_on(async move {
            match crate::local::run(args, data_dir).await {
                Ok(status) => status,
                Err(e) => {
                    eprintln!("shellgate local: {e:#}");
                    1
                }
            }
        });
    }
    if let Command::Exec(args) = cli.command {
        return runtime.block_on(async move {
            match exec(sandbox_dir(data_dir), args, forked_helper).await {
                Ok(status) => status,
                Err(e) => {
                    eprintln!("shellgate: {e:#}");
                    SANDBOX_FAILED
                }
            }
        });
    }
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Serve(args) => serve(data_dir, args, json_logs).await,
            Command::Keys(KeysCommand::Create {
                project,
                e2b,
                admin,
            }) => blocking(move || create_key(data_dir, &project, e2b, admin)).await,
            Command::Keys(KeysCommand::List { project }) => {
                blocking(move || list_keys(data_dir, project.as_deref())).await
            }
            Command::Keys(KeysCommand::Revoke { id }) => {
                blocking(move || revoke_key(data_dir, &id)).await
            }
            Command::Exec(_) | Command::Local(_) => Ok(()),
            Command::Config(ConfigCommand::Reference { update }) => {
                config_reference(update.as_deref())
            }
            Command::Config(ConfigCommand::Example) => {
                print!("{}", shellgate_server::config::reference::example());
                Ok(())
            }
            Command::Backup(args) => {
                let config = server_config(data_dir, args.config.as_deref())?;
                blocking(move || crate::backup::back_up(&config, &args.dest)).await
            }
            Command::Completions { .. } | Command::Man { .. } => Ok(()),
            Command::Drain(args) => drain(data_dir, args).await,
            Command::Image(command) => image(sandbox_dir(data_dir), command).await,
            Command::Snapshot(args) => crate::snapshot::run(args).await,
            Command::Audit(AuditCommand::Export {
                project,
                to_object: None,
                config,
            }) => {
                blocking(move || export_audit(data_dir, config.as_deref(), project.as_deref()))
                    .await
            }
            Command::Audit(AuditCommand::Export {
                project,
                to_object: Some(name),
                config,
            }) => export_audit_to_object(data_dir, config.as_deref(), project, &name).await,
        }
    });
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("shellgate: {e:#}");
            1
        }
    }
}

/// `man`: the manual page of `shellgate` on stdout, or every command's
/// page written into `out_dir`.
fn manual(out_dir: Option<&std::path::Path>) -> Result<()> {
    let command = Cli::command();
    match out_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            clap_mangen::generate_to(command, dir)
                .with_context(|| format!("writing the pages into {}", dir.display()))
        }
        None => clap_mangen::Man::new(command)
            .render(&mut std::io::stdout())
            .context("writing the page"),
    }
}

/// `config reference`: the settings table, printed or written into a page.
fn config_reference(page: Option<&std::path::Path>) -> Result<()> {
    use shellgate_server::config::reference;
    let Some(page) = page else {
        print!("{}", reference::table());
        return Ok(());
    };
    let text =
        std::fs::read_to_string(page).with_context(|| format!("reading {}", page.display()))?;
    let updated = reference::updated(&text).with_context(|| page.display().to_string())?;
    if updated != text {
        std::fs::write(page, updated).with_context(|| format!("writing {}", page.display()))?;
    }
    Ok(())
}

/// `drain`: tells the node on this machine to take no new containers,
/// then waits for its containers to end.
async fn drain(data_dir: Option<PathBuf>, args: DrainArgs) -> Result<()> {
    let config = server_config(data_dir, args.config.as_deref())?;
    let secret = config
        .cluster
        .cluster_secret
        .get()
        .context("drain needs cluster_secret (SHELLGATE_CLUSTER_SECRET), as the node has")?
        .to_owned();
    // The node listens on its own address; a wildcard is reached locally.
    let mut addr = config.server.listen;
    if addr.ip().is_unspecified() {
        addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    let base = format!("http://{addr}/internal/v1");
    let client = reqwest::Client::new();
    let secret_header = shellgate_server::cluster::SECRET_HEADER;
    let request = if args.cancel {
        client.delete(format!("{base}/drain"))
    } else {
        client.post(format!("{base}/drain"))
    };
    let answer = request.header(secret_header, &secret).send().await?;
    anyhow::ensure!(
        answer.status().is_success(),
        "the node refused: {} {}",
        answer.status(),
        answer.text().await.unwrap_or_default()
    );
    if args.cancel {
        eprintln!("node taken back: ready for containers");
        return Ok(());
    }
    #[derive(serde::Deserialize)]
    struct NodeState {
        containers: u64,
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(args.timeout);
    loop {
        let state: NodeState = client
            .get(format!("{base}/node"))
            .header(secret_header, &secret)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        if state.containers == 0 {
            eprintln!("node drained: no containers left");
            return Ok(());
        }
        if std::time::Instant::now() >= deadline {
            eprintln!(
                "drain timed out with {} containers still on the node",
                state.containers
            );
            return Ok(());
        }
        eprintln!("draining: {} containers left", state.containers);
        tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    }
}

/// Runs store work off the runtime's workers (the Postgres client blocks
/// on a runtime of its own, which a worker thread may not do).
async fn blocking(work: impl FnOnce() -> Result<()> + Send + 'static) -> Result<()> {
    tokio::task::spawn_blocking(work).await?
}

fn server_config(
    data_dir: Option<PathBuf>,
    config_file: Option<&std::path::Path>,
) -> Result<shellgate_server::Config> {
    let mut config = shellgate_server::Config::load(config_file, std::env::vars())?;
    if let Some(data_dir) = data_dir {
        config.server.data_dir = data_dir;
    }
    Ok(config)
}

/// `serve`: the address taken first, then the store and engine opened, the
/// start-up summary said (`json_logs`: as a log event, else as text), and
/// requests served until a signal.
async fn serve(data_dir: Option<PathBuf>, args: ServeArgs, json_logs: bool) -> Result<()> {
    let mut config = server_config(data_dir, args.config.as_deref())?;
    if let Some(listen) = args.listen {
        config.server.listen = listen;
    }
    let helper = std::env::current_exe().context("cannot find the shellgate binary")?;
    // Checked first, as `open` checks it, so a bad setting is reported as
    // the configuration's error, not as the engine's.
    config.validate()?;
    // Before anything is made or started (the data directory, the engine,
    // an image build): a taken address fails at once, naming it.
    let listener = shellgate_server::bind(config.server.listen).await?;
    if config.cluster.role == shellgate_server::config::Role::Api {
        // A cluster's API replica: no engine, nothing on this machine.
        tracing::info!(listen = %listener.local_addr()?, "shellgate API replica serving");
        shellgate_server::serve_replica(config, listener).await?;
        return Ok(());
    }
    let engine = crate::serving::EngineOptions::of(&config, helper)?;
    let opened = shellgate_server::open(config, |setup| engine.open(setup)).await?;
    let summary = shellgate_server::startup::Summary::gather(
        &opened.state,
        listener.local_addr()?,
        opened.generated_key,
    )
    .await;
    if json_logs {
        summary.log();
    } else {
        eprintln!("{}", summary.lines().join("\n"));
    }
    shellgate_server::serve(opened.state, listener).await?;
    Ok(())
}

fn create_key(data_dir: Option<PathBuf>, project: &str, e2b: bool, admin: bool) -> Result<()> {
    anyhow::ensure!(!project.trim().is_empty(), "--project must not be empty");
    let config = server_config(data_dir, None)?;
    std::fs::create_dir_all(&config.server.data_dir)?;
    let store = config.open_store()?;
    let key = if e2b {
        shellgate_server::new_e2b_api_key()
    } else {
        shellgate_server::new_api_key()
    };
    let role = if admin {
        shellgate_store::KeyRole::Admin
    } else {
        shellgate_store::KeyRole::Member
    };
    store.add_key_with_role(&key, project, role, shellgate_server::now())?;
    // The key itself is shown this once; the store keeps only its hash.
    println!("{key}");
    eprintln!(
        "{} ({} of project {project:?}): shown once, stored hashed",
        shellgate_store::key_id(&shellgate_store::hash_key(&key)),
        role.as_str()
    );
    Ok(())
}

/// The store of an existing data directory (a listing or a revocation on a
/// directory that has none is a mistake, not an empty answer).
fn existing_store(data_dir: Option<PathBuf>) -> Result<shellgate_store::Store> {
    store_of(&server_config(data_dir, None)?)
}

/// The store `config` names: its Postgres, or the data directory's SQLite
/// database, which must exist.
fn store_of(config: &shellgate_server::Config) -> Result<shellgate_store::Store> {
    if config.store.database_url.get().is_none() {
        let database = config.sqlite_path();
        anyhow::ensure!(
            database.exists(),
            "no database at {} (is --data-dir right?)",
            database.display()
        );
    }
    Ok(config.open_store()?)
}

/// `keys list`: a line per key, `id project role created [revoked]`.
fn list_keys(data_dir: Option<PathBuf>, project: Option<&str>) -> Result<()> {
    let store = existing_store(data_dir)?;
    println!("ID\tPROJECT\tROLE\tCREATED\tREVOKED");
    for key in store.list_keys(project)? {
        let revoked = key
            .revoked_at
            .map(shellgate_wire::time::rfc3339)
            .unwrap_or_else(|| "-".to_owned());
        println!(
            "{}\t{}\t{}\t{}\t{revoked}",
            key.id,
            key.project,
            key.role.as_str(),
            shellgate_wire::time::rfc3339(key.created_at)
        );
    }
    Ok(())
}

/// `keys revoke ID`.
fn revoke_key(data_dir: Option<PathBuf>, id: &str) -> Result<()> {
    let store = existing_store(data_dir)?;
    if store.revoke_key(id, shellgate_server::now())? {
        eprintln!("{id} revoked");
    } else {
        eprintln!("{id} was already revoked");
    }
    Ok(())
}

/// Writes the command audit to stdout, one JSON object a line.
fn export_audit(
    data_dir: Option<PathBuf>,
    config_file: Option<&std::path::Path>,
    project: Option<&str>,
) -> Result<()> {
    use std::io::Write;
    let store = store_of(&server_config(data_dir, config_file)?)?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    write_audit(&store, project, &mut out)?;
    out.flush()?;
    Ok(())
}

/// Writes the command audit to the object store as `audit/NAME`: read
/// from the store on a blocking thread and streamed into the object as it
/// is read (never whole in memory); the object exists only once complete.
async fn export_audit_to_object(
    data_dir: Option<PathBuf>,
    config_file: Option<&std::path::Path>,
    project: Option<String>,
    name: &str,
) -> Result<()> {
    let config = server_config(data_dir, config_file)?;
    let key = shellgate_server::blobs::audit_key(name)
        .with_context(|| format!("--to-object {name:?}"))?;
    let objects = shellgate_server::blobs::open(&config)?;
    let (writer, body) = shellgate_objects::blocking_body();
    // The store too is opened off the runtime's workers (Postgres's client
    // blocks on a runtime of its own).
    let producer = tokio::task::spawn_blocking(move || -> Result<u64> {
        let mut writer = writer;
        let written = store_of(&config)
            .and_then(|store| write_audit(&store, project.as_deref(), &mut writer));
        match written {
            Ok(lines) => {
                writer.finish()?;
                Ok(lines)
            }
            Err(e) => {
                writer.fail(std::io::Error::other(e.to_string()));
                Err(e)
            }
        }
    });
    let put = objects.put(&key, body).await;
    let produced = producer.await.context("the audit reader failed")?;
    // The store's error first: a reader that stopped because the put
    // failed says only that nobody read on.
    let bytes = put.with_context(|| format!("cannot write {key} to {}", objects.describe()))?;
    let lines = produced?;
    eprintln!(
        "{lines} commands ({bytes} bytes) written to {key} in {}",
        objects.describe()
    );
    Ok(())
}

/// Writes the command audit to `out`, one JSON object a line; answers
/// the number of lines.
fn write_audit(
    store: &shellgate_store::Store,
    project: Option<&str>,
    out: &mut impl std::io::Write,
) -> Result<u64> {
    let mut lines = 0u64;
    store.each_command(project, |row| {
        let line = serde_json::json!({
            "id": row.id,
            "project": row.project,
            "container_id": row.container_id,
            "response_id": row.response_id,
            "command": row.command,
            "outcome": row.outcome,
            "exit_code": row.exit_code,
            "duration_ms": row.duration_ms,
            "bytes_out": row.bytes_out,
            "created_at": row.created_at,
        });
        lines += 1;
        writeln!(out, "{line}").map_err(|e| e.to_string())
    })?;
    Ok(lines)
}

/// Runs the commands in a throwaway container; returns the exit status
/// (see [`exit_status`]).
async fn exec(
    data_dir: PathBuf,
    args: ExecArgs,
    forked_helper: Option<shellgate_sandbox::ForkedHelper>,
) -> Result<i32> {
    let memory_bytes = parse_size(&args.memory)
        .with_context(|| format!("--memory {:?} is not a size such as 1g", args.memory))?;
    let request = RunRequest {
        commands: args.commands()?,
        timeout_ms: args.timeout_ms,
        max_output_length: args.max_output_length,
        deadline_ms: None,
    };
    request.validate()?;
    let (network, egress) = egress_for(&args.allow, args.config.as_deref())?;
    let (engine, _lane) = open_engine(data_dir, egress, false).await?;
    if let Some(helper) = forked_helper {
        engine.adopt_forked_helper(helper);
    }
    let id = throwaway_id("exec");
    let spec = ContainerSpec {
        image: args.image,
        memory_bytes,
        ephemeral: true,
        network,
        ..ContainerSpec::default()
    };
    engine
        .create(&id, spec)
        .await
        .context("cannot create the sandbox")?;
    let result = if args.json {
        engine.run(&id, request.clone()).await
    } else {
        // The output goes to the terminal as it arrives, stdout to stdout
        // and stderr to stderr, as if the command ran here.
        let (sink, mut deltas) =
            tokio::sync::mpsc::unbounded_channel::<shellgate_sandbox::backend::OutputDelta>();
        let printer = tokio::task::spawn_blocking(move || {
            use std::io::Write;
            let (mut stdout, mut stderr) = (std::io::stdout(), std::io::stderr());
            while let Some(delta) = deltas.blocking_recv() {
                let _ = match delta.stream {
                    shellgate_sandbox::backend::StreamKind::Stdout => stdout
                        .write_all(delta.text.as_bytes())
                        .and_then(|()| stdout.flush()),
                    shellgate_sandbox::backend::StreamKind::Stderr => stderr
                        .write_all(delta.text.as_bytes())
                        .and_then(|()| stderr.flush()),
                };
            }
        });
        let result = engine.run_streaming(&id, request.clone(), sink).await;
        let _ = printer.await;
        result
    };
    let destroyed = engine.destroy(&id).await;
    engine.shutdown().await;
    let output = result.context("the sandbox failed while running the commands")?;
    destroyed.context("cannot remove the sandbox")?;
    let status = exit_status(&output);
    if args.json {
        // The object `POST /v1/containers/{id}/exec` returns.
        let json = serde_json::to_string(&shellgate_wire::ShellCallOutput::completed(
            output,
            request.max_output_length,
        ))?;
        println!("{json}");
    } else if let Some(timed_out) = output
        .iter()
        .position(|r| r.outcome == shellgate_sandbox::Outcome::Timeout)
    {
        eprintln!(
            "shellgate: command {} timed out after {} ms",
            timed_out + 1,
            request.timeout_ms
        );
    }
    Ok(status)
}

async fn image(data_dir: PathBuf, command: ImageCommand) -> Result<()> {
    if let ImageCommand::List = command {
        // Only reads the store: no engine, no lane, no lock.
        for image in
            shellgate_sandbox::image::ImageStore::list_in(&images_dir(&data_dir, &env_settings()))
        {
            println!("{}\t{}", image.name, image.path.display());
        }
        return Ok(());
    }
    if let ImageCommand::Build {
        name,
        dockerfile: Some(dockerfile),
        context,
        allow,
        config,
        ..
    } = command
    {
        let (network, egress) = egress_for(&allow, config.as_deref())?;
        let (engine, _lane) = open_engine(data_dir, egress, false).await?;
        let built = crate::image_build::build(&engine, &name, &dockerfile, context, network).await;
        engine.shutdown().await;
        let image = built?;
        println!("{}\t{}", image.name, image.path.display());
        return Ok(());
    }
    let (engine, _lane) = open_engine(data_dir, None, false).await?;
    match command {
        ImageCommand::List => Ok(()),
        ImageCommand::Build { name, force, .. } => {
            let started = std::time::Instant::now();
            let mut bar = ProgressBar::new(format!("building {name}"));
            let built = engine
                .images()
                .build_with(&name, force, &mut |fraction, line| {
                    bar.update(fraction, line)
                })
                .await;
            bar.finish();
            let built = built?;
            if !built.up_to_date {
                eprintln!(
                    "shellgate: built {name} in {:.0}s ({} MB)",
                    started.elapsed().as_secs_f64(),
                    built.image.details.size_bytes.unwrap_or(0) / 1_000_000
                );
            }
            // A new build's `info.json` has none; one built before they were
            // recorded at build time gets them too.
            if !built.up_to_date || built.image.details.runtimes.is_empty() {
                let found = runtimes::record(&engine, &name)
                    .await
                    .with_context(|| format!("cannot find the runtimes of {name}"))?;
                let listed: Vec<String> = found.iter().map(|(r, v)| format!("{r} {v}")).collect();
                eprintln!("shellgate: {name} has {}", listed.join(", "));
                engine.shutdown().await;
            }
            println!("{}\t{}", built.image.name, built.image.path.display());
            Ok(())
        }
        ImageCommand::Verify { name } => verify_image(&engine, &name).await,
        ImageCommand::Import { name, tarball } => {
            let image = engine.images().import(&name, &tarball).await?;
            println!("{}\t{}", image.name, image.path.display());
            Ok(())
        }
    }
}

/// The tools `image verify` reports on (a recipe may require more):
/// `python` and `pip` as scripts call them, beside `python3` (a runtime).
const TOOLS: &[&str] = &[
    "python", "pip", "git", "curl", "jq", "sqlite3", "zip", "unzip", "gcc", "g++", "make",
    "convert", "pandoc",
];

/// Prints the tools of a list that are not on the `PATH`, one a line.
fn missing_tools_command(tools: &[&str]) -> String {
    format!(
        "for tool in {}; do command -v \"$tool\" >/dev/null 2>&1 || echo \"$tool\"; done",
        tools.join(" ")
    )
}

/// Prints `module: error` for each Python module that does not import.
fn failing_imports_command(modules: &[&str]) -> String {
    format!(
        "python3 - <<'EOF'\n\
         import importlib\n\
         for name in {modules:?}.split():\n\
         \x20   try:\n\
         \x20       importlib.import_module(name)\n\
         \x20   except Exception as e:\n\
         \x20       print(f\"{{name}}: {{type(e).__name__}}: {{e}}\")\n\
         EOF",
        modules = modules.join(" ")
    )
}

/// Prints the PEP 668 marker's path if there is one (pip then refuses
/// every install, `--user` too), and pip's version.
const PIP_USER_COMMAND: &str = "python3 -c 'import os, sysconfig; \
     p = os.path.join(sysconfig.get_path(\"stdlib\"), \"EXTERNALLY-MANAGED\"); \
     print(\"blocked by \" + p if os.path.exists(p) else \"allowed\")' \
     && python3 -m pip --version | cut -d' ' -f1-2";

fn succeeded(result: &CommandResult) -> bool {
    matches!(
        result.outcome,
        shellgate_sandbox::Outcome::Exit { exit_code: 0 }
    )
}

/// Runs each runtime's version command, the tool, Python module and pip
/// checks in a throwaway container of the image; records the runtimes it
/// found (`GET /v1/images` shows them). Fails if a runtime is missing, or,
/// for an image with a recipe's expectations, if anything differs from
/// them (each problem named); other images (imported ones, the slim one)
/// only get a report of tools and modules.
async fn verify_image(engine: &LocalEngine, name: &str) -> Result<()> {
    let expect = shellgate_sandbox::image::recipe(name).and_then(|r| r.expect);
    let mut tools: Vec<&str> = TOOLS.to_vec();
    let mut modules: Vec<&str> = vec!["numpy", "pandas", "matplotlib"];
    if let Some(expect) = &expect {
        tools.extend(expect.tools.iter().filter(|t| !TOOLS.contains(t)));
        modules = expect.python_modules.to_vec();
    }
    let id = throwaway_id("verify");
    let spec = ContainerSpec {
        image: name.to_owned(),
        ephemeral: true,
        ..ContainerSpec::default()
    };
    engine
        .create(&id, spec)
        .await
        .context("cannot create a container of the image")?;
    let mut commands = runtimes::commands();
    commands.push(missing_tools_command(&tools));
    commands.push(failing_imports_command(&modules));
    commands.push(PIP_USER_COMMAND.to_owned());
    let request = RunRequest {
        commands,
        timeout_ms: runtimes::TIMEOUT_MS,
        max_output_length: 4000,
        deadline_ms: None,
    };
    let results = engine.run(&id, request).await;
    let _ = engine.destroy(&id).await;
    let results = results.context("the verification commands failed to run")?;
    anyhow::ensure!(
        results.len() == runtimes::RUNTIMES.len() + 3,
        "the verification stopped after {} of {} commands",
        results.len(),
        runtimes::RUNTIMES.len() + 3
    );
    let (runtime_results, checks) = results.split_at(runtimes::RUNTIMES.len());

    let found = runtimes::found(runtime_results);
    let mut missing = Vec::new();
    let mut problems = Vec::new();
    for (runtime, version) in runtimes::versions(runtime_results) {
        match version {
            Some(version) => println!("{runtime:<18} {version}"),
            None => {
                println!("{runtime:<18} MISSING");
                missing.push(runtime);
            }
        }
    }
    if let Some(expect) = &expect {
        if !missing.is_empty() {
            problems.push(format!("missing: {}", missing.join(", ")));
        }
        for (runtime, wanted) in expect.versions {
            if let Some(version) = found.get(*runtime) {
                if !shellgate_sandbox::image::version_matches(version, wanted) {
                    problems.push(format!(
                        "{runtime} is {version}, the recipe promises {wanted}"
                    ));
                }
            }
        }
    }

    let (tools_result, imports_result, pip_result) = (&checks[0], &checks[1], &checks[2]);
    let absent: Vec<&str> = if succeeded(tools_result) {
        tools_result.stdout.split_whitespace().collect()
    } else {
        tools.clone()
    };
    let present: Vec<&str> = tools
        .iter()
        .copied()
        .filter(|t| !absent.contains(t))
        .collect();
    if absent.is_empty() {
        println!("{:<18} {}", "tools", present.join(" "));
    } else {
        println!(
            "{:<18} {} (missing: {})",
            "tools",
            present.join(" "),
            absent.join(" ")
        );
    }
    if let Some(expect) = &expect {
        let required: Vec<&str> = expect
            .tools
            .iter()
            .copied()
            .filter(|t| absent.contains(t))
            .collect();
        if !required.is_empty() {
            problems.push(format!("tools missing: {}", required.join(", ")));
        }
    }

    let failing: Vec<&str> = if succeeded(imports_result) {
        imports_result
            .stdout
            .lines()
            .filter(|l| !l.is_empty())
            .collect()
    } else {
        vec!["python3 could not run"]
    };
    if failing.is_empty() {
        println!("{:<18} {} import", "python modules", modules.join(" "));
    } else {
        println!("{:<18} FAILING: {}", "python modules", failing.join("; "));
        if expect.is_some() {
            problems.push(format!(
                "python modules do not import: {}",
                failing.join("; ")
            ));
        }
    }

    let pip = pip_result.stdout.trim().replace('\n', ", ");
    let pip_ok = succeeded(pip_result) && pip.starts_with("allowed");
    println!(
        "{:<18} {}",
        "pip --user",
        if pip.is_empty() {
            "no python3 or pip"
        } else {
            &pip
        }
    );
    if expect.as_ref().is_some_and(|e| e.pip_user_installs) && !pip_ok {
        problems.push(format!(
            "pip install --user would not work: {}",
            if pip.is_empty() {
                "no python3 or pip"
            } else {
                &pip
            }
        ));
    }

    engine.images().set_runtimes(name, found)?;
    engine.shutdown().await;
    if !missing.is_empty() && expect.is_none() {
        anyhow::bail!("image {name} lacks: {}", missing.join(", "));
    }
    if !problems.is_empty() {
        anyhow::bail!(
            "image {name} is not what its recipe promises:\n  - {}\n(rebuild it: shellgate image build --force {name})",
            problems.join("\n  - ")
        );
    }
    Ok(())
}

/// A one-line progress bar on stderr (plain lines when stderr is no terminal).
struct ProgressBar {
    label: String,
    terminal: bool,
    last_fraction: f64,
}

impl ProgressBar {
    fn new(label: String) -> Self {
        use std::io::IsTerminal;
        Self {
            label,
            terminal: std::io::stderr().is_terminal(),
            last_fraction: -1.0,
        }
    }

    fn update(&mut self, fraction: f64, line: &str) {
        const WIDTH: usize = 30;
        // shellgate's own notes (a mirror fallback, a cached image) and
        // mmdebstrap's warnings are worth a line of their own.
        if line.starts_with("shellgate: ") || line.starts_with("W: ") || line.starts_with("E: ") {
            if self.terminal {
                eprint!("\r\x1b[2K");
            }
            eprintln!("{line}");
            self.last_fraction = fraction;
            return;
        }
        let filled = ((fraction.clamp(0.0, 1.0)) * WIDTH as f64) as usize;
        let bar = format!(
            "[{}{}] {:3.0}%",
            "#".repeat(filled),
            " ".repeat(WIDTH - filled),
            fraction * 100.0
        );
        if self.terminal {
            let detail: String = line.chars().take(60).collect();
            eprint!("\r\x1b[2K{} {bar} {detail}", self.label);
        } else if fraction != self.last_fraction {
            eprintln!("{} {bar} {line}", self.label);
        }
        self.last_fraction = fraction;
    }

    fn finish(&self) {
        if self.terminal {
            eprintln!();
        }
    }
}
