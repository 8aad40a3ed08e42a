//! Volumes, in the OpenAI-styled API (`/v1/volumes`): a project's
//! persistent directory, made and deleted on its own and mounted read-write
//! into containers at create (`volumes` of `POST /v1/containers`).

use serde::{Deserialize, Serialize};

/// `POST /v1/volumes`.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateVolume {
    /// Unique within the project: 1 to 64 letters, digits, `-`, `_`, `.`.
    pub name: String,
}

/// The volume object.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct Volume {
    pub id: String,
    /// Always `volume`.
    pub object: String,
    pub name: String,
    pub created_at: i64,
}

/// One entry of `volumes` at container create: the volume, by id or by
/// name (exactly one), and the absolute path it is mounted at.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct VolumeMount {
    #[serde(default)]
    pub volume_id: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    pub path: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mount_names_its_volume_and_path_and_nothing_else() {
        let mount: VolumeMount =
            serde_json::from_str(r#"{"volume_id":"vol_1","path":"/mnt/v"}"#).expect("reads");
        assert_eq!(
            (mount.volume_id.as_deref(), mount.name, mount.path.as_str()),
            (Some("vol_1"), None, "/mnt/v")
        );
        let unknown = serde_json::from_str::<VolumeMount>(r#"{"path":"/mnt/v","mode":"ro"}"#);
        assert!(unknown.is_err(), "an unknown key was read: {unknown:?}");
    }
}
