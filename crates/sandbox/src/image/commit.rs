//! Images committed from containers: a container's image tree with its
//! overlay upper layer applied, and its home as the home every container
//! made from the image starts with.
//!
//! The upper layer is the overlay's own record of the container's changes
//! (mounted with `userxattr`): a character device 0/0 is a whiteout (the
//! entry below is gone), a directory with `user.overlay.opaque` (or
//! `trusted.overlay.opaque`, an overlay mounted without `userxattr`) hides
//! everything below it, anything else replaces what the tree had. It is
//! applied in three passes: the entries it removes or replaces by another
//! kind go from the tree (so a copy never writes through a link of the
//! tree), the layer is copied over it (`cp -a`, blocks shared where the
//! file system allows), and the copied whiteouts and the overlay's
//! attributes go (the image is a lower layer: they would mean something
//! there). The image tree itself starts as hard links to the base's files
//! (see [`link_tree`]).

use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use crate::error::{IoContext, SandboxError};

/// The overlay's extended attributes: `user.overlay.*` (`userxattr`) and
/// `trusted.overlay.*`.
const OVERLAY_XATTR_PREFIXES: [&[u8]; 2] = [b"user.overlay.", b"trusted.overlay."];

/// Whether `meta` is an overlay whiteout: a character device 0/0.
fn is_whiteout(meta: &fs::Metadata) -> bool {
    meta.file_type().is_char_device() && meta.rdev() == 0
}

/// The overlay attributes set on `path` (not followed if a link).
fn overlay_xattrs(path: &Path) -> Vec<CString> {
    let Ok(c_path) = CString::new(path.as_os_str().as_bytes()) else {
        return Vec::new();
    };
    let mut buffer = vec![0u8; 4096];
    // SAFETY: the path is NUL-terminated and the buffer is writable for
    // its whole length.
    let length =
        unsafe { libc::llistxattr(c_path.as_ptr(), buffer.as_mut_ptr().cast(), buffer.len()) };
    let Ok(length) = usize::try_from(length) else {
        return Vec::new();
    };
    buffer[..length]
        .split(|&b| b == 0)
        .filter(|name| {
            OVERLAY_XATTR_PREFIXES
                .iter()
                .any(|prefix| name.starts_with(prefix))
        })
        .filter_map(|name| CString::new(name).ok())
        .collect()
}

/// Whether directory `path` of an upper layer is opaque.
fn is_opaque(path: &Path) -> bool {
    overlay_xattrs(path)
        .iter()
        .any(|name| name.as_bytes().ends_with(b".overlay.opaque"))
}

/// Removes `path` whatever it is (a directory with its contents); a
/// missing one is not an error.
fn remove_any(path: &Path) -> Result<(), SandboxError> {
    let result = match fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => Err(e),
    };
    result.context(|| format!("remove {}", path.display()))
}

/// Pass one: removes from `tree` what the layer `upper` removes (whiteouts,
/// opaque directories' contents) or replaces by an entry of another kind.
/// A directory of the layer leaves a real directory (never a link) in the
/// tree, so the copy's paths run through directories only.
fn clear_replaced(upper: &Path, tree: &Path) -> Result<(), SandboxError> {
    let mut pending = vec![(upper.to_owned(), tree.to_owned())];
    while let Some((from, to)) = pending.pop() {
        for entry in fs::read_dir(&from).context(|| format!("list {}", from.display()))? {
            let entry = entry.context(|| format!("list {}", from.display()))?;
            let meta = entry
                .metadata()
                .context(|| format!("stat {}", entry.path().display()))?;
            let target = to.join(entry.file_name());
            let existing = fs::symlink_metadata(&target).ok();
            if meta.is_dir() {
                let keep = existing.is_some_and(|e| e.is_dir()) && !is_opaque(&entry.path());
                if !keep {
                    remove_any(&target)?;
                }
                pending.push((entry.path(), target));
            } else if existing.is_some() {
                remove_any(&target)?;
            }
        }
    }
    Ok(())
}

/// Pass three: removes the whiteouts copied from `upper` into `tree` and the
/// overlay attributes copied onto its directories.
fn remove_overlay_marks(upper: &Path, tree: &Path) -> Result<(), SandboxError> {
    let mut pending = vec![(upper.to_owned(), tree.to_owned())];
    while let Some((from, to)) = pending.pop() {
        for name in overlay_xattrs(&to) {
            let Ok(c_path) = CString::new(to.as_os_str().as_bytes()) else {
                continue;
            };
            // SAFETY: both strings are NUL-terminated. A failure leaves an
            // attribute the overlay ignores on a single lower layer.
            unsafe { libc::lremovexattr(c_path.as_ptr(), name.as_ptr()) };
        }
        for entry in fs::read_dir(&from).context(|| format!("list {}", from.display()))? {
            let entry = entry.context(|| format!("list {}", from.display()))?;
            let meta = entry
                .metadata()
                .context(|| format!("stat {}", entry.path().display()))?;
            let target = to.join(entry.file_name());
            if is_whiteout(&meta) {
                remove_any(&target)?;
                continue;
            }
            drop_set_id_bits(&target, &meta)?;
            if meta.is_dir() {
                pending.push((entry.path(), target));
            }
        }
    }
    Ok(())
}

