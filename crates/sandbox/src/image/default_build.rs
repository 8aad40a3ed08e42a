//! The default image, built in the background on a server start that finds
//! it missing or built from an older recipe, so that a fresh install (or an
//! upgrade) gets the seeds' runtime with no extra command (the host tools
//! the build needs installed first, with apt, when they are missing), its
//! runtimes recorded when it is done (as `GET /v1/images` shows them).
//! Until a missing one is ready containers use `host` (the log says so, and
//! their `image` field shows it), an out-of-date one is used as it is; the
//! server's `/healthz` reports the build's progress.

use std::sync::{Arc, Mutex};

use shellgate_sandbox_api::image::{BuildStatus, SharedBuildStatus};

use tokio::sync::oneshot;

use crate::engine::LocalEngine;
use crate::error::SandboxError;
use crate::image::{runtimes, HOST_IMAGE, RECIPES};

fn set(status: &SharedBuildStatus, update: impl FnOnce(&mut BuildStatus)) {
    if let Some(current) = status.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
        update(current);
    }
}

/// What building an image needs on the host, by Debian package.
const BUILD_TOOLS: &[(&str, &str)] = &[("mmdebstrap", "mmdebstrap"), ("curl", "curl")];

/// Installs the build's host tools that are missing, as README.md's serve
/// command promises a fresh machine the default image with no other step:
/// only as root on a host with apt; otherwise says what to install.
fn install_build_tools() -> Result<(), String> {
    let missing: Vec<&str> = BUILD_TOOLS
        .iter()
        .filter(|(program, _)| !crate::sys::on_path(program))
        .map(|(_, package)| *package)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let apt = std::path::Path::new("/usr/bin/apt-get");
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || !apt.exists() {
        return Err(format!(
            "building images needs {} (e.g. apt-get install {})",
            missing.join(", "),
            missing.join(" ")
        ));
    }
    tracing::info!("installing {} to build images", missing.join(", "));
    let install = |update: bool| {
        let mut command = std::process::Command::new(apt);
        if update {
            command.arg("update").arg("-qq");
        } else {
            command
                .args(["install", "-y", "-qq", "--no-install-recommends"])
                .args(&missing);
        }
        command
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| format!("apt-get: {e}"))
    };
    let first = install(false)?;
    if first.status.success() {
        return Ok(());
    }
    // Stale package lists: refresh them once.
    install(true)?;
    let second = install(false)?;
    if second.status.success() {
        Ok(())
    } else {
        Err(format!(
            "apt-get install {} failed: {}",
            missing.join(" "),
            String::from_utf8_lossy(&second.stderr).trim()
        ))
    }
}

/// Why the default image is (re)built at start-up.
enum Need {
    /// Not there: containers use `host` until it is.
    Missing,
    /// Built from an older version of its recipe (a shellgate upgrade that
    /// changed it, say one that added `python`): containers keep the
    /// image as it is until the new build replaces it.
    Stale,
}

/// Whether `image` needs a build: a recipe makes it and it is missing, or
/// was built from that recipe as it was before (an image imported under
/// the recipe's name is left alone).
fn need(engine: &LocalEngine, image: &str) -> Option<Need> {
    let recipe = RECIPES.iter().find(|r| r.name == image)?;
    if image == HOST_IMAGE {
        return None;
    }
    let Some(installed) = engine.images().list().into_iter().find(|i| i.name == image) else {
        return Some(Need::Missing);
    };
    let built_from_recipe = installed.details.recipe.as_deref() == Some(recipe.name);
    let current = installed.details.recipe_hash == Some(recipe.hash());
    (built_from_recipe && !current).then_some(Need::Stale)
}

/// Starts building `image` if it is missing, or out of date with its
/// recipe, and a recipe makes it; returns the status to report (`None`:
/// nothing to build).
pub fn start_if_missing(engine: Arc<LocalEngine>, image: &str) -> SharedBuildStatus {
    let status: SharedBuildStatus = Arc::new(Mutex::new(None));
    let Some(need) = need(&engine, image) else {
        return status;
    };
    *status.lock().unwrap_or_else(|p| p.into_inner()) = Some(BuildStatus {
        image: image.to_owned(),
        status: "building",
        progress: 0.0,
        message: "starting".to_owned(),
    });
    match need {
        Need::Missing => tracing::warn!(
            "the default image {image:?} is not built: building it in the background (minutes; \
             containers use `host` until it is ready; set build_default_image = false to turn this off)"
        ),
        Need::Stale => tracing::warn!(
            "the default image {image:?} was built from an older recipe: rebuilding it in the \
             background (minutes; containers use the image as it is until the new build replaces \
             it; set build_default_image = false to turn this off)"
        ),
    }
    spawn_build(engine, image, Arc::clone(&status), need);
    status
}

