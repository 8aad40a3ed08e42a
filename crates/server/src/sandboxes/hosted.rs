//! The hosted tools' container for one request of the Responses or the
//! Messages API: which container the model's commands run in, what the
//! model is told about it, and the sandbox time it used.
//!
//! Which container (seeds/004 for OpenRouter's tools):
//! - `container_reference`: that container of the project (404 if none);
//! - `container_auto` of OpenAI's `shell`: the container the conversation
//!   last used (a `shell_call`'s `container_reference`, from
//!   `previous_response_id`'s stored chain or replayed `input` items) while
//!   it lives, is this project's and was made with this request's
//!   parameters (network policy, skills, memory, image, files: as OpenAI's
//!   code interpreter's auto mode continues its container); else a new
//!   container, made at the first command (or at once, for attached files);
//! - `container_auto` of `openrouter:shell` / `openrouter:bash`: the
//!   container of the request's stable `session_id` (letters, digits, `_`
//!   and `-`; the last 20 characters; anything else is ignored), else the
//!   most recent container of the replayed conversation, else a new one. A
//!   session id keeps naming the same container until that container is
//!   gone; then the next request makes a new one for it.
//!
//! OpenAI's `code_interpreter` uses the same container (`auto` is a
//! `container_auto` of its `file_ids`, `memory_limit` and
//! `network_policy`; an id a `container_reference`); its code runs on the
//! container's kernel (`crate::sandboxes::interpreting`), billed as a command is.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde::Deserialize as _;
use serde_json::Value;
use shellgate_model::run::{
    Cell, CodeCall, FileMark, HostError, Interpretation, OutputFiles, Sandbox,
};
use shellgate_model::tools::{Environment, Tools};
use shellgate_sandbox_api::backend::{CommandResult, RunRequest};
use shellgate_wire::responses::ContainerAuto;
use shellgate_wire::{CreateContainer, MountedSkill};

use crate::error::{host_error, ApiError, ApiResult};
use crate::sandboxes::containers::create_container;
use crate::sandboxes::exec::Exec;
use crate::sandboxes::paused_cells::{CellOwner, Progress};
use crate::sandboxes::reuse::Reuse;
use crate::state::AppState;
use crate::time::now;

/// Whether a container was made with what a `container_auto` asks (the
/// network policy and skills are compared by [`HostedShell::reusable`]):
/// the same memory limit (none asked: the default), the image asked if one
/// is (none: whatever the container has, so a conversation begun while the
/// default image was still building keeps its files), and every file asked
/// among those it was made with, and every port asked exposed. Otherwise
/// the request gets a new container with what it asks, rather than one
/// that silently differs.
fn made_alike(row: &shellgate_store::ContainerRow, asked: &CreateContainer) -> bool {
    if asked.memory_limit.unwrap_or_default() != row.memory_limit {
        return false;
    }
    let exposed = |port: &u32| u16::try_from(*port).is_ok_and(|p| row.exposed_ports.contains(&p));
    if !asked.exposed_ports.iter().all(exposed) {
        return false;
    }
    if asked
        .image
        .as_ref()
        .is_some_and(|image| *image != row.image)
    {
        return false;
    }
    if asked.file_ids.is_empty() {
        return true;
    }
    // A column that does not read as ids holds none of them.
    let held: Vec<String> = serde_json::from_str(&row.file_ids).unwrap_or_default();
    asked.file_ids.iter().all(|id| held.contains(id))
}

/// The container of a `container_auto` environment, as `POST /v1/containers`
/// takes it (keys it does not name are not the container's: ignored).
fn auto_container(params: &ContainerAuto) -> CreateContainer {
    CreateContainer {
        name: "shell".to_owned(),
        file_ids: params.file_ids.clone().unwrap_or_default(),
        expires_after: None,
        skills: params.skills.clone().unwrap_or_default(),
        memory_limit: params.memory_limit,
        network_policy: params.network_policy.clone(),
        image: params.image.clone(),
        exposed_ports: params.exposed_ports.clone().unwrap_or_default(),
        volumes: Vec::new(),
        snapshot_id: None,
    }
}

/// The hosted tools of one request: their container, found or made on
/// first use, and the sandbox time it used.
pub struct HostedShell {
    state: Arc<AppState>,
    project: String,
    auto: Option<CreateContainer>,
    /// The skills the model is told of (`Mounted::summary`): a container
    /// continued must hold these.
    skills: Vec<MountedSkill>,
    reuse: Reuse,
    /// `Some`: OpenRouter's tools set the container's idle time before it
    /// sleeps (`None` inside: the server's).
    sleep_after: Option<Option<u64>>,
    container: tokio::sync::Mutex<Option<String>>,
    /// The response or message it serves (for the command audit).
    request: String,
    /// Seconds its commands took, and sessions it began (a new or woken
    /// container costs at least 30 s).
    time: Mutex<(f64, u32)>,
    /// Files API files to put into the container when it is first used
    /// (Anthropic's `container_upload` blocks).
    uploads: Mutex<Vec<shellgate_store::FileRow>>,
}

