//! Per-container cgroups: memory, pids and CPU limits.
//!
//! Works on a pure cgroup v2 host (the common production case) and on a
//! hybrid or v1 host, where each controller has its own hierarchy under
//! `/sys/fs/cgroup/<controller>`. The engine's cgroups nest under the
//! server's own cgroup (so a supervisor's limits still bound the sandboxes)
//! in a folder named after the data directory, so that two engines never
//! touch each other's containers. Where a controller cannot be used (rootless,
//! no delegation), the engine runs without that limit and says so.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::backend::ContainerSpec;
use crate::sys;

const CGROUP_ROOT: &str = "/sys/fs/cgroup";
const V1_CONTROLLERS: [&str; 3] = ["memory", "pids", "cpu"];

/// Which cgroup layout the host has, and where this engine's cgroups live.
#[derive(Debug, Clone)]
pub enum Cgroups {
    /// Unified hierarchy: one folder per container holds every controller.
    V2 { base: PathBuf },
    /// One base folder per controller that could be used.
    V1 { bases: Vec<(&'static str, PathBuf)> },
    /// No usable controller: limits are not enforced.
    Disabled,
}

/// This process's cgroup path for `controller` ("" for the v2 hierarchy),
/// read from the text of `/proc/self/cgroup`.
pub(crate) fn own_cgroup(self_cgroup: &str, controller: &str) -> Option<String> {
    self_cgroup.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let matches = if controller.is_empty() {
            controllers.is_empty()
        } else {
            controllers.split(',').any(|c| c == controller)
        };
        matches.then(|| path.to_owned())
    })
}

impl Cgroups {
    /// Finds the host's layout and creates this engine's base folders.
    /// `group` names the engine (derived from its data directory).
    /// Returns warnings for limits that cannot be enforced.
    pub fn setup(group: &str) -> (Self, Vec<String>) {
        let self_cgroup = fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        Self::setup_in(
            Path::new(CGROUP_ROOT),
            &self_cgroup,
            std::process::id(),
            group,
        )
    }

    /// `setup` against a cgroup file system mounted at `root`, for a process
    /// `pid` whose `/proc/self/cgroup` reads `self_cgroup` (tests use a fake
    /// tree; the kernel's is at `/sys/fs/cgroup`).
    pub fn setup_in(root: &Path, self_cgroup: &str, pid: u32, group: &str) -> (Self, Vec<String>) {
        let mut warnings = Vec::new();
        if root.join("cgroup.controllers").exists() {
            match setup_v2(root, self_cgroup, pid, group) {
                Ok(base) => return (Cgroups::V2 { base }, warnings),
                Err(e) => {
                    warnings.push(format!(
                        "cgroup v2 unusable ({e}): memory, pids and CPU limits are off"
                    ));
                    return (Cgroups::Disabled, warnings);
                }
            }
        }
        let mut bases = Vec::new();
        for controller in V1_CONTROLLERS {
            let mount = root.join(controller);
            // A folder that is not a mounted hierarchy would take our
            // folders without enforcing anything.
            if !mount.join("cgroup.procs").exists() {
                warnings.push(format!(
                    "cgroup v1 controller {controller} not mounted: its limit is off"
                ));
                continue;
            }
            let Some(own) = own_cgroup(self_cgroup, controller) else {
                warnings.push(format!(
                    "cgroup v1 controller {controller} not mounted: its limit is off"
                ));
                continue;
            };
            let base = mount.join(own.trim_start_matches('/')).join(group);
            match fs::create_dir_all(&base) {
                Ok(()) => bases.push((controller, base)),
                Err(e) => warnings.push(format!(
                    "cannot create {} ({e}): the {controller} limit is off",
                    base.display()
                )),
            }
        }
        if bases.is_empty() {
            (Cgroups::Disabled, warnings)
        } else {
            (Cgroups::V1 { bases }, warnings)
        }
    }

