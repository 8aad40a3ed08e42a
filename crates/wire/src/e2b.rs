//! E2B's control-plane REST shapes, typed from the SDK's
//! generated client (`e2b/api/client/models`, e2b 2.63.0 and 2.31.0):
//! create and connect bodies, the `Sandbox`, `SandboxDetail` and
//! `ListedSandbox` answers, and E2B's error body. Request fields the SDK
//! may add later are ignored (no `deny_unknown_fields`), as E2B's API does;
//! fields that would change what the sandbox is, and that shellgate cannot
//! honour, are read so that the server can refuse them by name.

use std::collections::BTreeMap;

use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};

/// The header naming the sandbox of an in-sandbox request (E2B's
/// in-sandbox API comes to one base URL and names its sandbox here).
pub const SANDBOX_ID_HEADER: &str = "e2b-sandbox-id";

/// `POST /v2/sandboxes` (`NewSandboxV2`) and `POST /sandboxes`
/// (`NewSandbox`, the same fields and `secure`).
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct NewSandbox {
    #[serde(rename = "templateID")]
    pub template_id: String,
    /// Seconds until the sandbox is killed (or paused, `autoPause`).
    pub timeout: Option<i64>,
    pub auto_pause: Option<bool>,
    /// Whether an auto-pause keeps memory (shellgate's pause keeps files only).
    pub auto_pause_memory: Option<bool>,
    pub auto_resume: Option<AutoResume>,
    /// The older API's flag: every sandbox's in-sandbox API is secured here.
    pub secure: Option<bool>,
    /// Spelled in snake_case by E2B's API.
    #[serde(rename = "allow_internet_access")]
    pub allow_internet_access: Option<bool>,
    pub network: Option<NetworkConfig>,
    pub metadata: Option<BTreeMap<String, String>>,
    pub env_vars: Option<BTreeMap<String, String>>,
    #[schema(value_type = Option<Object>)]
    pub mcp: Option<IgnoredAny>,
    #[schema(value_type = Option<Object>)]
    pub iam: Option<IgnoredAny>,
    pub volume_mounts: Option<Vec<SandboxVolumeMount>>,
}

/// A volume mounted at create (`volumeMounts`): by name, at a path.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
pub struct SandboxVolumeMount {
    pub name: String,
    pub path: String,
}

/// `POST /volumes`.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
pub struct NewVolume {
    pub name: String,
}

/// A volume in `GET /volumes`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct E2bVolume {
    #[serde(rename = "volumeID")]
    pub volume_id: String,
    pub name: String,
}

/// `POST /volumes` (201) and `GET /volumes/{volumeID}`: the volume and the
/// bearer token of its content API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct VolumeAndToken {
    #[serde(rename = "volumeID")]
    pub volume_id: String,
    pub name: String,
    pub token: String,
}

/// The query of E2B's volume content calls (`/volumecontent/{volumeID}/
/// path|dir|file`): the entry's path in the volume, and what a make or a
/// write may set.
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
pub struct VolumeContentQuery {
    pub path: String,
    /// How many levels a listing descends (1: the directory's own entries).
    pub depth: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub mode: Option<u32>,
    /// Make missing parent directories (a make or a write).
    pub force: Option<bool>,
}

/// `PATCH /volumecontent/{volumeID}/path`: the metadata to set.
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct VolumeEntryPatch {
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub mode: Option<u32>,
}

/// What a volume's entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum VolumeEntryType {
    File,
    Directory,
    Symlink,
    Unknown,
}

/// An entry of a volume as E2B's content API describes it
/// (`VolumeEntryStat`): its path from the volume's root, times in RFC 3339.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct VolumeEntryStat {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: VolumeEntryType,
    pub path: String,
    pub size: u64,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub atime: String,
    pub mtime: String,
    pub ctime: String,
    /// A link's target, as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

/// `autoResume`: resuming a paused sandbox when traffic reaches it.
#[derive(Debug, Clone, Copy, Deserialize, utoipa::ToSchema)]
pub struct AutoResume {
    pub enabled: bool,
}

