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
