//! Container files and the Files API's file object.

use serde::{Deserialize, Serialize};

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

/// A Files API file in Anthropic's shape (`FileMetadata`, the `anthropic`
/// SDK's `types/beta/beta_file_metadata.py`): what `/v1/files` answers a
/// client that sends `anthropic-version`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct AnthropicFile {
    pub id: String,
    /// Always `file`.
    #[serde(rename = "type")]
    pub kind: String,
    pub filename: String,
    pub mime_type: String,
    pub size_bytes: u64,
    /// RFC 3339.
    pub created_at: String,
    pub downloadable: bool,
    /// RFC 3339; none when the file does not expire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
}

/// A page of Anthropic's file list: newest first, with the ids of its
/// ends (`after_id` / `before_id` page on) and, while more follow, the
/// cursor of the next page (`page`: the SDK's cursor pages read it).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct AnthropicFileList {
    pub data: Vec<AnthropicFile>,
    pub has_more: bool,
    pub first_id: Option<String>,
    pub last_id: Option<String>,
    pub next_page: Option<String>,
}

/// `DELETE /v1/files/{id}` in Anthropic's shape.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct AnthropicFileDeleted {
    pub id: String,
    /// Always `file_deleted`.
    #[serde(rename = "type")]
    pub kind: String,
}

/// The query of Anthropic's file list: `limit` (1 to 1,000, default 20),
/// and one of `after_id`, `before_id` or `page` (a `next_page` cursor).
/// Numbers are read by the handler, so a bad one is a 400 naming it.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct AnthropicFilesQuery {
    pub limit: Option<String>,
    pub after_id: Option<String>,
    pub before_id: Option<String>,
    pub page: Option<String>,
}

/// The prefix of Anthropic's page cursors (`next_page`, `page`).
pub const PAGE_CURSOR_PREFIX: &str = "page_";

/// The MIME type a file's name says (its extension), for Anthropic's
/// `mime_type`; `application/octet-stream` when it says none known.
pub fn mime_type_of(filename: &str) -> &'static str {
    let extension = filename
        .rsplit_once('.')
        .map(|(_, ext)| ext.to_ascii_lowercase())
        .unwrap_or_default();
    match extension.as_str() {
        "txt" | "log" | "text" => "text/plain",
        "md" | "markdown" => "text/markdown",
        "csv" => "text/csv",
        "tsv" => "text/tab-separated-values",
        "html" | "htm" => "text/html",
        "css" => "text/css",
        "xml" => "application/xml",
        "json" => "application/json",
        "jsonl" | "ndjson" => "application/x-ndjson",
        "yaml" | "yml" => "application/yaml",
        "js" | "mjs" => "text/javascript",
        "py" => "text/x-python",
        "sh" => "application/x-sh",
        "pdf" => "application/pdf",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "svg" => "image/svg+xml",
        "zip" => "application/zip",
        "gz" | "tgz" => "application/gzip",
        "tar" => "application/x-tar",
        "xlsx" => "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        "docx" => "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        "pptx" => "application/vnd.openxmlformats-officedocument.presentationml.presentation",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_files_mime_type_is_its_extensions() {
        assert_eq!(mime_type_of("data.CSV"), "text/csv");
        assert_eq!(mime_type_of("chart.png"), "image/png");
        assert_eq!(mime_type_of("archive.tar.gz"), "application/gzip");
        assert_eq!(mime_type_of("README"), "application/octet-stream");
    }
}