/// The hosted side of a request, checked: the sandbox (if a tool runs
/// there) and what the model is told about the shell's environment.
pub struct Hosted {
    pub sandbox: Option<Arc<HostedShell>>,
    pub description: String,
}

/// Checks the hosted tools' environment (the referenced container exists;
/// a `container_auto`'s policy, limits, image and skills are valid) and
/// sets up its sandbox. A container continued by [`Reuse`] keeps what it
/// was made with (its policy, files and skills: seeds/004, the policy is
/// fixed when the container starts).
pub async fn prepare(
    state: &Arc<AppState>,
    project: &str,
    tools: &Tools,
    reuse: Reuse,
    request: &str,
) -> ApiResult<Hosted> {
    let mut auto = None;
    let mut skills: Vec<MountedSkill> = Vec::new();
    let mut network = NetworkView::None;
    let environment = tools.hosted_environment().or(tools.shell.as_ref());
    match environment {
        Some(Environment::ContainerReference(id)) => {
            let (owner, key) = (project.to_owned(), id.clone());
            let row = state
                .db(move |s| s.container(&owner, &key))
                .await?
                .ok_or_else(|| ApiError::not_found("container", id))?;
            skills = crate::sandboxes::containers::mounted_skills(&row)?;
            network = ContainerPolicy::of_container(state, &row).view();
        }
        Some(Environment::ContainerAuto(params)) => {
            let body = auto_container(params);
            // A policy outside the organization allowlist fails the
            // request now (400), not the container when the model
            // first runs a command.
            crate::egress::network_spec(
                &state.config,
                body.network_policy.as_ref(),
                "tools.environment.network_policy",
            )?;
            network = ContainerPolicy::of_request(body.network_policy.as_ref()).view();
            crate::sandboxes::containers::validate_create(&state.config, &body)?;
            // Files too: one that is not this project's is this request's
            // 404, not a `server_error` when the container is made.
            crate::sandboxes::containers::project_files(
                state,
                project,
                &body.file_ids,
                "tools.environment.file_ids",
            )
            .await?;
            if body.image.is_some() {
                // Checked (and fetched) now; the container's create holds it.
                crate::sandboxes::containers::choose_image(state, project, body.image.as_deref())
                    .await?;
            }
            // Skills are checked now (a malformed entry or a hostile
            // bundle is this request's 400) and listed for the model.
            skills = crate::sandboxes::skills::resolve(
                state,
                project,
                &body.skills,
                "tools.environment.skills",
            )
            .await?
            .iter()
            .map(crate::sandboxes::skills::Mounted::summary)
            .collect();
            auto = Some(body);
        }
        Some(Environment::Local { .. }) | None => {}
    }
    let sandbox = tools.hosted_environment().is_some().then(|| {
        Arc::new(HostedShell {
            state: Arc::clone(state),
            project: project.to_owned(),
            auto,
            skills: skills.clone(),
            reuse,
            sleep_after: tools.openrouter().then_some(tools.sleep_after_seconds),
            container: tokio::sync::Mutex::new(None),
            request: request.to_owned(),
            time: Mutex::new((0.0, 0)),
            uploads: Mutex::new(Vec::new()),
        })
    });
    // A reused container's policy is the request's (one that differs gets
    // a new container, see `find_or_make`), so this is the policy of the
    // container the commands actually run in.
    let description = environment
        .map(|e| describe(e, &network, &skills))
        .unwrap_or_default();
    Ok(Hosted {
        sandbox,
        description,
    })
}

impl HostedShell {
    /// Sandbox seconds to bill for this request.
    pub fn billed_seconds(&self) -> f64 {
        let (seconds, sessions) = *self.time.lock().unwrap_or_else(|p| p.into_inner());
        seconds.max(shellgate_store::SESSION_MINIMUM_SECONDS * f64::from(sessions))
    }

    /// Puts `files` into the container (its `/mnt/data`, each under its
    /// name) when the request first uses it.
    pub fn upload(&self, files: Vec<shellgate_store::FileRow>) {
        self.uploads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(files);
    }

    /// The container, if one was found or made.
    pub async fn container_id(&self) -> Option<String> {
        self.container.lock().await.clone()
    }

    /// The cell `cell` this request runs in `container`.
    fn owner(&self, container: &str, cell: &str) -> CellOwner {
        CellOwner {
            cell: cell.to_owned(),
            container: container.to_owned(),
            project: self.project.clone(),
        }
    }

