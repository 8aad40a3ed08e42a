//! Containers as every dialect sees them: made (validated, admitted against
//! the project's quotas, its image chosen, its skills and files put in),
//! owned by one project, shown, removed.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use shellgate_sandbox_api::backend::ContainerSpec;
use shellgate_store::{ContainerFileRow, ContainerRow, ContainerStatus, FileSource};
use shellgate_wire::{new_id, ErrorCode};
use shellgate_wire::{
    Container, CreateContainer, ExpiresAfter, ExpiresAnchor, MountedSkill, NetworkPolicy,
    StoredSkill,
};

use crate::engine::destroy_quietly;
use crate::error::{ApiError, ApiResult};
use crate::http::{to_completion, Project};
use crate::public_base::PublicBase;
use crate::sandboxes::files::safe_file_name;
use crate::state::AppState;
use crate::time::now;

/// Longest container name.
const MAX_NAME: usize = 256;

/// The network policy a container row keeps (secret values left out).
pub fn network_policy(row: &ContainerRow) -> NetworkPolicy {
    serde_json::from_str(&row.network_policy).unwrap_or(NetworkPolicy::Disabled)
}

/// The skills a container row keeps. Rows from before skills were mounted
/// hold the request's entries (no `path`): those were never in the
/// container, and are left out on purpose; any other entry that does not
/// read as a mounted skill is a corrupt row (an error, not a skill less).
pub fn mounted_skills(row: &ContainerRow) -> ApiResult<Vec<MountedSkill>> {
    let stored: Vec<StoredSkill> = serde_json::from_str(&row.skills)
        .map_err(|e| ApiError::internal(format!("container {}: its stored skills: {e}", row.id)))?;
    Ok(stored
        .into_iter()
        .filter_map(|skill| match skill {
            StoredSkill::Mounted(skill) => Some(skill),
            StoredSkill::NeverMounted => None,
        })
        .collect())
}

/// The container object of a row.
pub fn container_object(row: &ContainerRow) -> ApiResult<Container> {
    Ok(Container {
        id: row.id.clone(),
        object: "container".to_owned(),
        name: row.name.clone(),
        created_at: row.created_at,
        status: row.status.as_str().to_owned(),
        last_active_at: row.last_active_at,
        expires_after: ExpiresAfter {
            anchor: ExpiresAnchor::LastActiveAt,
            minutes: row.expires_minutes,
        },
        memory_limit: row.memory_limit,
        network_policy: network_policy(row),
        image: row.image.clone(),
        skills: mounted_skills(row)?,
        secrets_missing: Vec::new(),
        exposed_ports: Vec::new(),
        port_token: None,
    })
}

/// The container object of a row as the API shows it: with the secrets
/// whose values this server no longer holds (its network is off), and its
/// exposed ports where `base` says clients reach this server.
pub fn shown_container(
    state: &AppState,
    row: &ContainerRow,
    base: &PublicBase,
) -> ApiResult<Container> {
    let mut container = container_object(row)?;
    container.exposed_ports = row
        .exposed_ports
        .iter()
        .map(|port| base.exposed(&state.config.server.ports_base_domain, &row.id, *port))
        .collect();
    if !row.exposed_ports.is_empty() {
        container.port_token = row.port_token.clone();
    }
    container.secrets_missing = state
        .engine
        .secret_status(&row.id)
        .into_iter()
        .filter(|s| !s.held)
        .map(|s| s.name)
        .collect();
    Ok(container)
}

/// The images a container may be made from here: the engine's, and on a
/// cluster's node the object store's project images too.
pub(crate) async fn image_list(
    state: &AppState,
) -> ApiResult<Vec<shellgate_sandbox_api::image::ImageInfo>> {
    let local = crate::engine::images(&state.engine).await?;
    if crate::image_archives::archived(state) {
        // A cluster's node: the object store's project images too.
        return crate::image_archives::merged(state, local).await;
    }
    Ok(local)
}

/// Whether `project` may make containers from `image` (and see it): every
/// project may use the operator's images, only its own of those committed
/// from containers.
pub(crate) fn usable_by(image: &shellgate_sandbox_api::image::ImageInfo, project: &str) -> bool {
    image
        .details
        .project
        .as_deref()
        .is_none_or(|owner| owner == project)
}

