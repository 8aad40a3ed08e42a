//! The web console's JSON: what the console's own routes
//! (`/console/session`, `/console/api/...`) send and take. The app is
//! shellgate's own, so these are shellgate's shapes; everything else the
//! console shows comes from the OpenAI-compatible API's types.

use serde::{Deserialize, Serialize};

use crate::containers::Container;

/// `POST /console/session`'s body.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignIn {
    /// An API key (`shellgate keys create`).
    pub key: String,
}

/// A signed-in session (`console.session`).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ConsoleSession {
    pub object: &'static str,
    /// The signing key's project.
    pub project: String,
    /// `member`, or `admin` (sees every project).
    pub role: &'static str,
    /// Sent back in `X-CSRF-Token` on every state-changing request.
    pub csrf_token: String,
    pub expires_at: i64,
}

/// A page of a console listing, with how many match in all where known.
#[derive(Debug, Clone, Serialize)]
pub struct ConsoleList<T> {
    pub object: &'static str,
    pub data: Vec<T>,
    pub has_more: bool,
    pub last_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
}

impl<T> ConsoleList<T> {
    pub fn new(
        data: Vec<T>,
        has_more: bool,
        total: Option<u64>,
        id: impl Fn(&T) -> String,
    ) -> Self {
        Self {
            object: "list",
            last_id: data.last().map(id),
            data,
            has_more,
            total,
        }
    }
}

/// A project in the project list.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ProjectEntry {
    pub project: String,
    pub containers: u64,
    pub running: u64,
    pub keys: u64,
}

/// A container as the console lists it: the API's object and what an
/// operator wants beside it.
#[derive(Debug, Clone, Serialize)]
pub struct ConsoleContainer {
    #[serde(flatten)]
    pub container: Container,
    pub project: String,
    /// When it expires unless used again (Unix seconds).
    pub expires_at: i64,
    /// Sandbox seconds billed so far (its open session at least the minimum).
    pub sandbox_seconds: f64,
    pub cost: f64,
}

/// A stored response as the console lists it.
#[derive(Debug, Clone, Serialize)]
pub struct ConsoleResponse {
    pub id: String,
    pub model: String,
    pub status: String,
    pub created_at: i64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub sandbox_seconds: f64,
    pub cost: f64,
}

/// `GET /console/api/usage`.
#[derive(Debug, Clone, Serialize)]
pub struct ConsoleUsage {
    pub object: &'static str,
    pub project: String,
    /// The range's sandbox time and its cost: what `days`, `containers`
    /// with `other_containers`, each add up to.
    pub sandbox_seconds: f64,
    pub cost: f64,
    /// The range's upstream tokens and answers (Responses, Messages and
    /// Chat Completions alike): what `models` adds up to.
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub responses: u64,
    /// Per UTC day, oldest first, every day of the asked range.
    pub days: Vec<DayUsage>,
    /// Per container, most used first (deleted ones too), the first few.
    pub containers: Vec<ContainerCost>,
    /// The containers after those, together.
    pub other_containers: OtherContainers,
    /// Per model as the requests named it, most tokens first.
    pub models: Vec<ModelTokens>,
    pub quota: Quota,
    pub price_per_second: f64,
}

/// Containers the usage page does not list one by one, together.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct OtherContainers {
    pub containers: u64,
    pub sandbox_seconds: f64,
    pub cost: f64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DayUsage {
    /// `YYYY-MM-DD`, UTC.
    pub date: String,
    pub sandbox_seconds: f64,
    pub cost: f64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ContainerCost {
    /// `''`: time billed before it was recorded per container.
    pub container_id: String,
    /// Its name, while it exists (a deleted container keeps its time).
    pub name: Option<String>,
    pub sandbox_seconds: f64,
    pub cost: f64,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ModelTokens {
    pub model: String,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub responses: u64,
}

/// A project's use of its limits.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Quota {
    pub running_containers: Meter,
    pub memory_bytes: Meter,
    pub concurrent_execs: Meter,
}

/// How much of a limit is used (`limit` 0: unlimited).
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct Meter {
    pub used: u64,
    pub limit: u64,
}

/// `GET /console/api/operator/health`.
#[derive(Debug, Clone, Serialize)]
pub struct ConsoleHealth {
    pub version: &'static str,
    pub engine: EngineHealth,
    pub default_image: DefaultImageHealth,
    /// What an operator should know (a missing capability, an image not
    /// built, egress off).
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct EngineHealth {
    /// `ok`, or what is wrong.
    pub state: String,
    /// `v2`, `hybrid` or `v1`.
    pub cgroup_mode: String,
    /// Containers by status.
    pub containers: Vec<StatusCount>,
    /// Whether containers may reach the network (through the egress proxy).
    pub egress: bool,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct StatusCount {
    pub status: String,
    pub count: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct DefaultImageHealth {
    pub name: String,
    /// `ready`, `building`, `failed` or `missing`.
    pub state: String,
    /// The build's last step or failure.
    pub progress: String,
}

/// An API key as the operator page lists it (its id, never the key).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct KeyEntry {
    pub id: String,
    pub project: String,
    pub role: &'static str,
    pub created_at: i64,
    pub revoked_at: Option<i64>,
}

/// `POST /console/api/operator/keys`'s body.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewKey {
    pub project: String,
    #[serde(default)]
    pub role: Option<String>,
}

/// A key just made: shown this once.
#[derive(Debug, Clone, Serialize)]
pub struct CreatedKey {
    pub id: String,
    pub key: String,
    pub project: String,
    pub role: &'static str,
}

/// What a live update says (the SSE event's data; its name is the topic).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct LiveChange {
    pub project: String,
    pub id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
}

/// An exec command running now (the container page's live output).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct LiveRun {
    pub id: String,
    pub container_id: String,
    /// The exec's commands, run one after another.
    pub commands: Vec<String>,
    pub started_at: i64,
}

/// A piece of a running exec's output.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct LiveRunOutput {
    pub run_id: String,
    /// The command's index in the exec.
    pub command: usize,
    /// `stdout` or `stderr`.
    pub stream: &'static str,
    pub text: String,
}

/// What a container's live-output stream tells (SSE events `run`,
/// `output`, `end`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LiveRunEvent {
    Started(LiveRun),
    Output(LiveRunOutput),
    Ended { run_id: String },
}
