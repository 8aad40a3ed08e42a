//! The schemas the document's operations refer to, registered once.

use shellgate_wire as wire;
use utoipa::openapi::{RefOr, Schema};

use super::Builder;
use crate::container_egress::{EgressPage, SupplySecrets};

/// The schemas the operations refer to, each registered once.
pub(super) struct Schemas {
    pub(super) container: RefOr<Schema>,
    pub(super) container_list: RefOr<Schema>,
    pub(super) create_container: RefOr<Schema>,
    pub(super) deleted: RefOr<Schema>,
    pub(super) exec: RefOr<Schema>,
    pub(super) process: RefOr<Schema>,
    pub(super) processes: RefOr<Schema>,
    pub(super) process_create: RefOr<Schema>,
    pub(super) process_output: RefOr<Schema>,
    pub(super) process_signal: RefOr<Schema>,
    pub(super) process_resize: RefOr<Schema>,
    pub(super) shell_call_output: RefOr<Schema>,
    pub(super) commands: RefOr<Schema>,
    pub(super) egress: RefOr<Schema>,
    pub(super) supply: RefOr<Schema>,
    pub(super) network_policy: RefOr<Schema>,
    pub(super) images: RefOr<Schema>,
    pub(super) image: RefOr<Schema>,
    pub(super) image_build: RefOr<Schema>,
    pub(super) commit_image: RefOr<Schema>,
    pub(super) container_file: RefOr<Schema>,
    pub(super) container_files: RefOr<Schema>,
    pub(super) from_file_id: RefOr<Schema>,
    pub(super) fs_entry: RefOr<Schema>,
    pub(super) fs_list: RefOr<Schema>,
    pub(super) fs_mkdir: RefOr<Schema>,
    pub(super) fs_move: RefOr<Schema>,
    pub(super) fs_deleted: RefOr<Schema>,
    pub(super) fs_archive: RefOr<Schema>,
    pub(super) file: RefOr<Schema>,
    pub(super) files: RefOr<Schema>,
    pub(super) usage: RefOr<Schema>,
    pub(super) skill: RefOr<Schema>,
    pub(super) volume: RefOr<Schema>,
    pub(super) volumes: RefOr<Schema>,
    pub(super) create_volume: RefOr<Schema>,
    pub(super) snapshot: RefOr<Schema>,
    pub(super) snapshots: RefOr<Schema>,
    pub(super) create_snapshot: RefOr<Schema>,
    pub(super) fork_container: RefOr<Schema>,
    pub(super) skills: RefOr<Schema>,
    pub(super) update_skill: RefOr<Schema>,
    pub(super) version: RefOr<Schema>,
    pub(super) versions: RefOr<Schema>,
    pub(super) version_deleted: RefOr<Schema>,
    pub(super) error: RefOr<Schema>,
    pub(super) chat_request: RefOr<Schema>,
    pub(super) chat_completion: RefOr<Schema>,
    pub(super) model: RefOr<Schema>,
    pub(super) models: RefOr<Schema>,
    pub(super) response: RefOr<Schema>,
    pub(super) create_response: RefOr<Schema>,
    pub(super) response_deleted: RefOr<Schema>,
    pub(super) input_items: RefOr<Schema>,
    pub(super) input_tokens_request: RefOr<Schema>,
    pub(super) input_token_count: RefOr<Schema>,
    pub(super) compact_request: RefOr<Schema>,
    pub(super) compacted_response: RefOr<Schema>,
    pub(super) create_message: RefOr<Schema>,
    pub(super) message: RefOr<Schema>,
    pub(super) anthropic_error: RefOr<Schema>,
    pub(super) count_tokens: RefOr<Schema>,
    pub(super) token_count: RefOr<Schema>,
    pub(super) create_batch: RefOr<Schema>,
    pub(super) message_batch: RefOr<Schema>,
    pub(super) batch_page: RefOr<Schema>,
    pub(super) batch_deleted: RefOr<Schema>,
    pub(super) generate_content: RefOr<Schema>,
    pub(super) generated: RefOr<Schema>,
    pub(super) gemini_model: RefOr<Schema>,
    pub(super) gemini_models: RefOr<Schema>,
    pub(super) gemini_create_file: RefOr<Schema>,
    pub(super) gemini_uploaded: RefOr<Schema>,
    pub(super) gemini_file: RefOr<Schema>,
    pub(super) gemini_files: RefOr<Schema>,
    pub(super) gemini_deleted_file: RefOr<Schema>,
    pub(super) google_error: RefOr<Schema>,
    pub(super) e2b_create: RefOr<Schema>,
    pub(super) e2b_sandbox: RefOr<Schema>,
    pub(super) e2b_detail: RefOr<Schema>,
    pub(super) e2b_listed: RefOr<Schema>,
    pub(super) e2b_timeout: RefOr<Schema>,
    pub(super) e2b_connect: RefOr<Schema>,
    pub(super) e2b_pause: RefOr<Schema>,
    pub(super) e2b_alias: RefOr<Schema>,
    pub(super) e2b_new_volume: RefOr<Schema>,
    pub(super) e2b_volume: RefOr<Schema>,
    pub(super) e2b_volumes: RefOr<Schema>,
    pub(super) e2b_volume_entry: RefOr<Schema>,
    pub(super) e2b_volume_entries: RefOr<Schema>,
    pub(super) e2b_volume_patch: RefOr<Schema>,
    pub(super) e2b_snapshot_request: RefOr<Schema>,
    pub(super) e2b_snapshot: RefOr<Schema>,
    pub(super) e2b_snapshots: RefOr<Schema>,
    pub(super) e2b_fork_request: RefOr<Schema>,
    pub(super) e2b_fork_results: RefOr<Schema>,
    pub(super) e2b_template_request: RefOr<Schema>,
    pub(super) e2b_template_requested: RefOr<Schema>,
    pub(super) e2b_template_file: RefOr<Schema>,
    pub(super) e2b_template_start: RefOr<Schema>,
    pub(super) e2b_template_status: RefOr<Schema>,
    pub(super) e2b_refresh: RefOr<Schema>,
    pub(super) e2b_network_update: RefOr<Schema>,
    pub(super) e2b_metrics: RefOr<Schema>,
    pub(super) e2b_metrics_by_id: RefOr<Schema>,
    pub(super) e2b_logs: RefOr<Schema>,
    pub(super) e2b_logs_v2: RefOr<Schema>,
    pub(super) e2b_error: RefOr<Schema>,
}