    /// Folders of one container (one per hierarchy).
    fn dirs(&self, id: &str) -> Vec<(&'static str, PathBuf)> {
        match self {
            Cgroups::V2 { base } => vec![("", base.join(id))],
            Cgroups::V1 { bases } => bases.iter().map(|(c, base)| (*c, base.join(id))).collect(),
            Cgroups::Disabled => Vec::new(),
        }
    }

    /// Creates a container's cgroups with its limits; returns the
    /// `cgroup.procs` files the helper must join. A failure leaves none of
    /// the (still empty) folders this call made.
    pub fn create(&self, id: &str, spec: &ContainerSpec) -> io::Result<Vec<PathBuf>> {
        let mut procs = Vec::new();
        let mut made = Vec::new();
        for (controller, dir) in self.dirs(id) {
            let created = match fs::create_dir(&dir) {
                Ok(()) => {
                    made.push(dir.clone());
                    Ok(())
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
                Err(e) => Err(e),
            };
            if let Err(e) = created.and_then(|()| write_limits(controller, &dir, spec)) {
                for dir in made.iter().rev() {
                    let _ = fs::remove_dir(dir);
                }
                return Err(e);
            }
            procs.push(dir.join("cgroup.procs"));
        }
        Ok(procs)
    }

    /// The single cgroup v2 directory of `id`, where a process can be born
    /// directly (`clone3` with `CLONE_INTO_CGROUP`); `None` on v1, where
    /// processes must be moved into each hierarchy.
    pub fn unified_dir(&self, id: &str) -> Option<PathBuf> {
        match self {
            Cgroups::V2 { base } => Some(base.join(id)),
            _ => None,
        }
    }

    /// Sets (or changes) the limits of an existing cgroup.
    pub fn apply(&self, slot: &str, spec: &ContainerSpec) -> io::Result<()> {
        for (controller, dir) in self.dirs(slot) {
            write_limits(controller, &dir, spec)?;
        }
        Ok(())
    }

    /// Kills whatever is left in a container's cgroups and removes them.
    /// Waits up to `patience` for dying processes to leave.
    pub async fn remove(&self, id: &str, patience: Duration) -> io::Result<()> {
        let deadline = tokio::time::Instant::now() + patience;
        for (_, dir) in self.dirs(id) {
            loop {
                if !dir.exists() {
                    break;
                }
                kill_members(&dir);
                match fs::remove_dir(&dir) {
                    Ok(()) => break,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                    Err(e) if tokio::time::Instant::now() >= deadline => return Err(e),
                    Err(_) => tokio::time::sleep(Duration::from_millis(2)).await,
                }
            }
        }
        Ok(())
    }

    /// The `cgroup.procs` file listing a container's processes (its first
    /// hierarchy's), if it has cgroups.
    pub fn procs_file(&self, id: &str) -> Option<PathBuf> {
        self.dirs(id)
            .into_iter()
            .next()
            .map(|(_, dir)| dir.join("cgroup.procs"))
    }

    /// Names of every cgroup this engine has (used to clean up after a crash).
    pub fn existing(&self) -> Vec<String> {
        let mut ids: Vec<String> = Vec::new();
        // The same names in every hierarchy: each kept once, in the order
        // first seen (thousands after a crash with thousands live).
        let mut seen = std::collections::HashSet::new();
        let bases: Vec<&PathBuf> = match self {
            Cgroups::V2 { base } => vec![base],
            Cgroups::V1 { bases } => bases.iter().map(|(_, b)| b).collect(),
            Cgroups::Disabled => Vec::new(),
        };
        for base in bases {
            let Ok(entries) = fs::read_dir(base) else {
                continue;
            };
            for entry in entries.flatten() {
                if entry.path().is_dir() {
                    if let Some(name) = entry.file_name().to_str() {
                        if name != "server" && seen.insert(name.to_owned()) {
                            ids.push(name.to_owned());
                        }
                    }
                }
            }
        }
        ids
    }

    /// The layout's name, as the console's health page shows it: `v2`,
    /// `v1` (which includes hybrid hosts: v1 controllers beside an empty
    /// unified hierarchy), or `disabled`.
    pub fn layout(&self) -> &'static str {
        match self {
            Cgroups::V2 { .. } => "v2",
            Cgroups::V1 { .. } => "v1",
            Cgroups::Disabled => "disabled",
        }
    }