/// The image a new container of `project` is made from: the one asked for
/// (a 400 naming the available ones if it is not there or not the
/// project's), else the server's default, else (the default not built yet)
/// `host`; and, for a cluster's project image, its copy on this node, kept
/// until the answer's hold is dropped (once the container is made).
pub(crate) async fn choose_image(
    state: &Arc<AppState>,
    project: &str,
    asked: Option<&str>,
) -> ApiResult<(String, Option<crate::image_archives::Held>)> {
    let usable: Vec<_> = image_list(state)
        .await?
        .into_iter()
        .filter(|image| usable_by(image, project))
        .collect();
    let available: Vec<String> = usable.iter().map(|image| image.name.clone()).collect();
    let host = shellgate_sandbox_api::image::HOST_IMAGE;
    match asked {
        Some(name) if available.iter().any(|a| a == name) => {
            // A cluster's project image this node does not hold yet is
            // fetched (the operator's are on every node's disk).
            let held = if usable
                .iter()
                .any(|image| image.name == name && image.details.project.is_some())
            {
                crate::image_archives::hold(state, name).await?
            } else {
                None
            };
            Ok((name.to_owned(), held))
        }
        Some(name) => Err(ApiError::invalid(
            "image",
            format!(
                "no image named {name:?}; available: {}",
                available.join(", ")
            ),
        )),
        None => {
            let default = &state.config.sandbox.default_image;
            if let Some(image) = usable.iter().find(|image| &image.name == default) {
                // A project's image may be the default too.
                let held = match image.details.project {
                    Some(_) => crate::image_archives::hold(state, default).await?,
                    None => None,
                };
                return Ok((default.clone(), held));
            }
            if default != host
                && !state
                    .default_image_missing_said
                    .swap(true, Ordering::Relaxed)
            {
                tracing::warn!(
                    "the default image {default:?} is not there yet: containers use {host:?} until \
                     it is (`shellgate image build {default}`)"
                );
            }
            Ok((host.to_owned(), None))
        }
    }
}

/// The project's container `id`, or 404.
pub(crate) async fn owned(
    state: &AppState,
    project: &Project,
    id: &str,
) -> ApiResult<ContainerRow> {
    let (project, key) = (project.0.clone(), id.to_owned());
    state
        .db(move |s| s.container(&project, &key))
        .await?
        .ok_or_else(|| ApiError::not_found("container", id))
}

/// The rows of `project`'s files `ids`; one missing (or another project's)
/// is a 404 naming `param` (`param[i]`).
pub(crate) async fn project_files(
    state: &AppState,
    project: &str,
    ids: &[String],
    param: &str,
) -> ApiResult<Vec<shellgate_store::FileRow>> {
    let (owner, keys) = (project.to_owned(), ids.to_vec());
    let rows = state
        .db(move |s| {
            keys.iter()
                .map(|key| s.file(&owner, key))
                .collect::<Result<Vec<_>, _>>()
        })
        .await?;
    rows.into_iter()
        .zip(ids)
        .enumerate()
        .map(|(index, (row, id))| {
            row.ok_or_else(|| {
                let mut error = ApiError::not_found("file", id);
                error.param = Some(format!("{param}[{index}]"));
                error
            })
        })
        .collect()
}

pub(crate) fn validate_create(
    config: &crate::config::Config,
    body: &CreateContainer,
) -> ApiResult<()> {
    if body.name.trim().is_empty() || body.name.chars().count() > MAX_NAME {
        return Err(ApiError::invalid(
            "name",
            format!("name must be 1 to {MAX_NAME} characters"),
        ));
    }
    if let Some(expires) = body.expires_after {
        if expires.minutes == 0 || expires.minutes > config.sandbox.max_expires_minutes {
            return Err(ApiError::invalid(
                "expires_after.minutes",
                format!(
                    "expires_after.minutes must be between 1 and {}",
                    config.sandbox.max_expires_minutes
                ),
            ));
        }
    }
    if body.file_ids.len() > 50 {
        return Err(ApiError::invalid(
            "file_ids",
            "at most 50 file_ids are allowed",
        ));
    }
    if body.skills.len() > 200 {
        return Err(ApiError::invalid(
            "skills",
            "at most 200 skills are allowed",
        ));
    }
    shellgate_wire::ports::check_exposed_ports(&body.exposed_ports)
        .map_err(|message| ApiError::invalid("exposed_ports", message))?;
    Ok(())
}

