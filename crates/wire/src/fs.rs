//! Files by path (our extension): a container's file system
//! entry, a directory's listing, and the bodies of `mkdir` and `move`.

use serde::{Deserialize, Serialize};

/// `container.fs_entry`: one entry as `lstat` sees it (a symbolic link is
/// reported, not followed).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct FsEntry {
    pub object: String,
    /// Absolute path inside the container.
    pub path: String,
    pub name: String,
    #[serde(rename = "type")]
    pub kind: FsEntryKind,
    pub size: u64,
    /// Permission bits as an octal string, e.g. `"0644"`.
    pub mode: String,
    /// Modification time, Unix seconds.
    pub modified_at: i64,
    pub link_target: Option<String>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FsEntryKind {
    File,
    Directory,
    Symlink,
    /// A FIFO, socket or device.
    Other,
}

/// A directory's entries, depth first, each directory's sorted by name.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct FsEntryList {
    pub object: String,
    pub data: Vec<FsEntry>,
    /// The listing stopped at `limit`: more entries exist.
    pub truncated: bool,
    /// Names that are not UTF-8 (not listable in JSON), left out and
    /// counted here.
    pub non_utf8_names: u64,
    /// Entries whose path holds one of the container's secret values,
    /// left out and counted here (only commands reach them).
    pub secret_names: u64,
}

/// `POST /v1/containers/{id}/fs/mkdir`.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FsMkdir {
    pub path: String,
    /// Create missing parents, and accept a directory already there.
    #[serde(default = "yes")]
    pub parents: bool,
    /// Octal permission bits, `"0755"` when omitted.
    #[serde(default)]
    pub mode: Option<String>,
}

fn yes() -> bool {
    true
}

/// `POST /v1/containers/{id}/fs/move`.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FsMove {
    pub from: String,
    pub to: String,
    /// Replace `to` if it exists (refused otherwise).
    #[serde(default)]
    pub overwrite: bool,
}

/// `container.fs_entry.deleted`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct FsDeleted {
    pub object: String,
    pub path: String,
    pub deleted: bool,
}

/// `container.fs_archive`: what an archive import wrote.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct FsArchive {
    pub object: String,
    pub path: String,
    pub entries: u64,
    pub bytes: u64,
}

/// Reads an octal mode (`"0644"`, `"755"`): permission bits only.
pub fn parse_mode(mode: &str) -> Option<u32> {
    let digits = mode.strip_prefix("0o").unwrap_or(mode);
    if digits.is_empty() || digits.len() > 5 {
        return None;
    }
    u32::from_str_radix(digits, 8)
        .ok()
        .filter(|bits| *bits <= 0o7777)
}

/// Writes a mode as the API shows it (`"0644"`).
pub fn format_mode(mode: u32) -> String {
    format!("{:04o}", mode & 0o7777)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_read_and_write_as_octal() {
        assert_eq!(parse_mode("0644"), Some(0o644));
        assert_eq!(parse_mode("755"), Some(0o755));
        assert_eq!(parse_mode("4755"), Some(0o4755));
        for bad in ["", "9", "0o", "17777", "rw-r--r--", "-1"] {
            assert_eq!(parse_mode(bad), None, "{bad}");
        }
        assert_eq!(format_mode(0o644), "0644");
        assert_eq!(format_mode(0o100755), "0755");
    }

    #[test]
    fn bodies_refuse_unknown_fields_and_default_the_rest() {
        let mkdir: FsMkdir = serde_json::from_str(r#"{"path":"/tmp/a"}"#).unwrap();
        assert!(mkdir.parents);
        assert!(serde_json::from_str::<FsMkdir>(r#"{"path":"/a","x":1}"#).is_err());
        let moved: FsMove = serde_json::from_str(r#"{"from":"/a","to":"/b"}"#).unwrap();
        assert!(!moved.overwrite);
    }
}
