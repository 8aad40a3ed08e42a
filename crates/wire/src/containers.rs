//! The container object and what creates it: memory limits, expiry, the network policy and its domain secrets.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::skills::{MountedSkill, SkillEntry};

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
        /// SNI alone is checked; docs/operator/egress.md says what that gives up).
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
    /// shellgate's extension: TCP ports (1024 to 65535, unique, at most
    /// 16) reachable from outside through the server, by path
    /// (`/v1/containers/{id}/ports/{port}/`) and by host name.
    #[serde(default)]
    pub exposed_ports: Vec<u32>,
    /// shellgate's extension: the project's volumes mounted read-write
    /// (at most 8), each by `volume_id` or `name` at an absolute `path`.
    #[serde(default)]
    pub volumes: Vec<crate::volumes::VolumeMount>,
    /// shellgate's extension: a snapshot of the project's
    /// (`POST /v1/containers/{id}/snapshots`) whose files it starts with,
    /// on the snapshot's image; `memory_limit`, `network_policy` and
    /// `expires_after` are the snapshot's container's unless given.
    #[serde(default)]
    pub snapshot_id: Option<String>,
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
    /// shellgate's extension: the ports it was created with, and where
    /// each is reached through the server.
    #[serde(default)]
    pub exposed_ports: Vec<crate::ports::ExposedPort>,
    /// shellgate's extension: a secret that authorizes requests to this
    /// container's ports only (`x-shellgate-port-token` header or
    /// `shellgate_port_token` query parameter), for whoever should reach
    /// them without the project's API key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port_token: Option<String>,
}