/// A create's `network` (`SandboxNetworkConfig`).
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkConfig {
    pub allow_public_traffic: Option<bool>,
    /// Destinations the sandbox may reach: domains, `*.domain`, IPs, CIDRs.
    pub allow_out: Option<Vec<String>>,
    pub deny_out: Option<Vec<String>>,
    pub dns_servers: Option<Vec<String>>,
    #[schema(value_type = Option<Object>)]
    pub egress_proxy: Option<IgnoredAny>,
    pub mask_request_host: Option<String>,
    pub https_ports: Option<Vec<u16>>,
    /// Per-host request transforms (header injection).
    #[schema(value_type = Option<Object>)]
    pub rules: Option<IgnoredAny>,
}

/// The network of a sandbox as `SandboxDetail` shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkInfo {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_out: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny_out: Vec<String>,
}

/// `Sandbox`: what create and connect answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Sandbox {
    #[serde(rename = "templateID")]
    pub template_id: String,
    #[serde(rename = "sandboxID")]
    pub sandbox_id: String,
    #[serde(rename = "clientID")]
    pub client_id: String,
    pub envd_version: String,
    pub envd_access_token: String,
    /// The token E2B's SDKs send as `E2B-Traffic-Access-Token` (the code
    /// interpreter's contexts routes take it in place of the access token).
    pub traffic_access_token: String,
    /// Where the sandbox's ports are reached by host name, if configured.
    pub domain: Option<String>,
}

/// `running` or `paused`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum SandboxState {
    Running,
    Paused,
}

/// What happens at the timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum OnTimeout {
    Kill,
    Pause,
}

/// `SandboxLifecycle`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Lifecycle {
    pub auto_resume: bool,
    pub on_timeout: OnTimeout,
}

/// `ListedSandbox`: an entry of `GET /v2/sandboxes`, and the first part of
/// a `SandboxDetail`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListedSandbox {
    #[serde(rename = "templateID")]
    pub template_id: String,
    #[serde(rename = "sandboxID")]
    pub sandbox_id: String,
    #[serde(rename = "clientID")]
    pub client_id: String,
    /// RFC 3339.
    pub started_at: String,
    /// RFC 3339: when the timeout ends it.
    pub end_at: String,
    pub cpu_count: u32,
    #[serde(rename = "memoryMB")]
    pub memory_mb: u64,
    #[serde(rename = "diskSizeMB")]
    pub disk_size_mb: u64,
    pub state: SandboxState,
    pub envd_version: String,
    pub metadata: BTreeMap<String, String>,
}

/// `SandboxDetail`: `GET /sandboxes/{id}`, a listed sandbox and what only
/// its owner's detail tells.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SandboxDetail {
    #[serde(flatten)]
    pub listed: ListedSandbox,
    pub envd_access_token: String,
    /// Whether it may reach the internet (its network policy allows any
    /// destination).
    pub allow_internet_access: bool,
    pub domain: Option<String>,
    pub network: NetworkInfo,
    pub lifecycle: Lifecycle,
}

/// `POST /sandboxes/{id}/timeout`.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
pub struct TimeoutRequest {
    /// Seconds from now.
    pub timeout: i64,
}

/// `POST /sandboxes/{id}/refreshes` (`SandboxRefreshRequest`).
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
pub struct RefreshRequest {
    /// Seconds from now the sandbox is kept alive for (0 to 3600; 15 at
    /// least, and when omitted).
    pub duration: Option<i64>,
}

/// `PUT /sandboxes/{id}/network` (`SandboxNetworkUpdateConfig`): the
/// sandbox's egress rules replaced, a field omitted cleared.
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkUpdate {
    /// Spelled in snake_case by E2B's API.
    #[serde(rename = "allow_internet_access")]
    pub allow_internet_access: Option<bool>,
    pub allow_out: Option<Vec<String>>,
    pub deny_out: Option<Vec<String>>,
    pub dns_servers: Option<Vec<String>>,
    #[schema(value_type = Option<Object>)]
    pub egress_proxy: Option<IgnoredAny>,
    #[schema(value_type = Option<Object>)]
    pub rules: Option<IgnoredAny>,
}