    /// Whether limits are enforced at all.
    pub fn enabled(&self) -> bool {
        !matches!(self, Cgroups::Disabled)
    }

    /// Removes this engine's (empty) base folders, at shutdown: a stopped
    /// engine leaves no cgroup behind. A folder still holding something
    /// (another engine on the same data directory cannot exist; the v2
    /// `server` leaf may) is left alone.
    pub fn remove_base(&self) {
        let bases: Vec<&PathBuf> = match self {
            Cgroups::V2 { base } => vec![base],
            Cgroups::V1 { bases } => bases.iter().map(|(_, b)| b).collect(),
            Cgroups::Disabled => Vec::new(),
        };
        for base in bases {
            let _ = fs::remove_dir(base);
        }
    }

    /// Caps the memory of every sandbox together: the engine's base folder
    /// gets `bytes` as its limit, so however many containers are
    /// overcommitted, their sum can never starve the server or the host.
    pub fn set_ceiling(&self, bytes: u64) -> io::Result<()> {
        let value = bytes.to_string();
        match self {
            Cgroups::V2 { base } => sys::write_file(&base.join("memory.max"), &value),
            Cgroups::V1 { bases } => {
                for (controller, base) in bases {
                    if *controller == "memory" {
                        write_v1_memory(base, &value)?;
                    }
                }
                Ok(())
            }
            Cgroups::Disabled => Ok(()),
        }
    }

    /// Where the counters of a container's cgroup are (see
    /// [`LimitCounters`]).
    pub fn counters(&self, slot: &str) -> LimitCounters {
        let oom = match self {
            Cgroups::V2 { base } => Some(base.join(slot).join("memory.events")),
            _ => self
                .controller_dir(slot, "memory")
                .map(|dir| dir.join("memory.oom_control")),
        };
        LimitCounters {
            pids_events: self
                .controller_dir(slot, "pids")
                .map(|dir| dir.join("pids.events")),
            oom,
        }
    }

    /// What `slot`'s processes use now: CPU time (microseconds), memory
    /// without page cache, and page cache (bytes). A counter this host
    /// does not have reads as zero.
    pub fn usage(&self, slot: &str) -> CgroupUsage {
        let read = |controller: &str, file: &str| {
            self.controller_dir(slot, controller)
                .and_then(|dir| read_stat_file(&dir.join(file)))
        };
        let number = |text: Option<String>| text.and_then(|t| t.trim().parse::<u64>().ok());
        let (cpu_usec, charged, cache) = match self {
            Cgroups::V2 { .. } => (
                read("", "cpu.stat").and_then(|t| keyed(&t, "usage_usec")),
                number(read("", "memory.current")),
                read("", "memory.stat").and_then(|t| keyed(&t, "file")),
            ),
            // v1: `cpuacct` shares the `cpu` hierarchy where the host
            // mounts them together (`cpu,cpuacct`); its usage is in ns.
            _ => (
                number(read("cpu", "cpuacct.usage")).map(|ns| ns / 1000),
                number(read("memory", "memory.usage_in_bytes")),
                read("memory", "memory.stat").and_then(|t| keyed(&t, "cache")),
            ),
        };
        let (charged, cache) = (charged.unwrap_or(0), cache.unwrap_or(0));
        CgroupUsage {
            cpu_usec: cpu_usec.unwrap_or(0),
            memory_bytes: charged.saturating_sub(cache),
            memory_cache_bytes: cache,
        }
    }