/// The row of a container about to be made (status `creating`): what the
/// request asked, with the server's defaults, and no secret values.
fn new_row(
    state: &AppState,
    project: &str,
    body: &CreateContainer,
    memory: shellgate_wire::MemoryLimit,
    image: &str,
    skills: &[crate::sandboxes::skills::Mounted],
    exposed_ports: Vec<u16>,
) -> ApiResult<ContainerRow> {
    // A token only where there are ports for it to open.
    let port_token = (!exposed_ports.is_empty()).then(|| new_id("sgpt_"));
    let now = now();
    Ok(ContainerRow {
        id: new_id("cntr_"),
        project: project.to_owned(),
        name: body.name.clone(),
        created_at: now,
        last_active_at: now,
        status: ContainerStatus::Creating,
        memory_limit: memory,
        expires_minutes: body
            .expires_after
            .map(|e| e.minutes)
            .unwrap_or(state.config.sandbox.default_expires_minutes),
        network_policy: serde_json::to_string(
            &body
                .network_policy
                .as_ref()
                .map(NetworkPolicy::without_secrets)
                .unwrap_or(NetworkPolicy::Disabled),
        )
        .map_err(|e| ApiError::internal(e.to_string()))?,
        skills: serde_json::to_string(
            &skills
                .iter()
                .map(crate::sandboxes::skills::Mounted::summary)
                .collect::<Vec<_>>(),
        )
        .map_err(|e| ApiError::internal(e.to_string()))?,
        file_ids: serde_json::to_string(&body.file_ids)
            .map_err(|e| ApiError::internal(e.to_string()))?,
        billed_seconds: 0.0,
        session_seconds: 0.0,
        session_open: false,
        image: image.to_owned(),
        sleep_after_secs: None,
        exposed_ports,
        port_token,
        node_id: state.node_name.clone(),
    })
}

/// Copies the project's `files` into a new container's `/mnt/data`, each a
/// row of the container's files (source `user`).
pub(crate) async fn put_files(
    state: &AppState,
    id: &str,
    files: &[shellgate_store::FileRow],
    now: i64,
) -> ApiResult<()> {
    for file in files {
        let path = format!("/mnt/data/{}", safe_file_name(&file.filename));
        let blob =
            crate::blobs::open_file(state.objects.as_ref(), &state.spool_dir, &file.id).await?;
        let bytes = state.engine.write_file_from(id, &path, blob).await?;
        let file_row = ContainerFileRow {
            id: new_id("cfile_"),
            container_id: id.to_owned(),
            path,
            bytes,
            source: FileSource::User,
            created_at: now,
        };
        state
            .db(move |s| s.upsert_container_file(&file_row))
            .await?;
    }
    Ok(())
}

/// Makes a container for `project`: the one path of `POST /v1/containers`
/// and of the Responses API's `container_auto` (same validation, quotas,
/// expiry and metering). Runs to completion once admitted.
pub(crate) async fn create_container(
    state: &Arc<AppState>,
    project: &str,
    mut body: CreateContainer,
) -> ApiResult<ContainerRow> {
    let snapshot = match body.snapshot_id.clone() {
        Some(id) => {
            let snapshot = crate::sandboxes::snapshot_source::owned_snapshot(state, project, &id)
                .await
                .map_err(|e| e.with_param("snapshot_id"))?;
            crate::sandboxes::snapshot_source::inherit(&mut body, &snapshot)?;
            Some(snapshot)
        }
        None => None,
    };
    create_container_from(state, project, body, snapshot.as_ref()).await
}

