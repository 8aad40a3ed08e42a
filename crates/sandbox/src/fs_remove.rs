//! A directory removed with its whole tree, or refused before anything is
//! removed (files by path's recursive remove, E2B's `Remove`).
//!
//! Removing a tree entry by entry and failing at the end (a mount point
//! such as `/mnt/data` emptied, then refused) leaves a client told
//! "refused" about a tree that lost its contents. So the tree is walked
//! first, as the sandbox user who will remove it, and every obstacle the
//! kernel would raise is found before the first unlink:
//! - a mount point at the top or anywhere inside (`EBUSY`);
//! - a directory whose entries the user may not remove (`faccessat` for
//!   write and search: a read-only file system, another owner's mode, an
//!   ACL) or may not list;
//! - an immutable or append-only entry or directory;
//! - a sticky directory's entry that neither it nor the directory is the
//!   user's;
//! - a tree deeper than [`MAX_DEPTH`].
//!
//! Only then is it removed. What can still fail part way (the tree changed
//! between the check and the removal: a command made a read-only
//! directory meanwhile) is reported with the number of entries removed, so
//! the answer never says nothing changed when something did.

use std::ffi::{CStr, CString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{Access, AtFlags, FileType, Mode, OFlags, Statx, StatxAttributes, StatxFlags};
use rustix::io::Errno;

/// Deepest directory tree a recursive remove descends (each level holds a
/// descriptor and a stack frame).
pub const MAX_DEPTH: usize = 1024;

/// Why a tree was not removed whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemoveError {
    /// Found before anything was removed: `path` (the directory or an
    /// entry inside it) cannot be removed, for `reason`; `errno` is what
    /// the kernel would have answered.
    Refused {
        path: String,
        reason: String,
        errno: Errno,
    },
    /// Removing `path` failed with `errno` after `removed` entries inside
    /// the directory were removed (0: nothing was).
    Stopped {
        path: String,
        errno: Errno,
        removed: u64,
    },
}

fn refused(path: &str, reason: impl Into<String>, errno: Errno) -> RemoveError {
    RemoveError::Refused {
        path: path.to_owned(),
        reason: reason.into(),
        errno,
    }
}

/// A directory of the tree, with what its entries' checks need.
struct Dir<'a> {
    fd: BorrowedFd<'a>,
    stat: Statx,
}

impl<'a> Dir<'a> {
    fn of(fd: BorrowedFd<'a>, path: &str) -> Result<Self, RemoveError> {
        let stat = rustix::fs::statx(fd, c"", AtFlags::EMPTY_PATH, StatxFlags::BASIC_STATS)
            .map_err(|errno| refused(path, "it cannot be examined", errno))?;
        Ok(Self { fd, stat })
    }

    /// Whether the sandbox user may remove entries of it: write and search
    /// permission as the kernel judges them (mode, ACLs, a read-only file
    /// system), and not immutable or append-only.
    fn check_writable(&self, path: &str) -> Result<(), RemoveError> {
        if frozen(&self.stat) {
            return Err(refused(
                path,
                "it is immutable or append-only, so nothing in it can be removed",
                Errno::PERM,
            ));
        }
        rustix::fs::accessat(
            self.fd,
            c".",
            Access::WRITE_OK | Access::EXEC_OK,
            AtFlags::EACCESS,
        )
        .map_err(|errno| {
            let why = if errno == Errno::ROFS {
                "it is on a read-only file system"
            } else {
                "the sandbox user may not remove entries from it"
            };
            refused(path, why, errno)
        })
    }