/// Builds `image` now, whatever its state (the web console's build button),
/// reporting into `status` (the one [`start_if_missing`] returned, which
/// `/healthz` and the console show). False, and nothing started, when no
/// recipe makes it or a build is already running.
pub fn start_now(engine: Arc<LocalEngine>, image: &str, status: &SharedBuildStatus) -> bool {
    if image == HOST_IMAGE || RECIPES.iter().all(|r| r.name != image) {
        return false;
    }
    {
        let mut current = status.lock().unwrap_or_else(|p| p.into_inner());
        if current.as_ref().is_some_and(|s| s.status == "building") {
            return false;
        }
        *current = Some(BuildStatus {
            image: image.to_owned(),
            status: "building",
            progress: 0.0,
            message: "starting".to_owned(),
        });
    }
    let installed = engine.images().list().into_iter().any(|i| i.name == image);
    let need = if installed {
        Need::Stale
    } else {
        Need::Missing
    };
    tracing::info!("building image {image:?} (asked for from the console)");
    spawn_build(engine, image, Arc::clone(status), need);
    true
}

/// Runs the build of `image` on a blocking thread, reporting into `status`.
///
/// The build runs on a runtime of that thread's own, not the server's: when
/// the server stops, its runtime shuts its I/O down before it lets go of
/// this thread, and a build still reading mmdebstrap's output there would
/// fail halfway (and say so as an error). Instead it learns that the
/// server's runtime is stopping ([`stopping`]) and stops as a killed server's
/// build does: the future dropped, so the builder is killed with its
/// namespaces (its mounts go with them), and the half-made tree is left to
/// the next start, which removes it and builds the image again.
fn spawn_build(engine: Arc<LocalEngine>, image: &str, status: SharedBuildStatus, need: Need) {
    let (name, shared) = (image.to_owned(), status);
    let server = tokio::runtime::Handle::current();
    let mut stopping = stopping(&server);
    // A thread of its own: the build ends with a walk of the new tree
    // (blocking), and must never hold an async worker.
    tokio::task::spawn_blocking(move || {
        let mut last_logged = -1.0;
        let mut progress = |fraction: f64, line: &str| {
            set(&shared, |s| {
                s.progress = fraction;
                s.message = line.chars().take(200).collect();
            });
            if fraction >= last_logged + 0.1 || fraction >= 1.0 && last_logged < 1.0 {
                last_logged = fraction;
                tracing::info!(
                    "building image {name}: {:.0}% {line}",
                    (fraction * 100.0).min(100.0)
                );
            }
        };
        let own = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build();
        let built = match (&own, install_build_tools()) {
            (Ok(own), Ok(())) => own.block_on(async {
                tokio::select! {
                    built = engine.images().build(&name, &mut progress) => built.map(Some),
                    _ = &mut stopping => Ok(None),
                }
            }),
            (Err(e), _) => Err(SandboxError::Setup(format!(
                "cannot start its runtime: {e}"
            ))),
            (_, Err(e)) => Err(SandboxError::Setup(e)),
        };
        match built {
            Ok(Some(_)) => {
                // Before it is said ready: `GET /v1/images` then shows
                // its runtimes at once, not after an `image verify`.
                set(&shared, |s| s.message = "finding its runtimes".to_owned());
                // On the server's runtime, whose engine it uses: a task
                // there, dropped (not failed) if that runtime stops.
                let recording = {
                    let (engine, name) = (Arc::clone(&engine), name.clone());
                    server.spawn(async move { runtimes::record(&engine, &name).await })
                };
                // (A build ran: the runtime was made.)
                let Ok(own) = &own else { return };
                match own.block_on(recording) {
                    Ok(Ok(found)) => tracing::info!(
                        "image {name} has {}",
                        found
                            .iter()
                            .map(|(runtime, version)| format!("{runtime} {version}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    Ok(Err(e)) => tracing::warn!(
                        "image {name}: its runtimes could not be found (`shellgate image verify \
                         {name}` retries): {e}"
                    ),
                    Err(_) => tracing::warn!(
                        "image {name}: the server stopped before its runtimes were found \
                         (`shellgate image verify {name}` finds them)"
                    ),
                }
                set(&shared, |s| {
                    s.status = "ready";
                    s.progress = 1.0;
                    s.message = "built".to_owned();
                });
                tracing::info!("image {name} is built: new containers use it");
            }
            Ok(None) => {
                set(&shared, |s| {
                    s.message = "stopped with the server".to_owned()
                });
                tracing::warn!(
                    "building image {name} stopped: the server is stopping (the next start \
                     removes what the build made and builds it again)"
                );
            }
            Err(e) => {
                set(&shared, |s| {
                    s.status = "failed";
                    s.message = e.to_string().chars().take(2000).collect();
                });
                let meanwhile = match need {
                    Need::Missing => "`host`",
                    Need::Stale => "its previous build",
                };
                tracing::error!(
                    "building image {name} failed (containers keep using {meanwhile}; \
                     `shellgate image build {name}` retries): {e}"
                );
            }
        }
    });
}

/// A receiver that completes once `runtime` is stopping: a task there
/// holds its sender until the receiver goes, and a runtime that shuts down
/// drops its tasks (before its I/O and timers stop), so the sender with
/// them.
fn stopping(runtime: &tokio::runtime::Handle) -> oneshot::Receiver<()> {
    let (held, stopped) = oneshot::channel();
    runtime.spawn(async move {
        let mut held: oneshot::Sender<()> = held;
        held.closed().await;
    });
    stopped
}