/// `create_container`, its disk filled from `snapshot` if given (whose
/// defaults `body` holds already).
pub(crate) async fn create_container_from(
    state: &Arc<AppState>,
    project: &str,
    body: CreateContainer,
    snapshot: Option<&shellgate_store::SnapshotRow>,
) -> ApiResult<ContainerRow> {
    let snapshot = snapshot.cloned();
    let project = Project(project.to_owned());
    validate_create(&state.config, &body)?;
    let network = crate::egress::network_spec(
        &state.config,
        body.network_policy.as_ref(),
        "network_policy",
    )?;
    // Every file must exist (in this project) before anything is made.
    let files = project_files(state, &project.0, &body.file_ids, "file_ids").await?;
    let memory = body.memory_limit.unwrap_or_default();
    // The image's copy on this node stays until the container is made.
    let (image, image_held) = choose_image(state, &project.0, body.image.as_deref()).await?;
    let skills =
        crate::sandboxes::skills::resolve(state, &project.0, &body.skills, "skills").await?;
    let exposed_ports = shellgate_wire::ports::check_exposed_ports(&body.exposed_ports)
        .map_err(|message| ApiError::invalid("exposed_ports", message))?;
    let (volume_binds, volume_rows) =
        crate::sandboxes::volumes::resolve_mounts(state, &project.0, &body.volumes, "volumes")
            .await?;
    let row = new_row(
        state,
        &project.0,
        &body,
        memory,
        &image,
        &skills,
        exposed_ports,
    )?;
    let now = row.created_at;
    // Impossible on this host (400) before over this project's quota (429).
    shellgate_sandbox_api::backend::check_memory(memory.bytes(), state.engine.memory_ceiling())?;
    // Run to completion whether or not the client stays: a create either
    // finishes (the container is listed) or cleans up after itself.
    let worker = Arc::clone(state);
    let id = row.id.clone();
    let volume_owner = project.0.clone();
    to_completion(async move {
        let state = worker;
        let _image_held = image_held;
        // The row first (status `creating`), written only if the project's
        // quotas admit it: a crash from here on is cleaned up at the next
        // start, never leaving a container the store does not know.
        state.admission.insert_container(row.clone()).await?;
        if !volume_rows.is_empty() {
            let (owner, id, mounts) = (volume_owner.clone(), row.id.clone(), volume_rows.clone());
            let attached = state
                .db(move |s| s.attach_volumes(&owner, &id, &mounts))
                .await
                .and_then(|attached| {
                    // Deleted since it was resolved: nothing is made.
                    attached.map_err(|gone| ApiError::not_found("volume", &gone))
                });
            if let Err(error) = attached {
                let id = row.id.clone();
                let _ = state.db(move |s| s.delete_container(&id)).await;
                return Err(error);
            }
        }
        // Unpacked beside the engine's directory; the engine adopts it.
        let skills_dir = state
            .config
            .server
            .data_dir
            .join("skill-mounts")
            .join(&row.id);
        let made = async {
            let spec = ContainerSpec {
                memory_bytes: memory.bytes(),
                cpu_cores: state.config.sandbox.container_cpu_ceiling(),
                network,
                image,
                skills: if skills.is_empty() {
                    None
                } else {
                    crate::sandboxes::skills::unpack(&skills, skills_dir.clone()).await?;
                    Some(skills_dir.clone())
                },
                volumes: volume_binds,
                ..ContainerSpec::default()
            };
            match &snapshot {
                Some(snapshot) => {
                    // In a cluster, fetched from the object store unless
                    // this node holds it, and kept while the disk is filled.
                    let _held = crate::snapshot_archives::hold(&state, snapshot).await?;
                    state
                        .engine
                        .create_from_snapshot(&row.id, spec, &snapshot.id)
                        .await?
                }
                None => state.engine.create(&row.id, spec).await?,
            };
            put_files(&state, &row.id, &files, now).await?;
            let id = row.id.clone();
            if !state.db(move |s| s.finish_creating(&id)).await? {
                // Its node (this one) was declared lost meanwhile: a
                // create the replicas gave up on is undone, not finished.
                return Err(ApiError::of(
                    ErrorCode::NodeStoppedAnswering,
                    "The node making this container stopped answering for a while; nothing \
                     was made. Try again.",
                )
                .with_retry_after(5));
            }
            Ok::<_, ApiError>(())
        }
        .await;
        if made.is_err() {
            // Not adopted by the engine: still the server's to remove.
            let dir = skills_dir.clone();
            let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(dir)).await;
        }
        if let Err(error) = made {
            destroy_quietly(state.engine.as_ref(), &row.id).await;
            let id = row.id.clone();
            let _ = state.db(move |s| s.delete_container(&id)).await;
            return Err(error);
        }
        Ok(())
    })
    .await?;
    owned(state, &project, &id).await
}

/// Replaces what a container may reach (empty: nothing), whether it runs
/// or is suspended: the list is checked as a create's, its proxy takes it
/// for every connection begun from now on (one open keeps going) and keeps
/// it with the container, then its row shows it. A container made without
/// network is a 409: it has no proxy to give a list to.
pub(crate) async fn update_network(
    state: &AppState,
    row: &ContainerRow,
    allowed_domains: Vec<String>,
) -> ApiResult<()> {
    let allowed_domains = if allowed_domains.is_empty() {
        Vec::new()
    } else {
        let asked = NetworkPolicy::Allowlist {
            allowed_domains,
            domain_secrets: Vec::new(),
            tls_passthrough_domains: Vec::new(),
        };
        crate::egress::network_spec(&state.config, Some(&asked), "network_policy")?.allowed_domains
    };
    // One update of a container at a time: the proxy's list and the
    // row's are written in the same order.
    let lock = state.named_lock(&format!("network\n{}", row.id));
    let _held = lock.lock().await;
    state
        .engine
        .update_network(&row.id, allowed_domains.clone())
        .await?;
    let shown = updated_policy(&network_policy(row), allowed_domains);
    let json = serde_json::to_string(&shown).map_err(|e| ApiError::internal(e.to_string()))?;
    let id = row.id.clone();
    state.db(move |s| s.set_network_policy(&id, &json)).await
}

