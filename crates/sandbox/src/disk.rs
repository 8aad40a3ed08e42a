//! A container's persistent disk, with a hard size quota.
//!
//! Each container's persistent files (`/mnt/data`, its home directory and,
//! for rootfs images, its writable root layer) live in one sparse ext4 image
//! of the quota's size. A command that fills it gets `ENOSPC`; the host's
//! disk is never at risk. (This kernel has no quota format for ext4 or XFS
//! project quotas, and a per-container file system is also the stronger
//! tenant boundary.)
//!
//! The image is loop-mounted by the helper inside the container's own mount
//! namespace, never on the host: when the container's processes end, the
//! mount and its loop device (`LO_FLAGS_AUTOCLEAR`) go with them, so a crash
//! cannot leak a mount.
//!
//! Formatting takes several milliseconds, so the engine keeps a small pool of
//! formatted images of the default size; creating a container renames one.
//!
//! The file system has no journal and no reserved blocks for online growth
//! (`^has_journal,^resize_inode`; no disk is ever resized). A journal cost
//! every live container a kernel thread (`jbd2`) and its buffers, and the
//! reserved descriptor blocks made an empty 4 GiB disk take 2.2 MB of the
//! host's instead of 180 KB. What the journal bought is consistency after
//! the *host* crashes mid-write; a server that stops or dies does not need
//! it (the kernel still holds the file system and writes it back, and it is
//! unmounted cleanly when the container's processes end), nor does a
//! suspend. So the superblock is read before every fresh mount: a disk
//! without a journal that was not unmounted cleanly (or has errors marked)
//! is checked with `e2fsck -p` first, unless a loop device still holds it
//! (its file system is live: that device is mounted again, as with
//! `reuse`); a disk `e2fsck -p` cannot repair is refused, never mounted.
//! Disks formatted with a journal (before this choice) keep it, and the
//! kernel replays it as it always did.
//!
//! Without root (or without `mkfs.ext4`), disks are plain directories and the
//! quota is not enforced; the engine warns once.

use std::fs::{self, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use crate::sys;
use shellgate_sandbox_api::setup_error::{SetupError, SetupResult, SetupStep, StepContext};

/// Where the image's directories are, relative to its root.
pub const DATA_DIR: &str = "data";
pub const HOME_DIR: &str = "home";
pub const WORKSPACE_DIR: &str = "workspace";
pub const UPPER_DIR: &str = "upper";
pub const WORK_DIR: &str = "work";

/// How the engine stores container disks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiskKind {
    /// Sparse ext4 images with a hard size.
    Image,
    /// Plain directories: no quota.
    Directory,
}

/// Chooses the disk kind for this host.
pub fn detect(rootless: bool) -> (DiskKind, Option<String>) {
    if rootless {
        return (
            DiskKind::Directory,
            Some("running without root: disk quotas are off".into()),
        );
    }
    // Looked up, not run: an engine opens on every one-shot `exec`.
    if !sys::on_path("mkfs.ext4") {
        return (
            DiskKind::Directory,
            Some("mkfs.ext4 not found (install e2fsprogs): disk quotas are off".into()),
        );
    }
    (DiskKind::Image, None)
}

