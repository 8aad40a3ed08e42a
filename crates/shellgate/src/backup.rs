//! `shellgate backup DEST`: a single box backed up while it serves. The
//! store is copied online (SQLite's `VACUUM INTO`, one consistent
//! snapshot); then the data directory's files are copied as they are,
//! leaving out what the server makes again at start (its working copies,
//! the warm pool, mount points, spools). A restore is DEST copied to where
//! the data directory should be.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};
use shellgate_server::Config;

/// The data directory's entries a backup leaves out: the store's own files
/// (copied online instead), and what the server remakes at start (a spool
/// of bodies in flight, skill mounts, unfinished object writes).
const SKIPPED_AT_TOP: &[&str] = &[
    "shellgate.db",
    "shellgate.db-wal",
    "shellgate.db-shm",
    "shellgate.db-journal",
    "spool",
    "skill-mounts",
    ".partial",
];

/// The engine directory's (`sandbox/`) entries a backup leaves out: the
/// warm containers and pre-made disks (made again), the mount points of
/// running containers, the engine's lock and its network files. Kept:
/// `containers` (each one's disk and spec) and `images` (the trees the
/// containers were made from).
const SKIPPED_IN_SANDBOX: &[&str] = &["warm", "pool", "run", "engine.lock", "network"];

/// Backs up the single box `config` names into `dest`, a new directory.
pub fn back_up(config: &Config, dest: &Path) -> Result<()> {
    if config.store.database_url.get().is_some() {
        bail!(
            "this server's store is Postgres (database_url): back it up with pg_dump, and its \
             object store as the storage's own tools do (docs/operator/backups.md)"
        );
    }
    let data_dir = &config.server.data_dir;
    let database = config.sqlite_path();
    anyhow::ensure!(
        database.is_file(),
        "no store at {}: is {} a data directory?",
        database.display(),
        data_dir.display()
    );
    make_like(data_dir, dest)?;
    shellgate_store::backup_sqlite(&database, &dest.join("shellgate.db"))
        .with_context(|| format!("copying the store {}", database.display()))?;
    // A running container's disk is a file system mounted from its image:
    // what its processes wrote may be in the kernel's cache only. Flushed
    // first, the copy is the disk as a power cut would leave it at worst
    // (ext4's journal makes it whole at the next mount).
    // SAFETY: sync takes no arguments and cannot fail.
    unsafe { libc::sync() };
    copy_entries(data_dir, dest, SKIPPED_AT_TOP, |name, from, to| {
        if name == "sandbox" && from.is_dir() {
            make_like(from, to)?;
            copy_entries(from, to, SKIPPED_IN_SANDBOX, |_, from, to| copy(from, to))
        } else {
            copy(from, to)
        }
    })?;
    eprintln!(
        "backed up {} into {} (restore: copy it to the data directory, then serve)",
        data_dir.display(),
        dest.display()
    );
    Ok(())
}

/// Creates the directory `dest` (which must not exist) with `like`'s mode.
fn make_like(like: &Path, dest: &Path) -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let mode = std::fs::metadata(like)
        .with_context(|| format!("reading {}", like.display()))?
        .permissions()
        .mode();
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(dest)
        .with_context(|| {
            format!(
                "creating {} (a backup goes into a new directory)",
                dest.display()
            )
        })?;
    std::fs::set_permissions(dest, std::fs::Permissions::from_mode(mode & 0o7777))
        .with_context(|| format!("setting the mode of {}", dest.display()))
}

/// Copies each entry of `from` not named in `skipped` into `to` with
/// `copy_one(name, source, destination)`, in name order.
fn copy_entries(
    from: &Path,
    to: &Path,
    skipped: &[&str],
    mut copy_one: impl FnMut(&str, &Path, &Path) -> Result<()>,
) -> Result<()> {
    let mut names: Vec<String> = std::fs::read_dir(from)
        .with_context(|| format!("reading {}", from.display()))?
        .map(|entry| entry.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<std::io::Result<_>>()
        .with_context(|| format!("reading {}", from.display()))?;
    names.sort();
    for name in names
        .iter()
        .filter(|name| !skipped.contains(&name.as_str()))
    {
        copy_one(name, &from.join(name), &to.join(name))?;
    }
    Ok(())
}

/// Copies a file or a tree as `cp -a` does (owners, modes, links, device
/// files of an image's tree), keeping a disk image's holes (a container's
/// disk is a sparse file of its full size).
fn copy(from: &Path, to: &Path) -> Result<()> {
    let copied = Command::new("cp")
        .args(["-a", "--sparse=always", "--reflink=auto", "--"])
        .arg(from)
        .arg(to)
        .output()
        .context("running cp")?;
    anyhow::ensure!(
        copied.status.success(),
        "copying {}: {}",
        from.display(),
        String::from_utf8_lossy(&copied.stderr).trim()
    );
    Ok(())
}
