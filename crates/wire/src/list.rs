//! Cursor pages and deletions: `list` and `<kind>.deleted` objects.

use serde::{Deserialize, Serialize};

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
