//! OpenAI-compatible JSON shapes shellgate speaks on the wire: containers,
//! container files, files, lists, deletions, errors and `shell_call_output`.
//!
//! Field names and optionality follow the official `openai` SDK's typed
//! models (`openai/types/container_*`, `types/containers/`, `types/file_*`)
//! and `shared/reference/openai-wire.md`. Request types reject unknown enum
//! values; response types always carry every required key.

pub mod messages;
pub mod param;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub mod chat;
pub mod responses;

mod extensions;
mod skills;

pub use extensions::{ContainerCommand, Image, ImageList};
pub use skills::{
    InlineSkill, InlineSkillSource, MountedSkill, Skill, SkillEntry, SkillReference, SkillVersion,
    SkillVersionDeleted, StoredSkill, UpdateSkill, VersionRef,
};

/// `{"error": {"message", "type", "param", "code"}}`, all four keys present.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct ErrorEnvelope {
    pub error: ErrorBody,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct ErrorBody {
    pub message: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub param: Option<String>,
    pub code: Option<String>,
}

/// Container memory limits OpenAI offers.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default, utoipa::ToSchema)]
pub enum MemoryLimit {
    #[default]
    #[serde(rename = "1g")]
    OneGb,
    #[serde(rename = "4g")]
    FourGb,
    #[serde(rename = "16g")]
    SixteenGb,
    #[serde(rename = "64g")]
    SixtyFourGb,
}

impl MemoryLimit {
    pub fn bytes(self) -> u64 {
        match self {
            MemoryLimit::OneGb => 1 << 30,
            MemoryLimit::FourGb => 4 << 30,
            MemoryLimit::SixteenGb => 16 << 30,
            MemoryLimit::SixtyFourGb => 64 << 30,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            MemoryLimit::OneGb => "1g",
            MemoryLimit::FourGb => "4g",
            MemoryLimit::SixteenGb => "16g",
            MemoryLimit::SixtyFourGb => "64g",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        serde_json::from_value(Value::String(text.to_owned())).ok()
    }
}

/// `expires_after`: only the `last_active_at` anchor exists.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExpiresAfter {
    pub anchor: ExpiresAnchor,
    pub minutes: u32,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ExpiresAnchor {
    LastActiveAt,
}

/// A secret for a domain: the model sees only `$NAME`; the value is never
/// stored or echoed (nor printed by `Debug`).
#[derive(Clone, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DomainSecret {
    pub domain: String,
    pub name: String,
    /// Given, never shown back.
    #[schema(write_only)]
    pub value: String,
    /// shellgate's extension: where in a request the placeholder becomes
    /// the value (header values only when omitted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inject: Option<Vec<InjectInto>>,
    /// shellgate's extension: only requests with these methods get it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub methods: Option<Vec<String>>,
    /// shellgate's extension: only requests under these path prefixes get it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paths: Option<Vec<String>>,
}

/// A part of a request a secret may be put into.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum InjectInto {
    Header,
    Query,
    Body,
}

impl std::fmt::Debug for DomainSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DomainSecret")
            .field("domain", &self.domain)
            .field("name", &self.name)
            .field("value", &"<hidden>")
            .finish()
    }
}

/// `network_policy` of a container.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum NetworkPolicy {
    Disabled,
    Allowlist {
        allowed_domains: Vec<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        domain_secrets: Vec<DomainSecret>,
        /// shellgate's extension: names whose TLS is not terminated (the
        /// SNI alone is checked; see the README's trade-off).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tls_passthrough_domains: Vec<String>,
    },
}

impl NetworkPolicy {
    /// The policy as it may be echoed: secrets removed.
    pub fn without_secrets(&self) -> Self {
        match self {
            NetworkPolicy::Disabled => NetworkPolicy::Disabled,
            NetworkPolicy::Allowlist {
                allowed_domains,
                tls_passthrough_domains,
                ..
            } => NetworkPolicy::Allowlist {
                allowed_domains: allowed_domains.clone(),
                domain_secrets: Vec::new(),
                tls_passthrough_domains: tls_passthrough_domains.clone(),
            },
        }
    }
}