/// One sample of a sandbox's resources (`SandboxMetric`): CPU in percent
/// of the cores it may use, memory and disk in bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SandboxMetric {
    /// RFC 3339 (E2B keeps it beside `timestampUnix`).
    pub timestamp: String,
    pub timestamp_unix: i64,
    pub cpu_count: u32,
    pub cpu_used_pct: f64,
    pub mem_used: u64,
    pub mem_total: u64,
    /// Page cache, not counted in `memUsed`.
    pub mem_cache: u64,
    pub disk_used: u64,
    pub disk_total: u64,
}

/// `GET /sandboxes/metrics`: each sandbox's latest sample, by id.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SandboxesWithMetrics {
    pub sandboxes: BTreeMap<String, SandboxMetric>,
}

/// A log entry's level (`LogLevel`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    Debug,
    Info,
    Warn,
    Error,
}

/// A structured log entry (`SandboxLogEntry`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SandboxLogEntry {
    /// RFC 3339.
    pub timestamp: String,
    pub level: LogLevel,
    pub message: String,
    pub fields: BTreeMap<String, String>,
}

/// A log line (`SandboxLog`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SandboxLog {
    /// RFC 3339.
    pub timestamp: String,
    pub line: String,
}

/// `GET /sandboxes/{id}/logs` (`SandboxLogs`): the same entries as lines
/// and as structured entries.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SandboxLogs {
    pub logs: Vec<SandboxLog>,
    pub log_entries: Vec<SandboxLogEntry>,
}

/// `GET /v2/sandboxes/{id}/logs` (`SandboxLogsV2Response`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SandboxLogsV2 {
    pub logs: Vec<SandboxLogEntry>,
}

/// `POST /v2/sandboxes/{id}/connect`, `POST /sandboxes/{id}/connect` and
/// the older `POST /sandboxes/{id}/resume` (which also names `autoPause`).
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConnectRequest {
    /// Seconds from now until the timeout.
    pub timeout: Option<i64>,
    /// Resume with memory (shellgate's pause keeps files only).
    pub memory: Option<bool>,
    pub auto_pause: Option<bool>,
}

/// `POST /sandboxes/{id}/pause` (its fields change nothing here: a pause
/// keeps files, never memory).
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PauseRequest {
    pub memory: Option<bool>,
    pub require_healthy_guest: Option<bool>,
}

/// `POST /sandboxes/{id}/snapshots` (`memory` changes nothing here: a
/// snapshot keeps files, never memory).
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
pub struct SnapshotRequest {
    pub name: Option<String>,
    pub memory: Option<bool>,
}

/// A snapshot as E2B shows it: what a take answers and the listing holds.
/// Its id is what `POST /sandboxes` takes as `templateID` to start from it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SnapshotInfo {
    #[serde(rename = "snapshotID")]
    pub snapshot_id: String,
    pub names: Vec<String>,
}

/// `POST /sandboxes/{id}/fork`: `count` copies, each with `timeout`
/// seconds to live.
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
pub struct ForkRequest {
    pub timeout: Option<i64>,
    pub count: Option<u32>,
}

/// One copy of a fork: its sandbox, or why it was not made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ForkResult {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<Sandbox>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<E2bErrorBody>,
}

/// `GET /templates/aliases/{alias}`: the template an alias names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateAlias {
    #[serde(rename = "templateID")]
    pub template_id: String,
    /// Whether every project can use it (the server's images are).
    pub public: bool,
}

/// `POST /v3/templates`: a build of a template by name (E2B's
/// `TemplateBuildRequestV3`; resources are the server's own, so the sizes
/// asked for are read and not used).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateBuildRequest {
    #[serde(default)]
    pub name: Option<String>,
    /// The older SDKs' name for `name`.
    #[serde(default)]
    pub alias: Option<String>,
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    #[serde(default, rename = "cpuCount")]
    pub cpu_count: Option<u32>,
    #[serde(default, rename = "memoryMB")]
    pub memory_mb: Option<u64>,
    #[serde(default)]
    pub min_free_disk_mb: Option<u64>,
    #[serde(default, rename = "teamID")]
    pub team_id: Option<String>,
}