/// Clears the set-user-id and set-group-id bits (and a file's sticky bit)
/// of `path`, a copy of what `meta` describes. They mean nothing in a
/// container (`nosuid` mounts, `no_new_privs`), and the image's tree is on
/// the host, traversable by the sandboxes' ids and owned by the container's
/// own ids: a file a container made set-uid there would be a set-uid-root
/// program on the host. Imported images lose them the same way.
fn drop_set_id_bits(path: &Path, meta: &fs::Metadata) -> Result<(), SandboxError> {
    use std::os::unix::fs::PermissionsExt;
    let kept = match () {
        _ if meta.file_type().is_symlink() => return Ok(()),
        _ if meta.is_dir() => 0o1777,
        _ => 0o777,
    };
    let mode = meta.mode() & 0o7777;
    if mode & !kept == 0 {
        return Ok(());
    }
    fs::set_permissions(path, fs::Permissions::from_mode(mode & kept))
        .context(|| format!("chmod {}", path.display()))
}

/// [`drop_set_id_bits`] for everything under `dir` (links not followed).
fn drop_set_id_bits_below(dir: &Path) -> Result<(), SandboxError> {
    let mut pending = vec![dir.to_owned()];
    while let Some(dir) = pending.pop() {
        for entry in fs::read_dir(&dir).context(|| format!("list {}", dir.display()))? {
            let entry = entry.context(|| format!("list {}", dir.display()))?;
            let path = entry.path();
            let meta =
                fs::symlink_metadata(&path).context(|| format!("stat {}", path.display()))?;
            drop_set_id_bits(&path, &meta)?;
            if meta.is_dir() {
                pending.push(path);
            }
        }
    }
    Ok(())
}

/// Fills the empty directory `to` with hard links to the files of image tree
/// `base` (directories made anew): an image's files are never written in
/// place (a container's changes are copies up into its own layer, a new
/// revision is a new tree, and the passes here replace what they change),
/// so the committed image costs its changes alone.
pub(super) fn link_tree(base: &Path, to: &Path) -> Result<(), SandboxError> {
    run_cp(&["-a", "--link", "-T"], base, to)
}

/// Copies `from` onto `to` (merged into what is there), with owners, modes,
/// extended attributes, holes and, where the file system allows, shared
/// blocks; an existing non-directory is replaced, never written through.
pub(super) fn copy_onto(from: &Path, to: &Path) -> Result<(), SandboxError> {
    run_cp(
        &[
            "-a",
            "--reflink=auto",
            "--sparse=always",
            "--remove-destination",
            "-T",
        ],
        from,
        to,
    )
}

fn run_cp(options: &[&str], from: &Path, to: &Path) -> Result<(), SandboxError> {
    let output = std::process::Command::new("cp")
        .args(options)
        .arg(from)
        .arg(to)
        .output()
        .context(|| "run cp".into())?;
    if output.status.success() {
        Ok(())
    } else {
        Err(SandboxError::Setup(format!(
            "copying {} failed: {}",
            from.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        )))
    }
}

/// Applies the overlay upper layer `upper` to `tree`.
pub(super) fn apply_upper(upper: &Path, tree: &Path) -> Result<(), SandboxError> {
    if !upper.is_dir() {
        return Ok(());
    }
    clear_replaced(upper, tree)?;
    copy_onto(upper, tree)?;
    remove_overlay_marks(upper, tree)
}

