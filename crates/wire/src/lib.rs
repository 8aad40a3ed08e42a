//! OpenAI-compatible JSON shapes shellgate speaks on the wire: containers,
//! container files, files, lists, deletions, errors and `shell_call_output`.
//!
//! Field names and optionality follow the official `openai` SDK's typed
//! models (`openai/types/container_*`, `types/containers/`, `types/file_*`)
//! and `shared/reference/openai-wire.md`. Request types reject unknown enum
//! values; response types always carry every required key.

pub mod catalogue;
pub mod code_execution;
pub mod messages;
pub mod param;

pub mod chat;
pub mod cluster;
pub mod console;
pub mod e2b;
pub mod envd;
pub mod fs;
pub mod gemini;
pub mod models;
pub mod responses;
pub mod time;

mod containers;
mod error;
mod exec;
mod extensions;
mod files;
mod ids;
mod list;
mod outcome;
pub mod ports;
mod processes;
mod skills;
mod snapshots;
mod usage;
mod volumes;

pub use catalogue::{ErrorCode, ErrorType};
pub use containers::{
    Container, CreateContainer, DomainSecret, ExpiresAfter, ExpiresAnchor, InjectInto, MemoryLimit,
    NetworkPolicy,
};
pub use error::{ErrorBody, ErrorEnvelope};
pub use exec::{ExecRequest, ShellCallOutput, ShellOutputEntry};
pub use extensions::{
    ContainerCommand, Image, ImageBuild, ImageBuildError, ImageBuildLogEntry, ImageList,
    ImageRunConfig,
};
pub use files::{
    mime_type_of, AnthropicFile, AnthropicFileDeleted, AnthropicFileList, AnthropicFilesQuery,
    ContainerFile, CreateContainerFileFromId, FileObject, FILE_PURPOSES, PAGE_CURSOR_PREFIX,
};
pub use ids::new_id;
pub use list::{Deleted, List, ListIncomplete};
pub use outcome::Outcome;
pub use ports::ExposedPort;
pub use processes::{
    Process, ProcessChunk, ProcessClientMessage, ProcessCreate, ProcessDropped, ProcessOutput,
    ProcessPty, ProcessResize, ProcessServerMessage, ProcessSignal, ProcessStatus,
    ProcessStreamName, SignalName,
};
pub use skills::{
    AnthropicSkill, AnthropicSkillDeleted, AnthropicSkillList, AnthropicSkillSource,
    AnthropicSkillVersion, AnthropicSkillVersionDeleted, AnthropicSkillVersionList,
    AnthropicSkillVersionsQuery, AnthropicSkillsQuery, InlineSkill, InlineSkillSource,
    MountedSkill, Skill, SkillEntry, SkillReference, SkillVersion, SkillVersionDeleted,
    StoredSkill, UpdateSkill, VersionRef,
};
pub use snapshots::{CommitImage, CreateSnapshot, ForkContainer, Snapshot};
pub use usage::{ContainerUsage, Usage};
pub use volumes::{CreateVolume, Volume, VolumeMount};

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
