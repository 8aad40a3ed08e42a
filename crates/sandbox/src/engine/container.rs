//! One container's state: its processes (a [`Running`] init, or none while
//! stopped), what is in flight in it, and how the engine reaches its files.
//!
//! Everything that starts, stops or destroys a container decides under its
//! state lock, and so does everything that counts a command or file
//! operation in flight: "busy" has exactly one meaning.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::sync::watch;

use super::lock;
use super::slots::{DiskIds, SlotLease};
use shellgate_egress::secrets::{DomainSecret, Masker};

use crate::backend::ContainerSpec;
use crate::cgroup::{LimitCounters, LimitEvents};
use crate::error::{IoContext, SandboxError};
use crate::protocol::Request;
use crate::sys;

/// How long a container's init has, once told to stop, to end its
/// processes and exit before it is killed (see [`Running::shut_down`]).
pub(super) const STOP_PATIENCE: Duration = Duration::from_secs(2);

/// How long a stopped container's file view is kept for further requests.
pub(super) const VIEW_LIFETIME: Duration = Duration::from_secs(30);

/// A started container: its init and the channel to it.
pub(super) struct Running {
    /// Shared with the watcher of init (see `lifecycle`), which learns of
    /// init's exit from it: init's end closes only when init exits.
    pub control: Arc<AsyncFd<OwnedFd>>,
    /// Init, the engine's child: until the watcher reaps it (and says so
    /// under `reaped`'s lock) this pid names init and no other process, so
    /// the engine holds no pidfd per container (each live container costs
    /// descriptors of the server's limited number).
    pub init_pid: i32,
    pub reaped: Arc<Mutex<bool>>,
    /// The container's cgroup (see `launcher`).
    pub slot: String,
    pub exited: watch::Receiver<bool>,
    /// `/mnt/data` as the engine reaches it (see `files`): as init opened
    /// it, or, for a disk shown through an idmapped mount, the disk's own
    /// `data` beneath that mount (see `helper`).
    pub data: super::mount_hold::MountHold,
    /// Who owns what the engine makes through `data`, in the ids `data`
    /// shows (the sandbox user's).
    pub data_owner: (u32, u32),
    /// The host id range leased for this run (see `slots`); `None` when
    /// the range is the container's for good.
    pub id_lease: Option<SlotLease>,
    /// Its cgroup's counters, and the values already reported (see
    /// `command`).
    pub counters: LimitCounters,
    pub limits_seen: Mutex<LimitEvents>,
    /// The kernel's count of failed forks when the last command started
    /// (see `command`'s `reclaim`).
    pub forks_failed_at_last_start: std::sync::atomic::AtomicU64,
    /// The egress proxy serving this container's sockets, while it runs.
    pub egress: Option<shellgate_egress::proxy::Serving>,
    /// The last number given to a command (init knows commands by it).
    pub commands: std::sync::atomic::AtomicU32,
    /// When this start began: its cgroup's CPU time is since then.
    pub started: std::time::Instant,
    /// The process's descriptors this run holds (see `descriptors`).
    pub _descriptors: super::descriptors::DescriptorHold,
}

impl Running {
    pub fn alive(&self) -> bool {
        !*self.exited.borrow()
    }

    /// The refusals of its egress proxy, for the commands that run (see
    /// `command`); `None` without network.
    pub fn denials(&self) -> Option<&shellgate_egress::denials::Denials> {
        self.egress.as_ref().map(|serving| serving.denials())
    }

    /// A number for the next command, unique while this init lives.
    pub fn next_command(&self) -> u32 {
        self.commands
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            .wrapping_add(1)
    }