/// `POST /v1/containers`.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateContainer {
    pub name: String,
    #[serde(default)]
    pub file_ids: Vec<String>,
    pub expires_after: Option<ExpiresAfter>,
    /// `skill_reference` or `inline` entries: each read as a [`SkillEntry`]
    /// by the server, in the order it checks a container.
    #[serde(default)]
    #[schema(value_type = Vec<SkillEntry>)]
    pub skills: Vec<Value>,
    pub memory_limit: Option<MemoryLimit>,
    pub network_policy: Option<NetworkPolicy>,
    /// shellgate's extension: the image to make it from (`GET /v1/images`);
    /// the server's `default_image` when omitted.
    #[serde(default)]
    pub image: Option<String>,
}

/// The container object.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct Container {
    pub id: String,
    pub object: String,
    pub name: String,
    pub created_at: i64,
    pub status: String,
    pub last_active_at: i64,
    pub expires_after: ExpiresAfter,
    pub memory_limit: MemoryLimit,
    pub network_policy: NetworkPolicy,
    /// shellgate's extension: the image it was made from.
    #[serde(default)]
    pub image: String,
    /// shellgate's extension: its skills (`name`, `description`, `path`,
    /// and `skill_id`/`version` for a referenced one), shown read-only at
    /// `/mnt/skills/<name>`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skills: Vec<MountedSkill>,
    /// shellgate's extension: the secrets (by name) whose values this
    /// server no longer holds (it restarted since they were given): the
    /// container's network is off until they are supplied again
    /// (`POST /v1/containers/{id}/secrets`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets_missing: Vec<String>,
}

/// A cursor page: `{"object":"list","data":[...],"first_id","last_id","has_more"}`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct List<T> {
    pub object: String,
    pub data: Vec<T>,
    pub first_id: Option<String>,
    pub last_id: Option<String>,
    pub has_more: bool,
    /// shellgate's extension: set when a listing could not include
    /// everything (a container with more files than a listing walks), so
    /// that nothing goes missing silently.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incomplete: Option<ListIncomplete>,
}

/// What a listing left out, and why (see [`List::incomplete`]).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct ListIncomplete {
    /// A sentence for humans.
    pub message: String,
    /// Files and directories whose names are not UTF-8 (not listable in JSON).
    pub non_utf8_names: u64,
    /// Directories nested deeper than the listing walks.
    pub too_deep_directories: u64,
    /// Whether the walk stopped at its most entries.
    pub entry_limit_reached: bool,
}

impl<T> List<T> {
    /// A page of `data`, with ids taken by `id_of`.
    pub fn page(data: Vec<T>, has_more: bool, id_of: impl Fn(&T) -> String) -> Self {
        let first_id = data.first().map(&id_of);
        let last_id = data.last().map(&id_of);
        Self {
            object: "list".to_owned(),
            data,
            first_id,
            last_id,
            has_more,
            incomplete: None,
        }
    }
}

/// `{"id", "object": "<kind>.deleted", "deleted": true}`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct Deleted {
    pub id: String,
    pub object: String,
    pub deleted: bool,
}

impl Deleted {
    pub fn new(id: impl Into<String>, object: &str) -> Self {
        Self {
            id: id.into(),
            object: object.to_owned(),
            deleted: true,
        }
    }
}

/// The container.file object.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct ContainerFile {
    pub id: String,
    pub object: String,
    pub created_at: i64,
    pub bytes: u64,
    pub container_id: String,
    pub path: String,
    /// `user` (uploaded) or `assistant` (made by a command).
    pub source: String,
}

/// `POST /v1/containers/{id}/files` as JSON.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateContainerFileFromId {
    pub file_id: String,
}

/// The Files API's file object.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct FileObject {
    pub id: String,
    pub object: String,
    pub bytes: u64,
    pub created_at: i64,
    pub filename: String,
    pub purpose: String,
    pub status: String,
    pub expires_at: Option<i64>,
    pub status_details: Option<String>,
}

/// File purposes the Files API accepts.
pub const FILE_PURPOSES: &[&str] = &[
    "assistants",
    "batch",
    "fine-tune",
    "vision",
    "user_data",
    "evals",
];

/// `POST /v1/containers/{id}/exec` (shellgate's extension, like E2B's).
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecRequest {
    /// Run one after another, each in a shell (at most 100).
    pub commands: Vec<String>,
    /// Each command's timeout: 1 to 300000 (120000 when omitted).
    pub timeout_ms: Option<u64>,
    /// Characters kept of each stream: at most 65536 (16384 when omitted).
    pub max_output_length: Option<usize>,
    /// Server-sent events `exec.output.delta`, then `exec.completed`.
    #[serde(default)]
    pub stream: bool,
}

