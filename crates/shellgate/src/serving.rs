//! The engine `serve` runs the server on: the local namespace engine,
//! opened with the configuration's settings, its host checked, and the
//! default image built in the background when it is missing. The server
//! gets it as a `SandboxBackend` and never sees the engine itself.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Result;
use shellgate_sandbox::image::default_build;
use shellgate_sandbox::{EngineConfig, LocalEngine};
use shellgate_sandbox_api::SandboxBackend;
use shellgate_server::{Backend, EngineSetup, ServeError};

/// What the configuration says of the serving engine.
pub(crate) struct EngineOptions {
    helper_binary: PathBuf,
    warm_containers: usize,
    transfer_stall: std::time::Duration,
    expose_host_usr_local: bool,
    images_dir: Option<PathBuf>,
    memory_ceiling: Option<u64>,
    /// The default image, when it is to be built if missing.
    build: Option<String>,
    /// The default image (the console's build button builds it).
    default_image: String,
    /// The first host uid of the sandboxes' id ranges.
    uid_base: u32,
}

impl EngineOptions {
    pub(crate) fn of(config: &shellgate_server::Config, helper_binary: PathBuf) -> Result<Self> {
        Ok(Self {
            helper_binary,
            warm_containers: config.sandbox.warm_containers,
            transfer_stall: std::time::Duration::from_secs(
                config.sandbox.transfer_stall_secs.max(1),
            ),
            expose_host_usr_local: config.sandbox.expose_host_usr_local,
            images_dir: config.sandbox.images_dir(),
            memory_ceiling: config.sandbox.sandbox_memory_ceiling.bytes(),
            build: config
                .sandbox
                .build_default_image
                .then(|| config.sandbox.default_image.clone()),
            default_image: config.sandbox.default_image.clone(),
            uid_base: config.sandbox.sandbox_uid_base,
        })
    }

    /// Opens the engine in `setup.dir`, says what the host lacks, and
    /// starts the default image's build if it is missing.
    pub(crate) async fn open(self, setup: EngineSetup) -> Result<Backend, ServeError> {
        let mut engine_config = EngineConfig::new(setup.dir);
        engine_config.helper_binary = self.helper_binary;
        engine_config.warm_containers = self.warm_containers;
        engine_config.transfer_stall = self.transfer_stall;
        engine_config.expose_host_usr_local = self.expose_host_usr_local;
        engine_config.images_dir = self.images_dir;
        engine_config.memory_ceiling = self.memory_ceiling;
        engine_config.egress = setup.egress;
        engine_config.uid_base = self.uid_base;
        let (engine, mut warnings) = LocalEngine::open(engine_config)
            .await
            .map_err(|e| ServeError::Setup(format!("sandbox engine: {e}")))?;
        warnings.extend(host_warnings());
        for warning in &warnings {
            tracing::warn!("{warning}");
        }
        let host = shellgate_server::HostReport {
            cgroups: engine.cgroup_layout().to_owned(),
            warnings,
        };
        let engine = Arc::new(engine);
        let default_image_build = match &self.build {
            Some(image) => default_build::start_if_missing(Arc::clone(&engine), image),
            None => Default::default(),
        };
        let build_default_image: shellgate_server::ImageBuilder = {
            let (engine, status, image) = (
                Arc::clone(&engine),
                Arc::clone(&default_image_build),
                self.default_image,
            );
            Arc::new(move || default_build::start_now(Arc::clone(&engine), &image, &status))
        };
        let engine: Arc<dyn SandboxBackend> = engine;
        Ok(Backend {
            engine,
            default_image_build,
            build_default_image: Some(build_default_image),
            host,
        })
    }
}

/// What a serving host lacks that containers would miss.
fn host_warnings() -> Vec<String> {
    use shellgate_sandbox::sys::{geteuid, has_capability, CAP_SYS_RESOURCE};
    let mut warnings = Vec::new();
    if geteuid() == 0 && !has_capability(CAP_SYS_RESOURCE) {
        // Lowering init's OOM score (the helper's -1000) needs it.
        warnings.push(
            "no CAP_SYS_RESOURCE: containers' init processes cannot be shielded from the OOM \
             killer, so a container whose memory fills with files (tmpfs, shared memory) may \
             lose its init, and its processes with it"
                .to_owned(),
        );
    }
    warnings
}