    /// The folder of `slot` holding `controller`'s files.
    fn controller_dir(&self, slot: &str, controller: &str) -> Option<PathBuf> {
        match self {
            Cgroups::V2 { base } => Some(base.join(slot)),
            Cgroups::V1 { bases } => bases
                .iter()
                .find(|(c, _)| *c == controller)
                .map(|(_, base)| base.join(slot)),
            Cgroups::Disabled => None,
        }
    }
}

/// A container's cgroup counters, opened when read. Kept open they would
/// cost every live container two of the server's descriptors, and the
/// descriptor table, not memory, is what bounds how many containers one
/// server holds; an open, read and close of a small cgroup file costs
/// microseconds against a command's milliseconds. A counter this host does
/// not have reads as zero.
#[derive(Debug)]
pub struct LimitCounters {
    pids_events: Option<PathBuf>,
    oom: Option<PathBuf>,
}

/// A container's cgroup usage (see [`Cgroups::usage`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CgroupUsage {
    pub cpu_usec: u64,
    pub memory_bytes: u64,
    pub memory_cache_bytes: u64,
}

/// Reads a cgroup statistics file (`memory.stat` is a few KiB), bounded.
fn read_stat_file(path: &Path) -> Option<String> {
    use std::io::Read;
    let mut text = String::new();
    fs::File::open(path)
        .ok()?
        .take(64 << 10)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

/// Reads a whole (small) cgroup file.
fn read_counter_file(path: &Path) -> Option<String> {
    use std::io::Read;
    let mut buf = [0u8; 512];
    let n = fs::File::open(path).ok()?.read(&mut buf).ok()?;
    String::from_utf8(buf[..n].to_vec()).ok()
}

/// The value of `key` in a flat-keyed file (`key value` lines).
fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (name, value) = line.split_once(' ')?;
        (name == key).then(|| value.trim().parse().ok())?
    })
}

impl LimitCounters {
    /// How often the container has hit its process limit and how many
    /// processes the OOM killer ended in it, since its cgroup was made.
    pub fn events(&self) -> LimitEvents {
        let count = |path: &Option<PathBuf>, key: &str| {
            path.as_deref()
                .and_then(read_counter_file)
                .and_then(|text| keyed(&text, key))
                .unwrap_or(0)
        };
        LimitEvents {
            pids_max: count(&self.pids_events, "max"),
            oom_kills: count(&self.oom, "oom_kill"),
        }
    }
}

/// Counters of limits a container ran into (see [`LimitCounters::events`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LimitEvents {
    /// Times a fork or clone failed at `pids.max`.
    pub pids_max: u64,
    /// Processes the OOM killer ended.
    pub oom_kills: u64,
}

/// Sets a v1 memory limit and its memory+swap twin. The kernel keeps
/// `limit_in_bytes <= memsw.limit_in_bytes` at every step, so raising a
/// limit must raise memsw first and lowering must lower memsw last.
fn write_v1_memory(dir: &Path, value: &str) -> io::Result<()> {
    let limit = dir.join("memory.limit_in_bytes");
    let memsw = dir.join("memory.memsw.limit_in_bytes");
    if !memsw.exists() {
        return sys::write_file(&limit, value);
    }
    match sys::write_file(&limit, value) {
        Ok(()) => sys::write_file(&memsw, value),
        // Raising above the current memsw: memsw first.
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            sys::write_file(&memsw, value)?;
            sys::write_file(&limit, value)
        }
        Err(e) => Err(e),
    }
}