/// How a command ended: a signal death reports `128 + signal`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Outcome {
    Exit { exit_code: i32 },
    Timeout,
}

/// One entry of `shell_call_output.output`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct ShellOutputEntry {
    pub stdout: String,
    pub stderr: String,
    pub outcome: Outcome,
    /// How long the command took (for the command audit; not on the wire).
    #[serde(skip)]
    pub duration_ms: u64,
    /// Bytes it wrote to stdout and stderr before any capping (for the
    /// command audit; not on the wire).
    #[serde(skip)]
    pub bytes_out: u64,
}

/// A `shell_call_output`-shaped result.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct ShellCallOutput {
    #[serde(rename = "type")]
    pub kind: String,
    pub id: String,
    pub status: String,
    pub output: Vec<ShellOutputEntry>,
    pub max_output_length: usize,
}

impl ShellCallOutput {
    /// The finished result of a run of commands, with a new `sho_` id.
    pub fn completed(output: Vec<ShellOutputEntry>, max_output_length: usize) -> Self {
        Self {
            kind: "shell_call_output".to_owned(),
            id: new_id("sho_"),
            status: "completed".to_owned(),
            output,
            max_output_length,
        }
    }
}

/// `GET /v1/usage` (shellgate's extension).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct Usage {
    pub object: String,
    pub project: String,
    pub sandbox_seconds: f64,
    /// What the sandbox seconds cost at the configured price per second.
    pub server_tool_cost: f64,
    /// Upstream tokens of the project's responses.
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub responses: u64,
    pub containers: Vec<ContainerUsage>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct ContainerUsage {
    pub container_id: String,
    pub sandbox_seconds: f64,
}

/// A random id: `prefix` and 32 hex digits from the kernel's CSPRNG
/// (`cntr_…`, `resp_…`, `sh_…`): unguessable, so an id is never a way into
/// another project's objects.
pub fn new_id(prefix: &str) -> String {
    let mut bytes = [0u8; 16];
    let mut filled = 0;
    while filled < bytes.len() {
        // SAFETY: getrandom writes at most the given length into the buffer.
        let n = unsafe {
            libc::getrandom(bytes[filled..].as_mut_ptr().cast(), bytes.len() - filled, 0)
        };
        if n > 0 {
            filled += n as usize;
        }
    }
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("{prefix}{hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_enum_values_and_fields_are_refused() {
        assert!(
            serde_json::from_str::<CreateContainer>(r#"{"name":"a","memory_limit":"2g"}"#).is_err()
        );
        assert!(serde_json::from_str::<CreateContainer>(r#"{"name":"a","bogus":1}"#).is_err());
        assert!(serde_json::from_str::<CreateContainer>(
            r#"{"name":"a","expires_after":{"anchor":"created_at","minutes":5}}"#
        )
        .is_err());
        let ok: CreateContainer = serde_json::from_str(
            r#"{"name":"a","memory_limit":"4g","network_policy":{"type":"allowlist","allowed_domains":["x.org"]}}"#,
        )
        .unwrap();
        assert_eq!(ok.memory_limit, Some(MemoryLimit::FourGb));
    }

    #[test]
    fn secrets_are_never_echoed() {
        let policy = NetworkPolicy::Allowlist {
            allowed_domains: vec!["api.example.com".into()],
            domain_secrets: vec![DomainSecret {
                domain: "api.example.com".into(),
                name: "TOKEN".into(),
                value: "s3cret".into(),
                inject: Some(vec![InjectInto::Body]),
                methods: None,
                paths: None,
            }],
            tls_passthrough_domains: Vec::new(),
        };
        let echoed = serde_json::to_string(&policy.without_secrets()).unwrap();
        assert!(!echoed.contains("s3cret"));
        assert_eq!(
            echoed,
            r#"{"type":"allowlist","allowed_domains":["api.example.com"]}"#
        );
    }

    #[test]
    fn errors_carry_all_four_keys() {
        let envelope = ErrorEnvelope {
            error: ErrorBody {
                message: "m".into(),
                kind: "invalid_request_error".into(),
                param: None,
                code: None,
            },
        };
        assert_eq!(
            serde_json::to_string(&envelope).unwrap(),
            r#"{"error":{"message":"m","type":"invalid_request_error","param":null,"code":null}}"#
        );
    }
}