    /// Whether init should first end what no running command holds (see
    /// init's `reclaim`) before the next command or process starts; counts
    /// this start as the last one.
    ///
    /// Forks failed at the process limit since the last command started:
    /// what it or an earlier one left running may still hold the container
    /// at its limit (a fork bomb), and this command could not start bash's
    /// pipelines. The kernel's count of failed forks only grows, so this
    /// does not depend on when the container's process count is sampled: a
    /// bomb's count dips below its limit between forks, and a command
    /// started in such a dip would retry its own forks until it timed out.
    /// Counted from the last start, not its end: a bomb that reached the
    /// limit while its own command still ran may fail no fork between that
    /// end and this start (bash's fork retries sleep), and is there all the
    /// same. A container merely busy near its limit (no failed forks) is
    /// left alone.
    pub fn reclaim_due(&self) -> bool {
        let failed_forks = self.counters.events().pids_max;
        failed_forks
            > self
                .forks_failed_at_last_start
                .swap(failed_forks, std::sync::atomic::Ordering::Relaxed)
    }

    /// Sends one request, with descriptors attached.
    pub async fn send(&self, request: &Request, fds: &[&OwnedFd]) -> Result<(), SandboxError> {
        let bytes = request.encode();
        let raw: Vec<i32> = fds.iter().map(|f| f.as_raw_fd()).collect();
        loop {
            let mut guard = self
                .control
                .writable()
                .await
                .context(|| "wait on control socket".into())?;
            match guard.try_io(|fd| sys::send_with_fds(fd.as_raw_fd(), &bytes, &raw)) {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(e))
                    if matches!(e.raw_os_error(), Some(libc::EPIPE) | Some(libc::ECONNRESET)) =>
                {
                    return Err(SandboxError::ContainerGone)
                }
                Ok(Err(e)) => return Err(SandboxError::io("send to init", e)),
                Err(_would_block) => continue,
            }
        }
    }

    /// Sends a request without waiting (for `Drop` paths); a full socket or
    /// a dead init loses it, which is fine for a kill.
    pub fn send_now(&self, request: &Request) {
        let _ = sys::send_with_fds(self.control.as_raw_fd(), &request.encode(), &[]);
    }

    /// Asks init to exit (its pid namespace dies with it) and waits; kills
    /// it outright if it does not go within `patience`.
    pub async fn shut_down(&self, patience: Duration) {
        // shutdown() rather than close: in-flight commands still hold the fd.
        // SAFETY: shutdown on a socket we own.
        unsafe { libc::shutdown(self.control.as_raw_fd(), libc::SHUT_RDWR) };
        let mut exited = self.exited.clone();
        if tokio::time::timeout(patience, exited.wait_for(|e| *e))
            .await
            .is_err()
        {
            self.kill_init();
            let _ = exited.wait_for(|e| *e).await;
        }
    }

    /// SIGKILLs init unless it was reaped already (its pid could be
    /// another process's by then).
    pub fn kill_init(&self) {
        let reaped = lock(&self.reaped);
        if !*reaped {
            // SAFETY: kill with our unreaped child's pid; the lock keeps the
            // watcher from reaping it meanwhile.
            unsafe { libc::kill(self.init_pid, libc::SIGKILL) };
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // The watcher holds the control socket too: shut it down, so init
        // sees its end of the channel close when the engine lets go of the
        // container, as it did when this handle alone owned the socket.
        // SAFETY: shutdown on a socket we own.
        unsafe { libc::shutdown(self.control.as_raw_fd(), libc::SHUT_RDWR) };
        // A leased range goes back with this handle: nothing of this run
        // may keep running under ids the next container is given.
        if self.id_lease.is_some() {
            self.kill_init();
        }
    }
}