/// Puts `home` in `tree` as its sandbox user's home (`home_path`, relative),
/// replacing what the tree had there. Both directories on the way must be
/// real directories of the tree: a link there would lead out of it.
pub(super) fn install_home(home: &Path, tree: &Path, home_path: &str) -> Result<(), SandboxError> {
    let mut at = tree.to_owned();
    for part in home_path.split('/').filter(|p| !p.is_empty()) {
        at.push(part);
        match fs::symlink_metadata(&at) {
            Ok(meta) if meta.is_dir() => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                fs::create_dir(&at).context(|| format!("create {}", at.display()))?;
            }
            _ => {
                return Err(SandboxError::Setup(format!(
                    "the image's {home_path} is not a directory"
                )))
            }
        }
    }
    if !home.is_dir() {
        return Ok(());
    }
    fs::remove_dir_all(&at).context(|| format!("empty {}", at.display()))?;
    copy_onto(home, &at)?;
    drop_set_id_bits_below(&at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scratch::Scratch;

    fn whiteout(path: &Path) -> bool {
        let c_path = CString::new(path.as_os_str().as_bytes()).expect("path");
        // SAFETY: a NUL-terminated path; mknod of a 0/0 character device.
        unsafe { libc::mknod(c_path.as_ptr(), libc::S_IFCHR | 0o600, 0) == 0 }
    }

    fn set_opaque(path: &Path) -> bool {
        let c_path = CString::new(path.as_os_str().as_bytes()).expect("path");
        let name = CString::new("user.overlay.opaque").expect("name");
        // SAFETY: NUL-terminated strings and a one-byte value.
        unsafe { libc::lsetxattr(c_path.as_ptr(), name.as_ptr(), b"y".as_ptr().cast(), 1, 0) == 0 }
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    #[test]
    fn an_upper_layer_adds_replaces_removes_and_hides() {
        let scratch = Scratch::new("apply");
        let (upper, tree) = (scratch.0.join("upper"), scratch.0.join("tree"));
        for dir in [
            "tree/etc",
            "tree/gone",
            "tree/hidden",
            "tree/usr/bin",
            "upper/etc",
        ] {
            fs::create_dir_all(scratch.0.join(dir)).expect("mkdir");
        }
        fs::write(tree.join("etc/kept"), "kept").expect("write");
        fs::write(tree.join("etc/changed"), "old").expect("write");
        fs::write(tree.join("hidden/old"), "old").expect("write");
        std::os::unix::fs::symlink("/etc", tree.join("link")).expect("symlink");
        fs::write(upper.join("etc/changed"), "new").expect("write");
        fs::write(upper.join("etc/added"), "added").expect("write");
        // A directory where the tree had a link: written in the tree, not
        // through the link.
        fs::create_dir(upper.join("link")).expect("mkdir");
        fs::write(upper.join("link/inside"), "inside").expect("write");
        fs::create_dir(upper.join("hidden")).expect("mkdir");
        fs::write(upper.join("hidden/new"), "new").expect("write");
        let marks = whiteout(&upper.join("gone")) && set_opaque(&upper.join("hidden"));
        apply_upper(&upper, &tree).expect("apply");
        let read = |p: &str| fs::read_to_string(tree.join(p)).unwrap_or_default();
        assert_eq!(
            (read("etc/kept"), read("etc/changed"), read("etc/added")),
            ("kept".into(), "new".into(), "added".into()),
            "tree: {:?}",
            names(&tree.join("etc"))
        );
        let link = fs::symlink_metadata(tree.join("link")).expect("stat");
        assert!(link.is_dir(), "the link became a directory: {link:?}");
        assert_eq!(read("link/inside"), "inside");
        if marks {
            assert_eq!(names(&tree), vec!["etc", "hidden", "link", "usr"]);
            assert_eq!(names(&tree.join("hidden")), vec!["new"]);
            assert!(
                overlay_xattrs(&tree.join("hidden")).is_empty(),
                "the opaque mark stays in the layer"
            );
        }
    }

    #[test]
    fn a_home_replaces_the_trees_and_a_link_on_the_way_is_refused() {
        let scratch = Scratch::new("home");
        let (home, tree) = (scratch.0.join("home"), scratch.0.join("tree"));
        fs::create_dir_all(tree.join("home/user")).expect("mkdir");
        fs::write(tree.join("home/user/old"), "old").expect("write");
        fs::create_dir_all(&home).expect("mkdir");
        fs::write(home.join("note"), "note").expect("write");
        install_home(&home, &tree, "/home/user").expect("install");
        assert_eq!(names(&tree.join("home/user")), vec!["note"]);
        let other = scratch.0.join("other");
        fs::create_dir_all(other.join("home")).expect("mkdir");
        std::os::unix::fs::symlink(&tree, other.join("home/user")).expect("symlink");
        let refused = install_home(&home, &other, "/home/user");
        assert!(refused.is_err(), "a link on the way: {refused:?}");
    }

    #[test]
    fn set_id_bits_a_container_gave_do_not_reach_the_image() {
        use std::os::unix::fs::PermissionsExt;
        let scratch = Scratch::new("setid");
        let (upper, home, tree) = (
            scratch.0.join("upper"),
            scratch.0.join("home"),
            scratch.0.join("tree"),
        );
        for dir in ["upper/bin", "upper/shared", "home/d", "tree"] {
            fs::create_dir_all(scratch.0.join(dir)).expect("mkdir");
        }
        let chmod = |path: &Path, mode: u32| {
            fs::set_permissions(path, fs::Permissions::from_mode(mode)).expect("chmod")
        };
        fs::write(upper.join("bin/shell"), "x").expect("write");
        chmod(&upper.join("bin/shell"), 0o6755);
        chmod(&upper.join("shared"), 0o3777);
        fs::write(home.join("d/tool"), "x").expect("write");
        chmod(&home.join("d/tool"), 0o4711);
        apply_upper(&upper, &tree).expect("apply");
        install_home(&home, &tree, "/home/user").expect("install");
        let mode = |p: &str| fs::symlink_metadata(tree.join(p)).expect("stat").mode() & 0o7777;
        assert_eq!(mode("bin/shell"), 0o755);
        assert_eq!(mode("shared"), 0o1777, "a directory keeps its sticky bit");
        assert_eq!(mode("home/user/d/tool"), 0o711);
    }
}
