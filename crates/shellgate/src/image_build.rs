//! `shellgate image build NAME --dockerfile FILE`: the image builder
//! (`shellgate_sandbox::image::build`) run by a one-shot engine, its log
//! printed as it goes. The image is the operator's (every project's), as
//! an imported one is.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use shellgate_sandbox::backend::NetworkSpec;
use shellgate_sandbox::image::build::{self, BuildLogLine, BuildRequest, ContextPart, LogLevel};
use shellgate_sandbox::image::{dockerfile, ImageInfo};
use shellgate_sandbox::LocalEngine;

use crate::oneshot::throwaway_id;

/// The build sandbox's memory and disk.
const BUILD_MEMORY: u64 = 2 << 30;
const BUILD_DISK: u64 = 8 << 30;

/// Builds image `name` from the Dockerfile at `path`; `context` (a
/// directory or a tar, default the Dockerfile's directory) is what `COPY`
/// reads.
pub(crate) async fn build(
    engine: &LocalEngine,
    name: &str,
    path: &Path,
    context: Option<PathBuf>,
    network: NetworkSpec,
) -> Result<ImageInfo> {
    let text = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    if text.len() > dockerfile::MAX_DOCKERFILE_BYTES {
        anyhow::bail!(
            "{} is {} bytes; a Dockerfile may have at most {}",
            path.display(),
            text.len(),
            dockerfile::MAX_DOCKERFILE_BYTES
        );
    }
    let text =
        String::from_utf8(text).with_context(|| format!("{} is not UTF-8", path.display()))?;
    let parsed = dockerfile::parse(&text)?;
    shellgate_sandbox::image::ImageStore::check_commit_name(name)?;
    let scratch = tempfile_dir()?;
    let context_tar = if parsed
        .steps
        .iter()
        .any(|step| matches!(step.instruction, dockerfile::Instruction::Copy { .. }))
    {
        let dir = context.unwrap_or_else(|| {
            path.parent()
                .filter(|p| !p.as_os_str().is_empty())
                .map_or_else(|| PathBuf::from("."), Path::to_owned)
        });
        Some(context_tar(&dir, &scratch.0)?)
    } else {
        None
    };
    let base_config = engine
        .images()
        .details(&parsed.from)
        .config
        .unwrap_or_default();
    let request = BuildRequest {
        name: name.to_owned(),
        project: String::new(),
        dockerfile: parsed,
        context: context_tar
            .map(|tar| ContextPart {
                tar,
                dir: String::new(),
            })
            .into_iter()
            .collect(),
        network,
        memory_bytes: BUILD_MEMORY,
        disk_bytes: BUILD_DISK,
        deadline: std::time::Instant::now() + build::DEFAULT_BUILD_DEADLINE,
        base_config,
    };
    let mut print = |line: BuildLogLine| {
        let prefix = if line.step == 0 {
            "----".to_owned()
        } else {
            format!("#{}", line.step)
        };
        match line.level {
            LogLevel::Info => eprintln!("{prefix} {}", line.message),
            LogLevel::Warn | LogLevel::Error => eprintln!("{prefix} ! {}", line.message),
        }
    };
    let interrupted = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let image = build::build(
        engine,
        &throwaway_id("build"),
        request,
        &mut print,
        interrupted,
    )
    .await?;
    Ok(image)
}

/// A directory removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tempfile_dir() -> Result<Scratch> {
    let dir = std::env::temp_dir().join(throwaway_id("shellgate-build"));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(Scratch(dir))
}

/// The context as a tar file: `path` itself if it is a file (a tar
/// archive), else a tar of the directory made in `scratch`.
fn context_tar(path: &Path, scratch: &Path) -> Result<PathBuf> {
    let meta = std::fs::metadata(path)
        .with_context(|| format!("no build context at {}", path.display()))?;
    if meta.is_file() {
        return Ok(path.to_owned());
    }
    let tar = scratch.join("context.tar");
    let status = std::process::Command::new("tar")
        .arg("--create")
        .arg("--file")
        .arg(&tar)
        .arg("--directory")
        .arg(path)
        .arg(".")
        .status()
        .context("cannot run tar")?;
    anyhow::ensure!(status.success(), "tar of {} failed", path.display());
    Ok(tar)
}
