//! Removing what an interrupted build or import left behind.
//!
//! A build runs mmdebstrap in a mount namespace of its own (see
//! `recipe::builder_command`), so its `proc`, `sys`, `devpts` and `/dev/shm`
//! mounts never show on the host. A tree left by an older version, or by a
//! builder that escaped that namespace, may still have mounts below it: one
//! of them can be the host's own `/dev/shm` bound in, and a recursive
//! removal across it would empty the host's shared memory. So every mount
//! at or below the tree is detached first (lazily, deepest first, never
//! following a link at the mount point), and the tree is removed only once
//! this process's mount table shows nothing below it.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::error::SandboxError;

/// A mount point as `/proc/self/mountinfo` spells it: space, tab, newline
/// and backslash as three-digit octal escapes.
fn unescape(field: &str) -> PathBuf {
    use std::os::unix::ffi::OsStringExt;
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let octal = bytes.get(at + 1..at + 4).and_then(|digits| {
            let text = std::str::from_utf8(digits).ok()?;
            u8::from_str_radix(text, 8).ok()
        });
        match (bytes[at], octal) {
            (b'\\', Some(byte)) => {
                out.push(byte);
                at += 4;
            }
            (byte, _) => {
                out.push(byte);
                at += 1;
            }
        }
    }
    PathBuf::from(std::ffi::OsString::from_vec(out))
}

/// The mount points in a mountinfo table at or below `dir` (an absolute
/// path with no links in it), deepest first.
fn mount_points_below(mountinfo: &str, dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = mountinfo
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(unescape)
        .filter(|point| point.starts_with(dir))
        .collect();
    found.sort_by_key(|point| std::cmp::Reverse(point.components().count()));
    found.dedup();
    found
}

/// The mount points at or below `dir` in this process's mount namespace.
pub(crate) fn mounts_below(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let dir = fs::canonicalize(dir)?;
    let table = fs::read_to_string("/proc/self/mountinfo")?;
    Ok(mount_points_below(&table, &dir))
}

/// Detaches every mount at or below `dir` (`MNT_DETACH`: a busy one goes
/// too; `UMOUNT_NOFOLLOW`: a link where a mount was is not followed), and
/// fails if any is left.
pub(crate) fn unmount_below(dir: &Path) -> Result<(), SandboxError> {
    let listed = |dir: &Path| {
        mounts_below(dir).map_err(|e| {
            SandboxError::Setup(format!(
                "cannot read the mounts below {}: {e}",
                dir.display()
            ))
        })
    };
    // Stacked mounts show one line each: a few passes take them all.
    for _ in 0..8 {
        let points = listed(dir)?;
        if points.is_empty() {
            return Ok(());
        }
        for point in points {
            if let Err(e) = crate::sys::umount2(&point, libc::MNT_DETACH | libc::UMOUNT_NOFOLLOW) {
                tracing::warn!("cannot unmount {}: {e}", point.display());
            } else {
                tracing::warn!(
                    "unmounted {} (left by an interrupted image build)",
                    point.display()
                );
            }
        }
    }
    let left = listed(dir)?;
    if left.is_empty() {
        Ok(())
    } else {
        Err(SandboxError::Setup(format!(
            "{} is still mounted below {}: not removed",
            left[0].display(),
            dir.display()
        )))
    }
}