/// The answer to `POST /v3/templates`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TemplateBuildRequested {
    #[serde(rename = "templateID")]
    pub template_id: String,
    #[serde(rename = "buildID")]
    pub build_id: String,
    pub public: bool,
    pub names: Vec<String>,
    pub tags: Vec<String>,
    pub aliases: Vec<String>,
}

/// `GET /templates/{id}/files/{hash}`: whether a COPY step's files are
/// there already, else where to `PUT` them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TemplateFileUpload {
    pub present: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// One step of a template build (E2B's `TemplateStep`): `RUN` (command,
/// user), `COPY` (source, destination, owner, mode), `ENV` (name, value
/// pairs), `WORKDIR` (path), `USER` (name).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateStep {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files_hash: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force: Option<bool>,
}

/// `POST /v2/templates/{id}/builds/{buildID}`: what the build does (E2B's
/// `TemplateBuildStartV2`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateBuildStart {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_template: Option<String>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub from_image_registry: Option<IgnoredAny>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force: Option<bool>,
    #[serde(default)]
    pub steps: Vec<TemplateStep>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_cmd: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_cmd: Option<String>,
}

/// A build's log line (E2B's `BuildLogEntry`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BuildLogEntry {
    /// RFC 3339.
    pub timestamp: String,
    pub message: String,
    /// `debug`, `info`, `warn` or `error`.
    pub level: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
}

/// Why a build failed (E2B's `BuildStatusReason`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BuildStatusReason {
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    #[serde(default)]
    pub log_entries: Vec<BuildLogEntry>,
}

/// `GET /templates/{id}/builds/{buildID}/status` (E2B's
/// `TemplateBuildInfo`): the status and the log entries after
/// `logsOffset`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateBuildStatus {
    /// Always empty (E2B's deprecated raw lines).
    pub logs: Vec<String>,
    pub log_entries: Vec<BuildLogEntry>,
    #[serde(rename = "templateID")]
    pub template_id: String,
    #[serde(rename = "buildID")]
    pub build_id: String,
    /// `waiting`, `building`, `ready` or `error`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<BuildStatusReason>,
}

/// E2B's error body: `{"code": <HTTP status>, "message": …}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct E2bErrorBody {
    pub code: u16,
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_create_reads_the_sdks_fields_and_ignores_new_ones() {
        let body: NewSandbox = serde_json::from_value(serde_json::json!({
            "templateID": "base", "timeout": 60, "autoPause": true,
            "allow_internet_access": false, "metadata": {"a": "b"},
            "envVars": {"X": "1"}, "network": {"allowOut": ["example.com"]},
            "mcp": null, "somethingNew": 1,
        }))
        .expect("reads");
        assert_eq!(body.template_id, "base");
        assert_eq!(body.timeout, Some(60));
        assert_eq!(body.allow_internet_access, Some(false));
        assert_eq!(body.env_vars.expect("env")["X"], "1");
        assert!(body.mcp.is_none());
        assert_eq!(
            body.network.and_then(|n| n.allow_out),
            Some(vec!["example.com".to_owned()])
        );
    }

    #[test]
    fn answers_use_e2bs_spelling() {
        let sandbox = Sandbox {
            template_id: "base".into(),
            sandbox_id: "cntr_1".into(),
            client_id: "shellgate".into(),
            envd_version: "0.6.4".into(),
            envd_access_token: "t".into(),
            traffic_access_token: "tt".into(),
            domain: None,
        };
        let json = serde_json::to_value(&sandbox).expect("serializes");
        for key in [
            "templateID",
            "sandboxID",
            "clientID",
            "envdVersion",
            "envdAccessToken",
            "trafficAccessToken",
        ] {
            assert!(json.get(key).is_some(), "{key} in {json}");
        }
    }
}