    fn add(&self, seconds: f64, session: bool) {
        let mut time = self.time.lock().unwrap_or_else(|p| p.into_inner());
        time.0 += seconds;
        time.1 += u32::from(session);
    }

    /// Whether the project still has container `id` and its network policy
    /// is this request's: a request whose policy differs (other domains,
    /// other secrets, secrets it supplies that the container no longer
    /// holds, or none where the container has some) gets a new container
    /// rather than one that would reach what it did not ask for.
    /// With `all_parameters` (OpenAI's `shell`), its memory limit, image
    /// and files must be the request's too ([`made_alike`]). Another
    /// project's container is not found: never reused, never an error.
    async fn reusable(&self, id: &str, all_parameters: bool) -> Result<bool, HostError> {
        use shellgate_store::ContainerStatus;
        let (owner, key) = (self.project.clone(), id.to_owned());
        let row = self
            .state
            .db(move |s| s.container(&owner, &key))
            .await
            .map_err(host_error)?;
        // Running or asleep (the command wakes it); not one being made or
        // deleted.
        let Some(row) = row.filter(|r| {
            matches!(
                r.status,
                ContainerStatus::Running | ContainerStatus::Suspended
            )
        }) else {
            return Ok(false);
        };
        if all_parameters
            && !self
                .auto
                .as_ref()
                .is_some_and(|asked| made_alike(&row, asked))
        {
            tracing::info!(container = %id, "not continued: the request's container_auto asks another memory limit, image or files");
            return Ok(false);
        }
        let requested = self.auto.as_ref().and_then(|a| a.network_policy.as_ref());
        let asked = ContainerPolicy::of_request(requested);
        let found = ContainerPolicy::of_container(&self.state, &row);
        if found.domains != asked.domains
            || found.secrets != asked.secrets
            || found.passthrough != asked.passthrough
        {
            return Ok(false);
        }
        // Nor other skills than the model is told of.
        let held = crate::sandboxes::containers::mounted_skills(&row).map_err(host_error)?;
        if skill_keys(&held) != skill_keys(&self.skills) {
            return Ok(false);
        }
        // The same names, and the same values: a request giving another
        // value under a name gets a container that uses its value.
        let supplied: Vec<shellgate_egress::secrets::DomainSecret> = match requested {
            Some(shellgate_wire::NetworkPolicy::Allowlist { domain_secrets, .. }) => domain_secrets
                .iter()
                .map(|s| shellgate_egress::secrets::DomainSecret {
                    domain: shellgate_egress::policy::normalize(&s.domain),
                    name: s.name.clone(),
                    placeholder: String::new(),
                    value: Some(shellgate_egress::secrets::SecretValue::new(
                        s.value.as_str(),
                    )),
                    ..Default::default()
                })
                .collect(),
            _ => Vec::new(),
        };
        if !self.state.engine.secrets_match(id, &supplied) {
            return Ok(false);
        }
        if found.missing.is_empty() {
            return Ok(true);
        }
        // The same policy, but the server restarted since the container got
        // its secrets: the request's values (the ones it was made with) are
        // supplied again; if it is busy, a new container.
        match self.state.engine.supply_secrets(id, supplied).await {
            Ok(()) => {
                if row.session_open {
                    let key = id.to_owned();
                    self.state
                        .db(move |s| {
                            s.close_session(&key, shellgate_store::ContainerStatus::Suspended)
                        })
                        .await
                        .map_err(host_error)?;
                }
                Ok(true)
            }
            Err(e) => {
                tracing::info!(container = %id, "not reused: its secrets could not be supplied again: {e}");
                Ok(false)
            }
        }
    }

    /// Makes the `container_auto` container.
    async fn make(&self) -> Result<String, HostError> {
        let Some(body) = &self.auto else {
            return Err(HostError {
                code: "server_error",
                message: "this request has no hosted shell".into(),
            });
        };
        let made = create_container(&self.state, &self.project, body.clone())
            .await
            .map_err(host_error)?;
        self.add(0.0, true);
        Ok(made.id)
    }