pub(super) struct Container {
    pub id: String,
    pub spec: ContainerSpec,
    pub dir: PathBuf,
    /// `None` while stopped. The lock serialises start, stop and destroy,
    /// and the in-flight count changes only under it.
    pub state: tokio::sync::Mutex<Option<Arc<Running>>>,
    /// Commands and file operations running now.
    in_flight: Arc<AtomicUsize>,
    /// Proxied connections to its ports open now (see `ports`).
    port_connections: Arc<AtomicUsize>,
    /// Which ids its disk holds (see `slots`); persisted in its `uid-slot`
    /// file.
    disk_ids: Mutex<DiskIds>,
    /// Set by `destroy`: nothing new may start, running commands end with
    /// `SandboxError::Deleted`.
    destroyed: AtomicBool,
    /// The loop device its disk was last on (see `disk::mount_image`).
    last_loop: Mutex<Option<u32>>,
    /// While stopped: a descriptor of its `data` directory, from a file-view
    /// helper, kept briefly for further requests.
    pub view: Mutex<Option<Arc<super::mount_hold::MountHold>>>,
    /// The CA and secrets of its egress proxy, made at its first start in
    /// this process (the CA stays the same across stops and starts).
    pub interceptor: Mutex<Option<Arc<shellgate_egress::intercept::Interceptor>>>,
    /// Its secrets as this process has them: the spec's, with the values
    /// it was given (at create, or supplied again after a restart).
    secrets: Mutex<Vec<DomainSecret>>,
    /// Masks its secrets' values (held, or known by their verifiers) in
    /// whatever of it reaches a client: command output, downloads.
    masker: Mutex<Option<Arc<Masker>>>,
    /// The names its proxy lets it reach now: the spec's, or the last
    /// network update's (which `spec.json` holds too).
    allowed_domains: Mutex<Vec<String>>,
}

/// The engine's containers, by id: each loaded (its record in memory) or
/// only stored (known by its directory, read at its first use), so that
/// thousands of stopped containers cost the server next to nothing until
/// one is used.
#[derive(Default)]
pub(super) struct Containers(Mutex<HashMap<String, Entry>>);

/// What the engine holds of one container.
pub(super) enum Entry {
    Loaded(Arc<Container>),
    /// Its directory, not read yet beyond the ids its disk holds (a kept
    /// slot is claimed from the start: no lease may take it); `None` when
    /// its `uid-slot` file was not read either (see `recovery`: no
    /// container of the directory keeps a slot).
    Stored(Option<DiskIds>),
}

impl Containers {
    /// The container's record, or the ids of one not read yet.
    pub fn find(&self, id: &str) -> Result<Entry, SandboxError> {
        match lock(&self.0).get(id) {
            Some(Entry::Loaded(container)) => Ok(Entry::Loaded(Arc::clone(container))),
            Some(Entry::Stored(ids)) => Ok(Entry::Stored(*ids)),
            None => Err(SandboxError::NotFound(id.to_owned())),
        }
    }

    /// Whether the container exists, loaded or not.
    pub fn contains(&self, id: &str) -> Result<(), SandboxError> {
        match lock(&self.0).contains_key(id) {
            true => Ok(()),
            false => Err(SandboxError::NotFound(id.to_owned())),
        }
    }

    /// Keeps the record read for a stored container; one another caller
    /// loaded meanwhile wins, and one removed meanwhile is not found.
    pub fn loaded(&self, container: Container) -> Result<Arc<Container>, SandboxError> {
        let mut containers = lock(&self.0);
        match containers.get_mut(&container.id) {
            Some(Entry::Loaded(kept)) => Ok(Arc::clone(kept)),
            Some(entry) => {
                let container = Arc::new(container);
                *entry = Entry::Loaded(Arc::clone(&container));
                Ok(container)
            }
            None => Err(SandboxError::NotFound(container.id.clone())),
        }
    }

    /// Adds a container whose id is not taken.
    pub fn add(&self, container: &Arc<Container>) -> Result<(), SandboxError> {
        let mut containers = lock(&self.0);
        if containers.contains_key(&container.id) {
            return Err(SandboxError::AlreadyExists(container.id.clone()));
        }
        containers.insert(container.id.clone(), Entry::Loaded(Arc::clone(container)));
        Ok(())
    }

    pub fn remove(&self, id: &str) {
        lock(&self.0).remove(id);
    }

    /// Removes a container still only stored (`false` if it was loaded or
    /// removed meanwhile: then it is someone else's to remove).
    pub fn forget_stored(&self, id: &str) -> bool {
        let mut containers = lock(&self.0);
        match containers.get(id) {
            Some(Entry::Stored(_)) => containers.remove(id).is_some(),
            _ => false,
        }
    }

    /// The loaded containers (only a loaded one can be running).
    pub fn loaded_all(&self) -> Vec<Arc<Container>> {
        lock(&self.0)
            .values()
            .filter_map(|entry| match entry {
                Entry::Loaded(container) => Some(Arc::clone(container)),
                Entry::Stored(_) => None,
            })
            .collect()
    }