fn setup_v2(root: &Path, self_cgroup: &str, pid: u32, group: &str) -> io::Result<PathBuf> {
    let own = own_cgroup(self_cgroup, "").unwrap_or_default();
    let own_dir = root.join(own.trim_start_matches('/'));
    let wanted = ["memory", "pids", "cpu"];
    let available = fs::read_to_string(own_dir.join("cgroup.controllers"))?;
    let enable: String = wanted
        .iter()
        .filter(|c| available.split_whitespace().any(|a| a == **c))
        .map(|c| format!("+{c} "))
        .collect();
    if enable.is_empty() {
        return Err(io::Error::other(
            "no memory, pids or cpu controller delegated",
        ));
    }
    let base = own_dir.join(group);
    let enable_in =
        |dir: &Path| sys::write_file(&dir.join("cgroup.subtree_control"), enable.trim());
    if let Err(e) = enable_in(&own_dir) {
        // "No internal processes": a non-root cgroup that holds processes
        // cannot hand controllers down. Move the server into a leaf beside
        // the containers, then try again.
        if e.raw_os_error() != Some(libc::EBUSY) || own_dir == root {
            return Err(e);
        }
        let leaf = own_dir.join("server");
        fs::create_dir_all(&leaf)?;
        sys::write_file(&leaf.join("cgroup.procs"), &pid.to_string())?;
        enable_in(&own_dir)?;
    }
    fs::create_dir_all(&base)?;
    enable_in(&base)?;
    Ok(base)
}

fn write_limits(controller: &str, dir: &Path, spec: &ContainerSpec) -> io::Result<()> {
    let knob = |name: &str, value: &str| sys::write_file(&dir.join(name), value);
    let optional = |name: &str, value: &str| {
        let path = dir.join(name);
        if path.exists() {
            let _ = sys::write_file(&path, value);
        }
    };
    let memory = spec.memory_bytes.to_string();
    match controller {
        "" => {
            knob("memory.max", &memory)?;
            optional("memory.swap.max", "0");
            knob("pids.max", &spec.pids_max.to_string())?;
            optional("cpu.weight", &spec.cpu_weight.clamp(1, 10_000).to_string());
            if let Some(cores) = spec.cpu_cores {
                let period = 100_000u64;
                optional(
                    "cpu.max",
                    &format!("{} {period}", (cores * period as f64) as u64),
                );
            }
        }
        // Equal memory+swap and memory limits: no swapping past the limit.
        "memory" => write_v1_memory(dir, &memory)?,
        "pids" => knob("pids.max", &spec.pids_max.to_string())?,
        "cpu" => {
            optional(
                "cpu.shares",
                &(spec.cpu_weight.clamp(1, 10_000) * 1024 / 100)
                    .max(2)
                    .to_string(),
            );
            if let Some(cores) = spec.cpu_cores {
                let period = 100_000u64;
                optional("cpu.cfs_period_us", &period.to_string());
                optional(
                    "cpu.cfs_quota_us",
                    &((cores * period as f64) as u64).to_string(),
                );
            }
        }
        _ => {}
    }
    Ok(())
}