    /// The container the commands run in, as [`Reuse`] says: the
    /// referenced one, or a `container_auto` container continued or made.
    async fn find_or_make(&self) -> Result<String, HostError> {
        match &self.reuse {
            Reuse::Fresh => self.make().await,
            // Not a `container_auto`: the reference is the container.
            Reuse::Referenced(id) => Ok(id.clone()),
            Reuse::Replayed(id) | Reuse::Continued(id) => {
                let all_parameters = matches!(self.reuse, Reuse::Continued(_));
                if self.reusable(id, all_parameters).await? {
                    Ok(id.clone())
                } else {
                    self.make().await
                }
            }
            Reuse::Session(key) => {
                let (owner, session) = (self.project.clone(), key.clone());
                let mapped = self
                    .state
                    .db(move |s| s.session_container(&owner, &session))
                    .await
                    .map_err(host_error)?;
                if let Some(id) = &mapped {
                    if self.reusable(id, false).await? {
                        return Ok(id.clone());
                    }
                }
                let made = self.make().await?;
                let (owner, session, container) = (self.project.clone(), key.clone(), made.clone());
                let winner = self
                    .state
                    .db(move |s| s.claim_session(&owner, &session, &container, mapped.as_deref()))
                    .await
                    .map_err(host_error)?;
                if winner != made {
                    // A concurrent request of the same session made its
                    // container first: use that one, drop ours.
                    let _ =
                        crate::sandboxes::containers::remove_container(&self.state, &made).await;
                }
                Ok(winner)
            }
        }
    }
}

#[async_trait]
impl Sandbox for HostedShell {
    async fn container(&self) -> Result<String, HostError> {
        let mut container = self.container.lock().await;
        if let Some(id) = container.as_ref() {
            return Ok(id.clone());
        }
        let id = self.find_or_make().await?;
        let uploads = std::mem::take(&mut *self.uploads.lock().unwrap_or_else(|p| p.into_inner()));
        if !uploads.is_empty() {
            crate::sandboxes::containers::put_files(&self.state, &id, &uploads, now())
                .await
                .map_err(host_error)?;
        }
        if let Some(seconds) = self.sleep_after {
            let key = id.clone();
            self.state
                .db(move |s| s.set_sleep_after(&key, seconds))
                .await
                .map_err(host_error)?;
        }
        *container = Some(id.clone());
        Ok(id)
    }

    async fn run(
        &self,
        container: &str,
        mut request: RunRequest,
        deltas: Option<shellgate_sandbox_api::backend::DeltaSink>,
    ) -> Result<Vec<CommandResult>, HostError> {
        let state = &self.state;
        request.deadline_ms = Some(
            state
                .config
                .sandbox
                .request_deadline_secs
                .saturating_mul(1000),
        );
        let exec = Exec::admit(state, &self.project, container)
            .await
            .map_err(host_error)?
            .in_response(&self.request);
        let woke = exec.woke();
        let started = std::time::Instant::now();
        // Cancelled with the request: the commands are killed and their
        // time until then billed.
        let result = exec.run(request, deltas).await;
        self.add(started.elapsed().as_secs_f64(), woke);
        result.map_err(host_error)
    }

    /// Runs `code` on `container`'s kernel, interrupted after `timeout`
    /// (`interpreting::interpret_within`), its time added to this request's.
    async fn interpret_within(
        &self,
        container: &str,
        code: &str,
        timeout: std::time::Duration,
    ) -> Result<(Interpretation, shellgate_model::run::Ended), HostError> {
        let started = std::time::Instant::now();
        let (interpretation, ended, woke) = crate::sandboxes::interpreting::interpret_within(
            &self.state,
            &self.project,
            &self.request,
            container,
            code,
            timeout,
        )
        .await?;
        self.add(started.elapsed().as_secs_f64(), woke);
        Ok((interpretation, ended))
    }

    /// Runs a cell calling the client's tools
    /// (`interpreting::interpret_calling`), its time until it ends or
    /// pauses added to this request's.
    async fn interpret_calling(
        &self,
        container: &str,
        cell: &str,
        code: &str,
        tools: &[shellgate_model::tools::CodeTool],
        timeout: Option<std::time::Duration>,
    ) -> Result<Cell, HostError> {
        let started = std::time::Instant::now();
        let tools = tools
            .iter()
            .map(|tool| shellgate_interpreter::CodeTool {
                name: tool.name.clone(),
                params: tool.params.clone(),
                description: (!tool.description.is_empty()).then(|| tool.description.clone()),
                refused: tool.refused.clone(),
            })
            .collect();
        let (progress, woke) = crate::sandboxes::interpreting::interpret_calling(
            &self.state,
            self.owner(container, cell),
            &self.request,
            code,
            tools,
            timeout.unwrap_or(crate::sandboxes::interpreting::TIMEOUT),
        )
        .await?;
        self.add(started.elapsed().as_secs_f64(), woke);
        Ok(cell_of(progress))
    }

    /// Resumes a paused cell (`interpreting::resume`), its time until it
    /// ends or pauses again added to this request's.
    async fn resume_cell(
        &self,
        container: &str,
        cell: &str,
        answers: &[shellgate_model::tools::ToolAnswer],
    ) -> Result<Cell, HostError> {
        let started = std::time::Instant::now();
        let progress = crate::sandboxes::interpreting::resume(
            &self.state,
            self.owner(container, cell),
            answers,
        )
        .await?;
        self.add(started.elapsed().as_secs_f64(), false);
        Ok(cell_of(progress))
    }