/// Removes a half-made tree, mounts below it detached first; nothing is
/// removed while anything below it is still mounted.
pub(crate) fn remove_half_made(dir: &Path) -> Result<(), SandboxError> {
    match fs::symlink_metadata(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            return Err(SandboxError::Setup(format!(
                "cannot look at {}: {e}",
                dir.display()
            )))
        }
        // A link where the tree was: only the link goes.
        Ok(meta) if !meta.is_dir() => {
            return fs::remove_file(dir)
                .map_err(|e| SandboxError::Setup(format!("cannot remove {}: {e}", dir.display())))
        }
        Ok(_) => {}
    }
    unmount_below(dir)?;
    match fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(SandboxError::Setup(format!(
            "cannot remove {}: {e}",
            dir.display()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_are_read_deepest_first_with_escapes() {
        let table = "\
22 1 8:1 / / rw - ext4 /dev/sda1 rw
30 22 0:5 / /data/images/x/rootfs.new/proc rw - proc proc rw
31 22 0:6 / /data/images/x/rootfs.new/dev/shm rw - tmpfs tmpfs rw
32 22 0:7 / /data/images/x/rootfs.new/dev/pts rw - devpts devpts rw
33 22 0:8 / /data/images/x/rootfs.newer rw - tmpfs tmpfs rw
34 22 0:9 / /data/images/y\\040z/rootfs.new rw - tmpfs tmpfs rw
";
        let points = mount_points_below(table, Path::new("/data/images/x/rootfs.new"));
        assert_eq!(
            points,
            [
                PathBuf::from("/data/images/x/rootfs.new/dev/shm"),
                PathBuf::from("/data/images/x/rootfs.new/dev/pts"),
                PathBuf::from("/data/images/x/rootfs.new/proc"),
            ]
        );
        assert_eq!(
            mount_points_below(table, Path::new("/data/images/y z")),
            [PathBuf::from("/data/images/y z/rootfs.new")]
        );
    }

    /// Adversarial: a recursive bind (a stand-in for the host's
    /// `/`, with a mount of its own inside), shared propagation, and links
    /// in the tree pointing outside; the cleanup removes none of what
    /// they reach.
    #[test]
    fn a_half_made_tree_with_a_recursive_bind_and_links_outside_is_removed_alone() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: mounting needs root");
            return;
        }
        let base =
            std::env::temp_dir().join(format!("shellgate-half-made-rbind-{}", std::process::id()));
        let _ = fs::remove_dir_all(&base);
        let host = base.join("host");
        let inner = host.join("run");
        fs::create_dir_all(&inner).unwrap();
        fs::write(host.join("precious"), b"host data").unwrap();
        let staging = base.join("images/x/rootfs.new");
        let root_bind = staging.join("host");
        fs::create_dir_all(&root_bind).unwrap();
        std::os::unix::fs::symlink(&host, staging.join("link-out")).unwrap();
        std::os::unix::fs::symlink(host.join("precious"), staging.join("file-out")).unwrap();
        let c = |s: &Path| std::ffi::CString::new(s.to_str().unwrap()).unwrap();
        let mount = |source: &Path, target: &Path, fstype: &str, flags| {
            let fstype = std::ffi::CString::new(fstype).unwrap();
            // SAFETY: valid NUL-terminated strings; no data argument.
            let ret = unsafe {
                libc::mount(
                    c(source).as_ptr(),
                    c(target).as_ptr(),
                    fstype.as_ptr(),
                    flags,
                    std::ptr::null(),
                )
            };
            assert_eq!(ret, 0, "mount: {}", io::Error::last_os_error());
        };
        mount(Path::new("tmpfs"), &inner, "tmpfs", 0);
        fs::write(inner.join("precious"), b"in a mount").unwrap();
        mount(&host, &root_bind, "none", libc::MS_BIND | libc::MS_REC);
        // SAFETY: a valid path; no source, type or data.
        let shared = unsafe {
            libc::mount(
                std::ptr::null(),
                c(&root_bind).as_ptr(),
                std::ptr::null(),
                libc::MS_SHARED | libc::MS_REC,
                std::ptr::null(),
            )
        };
        assert_eq!(shared, 0, "{}", io::Error::last_os_error());
        assert_eq!(mounts_below(&staging).unwrap().len(), 2);

        super::super::ImageStore::open(&base.join("images"), "test").unwrap();

        assert!(!staging.exists());
        assert_eq!(fs::read(host.join("precious")).unwrap(), b"host data");
        assert_eq!(fs::read(inner.join("precious")).unwrap(), b"in a mount");
        // SAFETY: a valid path.
        unsafe { libc::umount2(c(&inner).as_ptr(), libc::MNT_DETACH) };
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn opening_the_store_removes_a_half_made_tree_without_reaching_through_its_mounts() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: mounting needs root");
            return;
        }
        let base = std::env::temp_dir().join(format!("shellgate-half-made-{}", std::process::id()));
        let _ = fs::remove_dir_all(&base);
        // Stands for the host's /dev/shm, bound into a half-made build.
        let outside = base.join("host-shm");
        fs::create_dir_all(&outside).unwrap();
        fs::write(outside.join("precious"), b"host data").unwrap();
        let staging = base.join("images/x/rootfs.new");
        let shm = staging.join("dev/shm");
        fs::create_dir_all(&shm).unwrap();
        fs::create_dir_all(staging.join("proc")).unwrap();
        let mount = |source: &str, target: &Path, fstype: &str, flags| {
            let c = |s: &str| std::ffi::CString::new(s).unwrap();
            let target = c(target.to_str().unwrap());
            let (source, fstype) = (c(source), c(fstype));
            // SAFETY: valid NUL-terminated strings; no data argument.
            let ret = unsafe {
                libc::mount(
                    source.as_ptr(),
                    target.as_ptr(),
                    fstype.as_ptr(),
                    flags,
                    std::ptr::null(),
                )
            };
            assert_eq!(ret, 0, "mount: {}", io::Error::last_os_error());
        };
        mount(outside.to_str().unwrap(), &shm, "none", libc::MS_BIND);
        mount("proc", &staging.join("proc"), "proc", 0);
        assert_eq!(mounts_below(&staging).unwrap().len(), 2);
        assert!(
            shm.join("precious").exists(),
            "the bind shows the host's file"
        );

        // The next start (any opening of the image store) cleans it up.
        super::super::ImageStore::open(&base.join("images"), "test").unwrap();

        assert!(!staging.exists());
        assert_eq!(mounts_below(&base).unwrap(), Vec::<PathBuf>::new());
        assert_eq!(
            fs::read(outside.join("precious")).unwrap(),
            b"host data",
            "the removal reached through the bind mount"
        );
        fs::remove_dir_all(&base).unwrap();
    }
}