/// Formats a sparse ext4 image of `bytes` at `path` whose root is owned by
/// the container's root (`owner`).
pub async fn format_image(path: &Path, bytes: u64, owner: (u32, u32)) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    // Only the server (and the helper, as root) ever opens a disk image.
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.set_len(bytes)?;
    drop(file);
    // Formatting is background work (the pool): lowest CPU priority, so it
    // never slows a command that is running meanwhile.
    let output = tokio::process::Command::new("nice")
        .args(["-n", "19", "mkfs.ext4", "-q", "-F", "-m", "0", "-b", "4096"])
        .args(["-O", "^has_journal,^resize_inode"])
        .arg("-E")
        .arg(format!(
            "nodiscard,lazy_itable_init=1,lazy_journal_init=1,root_owner={}:{}",
            owner.0, owner.1
        ))
        .arg(path)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .stdin(Stdio::null())
        .output()
        .await?;
    if !output.status.success() {
        let _ = fs::remove_file(path);
        return Err(io::Error::other(format!(
            "mkfs.ext4 failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    Ok(())
}

const LOOP_CTL_GET_FREE: libc::c_ulong = 0x4C82;
const LOOP_CONFIGURE: libc::c_ulong = 0x4C0A;
const LOOP_GET_STATUS64: libc::c_ulong = 0x4C05;
const LO_FLAGS_AUTOCLEAR: u32 = 4;

#[repr(C)]
struct LoopInfo64 {
    device: u64,
    inode: u64,
    rdevice: u64,
    offset: u64,
    size_limit: u64,
    number: u32,
    encrypt_type: u32,
    encrypt_key_size: u32,
    flags: u32,
    file_name: [u8; 64],
    crypt_name: [u8; 64],
    encrypt_key: [u8; 32],
    init: [u64; 2],
}

#[repr(C)]
struct LoopConfig {
    fd: u32,
    block_size: u32,
    info: LoopInfo64,
    reserved: [u64; 8],
}

/// Whether the loop device open as `device` is attached to `backing`.
fn attached_to(device: &fs::File, backing: &fs::File) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = backing.metadata() else {
        return false;
    };
    // SAFETY: LoopInfo64 is plain data; zero is a valid value.
    let mut info: LoopInfo64 = unsafe { std::mem::zeroed() };
    // SAFETY: LOOP_GET_STATUS64 fills the loop_info64 we pass, which
    // outlives the call.
    let ret = unsafe {
        libc::ioctl(
            device.as_raw_fd(),
            LOOP_GET_STATUS64,
            &mut info as *mut LoopInfo64,
        )
    };
    ret == 0 && info.device == meta.dev() && info.inode == meta.ino()
}

fn mount_device(device_path: &Path, image: &Path, target: &Path) -> SetupResult<()> {
    sys::mount(
        Some(device_path),
        target,
        Some("ext4"),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOATIME,
        Some("errors=remount-ro"),
    )
    .step(SetupStep::MountDisk, || {
        format!("mount disk image {}", image.display())
    })
}

/// Mounts `image` at `target` and returns the loop device number it is on.
/// Runs in a helper, inside a private mount namespace.
///
/// One disk must never have two live ext4 instances (two loop devices on one
/// image would each cache and write its metadata: corruption). A stopped
/// container's files may still be open through the device it was last on
/// (a download, a file view), keeping that file system alive; so when
/// `reuse` names a device that is still attached to this very image, it is
/// mounted again and the kernel hands back the same superblock, exactly as
/// a bind mount would. The device is verified while held open, so it can
/// neither detach nor be given to another image in between.
pub fn mount_image(image: &Path, target: &Path, reuse: Option<u32>) -> SetupResult<u32> {
    let backing = OpenOptions::new()
        .read(true)
        .write(true)
        .open(image)
        .step(SetupStep::MountDisk, || {
            format!("open disk image {}", image.display())
        })?;
    if let Some(number) = reuse {
        let device_path = PathBuf::from(format!("/dev/loop{number}"));
        if let Ok(device) = OpenOptions::new().read(true).write(true).open(&device_path) {
            if attached_to(&device, &backing) {
                mount_device(&device_path, image, target)?;
                drop(device);
                return Ok(number);
            }
        }
    }
    if needs_check(&backing).step(SetupStep::MountDisk, || {
        format!("read the superblock of {}", image.display())
    })? {
        if let Some((number, device_path)) = attached_device(image, &backing) {
            mount_device(&device_path, image, target)?;
            return Ok(number);
        }
        check(image)?;
    }
    let control = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/loop-control")
        .step(SetupStep::MountDisk, || "open /dev/loop-control".into())?;
    // Another helper may claim the device we were offered: retry.
    for _ in 0..64 {
        // SAFETY: LOOP_CTL_GET_FREE takes no argument and returns a number.
        let number = unsafe { libc::ioctl(control.as_raw_fd(), LOOP_CTL_GET_FREE) };
        if number < 0 {
            return Err(SetupError::last_os(
                SetupStep::MountDisk,
                "LOOP_CTL_GET_FREE",
            ));
        }
        let device_path = PathBuf::from(format!("/dev/loop{number}"));
        let device = match OpenOptions::new().read(true).write(true).open(&device_path) {
            Ok(device) => device,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => {
                return Err(SetupError::os(
                    SetupStep::MountDisk,
                    format!("open {}", device_path.display()),
                    e,
                ))
            }
        };
        // SAFETY: LoopConfig is plain data; zero is a valid value.
        let mut config: LoopConfig = unsafe { std::mem::zeroed() };
        config.fd = backing.as_raw_fd() as u32;
        config.info.flags = LO_FLAGS_AUTOCLEAR;
        // SAFETY: `config` is a valid loop_config that outlives the call.
        let ret = unsafe {
            libc::ioctl(
                device.as_raw_fd(),
                LOOP_CONFIGURE,
                &config as *const LoopConfig,
            )
        };
        if ret < 0 {
            let error = io::Error::last_os_error();
            if error.raw_os_error() == Some(libc::EBUSY) {
                continue;
            }
            return Err(SetupError::os(
                SetupStep::MountDisk,
                format!("LOOP_CONFIGURE {}", device_path.display()),
                error,
            ));
        }
        let mounted = mount_device(&device_path, image, target);
        // With AUTOCLEAR the device detaches once both this descriptor and
        // the mount are gone.
        drop(device);
        return mounted.map(|()| number as u32);
    }
    Err(SetupError::other(
        SetupStep::MountDisk,
        "no free loop device",
        "",
    ))
}

/// Where ext4's superblock starts, and the fields of it read here.
const SUPERBLOCK_OFFSET: u64 = 1024;
const SB_MAGIC: usize = 0x38;
const SB_STATE: usize = 0x3A;
const SB_FEATURE_COMPAT: usize = 0x5C;
const EXT4_MAGIC: u16 = 0xEF53;
/// `s_state`: unmounted cleanly; errors found.
const STATE_VALID: u16 = 1;
const STATE_ERRORS: u16 = 2;
const COMPAT_HAS_JOURNAL: u32 = 4;

/// Whether the ext4 image open as `file` must be checked before a fresh
/// mount: it has no journal, and its superblock says it was not unmounted
/// cleanly (the host went down while it was mounted, or it is mounted now)
/// or that errors were found. Not ext4 at all: no (the mount refuses it).
pub fn needs_check(file: &fs::File) -> io::Result<bool> {
    use std::os::unix::fs::FileExt;
    let mut block = [0u8; 0x60];
    file.read_exact_at(&mut block, SUPERBLOCK_OFFSET)?;
    let u16_at = |at: usize| u16::from_le_bytes([block[at], block[at + 1]]);
    let u32_at =
        |at: usize| u32::from_le_bytes([block[at], block[at + 1], block[at + 2], block[at + 3]]);
    if u16_at(SB_MAGIC) != EXT4_MAGIC || u32_at(SB_FEATURE_COMPAT) & COMPAT_HAS_JOURNAL != 0 {
        return Ok(false);
    }
    let state = u16_at(SB_STATE);
    Ok(state & STATE_VALID == 0 || state & STATE_ERRORS != 0)
}

/// A loop device still attached to `image` (open as `backing`), if any: its
/// file system is live (a container of a previous server still ending, a
/// view), so it must be mounted again, never checked nor attached twice.
/// Looked for only for a disk that was not unmounted cleanly, so the walk
/// over every loop device is rare.
fn attached_device(image: &Path, backing: &fs::File) -> Option<(u32, PathBuf)> {
    let name = image.as_os_str().as_encoded_bytes();
    for entry in fs::read_dir("/sys/block").ok()?.flatten() {
        let file_name = entry.file_name();
        let Some(number) = file_name
            .to_str()
            .and_then(|n| n.strip_prefix("loop"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(attached) = fs::read(entry.path().join("loop/backing_file")) else {
            continue;
        };
        if attached.strip_suffix(b"\n").unwrap_or(&attached) != name {
            continue;
        }
        let device_path = PathBuf::from(format!("/dev/loop{number}"));
        // Verified by device and inode, not by name, while held open.
        if let Ok(device) = OpenOptions::new().read(true).write(true).open(&device_path) {
            if attached_to(&device, backing) {
                return Some((number, device_path));
            }
        }
    }
    None
}

/// `e2fsck -p` on a disk that is mounted nowhere; refuses the disk when it
/// cannot be repaired without a person deciding (exit status 4 and above).
fn check(image: &Path) -> SetupResult<()> {
    let what = || format!("e2fsck -p {}", image.display());
    let status = std::process::Command::new("e2fsck")
        .arg("-p")
        .arg(image)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .step(SetupStep::MountDisk, what)?;
    // 0: clean; 1: errors corrected; 2: corrected, "reboot" (a root file
    // system's concern, not an image's).
    match status.code() {
        Some(0..=3) => Ok(()),
        code => Err(SetupError::other(
            SetupStep::MountDisk,
            what(),
            format!("the disk has errors e2fsck -p cannot repair (exit status {code:?})"),
        )),
    }
}

/// Makes the standard directories in a mounted (or plain) disk root.
pub fn prepare_layout(
    root: &Path,
    sandbox: (u32, u32),
    container_root: (u32, u32),
) -> SetupResult<()> {
    use std::os::unix::fs::{chown, DirBuilderExt};
    for (name, owner, mode) in [
        (DATA_DIR, sandbox, 0o755),
        (HOME_DIR, sandbox, 0o750),
        (WORKSPACE_DIR, sandbox, 0o755),
        (UPPER_DIR, container_root, 0o755),
        (WORK_DIR, container_root, 0o700),
    ] {
        let dir = root.join(name);
        match fs::DirBuilder::new().mode(mode).create(&dir) {
            Ok(()) => chown(&dir, Some(owner.0), Some(owner.1))
                .step(SetupStep::PrepareDisk, || {
                    format!("chown {}", dir.display())
                })?,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                return Err(SetupError::os(
                    SetupStep::PrepareDisk,
                    format!("mkdir {}", dir.display()),
                    e,
                ))
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scratch::Scratch;

    /// A formatted image in a fresh folder, or `None` without `mkfs.ext4`.
    fn formatted(extra: &[&str]) -> Option<(Scratch, PathBuf)> {
        let dir = Scratch::new("disk-check");
        let image = dir.path().join("disk.img");
        fs::File::create(&image).ok()?.set_len(64 << 20).ok()?;
        let status = std::process::Command::new("mkfs.ext4")
            .args(["-q", "-F"])
            .args(extra)
            .arg(&image)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .ok()?;
        status.success().then_some((dir, image))
    }

    /// Sets `s_state` as the kernel would leave it (`debugfs` keeps the
    /// superblock's checksum valid, as a crash does).
    fn set_state(image: &Path, state: u16) {
        let status = std::process::Command::new("debugfs")
            .args(["-w", "-R", &format!("ssv state {state}")])
            .arg(image)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
    }

    fn open(image: &Path) -> fs::File {
        fs::File::open(image).unwrap()
    }

    #[test]
    fn only_a_journal_less_disk_left_unclean_or_with_errors_is_checked() {
        let Some((_dir, image)) = formatted(&["-O", "^has_journal,^resize_inode"]) else {
            eprintln!("mkfs.ext4 not found: skipped");
            return;
        };
        assert!(
            !needs_check(&open(&image)).unwrap(),
            "a fresh disk is clean"
        );
        set_state(&image, 0);
        assert!(needs_check(&open(&image)).unwrap(), "left mounted");
        set_state(&image, STATE_VALID | STATE_ERRORS);
        assert!(needs_check(&open(&image)).unwrap(), "errors marked");
        // The check repairs and marks it clean again.
        set_state(&image, 0);
        check(&image).unwrap();
        assert!(!needs_check(&open(&image)).unwrap());

        let Some((_dir, journaled)) = formatted(&[]) else {
            return;
        };
        set_state(&journaled, 0);
        assert!(
            !needs_check(&open(&journaled)).unwrap(),
            "a journal is replayed by the kernel"
        );
    }

    #[test]
    fn a_file_that_is_not_ext4_is_left_to_the_mount_to_refuse() {
        let dir = Scratch::new("disk-junk");
        let image = dir.path().join("junk.img");
        fs::write(&image, vec![0xA5u8; 4096]).unwrap();
        assert!(!needs_check(&open(&image)).unwrap());
        // Too short to hold a superblock: an error, not a panic.
        let short = dir.path().join("short.img");
        fs::write(&short, b"x").unwrap();
        assert!(needs_check(&open(&short)).is_err());
    }
}
