//! Command-line parsing and the subcommands.

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use serde::Serialize;
use shellgate_sandbox::backend::{
    limits, parse_size, CommandResult, ContainerSpec, RunRequest, SandboxBackend,
};
use shellgate_sandbox::{EngineConfig, LocalEngine};

#[derive(Parser)]
#[command(
    name = "shellgate",
    version,
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
    /// Run commands in a throwaway container and print a shell_call_output-shaped JSON object.
    Exec(ExecArgs),
    /// Build, import and list images.
    #[command(subcommand)]
    Image(ImageCommand),
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
    /// Commands, each run with `bash -c` in /mnt/data.
    #[arg(last = true, required = true)]
    commands: Vec<String>,
}

#[derive(Subcommand)]
enum ImageCommand {
    /// List images.
    List,
    /// Build an image from Debian packages (needs mmdebstrap): `debian-12`.
    Build {
        /// Image to build.
        name: String,
    },
    /// Import a root file system tarball as an image.
    Import {
        /// Name of the new image.
        name: String,
        /// A tar archive (optionally compressed) of a root file system.
        tarball: PathBuf,
    },
}

#[derive(Serialize)]
struct ShellCallOutput {
    output: Vec<CommandResult>,
    max_output_length: usize,
}

/// The default data directory: system-wide for root, per user otherwise.
pub fn default_data_dir() -> PathBuf {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        return PathBuf::from("/var/lib/shellgate");
    }
    if let Some(xdg) = std::env::var_os("XDG_DATA_HOME") {
        return PathBuf::from(xdg).join("shellgate");
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    home.join(".local/share/shellgate")
}

pub fn main() -> i32 {
    let cli = Cli::parse();
    init_logging();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("shellgate: cannot start the runtime: {e}");
            return 1;
        }
    };
    let data_dir = cli.data_dir.clone().unwrap_or_else(default_data_dir);
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Exec(args) => exec(data_dir, args).await,
            Command::Image(command) => image(data_dir, command).await,
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

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SHELLGATE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
}

async fn open_engine(data_dir: PathBuf) -> Result<LocalEngine> {
    let mut config = EngineConfig::new(data_dir);
    // A one-shot command has no use for pre-formatted disks.
    config.pool_size = 0;
    config.spare_helpers = 0;
    config.warm_containers = 0;
    let (engine, warnings) = LocalEngine::open(config)
        .await
        .context("cannot open the sandbox engine")?;
    for warning in warnings {
        tracing::warn!("{warning}");
    }
    Ok(engine)
}

async fn exec(data_dir: PathBuf, args: ExecArgs) -> Result<()> {
    let memory_bytes = parse_size(&args.memory)
        .with_context(|| format!("--memory {:?} is not a size such as 1g", args.memory))?;
    let request = RunRequest {
        commands: args.commands,
        timeout_ms: args.timeout_ms,
        max_output_length: args.max_output_length,
    };
    request.validate()?;
    let engine = open_engine(data_dir).await?;
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let id = format!("exec-{}-{nanos}", std::process::id());
    let spec = ContainerSpec {
        image: args.image,
        memory_bytes,
        ephemeral: true,
        ..ContainerSpec::default()
    };
    engine
        .create(&id, spec)
        .await
        .context("cannot create the sandbox")?;
    let result = engine.run(&id, request.clone()).await;
    let destroyed = engine.destroy(&id).await;
    engine.shutdown().await;
    let output = result.context("the sandbox failed while running the commands")?;
    destroyed.context("cannot remove the sandbox")?;
    let json = serde_json::to_string(&ShellCallOutput {
        output,
        max_output_length: request.max_output_length,
    })?;
    println!("{json}");
    Ok(())
}

async fn image(data_dir: PathBuf, command: ImageCommand) -> Result<()> {
    let engine = open_engine(data_dir).await?;
    match command {
        ImageCommand::List => {
            for image in engine.images().list() {
                println!("{}\t{}", image.name, image.path.display());
            }
            Ok(())
        }
        ImageCommand::Build { name } => {
            let mut bar = ProgressBar::new(format!("building {name}"));
            let image = engine
                .images()
                .build(&name, &mut |fraction, line| bar.update(fraction, line))
                .await;
            bar.finish();
            let image = image?;
            println!("{}\t{}", image.name, image.path.display());
            Ok(())
        }
        ImageCommand::Import { name, tarball } => {
            let image = engine.images().import(&name, &tarball).await?;
            println!("{}\t{}", image.name, image.path.display());
            Ok(())
        }
    }
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