    async fn mark_files(&self, container: &str) -> Result<FileMark, HostError> {
        crate::sandboxes::interpreting::listing(&self.state, container)
            .await
            .map(FileMark)
    }

    /// Each file created or changed since `mark` (at most
    /// `MAX_CITED_FILES`, by path), stored as a Files API file; one whose
    /// name holds a secret's value is left out, as listings leave it out.
    async fn output_files(
        &self,
        container: &str,
        mark: &FileMark,
    ) -> Result<OutputFiles, HostError> {
        use crate::sandboxes::interpreting::{changed, listing, MAX_CITED_FILES};
        let state = &self.state;
        let after = listing(state, container).await?;
        let mut paths = changed(&mark.0, &after);
        paths.truncate(MAX_CITED_FILES);
        let masker = state.engine.masker(container);
        let limit = state.config.server.max_upload_bytes as u64;
        let mut written = OutputFiles::default();
        for path in paths {
            if masker
                .as_ref()
                .is_some_and(|m| m.mask(path.as_bytes()) != path.as_bytes())
            {
                continue;
            }
            if after.get(&path).is_some_and(|(bytes, _)| *bytes > limit) {
                written.too_large = true;
                continue;
            }
            let file = match state.engine.open_file(container, &path).await {
                Ok(file) => file,
                // Removed since the listing: nothing to store.
                Err(shellgate_sandbox_api::SandboxError::FileNotFound(_)) => continue,
                Err(e) => return Err(host_error(crate::engine::engine_error(container, e))),
            };
            let row = crate::sandboxes::files::store_container_file(
                state,
                &self.project,
                container,
                &path,
                file,
            )
            .await
            .map_err(host_error)?;
            written.file_ids.push(row.id);
        }
        Ok(written)
    }

    /// Runs `code` on `container`'s kernel within the request's deadline
    /// (`request_deadline_secs`), as a command is: a cell past it is
    /// interrupted and its interpretation says it timed out.
    async fn interpret(&self, container: &str, code: &str) -> Result<Interpretation, HostError> {
        let deadline =
            std::time::Duration::from_secs(self.state.config.sandbox.request_deadline_secs);
        let started = std::time::Instant::now();
        let (interpretation, _, woke) = crate::sandboxes::interpreting::interpret_within(
            &self.state,
            &self.project,
            &self.request,
            container,
            code,
            deadline.min(crate::sandboxes::interpreting::TIMEOUT),
        )
        .await?;
        self.add(started.elapsed().as_secs_f64(), woke);
        Ok(interpretation)
    }
}

/// A cell's progress as the loop sees it.
fn cell_of(progress: Progress) -> Cell {
    match progress {
        Progress::Done(interpretation) => Cell::Done(interpretation),
        Progress::Paused(calls) => Cell::Paused(
            calls
                .into_iter()
                .map(|call| CodeCall {
                    id: call.id,
                    name: call.name,
                    input: call.input,
                })
                .collect(),
        ),
        Progress::Gone => Cell::Gone,
    }
}

/// A container's network policy as it decides reuse and what the model is
/// told: its domains and its secrets (domain, name), normalized; secrets
/// whose values this server no longer holds count as none (the network of
/// such a container is off).
#[derive(Debug, Clone, PartialEq, Eq)]
struct ContainerPolicy {
    domains: std::collections::BTreeSet<String>,
    /// (domain, name) → scope key: a secret put into other requests
    /// (parts, methods, paths) is another policy.
    secrets: std::collections::BTreeMap<(String, String), String>,
    /// Names whose TLS is not terminated.
    passthrough: std::collections::BTreeSet<String>,
    /// Secrets whose values are gone (the server restarted).
    missing: Vec<String>,
}

/// What tells skills apart (`Mounted::summary`'s name, source and
/// description), in order of name (a container's names are distinct).
fn skill_keys(skills: &[MountedSkill]) -> Vec<(&str, Option<&str>, Option<&str>, &str)> {
    let mut keys: Vec<_> = skills
        .iter()
        .map(|skill| {
            (
                skill.name.as_str(),
                skill.skill_id.as_deref(),
                skill.version.as_deref(),
                skill.description.as_str(),
            )
        })
        .collect();
    keys.sort_unstable();
    keys
}

