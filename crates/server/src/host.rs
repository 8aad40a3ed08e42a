//! What the host told the engine when it opened: its cgroup layout and what
//! it lacks. Logged at start-up, and shown on the console's health page.

/// The host as the sandbox backend found it.
#[derive(Debug, Clone, Default)]
pub struct HostReport {
    /// `v2`, `v1` or `disabled` (the engine's `Cgroups::layout`).
    pub cgroups: String,
    /// What containers miss on this host (each also logged at start-up).
    pub warnings: Vec<String>,
}

/// Starts building the default image now (the console's build button):
/// false when no recipe makes it or a build is already running. Its
/// progress is the backend's build status (`Backend::default_image_build`).
pub type ImageBuilder = std::sync::Arc<dyn Fn() -> bool + Send + Sync>;