/// SIGKILLs every process in a cgroup (v2 `cgroup.kill` where available).
fn kill_members(dir: &Path) {
    let kill_file = dir.join("cgroup.kill");
    if kill_file.exists() && sys::write_file(&kill_file, "1").is_ok() {
        return;
    }
    if let Ok(procs) = fs::read_to_string(dir.join("cgroup.procs")) {
        for pid in procs
            .lines()
            .filter_map(|l| l.trim().parse::<libc::pid_t>().ok())
        {
            // SAFETY: kill(2) with a pid read from the cgroup; a stale pid can
            // only name a process of this cgroup or nothing (pids are not
            // reused while they are listed).
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake v1 layout: the three hierarchies' roots, and `files`.
    fn fake_v1(files: &[&str]) -> PathBuf {
        let roots = [
            "memory/cgroup.procs",
            "pids/cgroup.procs",
            "cpu/cgroup.procs",
        ];
        fake(&[&roots[..], files].concat())
    }

    /// A fake cgroup tree: directories and the knob files the kernel would
    /// have made.
    fn fake(files: &[&str]) -> PathBuf {
        let root = std::env::temp_dir().join(format!(
            "shellgate-cgroup-test-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        ));
        for file in files {
            let path = root.join(file);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, "").unwrap();
        }
        root
    }

    fn read(root: &Path, file: &str) -> String {
        fs::read_to_string(root.join(file)).unwrap()
    }

    fn spec() -> ContainerSpec {
        ContainerSpec {
            memory_bytes: 128 << 20,
            pids_max: 64,
            cpu_weight: 50,
            cpu_cores: Some(1.5),
            ..ContainerSpec::default()
        }
    }

    #[test]
    fn pure_v2_enables_controllers_and_writes_limits() {
        let slot = "g/s1";
        let root = fake(&[
            "cgroup.subtree_control",
            "g/cgroup.subtree_control",
            "g/s1/memory.max",
            "g/s1/memory.swap.max",
            "g/s1/pids.max",
            "g/s1/cpu.weight",
            "g/s1/cpu.max",
            "g/s1/cgroup.procs",
        ]);
        fs::write(
            root.join("cgroup.controllers"),
            "cpuset cpu io memory hugetlb pids rdma misc\n",
        )
        .unwrap();
        let (cgroups, warnings) = Cgroups::setup_in(&root, "0::/\n", 42, "g");
        assert!(warnings.is_empty(), "{warnings:?}");
        assert!(matches!(&cgroups, Cgroups::V2 { base } if base == &root.join("g")));
        assert_eq!(read(&root, "cgroup.subtree_control"), "+memory +pids +cpu");
        assert_eq!(
            read(&root, "g/cgroup.subtree_control"),
            "+memory +pids +cpu"
        );
        let procs = cgroups.create("s1", &spec()).unwrap();
        assert_eq!(procs, vec![root.join(slot).join("cgroup.procs")]);
        assert_eq!(read(&root, "g/s1/memory.max"), "134217728");
        assert_eq!(read(&root, "g/s1/memory.swap.max"), "0");
        assert_eq!(read(&root, "g/s1/pids.max"), "64");
        assert_eq!(read(&root, "g/s1/cpu.weight"), "50");
        assert_eq!(read(&root, "g/s1/cpu.max"), "150000 100000");
        assert_eq!(cgroups.existing(), vec!["s1".to_owned()]);
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn v2_without_the_controllers_is_disabled_with_a_warning() {
        let root = fake(&["cgroup.subtree_control"]);
        fs::write(root.join("cgroup.controllers"), "hugetlb\n").unwrap();
        let (cgroups, warnings) = Cgroups::setup_in(&root, "0::/\n", 42, "g");
        assert!(!cgroups.enabled());
        assert!(warnings[0].contains("limits are off"), "{warnings:?}");
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_create_that_fails_leaves_none_of_the_folders_it_made() {
        // The memory folder is there already (kept); the pids one is made,
        // then its limit cannot be written (the fake has no `pids.max`).
        let root = fake_v1(&[
            "memory/g/s1/memory.limit_in_bytes",
            "memory/g/s1/memory.memsw.limit_in_bytes",
            "memory/g/s1/cgroup.procs",
        ]);
        let self_cgroup = "4:memory:/\n8:pids:/\n1:cpu,cpuacct:/\n0::/\n";
        let (cgroups, _) = Cgroups::setup_in(&root, self_cgroup, 42, "g");
        assert!(cgroups.create("s1", &spec()).is_err());
        assert!(root.join("memory/g/s1").exists());
        assert!(root.join("pids/g").exists());
        assert!(!root.join("pids/g/s1").exists());
        assert!(!root.join("cpu/g/s1").exists());
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn v1_nests_under_each_controllers_own_cgroup() {
        let root = fake_v1(&[
            "memory/user.slice/g/s1/memory.limit_in_bytes",
            "memory/user.slice/g/s1/memory.memsw.limit_in_bytes",
            "memory/user.slice/g/s1/cgroup.procs",
            "pids/g/s1/pids.max",
            "pids/g/s1/cgroup.procs",
            "cpu/g/s1/cpu.shares",
            "cpu/g/s1/cpu.cfs_period_us",
            "cpu/g/s1/cpu.cfs_quota_us",
            "cpu/g/s1/cgroup.procs",
        ]);
        let self_cgroup = "4:memory:/user.slice\n8:pids:/\n1:cpu,cpuacct:/\n0::/\n";
        let (cgroups, warnings) = Cgroups::setup_in(&root, self_cgroup, 42, "g");
        assert!(warnings.is_empty(), "{warnings:?}");
        let procs = cgroups.create("s1", &spec()).unwrap();
        assert_eq!(procs.len(), 3);
        assert_eq!(
            read(&root, "memory/user.slice/g/s1/memory.limit_in_bytes"),
            "134217728"
        );
        assert_eq!(
            read(&root, "memory/user.slice/g/s1/memory.memsw.limit_in_bytes"),
            "134217728"
        );
        assert_eq!(read(&root, "pids/g/s1/pids.max"), "64");
        assert_eq!(read(&root, "cpu/g/s1/cpu.shares"), "512");
        assert_eq!(read(&root, "cpu/g/s1/cpu.cfs_quota_us"), "150000");
        assert_eq!(read(&root, "cpu/g/s1/cpu.cfs_period_us"), "100000");
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn limit_counters_are_read_from_the_cgroup_each_time() {
        let root = fake(&[
            "memory/cgroup.procs",
            "pids/cgroup.procs",
            "memory/g/s1/memory.oom_control",
            "pids/g/s1/pids.events",
        ]);
        let (cgroups, _) = Cgroups::setup_in(&root, "4:memory:/\n8:pids:/\n0::/\n", 42, "g");
        let counters = cgroups.counters("s1");
        assert_eq!(counters.events(), LimitEvents::default());
        fs::write(root.join("pids/g/s1/pids.events"), "max 3\n").unwrap();
        fs::write(
            root.join("memory/g/s1/memory.oom_control"),
            "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
        )
        .unwrap();
        assert_eq!(
            counters.events(),
            LimitEvents {
                pids_max: 3,
                oom_kills: 2
            }
        );
        // A container whose cgroup is gone reads as having hit nothing.
        fs::remove_dir_all(&root).unwrap();
        assert_eq!(counters.events(), LimitEvents::default());
    }

    #[test]
    fn usage_is_read_from_the_cgroup_without_page_cache() {
        let root = fake(&[]);
        let base = root.join("base");
        fs::create_dir_all(base.join("s1")).unwrap();
        fs::write(
            base.join("s1/cpu.stat"),
            "usage_usec 2500000\nuser_usec 2000000\n",
        )
        .unwrap();
        fs::write(base.join("s1/memory.current"), "104857600\n").unwrap();
        fs::write(
            base.join("s1/memory.stat"),
            "anon 73400320\nfile 31457280\n",
        )
        .unwrap();
        let cgroups = Cgroups::V2 { base };
        assert_eq!(
            cgroups.usage("s1"),
            CgroupUsage {
                cpu_usec: 2_500_000,
                memory_bytes: 73_400_320,
                memory_cache_bytes: 31_457_280,
            }
        );
        assert_eq!(cgroups.usage("gone"), CgroupUsage::default());
        assert_eq!(Cgroups::Disabled.usage("s1"), CgroupUsage::default());
    }

    #[test]
    fn a_missing_v1_controller_is_reported() {
        let root = fake(&["pids/cgroup.procs", "memory/not-a-hierarchy"]);
        let (cgroups, warnings) = Cgroups::setup_in(&root, "8:pids:/\n0::/\n", 42, "g");
        assert!(cgroups.enabled());
        assert_eq!(
            warnings.len(),
            2,
            "memory and cpu are missing: {warnings:?}"
        );
        fs::remove_dir_all(&root).unwrap();
    }
}