/// The scope key of a secret as a request gives it (see
/// `shellgate_egress::secrets::scope_key`).
fn request_scope(secret: &shellgate_wire::DomainSecret) -> String {
    use shellgate_egress::secrets::InjectInto;
    let inject: Vec<InjectInto> = secret
        .inject
        .iter()
        .flatten()
        .map(|part| match part {
            shellgate_wire::InjectInto::Header => InjectInto::Header,
            shellgate_wire::InjectInto::Query => InjectInto::Query,
            shellgate_wire::InjectInto::Body => InjectInto::Body,
        })
        .collect();
    shellgate_egress::secrets::scope_key(
        &inject,
        secret.methods.as_deref().unwrap_or_default(),
        secret.paths.as_deref().unwrap_or_default(),
    )
}

/// What the model is told about the network.
enum NetworkView {
    None,
    Allowlist(Vec<String>),
    /// Off until the client supplies these secrets' values again.
    SecretsMissing(Vec<String>),
}

impl ContainerPolicy {
    fn of_request(policy: Option<&shellgate_wire::NetworkPolicy>) -> Self {
        use shellgate_egress::policy::normalize;
        let (domains, secrets, passthrough) = match policy {
            Some(shellgate_wire::NetworkPolicy::Allowlist {
                allowed_domains,
                domain_secrets,
                tls_passthrough_domains,
            }) => (
                allowed_domains.iter().map(|d| normalize(d)).collect(),
                domain_secrets
                    .iter()
                    .map(|s| ((normalize(&s.domain), s.name.clone()), request_scope(s)))
                    .collect(),
                tls_passthrough_domains
                    .iter()
                    .map(|d| normalize(d))
                    .collect(),
            ),
            _ => Default::default(),
        };
        Self {
            domains,
            secrets,
            passthrough,
            missing: Vec::new(),
        }
    }

    fn of_container(state: &AppState, row: &shellgate_store::ContainerRow) -> Self {
        let shown = crate::sandboxes::containers::network_policy(row);
        let mut policy = Self::of_request(Some(&shown));
        for secret in state.engine.secret_status(&row.id) {
            policy
                .secrets
                .insert((secret.domain.clone(), secret.name.clone()), secret.scope);
            if !secret.held {
                policy.missing.push(secret.name);
            }
        }
        policy
    }

    fn view(&self) -> NetworkView {
        if !self.missing.is_empty() {
            NetworkView::SecretsMissing(self.missing.clone())
        } else if self.domains.is_empty() {
            NetworkView::None
        } else {
            NetworkView::Allowlist(self.domains.iter().cloned().collect())
        }
    }
}

/// What the model is told about the shell's environment: `network` is the
/// policy of the container it runs in, `mounted` its skills (as the
/// container object lists them).
fn describe(environment: &Environment, network: &NetworkView, mounted: &[MountedSkill]) -> String {
    match environment {
        Environment::Local { skills } => {
            let mut text = "Runs shell commands on the user's own machine: the user's client runs \
                            them and sends back their output."
                .to_owned();
            list_skills(&mut text, local_skills(skills));
            text
        }
        _ => {
            let mut text = String::from(
                "Runs shell commands in a persistent, isolated Linux container (Debian-like) as \
                 an unprivileged user without sudo. The working directory is /mnt/data: files the \
                 user provides are there, and files to give back to the user go there. Each \
                 command runs with bash -c; the commands of one call run in order, and the \
                 container (its files and background processes) persists between calls. There \
                 is no TTY: commands must not wait for input.",
            );
            match network {
                NetworkView::Allowlist(domains) => text.push_str(&format!(
                    " Network access is limited to: {}.",
                    domains.join(", ")
                )),
                NetworkView::SecretsMissing(names) => text.push_str(&format!(
                    " There is no network access: it is off until the user supplies the \
                     secrets {} again.",
                    names.join(", ")
                )),
                NetworkView::None => text.push_str(" There is no network access."),
            }
            list_skills(
                &mut text,
                mounted.iter().map(|skill| SkillListing {
                    name: skill.name.as_str(),
                    description: skill.description.as_str(),
                    path: skill.path.as_str(),
                }),
            );
            text
        }
    }
}

/// A skill as the model is told of it.
#[derive(serde::Deserialize)]
struct SkillListing<'a> {
    name: &'a str,
    description: &'a str,
    path: &'a str,
}

/// The skills of a `local` environment (the client's machine), as its
/// request gives them: one that does not read as a name, description and
/// path is left out on purpose, as it always was (the model is told of
/// the ones it can use; the client's own list is not checked here).
fn local_skills(skills: &[Value]) -> impl Iterator<Item = SkillListing<'_>> {
    skills
        .iter()
        // An object: serde would read a struct from an array too.
        .filter(|skill| skill.is_object())
        .filter_map(|skill| SkillListing::deserialize(skill).ok())
}