/// A row's policy after an update to `allowed_domains`: nothing reachable
/// is shown as no network (and is what a snapshot or fork of it gets);
/// the names whose TLS passes untouched stay those still listed.
fn updated_policy(before: &NetworkPolicy, allowed_domains: Vec<String>) -> NetworkPolicy {
    if allowed_domains.is_empty() {
        return NetworkPolicy::Disabled;
    }
    let tls_passthrough_domains = match before {
        NetworkPolicy::Allowlist {
            tls_passthrough_domains,
            ..
        } => tls_passthrough_domains
            .iter()
            .filter(|name| allowed_domains.contains(name))
            .cloned()
            .collect(),
        NetworkPolicy::Disabled => Vec::new(),
    };
    NetworkPolicy::Allowlist {
        allowed_domains,
        domain_secrets: Vec::new(),
        tls_passthrough_domains,
    }
}

/// Removes a container: its processes, its files, its row (its time billed
/// first).
pub(crate) async fn remove_container(state: &Arc<AppState>, id: &str) -> ApiResult<()> {
    state.forget_owner(id);
    // An E2B sandbox's record goes with the row: its access check too, and
    // none lets it in while its processes are gone but its row is not.
    let _ending = state.e2b_access.end(id);
    state.e2b_signing.forget(id);
    destroy_quietly(state.engine.as_ref(), id).await;
    state.interpreters.forget_container(id);
    state.billing.flush().await;
    let key = id.to_owned();
    state.db(move |s| s.delete_container(&key)).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use shellgate_store::ContainerStatus;

    #[test]
    fn an_updated_policy_keeps_only_what_is_still_listed() {
        let before = NetworkPolicy::Allowlist {
            allowed_domains: vec!["a.test".into(), "b.test".into()],
            domain_secrets: Vec::new(),
            tls_passthrough_domains: vec!["b.test".into()],
        };
        assert_eq!(
            updated_policy(&before, vec!["a.test".into()]),
            NetworkPolicy::Allowlist {
                allowed_domains: vec!["a.test".into()],
                domain_secrets: Vec::new(),
                tls_passthrough_domains: Vec::new(),
            }
        );
        assert_eq!(
            updated_policy(&before, vec!["b.test".into()]),
            NetworkPolicy::Allowlist {
                allowed_domains: vec!["b.test".into()],
                domain_secrets: Vec::new(),
                tls_passthrough_domains: vec!["b.test".into()],
            }
        );
        assert_eq!(updated_policy(&before, Vec::new()), NetworkPolicy::Disabled);
    }

    fn row_with_skills(skills: &str) -> ContainerRow {
        ContainerRow {
            id: "cntr_1".to_owned(),
            project: "p".to_owned(),
            name: "x".to_owned(),
            created_at: 0,
            last_active_at: 0,
            status: ContainerStatus::Running,
            memory_limit: shellgate_wire::MemoryLimit::OneGb,
            expires_minutes: 20,
            network_policy: r#"{"type":"disabled"}"#.to_owned(),
            skills: skills.to_owned(),
            file_ids: "[]".to_owned(),
            billed_seconds: 0.0,
            session_seconds: 0.0,
            session_open: false,
            image: "host".to_owned(),
            sleep_after_secs: None,
            exposed_ports: Vec::new(),
            port_token: None,
            node_id: String::new(),
        }
    }

    #[test]
    fn a_rows_skills_are_its_mounted_ones_and_a_corrupt_row_is_an_error() {
        let row = row_with_skills(
            r#"[{"type":"inline","name":"old"},
                {"description":"d","name":"n","path":"/mnt/skills/n","skill_id":"skill_1","version":"2"}]"#,
        );
        let skills = container_object(&row).expect("the row reads").skills;
        assert_eq!(
            skills,
            vec![MountedSkill {
                description: "d".to_owned(),
                name: "n".to_owned(),
                path: "/mnt/skills/n".to_owned(),
                skill_id: Some("skill_1".to_owned()),
                version: Some("2".to_owned()),
            }]
        );
        // Mounted (it has a path) but not a mounted skill: not skipped.
        assert!(mounted_skills(&row_with_skills(r#"[{"path":"/mnt/skills/n"}]"#)).is_err());
        assert!(mounted_skills(&row_with_skills("not json")).is_err());
        assert!(mounted_skills(&row_with_skills("[]")).is_ok_and(|s| s.is_empty()));
    }
}