    /// The ids of those only stored, and the ids their disks hold.
    pub fn stored(&self) -> Vec<(String, Option<DiskIds>)> {
        lock(&self.0)
            .iter()
            .filter_map(|(id, entry)| match entry {
                Entry::Stored(ids) => Some((id.clone(), *ids)),
                Entry::Loaded(_) => None,
            })
            .collect()
    }

    pub fn ids(&self) -> Vec<String> {
        lock(&self.0).keys().cloned().collect()
    }

    /// Those a previous engine left, stored (see `recovery`).
    pub fn replace_all(&self, stored: HashMap<String, Option<DiskIds>>) {
        *lock(&self.0) = stored
            .into_iter()
            .map(|(id, ids)| (id, Entry::Stored(ids)))
            .collect();
    }
}

/// Marks a command or file operation as in flight until dropped.
pub(super) struct InFlight(Arc<AtomicUsize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Container {
    pub fn new(id: String, spec: ContainerSpec, dir: PathBuf, disk_ids: DiskIds) -> Self {
        let masker =
            Masker::with_verifiers(&spec.network.secrets, &spec.network.verifiers).map(Arc::new);
        Self {
            secrets: Mutex::new(spec.network.secrets.clone()),
            masker: Mutex::new(masker),
            allowed_domains: Mutex::new(spec.network.allowed_domains.clone()),
            id,
            spec,
            dir,
            state: tokio::sync::Mutex::new(None),
            in_flight: Arc::new(AtomicUsize::new(0)),
            port_connections: Arc::new(AtomicUsize::new(0)),
            disk_ids: Mutex::new(disk_ids),
            destroyed: AtomicBool::new(false),
            last_loop: Mutex::new(None),
            view: Mutex::new(None),
            interceptor: Mutex::new(None),
        }
    }

    /// Its secrets now (values this process holds, `None` for the others).
    pub fn secrets(&self) -> Vec<DomainSecret> {
        lock(&self.secrets).clone()
    }

    /// The names its proxy lets it reach now (empty: none, or no network).
    pub fn allowed_domains(&self) -> Vec<String> {
        lock(&self.allowed_domains).clone()
    }

    /// Its spec as it is now: with the allowlist of its last network
    /// update (what `spec.json` holds).
    pub fn current_spec(&self) -> ContainerSpec {
        let mut spec = self.spec.clone();
        let allowed_domains = self.allowed_domains();
        if allowed_domains != spec.network.allowed_domains {
            spec.network.allowed_domains = allowed_domains;
            spec.network.egress_kept = true;
        }
        spec
    }

    /// Takes a network update's allowlist; the caller holds the state lock
    /// and has written it to `spec.json`.
    pub fn set_allowed_domains(&self, allowed_domains: Vec<String>) {
        *lock(&self.allowed_domains) = allowed_domains;
    }

    /// Names of its secrets whose values this process does not hold.
    pub fn secrets_missing(&self) -> Vec<String> {
        lock(&self.secrets)
            .iter()
            .filter(|s| s.value.is_none())
            .map(|s| s.name.clone())
            .collect()
    }

    /// Its network is off: no policy, or secrets whose values are gone.
    pub fn network_off(&self) -> bool {
        self.spec.network.is_disabled() || !self.secrets_missing().is_empty()
    }

    pub fn masker(&self) -> Option<Arc<Masker>> {
        lock(&self.masker).clone()
    }

    /// Whether it holds exactly the secrets `asked` (a value it no longer
    /// holds is checked against its verifier).
    pub fn secrets_match(&self, asked: &[DomainSecret]) -> bool {
        let held = self.secrets();
        held.len() == asked.len()
            && asked.iter().all(|asked| {
                let value = asked.value.as_ref().map(|v| v.expose()).unwrap_or_default();
                held.iter()
                    .find(|s| s.name == asked.name && s.domain == asked.domain)
                    .is_some_and(|secret| match &secret.value {
                        Some(held) => held.expose() == value,
                        None => self
                            .spec
                            .network
                            .verifiers
                            .iter()
                            .find(|v| v.name == secret.name)
                            .is_some_and(|v| v.matches(value)),
                    })
            })
    }

    /// Its secrets as a client may see them: names, domains, whether held.
    pub fn secret_status(&self) -> Vec<crate::backend::SecretStatus> {
        self.secrets()
            .iter()
            .map(|s| crate::backend::SecretStatus {
                domain: s.domain.clone(),
                name: s.name.clone(),
                held: s.value.is_some(),
                scope: s.scope_key(),
            })
            .collect()
    }

    /// Its secrets with the values `supplied` again, each checked against
    /// what persists of the value it was made with; every secret is needed.
    pub fn with_supplied(
        &self,
        supplied: &[DomainSecret],
    ) -> Result<Vec<DomainSecret>, SandboxError> {
        let invalid = |message: String| SandboxError::InvalidRequest {
            param: "domain_secrets",
            message,
        };
        let mut secrets = self.secrets();
        for given in supplied {
            let Some(secret) = secrets
                .iter_mut()
                .find(|s| s.name == given.name && s.domain == given.domain)
            else {
                return Err(invalid(format!(
                    "the container has no secret {} for {}",
                    given.name, given.domain
                )));
            };
            let value = given.value.as_ref().map(|v| v.expose()).unwrap_or_default();
            // Checked against what persists of the value the container was
            // made with: a different value is a new container's.
            let verifier = self
                .spec
                .network
                .verifiers
                .iter()
                .find(|v| v.name == secret.name);
            if !verifier.is_some_and(|v| v.matches(value)) {
                return Err(invalid(format!(
                    "the value of secret {} is not the one the container was made with (a \
                     different value needs a new container)",
                    given.name
                )));
            }
            secret.value = given.value.clone();
        }
        if let Some(name) = secrets.iter().find(|s| s.value.is_none()).map(|s| &s.name) {
            return Err(invalid(format!(
                "secret {name} is not supplied: every secret of the container is needed"
            )));
        }
        Ok(secrets)
    }

    /// Takes the secrets' values supplied again; the caller holds the state
    /// lock with the container stopped (its next start has its network).
    pub fn set_secrets(&self, secrets: Vec<DomainSecret>) {
        *lock(&self.masker) =
            Masker::with_verifiers(&secrets, &self.spec.network.verifiers).map(Arc::new);
        *lock(&self.secrets) = secrets;
        // A new CA for the values' interceptor, made at the next start.
        lock(&self.interceptor).take();
    }

    pub fn disk_ids(&self) -> DiskIds {
        *lock(&self.disk_ids)
    }

    pub fn set_disk_ids(&self, ids: DiskIds) {
        *lock(&self.disk_ids) = ids;
    }

    pub fn destroyed(&self) -> bool {
        self.destroyed.load(Ordering::SeqCst)
    }

    /// Marks the container destroyed; the caller holds its state lock.
    pub fn mark_destroyed(&self) {
        self.destroyed.store(true, Ordering::SeqCst);
    }

    /// Whether anything is in flight; meaningful under the state lock.
    pub fn busy(&self) -> bool {
        self.in_flight.load(Ordering::SeqCst) > 0
    }

    /// Counts one operation in flight; the caller holds the state lock.
    pub(super) fn begin(&self) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(Arc::clone(&self.in_flight))
    }

    /// Its open port connections' count (see `ports`).
    pub fn port_connections(&self) -> &Arc<AtomicUsize> {
        &self.port_connections
    }

    pub fn last_loop(&self) -> Option<u32> {
        *lock(&self.last_loop)
    }

    pub fn set_last_loop(&self, device: Option<u32>) {
        if device.is_some() {
            *lock(&self.last_loop) = device;
        }
    }
}

/// Which way a file operation may reach a container.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Wake {
    /// Start a stopped container (writes: an upload is activity).
    Yes,
    /// Read a stopped container's disk without starting it (listing,
    /// downloading: polling must neither wake nor bill a container).
    No,
}