    /// Its entry `name` checked for removal by the sandbox user (the
    /// directory's own permission is [`Dir::check_writable`]); `None` if
    /// it is gone already.
    fn check_entry(&self, name: &CStr, path: &str) -> Result<Option<Statx>, RemoveError> {
        let stat = match rustix::fs::statx(
            self.fd,
            name,
            AtFlags::SYMLINK_NOFOLLOW,
            StatxFlags::BASIC_STATS,
        ) {
            Ok(stat) => stat,
            Err(Errno::NOENT) => return Ok(None),
            Err(errno) => return Err(refused(path, "it cannot be examined", errno)),
        };
        if self.holds_mount(&stat) {
            return Err(refused(
                path,
                "it is a mount point (remove what is inside it instead)",
                Errno::BUSY,
            ));
        }
        if frozen(&stat) {
            return Err(refused(path, "it is immutable or append-only", Errno::PERM));
        }
        let me = rustix::process::geteuid().as_raw();
        let sticky = u32::from(self.stat.stx_mode) & libc::S_ISVTX != 0;
        if sticky && stat.stx_uid != me && self.stat.stx_uid != me {
            return Err(refused(
                path,
                "its directory is sticky and neither it nor the directory is the sandbox user's",
                Errno::PERM,
            ));
        }
        Ok(Some(stat))
    }

    /// Whether `entry`, one of its entries, is the root of a mount: the
    /// kernel's attribute where it reports one (Linux 5.8), else a device
    /// other than the directory's (which misses a bind mount within one
    /// file system).
    fn holds_mount(&self, entry: &Statx) -> bool {
        if entry
            .stx_attributes_mask
            .contains(StatxAttributes::MOUNT_ROOT)
        {
            return entry.stx_attributes.contains(StatxAttributes::MOUNT_ROOT);
        }
        (entry.stx_dev_major, entry.stx_dev_minor)
            != (self.stat.stx_dev_major, self.stat.stx_dev_minor)
    }
}

fn frozen(stat: &Statx) -> bool {
    let frozen = StatxAttributes::IMMUTABLE | StatxAttributes::APPEND;
    stat.stx_attributes_mask.intersects(frozen) && stat.stx_attributes.intersects(frozen)
}

fn is_directory(stat: &Statx) -> bool {
    FileType::from_raw_mode(u32::from(stat.stx_mode)) == FileType::Directory
}