/// Appends the skills the shell has: name, path and description (what
/// OpenAI's skill discovery shows the model); the model reads a skill's
/// `SKILL.md` before it uses it.
fn list_skills<'a>(text: &mut String, skills: impl IntoIterator<Item = SkillListing<'a>>) {
    let mut listed = skills.into_iter().peekable();
    if listed.peek().is_none() {
        return;
    }
    text.push_str(
        "\n\nSkills are available: each is a folder with a SKILL.md to read (cat it) before \
         using the skill, and the scripts or references it names.",
    );
    for SkillListing {
        name,
        description,
        path,
    } in listed
    {
        text.push_str(&format!("\n- {name} ({path}/SKILL.md): {description}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shellgate_wire::responses::Item;

    fn mounted(name: &str, version: Option<&str>) -> MountedSkill {
        MountedSkill {
            description: "d".to_owned(),
            name: name.to_owned(),
            path: format!("/mnt/skills/{name}"),
            skill_id: version.map(|_| "skill_1".to_owned()),
            version: version.map(str::to_owned),
        }
    }

    fn tools(json: Value) -> Tools {
        let typed: Vec<shellgate_wire::responses::Tool> =
            serde_json::from_value(json).expect("tools");
        Tools::parse(&typed).expect("parsed tools")
    }

    fn auto_shell(environment: Value) -> Tools {
        let mut environment = environment;
        environment["type"] = "container_auto".into();
        tools(serde_json::json!([{"type": "shell", "environment": environment}]))
    }

    /// A conversation whose shell call ran in `container`.
    fn ran_in(container: &str) -> Vec<Item> {
        serde_json::from_value(serde_json::json!([
            {"type": "message", "role": "user", "content": "Execute: ls"},
            {"type": "shell_call", "call_id": "call_1", "status": "completed",
             "action": {"commands": ["ls"]},
             "environment": {"type": "container_reference", "container_id": container}},
            {"type": "shell_call_output", "call_id": "call_1",
             "output": [{"stdout": "", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}]},
        ]))
        .expect("items")
    }

    #[test]
    fn openais_shell_continues_the_conversations_last_container() {
        let shell = auto_shell(serde_json::json!({}));
        assert_eq!(Reuse::pick(&shell, None, &[]), Reuse::Fresh);
        let mut items = ran_in("cntr_first");
        items.extend(ran_in("cntr_last"));
        assert_eq!(
            Reuse::pick(&shell, None, &items),
            Reuse::Continued("cntr_last".into())
        );
        // A session id still names its own container.
        assert_eq!(
            Reuse::pick(&shell, Some("s-1"), &items),
            Reuse::Session("s-1".into())
        );
        let openrouter = tools(serde_json::json!([{"type": "openrouter:shell"}]));
        assert_eq!(
            Reuse::pick(&openrouter, None, &items),
            Reuse::Replayed("cntr_last".into())
        );
    }

    fn row(memory: &str, image: &str, file_ids: &str) -> shellgate_store::ContainerRow {
        shellgate_store::ContainerRow {
            id: "cntr_1".into(),
            project: "alpha".into(),
            name: "shell".into(),
            created_at: 0,
            last_active_at: 0,
            status: shellgate_store::ContainerStatus::Running,
            memory_limit: shellgate_wire::MemoryLimit::parse(memory).expect("memory"),
            expires_minutes: 20,
            network_policy: "{}".into(),
            skills: "[]".into(),
            file_ids: file_ids.into(),
            billed_seconds: 0.0,
            session_seconds: 0.0,
            session_open: true,
            image: image.into(),
            sleep_after_secs: None,
            exposed_ports: Vec::new(),
            port_token: None,
            node_id: String::new(),
        }
    }

    fn asked(environment: Value) -> CreateContainer {
        let mut environment = environment;
        environment["type"] = "container_auto".into();
        auto_container(&serde_json::from_value(environment).expect("container_auto"))
    }

    #[test]
    fn a_container_is_continued_only_if_made_with_what_the_request_asks() {
        let made = row("1g", "debian-12", r#"["file_a","file_b"]"#);
        assert!(made_alike(&made, &asked(serde_json::json!({}))));
        assert!(made_alike(
            &made,
            &asked(
                serde_json::json!({"memory_limit": "1g", "image": "debian-12",
                                       "file_ids": ["file_b"]})
            )
        ));
        for other in [
            serde_json::json!({"memory_limit": "4g"}),
            serde_json::json!({"image": "host"}),
            serde_json::json!({"file_ids": ["file_a", "file_c"]}),
            serde_json::json!({"exposed_ports": [8000]}),
        ] {
            assert!(!made_alike(&made, &asked(other.clone())), "{other}");
        }
        let mut serving = row("1g", "debian-12", "[]");
        serving.exposed_ports = vec![8000, 3000];
        assert!(made_alike(
            &serving,
            &asked(serde_json::json!({"exposed_ports": [3000]}))
        ));
        // No memory limit asked is the default one.
        assert!(!made_alike(
            &row("4g", "debian-12", "[]"),
            &asked(serde_json::json!({}))
        ));
    }

    /// The container the hosted shell of a request of `project` with these
    /// tools and this conversation runs its commands in.
    async fn container_for(
        harness: &crate::testing::Harness,
        project: &str,
        tools: &Tools,
        items: &[Item],
    ) -> String {
        let reuse = Reuse::pick(tools, None, items);
        let hosted = prepare(&harness.state, project, tools, reuse, "resp_test")
            .await
            .expect("prepared");
        hosted
            .sandbox
            .expect("a hosted shell")
            .container()
            .await
            .expect("a container")
    }

    #[tokio::test]
    async fn container_auto_continues_the_projects_living_container_only() {
        let harness = crate::testing::Harness::with_config(|config| {
            config.egress.egress = true;
            config.egress.egress_allowed_domains = "*.example.com".into();
        });
        let mine = harness.container("mine").await;
        let shell = auto_shell(serde_json::json!({}));
        assert_eq!(
            container_for(&harness, "alpha", &shell, &ran_in(&mine)).await,
            mine
        );
        // Another project naming it in a replayed item gets a container of
        // its own, and this one is left alone.
        let theirs = container_for(&harness, "beta", &shell, &ran_in(&mine)).await;
        assert_ne!(theirs, mine);
        let key = theirs.clone();
        let row = harness
            .state
            .db(move |s| s.container("beta", &key))
            .await
            .unwrap();
        assert!(row.is_some_and(|r| r.project == "beta"));
        // Other parameters: a new container with them.
        let bigger = auto_shell(serde_json::json!({"memory_limit": "4g"}));
        let other = container_for(&harness, "alpha", &bigger, &ran_in(&mine)).await;
        assert_ne!(other, mine);
        // A network the container was made without is never added to it by
        // a follow-up: a new container has it.
        let networked = auto_shell(serde_json::json!({"network_policy": {
            "type": "allowlist", "allowed_domains": ["pypi.example.com"]}}));
        let online = container_for(&harness, "alpha", &networked, &ran_in(&mine)).await;
        assert!(online != mine && online != other, "{online}");
        // And the networked one is continued only with its own policy.
        assert_ne!(
            container_for(&harness, "alpha", &shell, &ran_in(&online)).await,
            online
        );
        assert_eq!(
            container_for(&harness, "alpha", &networked, &ran_in(&online)).await,
            online
        );
        // Asleep, it is continued (its next command wakes it).
        let active = harness.get(&format!("/v1/containers/{mine}")).await.ok()["last_active_at"]
            .as_i64()
            .unwrap();
        harness.clock.set(active + 5 * 60);
        crate::lifecycle::sweep(&harness.state).await.unwrap();
        let status = harness.get(&format!("/v1/containers/{mine}")).await;
        assert_eq!(status.ok()["status"], "suspended");
        assert_eq!(
            container_for(&harness, "alpha", &shell, &ran_in(&mine)).await,
            mine
        );
        // Deleted, it is not: a new one, no error.
        harness.delete(&format!("/v1/containers/{mine}")).await.ok();
        let after = container_for(&harness, "alpha", &shell, &ran_in(&mine)).await;
        assert!(after != mine && after.starts_with("cntr_"), "{after}");
    }

    #[test]
    fn skills_are_the_same_in_any_order_and_differ_by_version() {
        let held = [mounted("a", Some("1")), mounted("b", None)];
        let asked = [mounted("b", None), mounted("a", Some("1"))];
        assert_eq!(skill_keys(&held), skill_keys(&asked));
        let other = [mounted("b", None), mounted("a", Some("2"))];
        assert_ne!(skill_keys(&held), skill_keys(&other));
    }

    #[test]
    fn a_local_skill_that_is_not_name_description_path_is_left_out() {
        let skills = vec![
            serde_json::json!({"name": "x", "description": "does x", "path": "/s/x", "extra": 1}),
            serde_json::json!({"name": "y", "description": "no path"}),
            serde_json::json!(["z", "an array", "/s/z"]),
        ];
        let mut text = String::new();
        list_skills(&mut text, local_skills(&skills));
        assert!(text.ends_with("\n- x (/s/x/SKILL.md): does x"), "{text}");
        assert!(!text.contains("- y") && !text.contains("- z"), "{text}");
        let mut none = String::new();
        list_skills(&mut none, local_skills(&skills[1..]));
        assert!(none.is_empty());
    }
}