impl Schemas {
    /// Registers every schema with `d`. The order matters (a dialect's
    /// references are rewritten by the names it has so far), and a struct's
    /// fields are evaluated in the order written. A schema no operation's body
    /// or answer refers to is registered beside the one it goes with: a
    /// process's events and WebSocket frames, a completion's streamed chunks,
    /// Gemini's `:countTokens` bodies (that method shares generateContent's
    /// path), a generic's parameter (its `schemas` leaves that out).
    pub(super) fn register(d: &mut Builder) -> Self {
        use wire::{chat::served, e2b, gemini, messages, responses};
        Self {
            container: d.schema::<wire::Container>(),
            container_list: d.list::<wire::Container>("ContainerList"),
            create_container: d.schema::<wire::CreateContainer>(),
            deleted: d.schema::<wire::Deleted>(),
            exec: d.schema::<wire::ExecRequest>(),
            process: d.schema::<wire::Process>(),
            processes: d.list::<wire::Process>("ProcessList"),
            process_create: d.schema::<wire::ProcessCreate>(),
            process_output: d.schema::<wire::ProcessOutput>(),
            process_signal: d.schema::<wire::ProcessSignal>(),
            process_resize: {
                let schema = d.schema::<wire::ProcessResize>();
                d.schema::<wire::ProcessDropped>();
                d.schema::<wire::ProcessClientMessage>();
                d.schema::<wire::ProcessServerMessage>();
                schema
            },
            shell_call_output: d.schema::<wire::ShellCallOutput>(),
            commands: d.list::<wire::ContainerCommand>("ContainerCommandList"),
            egress: d.schema::<EgressPage>(),
            supply: d.schema::<SupplySecrets>(),
            network_policy: d.schema::<wire::NetworkPolicy>(),
            images: d.schema::<wire::ImageList>(),
            image: d.schema::<wire::Image>(),
            image_build: d.schema::<wire::ImageBuild>(),
            commit_image: d.schema::<wire::CommitImage>(),
            container_file: d.schema::<wire::ContainerFile>(),
            container_files: d.list::<wire::ContainerFile>("ContainerFileList"),
            from_file_id: d.schema::<wire::CreateContainerFileFromId>(),
            fs_entry: d.schema::<wire::fs::FsEntry>(),
            fs_list: d.schema::<wire::fs::FsEntryList>(),
            fs_mkdir: d.schema::<wire::fs::FsMkdir>(),
            fs_move: d.schema::<wire::fs::FsMove>(),
            fs_deleted: d.schema::<wire::fs::FsDeleted>(),
            fs_archive: d.schema::<wire::fs::FsArchive>(),
            file: d.schema::<wire::FileObject>(),
            files: d.list::<wire::FileObject>("FileList"),
            usage: d.schema::<wire::Usage>(),
            skill: d.schema::<wire::Skill>(),
            volume: d.schema::<wire::Volume>(),
            volumes: d.list::<wire::Volume>("VolumeList"),
            create_volume: {
                let schema = d.schema::<wire::CreateVolume>();
                d.schema::<wire::VolumeMount>();
                schema
            },
            snapshot: d.schema::<wire::Snapshot>(),
            snapshots: d.list::<wire::Snapshot>("SnapshotList"),
            create_snapshot: d.schema::<wire::CreateSnapshot>(),
            fork_container: d.schema::<wire::ForkContainer>(),
            skills: d.list::<wire::Skill>("SkillList"),
            update_skill: d.schema::<wire::UpdateSkill>(),
            version: d.schema::<wire::SkillVersion>(),
            versions: d.list::<wire::SkillVersion>("SkillVersionList"),
            version_deleted: d.schema::<wire::SkillVersionDeleted>(),
            error: d.schema::<wire::ErrorEnvelope>(),
            chat_request: d
                .scoped::<served::ChatCompletionRequest>("chat", "ChatCompletionRequest"),
            chat_completion: {
                let schema = d.scoped::<served::Completion>("chat", "Completion");
                d.scoped::<served::CompletionChunk>("chat", "CompletionChunk");
                schema
            },
            model: d.schema::<wire::models::Model>(),
            models: d.schema::<wire::models::ModelList>(),
            response: {
                let schema = d.scoped::<responses::Response>("responses", "Response");
                // `input`'s schema is referred to but not collected by the derive.
                d.scoped::<responses::Input>("responses", "Input");
                schema
            },
            create_response: d.scoped::<responses::CreateResponse>("responses", "CreateResponse"),
            response_deleted: d
                .scoped::<responses::ResponseDeleted>("responses", "ResponseDeleted"),
            input_items: {
                d.scoped::<responses::Item>("responses", "Item");
                d.scoped::<wire::List<responses::Item>>("responses", "ItemList")
            },
            input_tokens_request: d
                .scoped::<responses::InputTokensRequest>("responses", "InputTokensRequest"),
            input_token_count: d
                .scoped::<responses::InputTokenCount>("responses", "InputTokenCount"),
            compact_request: d.scoped::<responses::CompactRequest>("responses", "CompactRequest"),
            compacted_response: d
                .scoped::<responses::CompactedResponse>("responses", "CompactedResponse"),
            create_message: d.scoped::<messages::CreateMessage>("messages", "CreateMessage"),
            message: d.scoped::<messages::Message>("messages", "Message"),
            anthropic_error: d.scoped::<messages::ErrorResponse>("messages", "ErrorResponse"),
            count_tokens: d.scoped::<messages::CountTokens>("messages", "CountTokens"),
            token_count: d.scoped::<messages::TokenCount>("messages", "TokenCount"),
            create_batch: d.scoped::<messages::CreateBatch>("messages", "CreateBatch"),
            message_batch: d.scoped::<messages::MessageBatch>("messages", "MessageBatch"),
            batch_page: d.scoped::<messages::BatchPage>("messages", "BatchPage"),
            batch_deleted: d
                .scoped::<messages::DeletedMessageBatch>("messages", "DeletedMessageBatch"),
            generate_content: d
                .scoped::<gemini::GenerateContentRequest>("gemini", "GenerateContentRequest"),
            generated: {
                let schema = d
                    .scoped::<gemini::GenerateContentResponse>("gemini", "GenerateContentResponse");
                d.scoped::<gemini::CountTokensRequest>("gemini", "CountTokensRequest");
                d.scoped::<gemini::CountTokensResponse>("gemini", "CountTokensResponse");
                schema
            },
            gemini_model: d.scoped::<gemini::Model>("gemini", "Model"),
            gemini_models: d.scoped::<gemini::ListModelsResponse>("gemini", "ListModelsResponse"),
            gemini_create_file: {
                d.scoped::<gemini::FileMetadata>("gemini", "FileMetadata");
                d.scoped::<gemini::CreateFileRequest>("gemini", "CreateFileRequest")
            },
            gemini_uploaded: d.scoped::<gemini::UploadedFile>("gemini", "UploadedFile"),
            gemini_file: d.scoped::<gemini::File>("gemini", "File"),
            gemini_files: d.scoped::<gemini::ListFilesResponse>("gemini", "ListFilesResponse"),
            gemini_deleted_file: d.scoped::<gemini::DeletedFile>("gemini", "DeletedFile"),
            google_error: d.scoped::<gemini::ErrorResponse>("gemini", "ErrorResponse"),
            e2b_create: d.scoped::<e2b::NewSandbox>("e2b", "NewSandbox"),
            e2b_sandbox: d.scoped::<e2b::Sandbox>("e2b", "Sandbox"),
            e2b_detail: d.scoped::<e2b::SandboxDetail>("e2b", "SandboxDetail"),
            e2b_listed: {
                let schema = d.scoped::<Vec<e2b::ListedSandbox>>("e2b", "ListedSandboxList");
                d.scoped::<e2b::ListedSandbox>("e2b", "ListedSandbox");
                schema
            },
            e2b_timeout: d.scoped::<e2b::TimeoutRequest>("e2b", "TimeoutRequest"),
            e2b_connect: d.scoped::<e2b::ConnectRequest>("e2b", "ConnectRequest"),
            e2b_pause: d.scoped::<e2b::PauseRequest>("e2b", "PauseRequest"),
            e2b_alias: d.scoped::<e2b::TemplateAlias>("e2b", "TemplateAlias"),
            e2b_new_volume: d.scoped::<e2b::NewVolume>("e2b", "NewVolume"),
            e2b_volume: d.scoped::<e2b::VolumeAndToken>("e2b", "VolumeAndToken"),
            e2b_volumes: {
                let schema = d.scoped::<Vec<e2b::E2bVolume>>("e2b", "VolumeList");
                d.scoped::<e2b::E2bVolume>("e2b", "Volume");
                schema
            },
            e2b_volume_entry: d.scoped::<e2b::VolumeEntryStat>("e2b", "VolumeEntryStat"),
            e2b_volume_entries: d.scoped::<Vec<e2b::VolumeEntryStat>>("e2b", "VolumeEntryStatList"),
            e2b_volume_patch: d.scoped::<e2b::VolumeEntryPatch>("e2b", "VolumeEntryPatch"),
            e2b_snapshot_request: d.scoped::<e2b::SnapshotRequest>("e2b", "SnapshotRequest"),
            e2b_snapshot: d.scoped::<e2b::SnapshotInfo>("e2b", "SnapshotInfo"),
            e2b_snapshots: d.scoped::<Vec<e2b::SnapshotInfo>>("e2b", "SnapshotInfoList"),
            e2b_fork_request: d.scoped::<e2b::ForkRequest>("e2b", "ForkRequest"),
            e2b_fork_results: {
                let schema = d.scoped::<Vec<e2b::ForkResult>>("e2b", "ForkResultList");
                d.scoped::<e2b::ForkResult>("e2b", "ForkResult");
                schema
            },
            e2b_template_request: d
                .scoped::<e2b::TemplateBuildRequest>("e2b", "TemplateBuildRequest"),
            e2b_template_requested: d
                .scoped::<e2b::TemplateBuildRequested>("e2b", "TemplateBuildRequested"),
            e2b_template_file: d.scoped::<e2b::TemplateFileUpload>("e2b", "TemplateFileUpload"),
            e2b_template_start: {
                let schema = d.scoped::<e2b::TemplateBuildStart>("e2b", "TemplateBuildStart");
                d.scoped::<e2b::TemplateStep>("e2b", "TemplateStep");
                schema
            },
            e2b_template_status: {
                let schema = d.scoped::<e2b::TemplateBuildStatus>("e2b", "TemplateBuildStatus");
                d.scoped::<e2b::BuildLogEntry>("e2b", "BuildLogEntry");
                d.scoped::<e2b::BuildStatusReason>("e2b", "BuildStatusReason");
                schema
            },
            e2b_refresh: d.scoped::<e2b::RefreshRequest>("e2b", "RefreshRequest"),
            e2b_network_update: d.scoped::<e2b::NetworkUpdate>("e2b", "NetworkUpdate"),
            e2b_metrics: {
                let schema = d.scoped::<Vec<e2b::SandboxMetric>>("e2b", "SandboxMetricList");
                d.scoped::<e2b::SandboxMetric>("e2b", "SandboxMetric");
                schema
            },
            e2b_metrics_by_id: d.scoped::<e2b::SandboxesWithMetrics>("e2b", "SandboxesWithMetrics"),
            e2b_logs: {
                let schema = d.scoped::<e2b::SandboxLogs>("e2b", "SandboxLogs");
                d.scoped::<e2b::SandboxLog>("e2b", "SandboxLog");
                d.scoped::<e2b::SandboxLogEntry>("e2b", "SandboxLogEntry");
                d.scoped::<e2b::LogLevel>("e2b", "LogLevel");
                schema
            },
            e2b_logs_v2: d.scoped::<e2b::SandboxLogsV2>("e2b", "SandboxLogsV2"),
            e2b_error: d.scoped::<e2b::E2bErrorBody>("e2b", "Error"),
        }
    }
}
