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