fn open_directory(parent: BorrowedFd<'_>, name: &CStr) -> Result<OwnedFd, Errno> {
    rustix::fs::openat(
        parent,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

fn names(dir: &OwnedFd) -> Result<Vec<CString>, Errno> {
    Ok(rustix::fs::Dir::read_from(dir)?
        .filter_map(Result::ok)
        .map(|entry| entry.file_name().to_owned())
        .filter(|n| n.as_bytes() != b"." && n.as_bytes() != b"..")
        .collect())
}

fn child_path(path: &str, name: &CStr) -> String {
    format!("{path}/{}", String::from_utf8_lossy(name.to_bytes()))
}

/// Checks that everything inside the directory `name` of `parent` can be
/// removed, depth first.
fn check_inside(
    parent: BorrowedFd<'_>,
    name: &CStr,
    path: &str,
    depth: usize,
) -> Result<(), RemoveError> {
    if depth >= MAX_DEPTH {
        return Err(refused(
            path,
            format!("it is nested deeper than {MAX_DEPTH} directories"),
            Errno::LOOP,
        ));
    }
    let fd = match open_directory(parent, name) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(()),
        Err(errno) => return Err(refused(path, "it cannot be listed", errno)),
    };
    let children = names(&fd).map_err(|errno| refused(path, "it cannot be listed", errno))?;
    if children.is_empty() {
        return Ok(());
    }
    let dir = Dir::of(fd.as_fd(), path)?;
    dir.check_writable(path)?;
    for child in children {
        let at = child_path(path, &child);
        if let Some(stat) = dir.check_entry(&child, &at)? {
            if is_directory(&stat) {
                check_inside(dir.fd, &child, &at, depth + 1)?;
            }
        }
    }
    Ok(())
}

/// Removes everything inside the directory `name` of `parent`, never
/// following a link, counting what it removed.
fn empty(
    parent: BorrowedFd<'_>,
    name: &CStr,
    path: &str,
    depth: usize,
    removed: &mut u64,
) -> Result<(), RemoveError> {
    let stopped = |path: &str, errno, removed: u64| RemoveError::Stopped {
        path: path.to_owned(),
        errno,
        removed,
    };
    if depth >= MAX_DEPTH {
        return Err(stopped(path, Errno::LOOP, *removed));
    }
    let dir = open_directory(parent, name).map_err(|errno| stopped(path, errno, *removed))?;
    let children = names(&dir).map_err(|errno| stopped(path, errno, *removed))?;
    for child in children {
        let at = child_path(path, &child);
        let is_dir = rustix::fs::statat(&dir, child.as_c_str(), AtFlags::SYMLINK_NOFOLLOW)
            .is_ok_and(|s| FileType::from_raw_mode(s.st_mode) == FileType::Directory);
        if is_dir {
            empty(dir.as_fd(), &child, &at, depth + 1, removed)?;
        }
        let flags = if is_dir {
            AtFlags::REMOVEDIR
        } else {
            AtFlags::empty()
        };
        match rustix::fs::unlinkat(&dir, child.as_c_str(), flags) {
            Ok(()) => *removed += 1,
            Err(Errno::NOENT) => {}
            Err(errno) => return Err(stopped(&at, errno, *removed)),
        }
    }
    Ok(())
}

/// Removes the directory `name` of `parent` (a descriptor, `O_PATH` will
/// do, of the directory `parent_path` holding it; the directory is `path`)
/// with everything in it, after checking that all of it can be removed.
pub fn remove_tree(
    parent: BorrowedFd<'_>,
    parent_path: &str,
    name: &CStr,
    path: &str,
) -> Result<(), RemoveError> {
    let holder = Dir::of(parent, parent_path)?;
    if holder.check_entry(name, path)?.is_none() {
        return Err(refused(path, "it does not exist", Errno::NOENT));
    }
    holder
        .check_writable(parent_path)
        .map_err(|error| match error {
            RemoveError::Refused { reason, errno, .. } => refused(
                path,
                format!("{parent_path}, which holds it: {reason}"),
                errno,
            ),
            other => other,
        })?;
    check_inside(parent, name, path, 0)?;
    let mut removed = 0;
    empty(parent, name, path, 0, &mut removed)?;
    rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR).map_err(|errno| RemoveError::Stopped {
        path: path.to_owned(),
        errno,
        removed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::path::{Path, PathBuf};

    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("fs-remove-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn open_path(dir: &Path) -> OwnedFd {
        rustix::fs::open(
            dir,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .unwrap()
    }

    fn remove(base: &Path, name: &CStr) -> Result<(), RemoveError> {
        let path = base.join(name.to_str().unwrap());
        remove_tree(
            open_path(base).as_fd(),
            base.to_str().unwrap(),
            name,
            path.to_str().unwrap(),
        )
    }

    /// Every path below `dir`, sorted.
    fn tree(dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() && !path.is_symlink() {
                out.extend(tree(&path));
            }
            out.push(path);
        }
        out.sort();
        out
    }

    /// Runs `body` on a thread of its own as an unprivileged user (the
    /// sandbox user has no capability either; root's would let any
    /// removal through). A thread's ids are its own at the system call
    /// level, so the rest of the test process keeps its own.
    fn unprivileged<T: Send + 'static>(body: impl FnOnce() -> T + Send + 'static) -> T {
        std::thread::spawn(move || {
            if rustix::process::geteuid().is_root() {
                let nobody = rustix::process::Uid::from_raw(65534);
                rustix::thread::set_thread_res_uid(nobody, nobody, nobody).unwrap();
            }
            body()
        })
        .join()
        .unwrap()
    }

    #[test]
    fn a_tree_is_removed_whole_without_following_links() {
        let base = temp("whole");
        let tree_at = base.join("tree");
        std::fs::create_dir_all(tree_at.join("a/b/c")).unwrap();
        std::fs::write(tree_at.join("a/b/c/f"), b"x").unwrap();
        std::fs::write(tree_at.join("g"), b"x").unwrap();
        let outside = base.join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("kept"), b"x").unwrap();
        std::os::unix::fs::symlink(&outside, tree_at.join("link")).unwrap();
        remove(&base, c"tree").unwrap();
        assert!(!tree_at.exists());
        assert!(outside.join("kept").exists());
        std::fs::remove_dir_all(&base).unwrap();
    }

    /// A directory whose entries the user may not remove, deep in the
    /// tree among entries it may: refused before any of them goes. So is
    /// a sticky directory's entry of another owner.
    #[test]
    fn an_entry_that_cannot_be_removed_refuses_the_whole_tree_first() {
        let base = temp("refused");
        std::fs::set_permissions(&base, PermissionsExt::from_mode(0o777)).unwrap();
        let made = base.clone();
        let (answer, before, after) = unprivileged(move || {
            let tree_at = made.join("tree");
            let locked = tree_at.join("m/locked");
            std::fs::create_dir_all(&locked).unwrap();
            for i in 0..20 {
                std::fs::write(tree_at.join(format!("f{i}")), b"x").unwrap();
            }
            std::fs::write(locked.join("inner"), b"x").unwrap();
            std::fs::set_permissions(&locked, PermissionsExt::from_mode(0o555)).unwrap();
            let before = tree(&tree_at);
            let answer = remove(&made, c"tree");
            let after = tree(&tree_at);
            std::fs::set_permissions(&locked, PermissionsExt::from_mode(0o755)).unwrap();
            (answer, before, after)
        });
        match answer {
            Err(RemoveError::Refused { path, errno, .. }) => {
                assert_eq!(path, base.join("tree/m/locked").to_str().unwrap());
                assert_eq!(errno, Errno::ACCESS);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(after, before);

        // A sticky directory (as /tmp is) holding root's file.
        let sticky = base.join("sticky");
        std::fs::create_dir(&sticky).unwrap();
        std::fs::set_permissions(&sticky, PermissionsExt::from_mode(0o1777)).unwrap();
        std::fs::write(sticky.join("roots"), b"x").unwrap();
        let made = base.clone();
        let answer = unprivileged(move || {
            std::fs::write(made.join("sticky/mine"), b"x").unwrap();
            remove(&made, c"sticky")
        });
        assert!(
            matches!(&answer, Err(RemoveError::Refused { errno: Errno::PERM, path, .. })
                if path.ends_with("sticky/roots")),
            "{answer:?}"
        );
        assert!(sticky.join("mine").exists() && sticky.join("roots").exists());
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_missing_directory_and_a_deep_tree_are_refused_before_anything_goes() {
        let base = temp("deep");
        assert!(matches!(
            remove(&base, c"none"),
            Err(RemoveError::Refused {
                errno: Errno::NOENT,
                ..
            })
        ));
        // MAX_DEPTH + 1 levels, made by relative paths (the whole path is
        // longer than PATH_MAX).
        std::fs::create_dir(base.join("deep")).unwrap();
        std::fs::write(base.join("deep/top-file"), b"x").unwrap();
        let mut chain = vec![open_directory(open_path(&base).as_fd(), c"deep").unwrap()];
        for _ in 0..=MAX_DEPTH {
            let last = chain.last().unwrap();
            rustix::fs::mkdirat(last, c"d", Mode::from_raw_mode(0o755)).unwrap();
            let next = open_directory(last.as_fd(), c"d").unwrap();
            chain.push(next);
        }
        assert!(matches!(
            remove(&base, c"deep"),
            Err(RemoveError::Refused {
                errno: Errno::LOOP,
                ..
            })
        ));
        assert!(base.join("deep/top-file").exists());
        // Cleaned up deepest first.
        chain.pop();
        while let Some(dir) = chain.pop() {
            rustix::fs::unlinkat(&dir, c"d", AtFlags::REMOVEDIR).unwrap();
        }
        std::fs::remove_dir_all(&base).unwrap();
    }
}
