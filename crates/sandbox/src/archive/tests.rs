//! Tests of [`super::export`] and [`super::import`] on host temporary
//! directories: round trips, excludes, what export skips, and every refusal
//! of import, each checked to leave the directory exactly as it was.
//! Hostile archives the `tar` crate's builder refuses to write are made
//! from raw headers.

use super::*;

use std::collections::BTreeMap;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

/// A fresh directory under the system's temporary directory, removed when
/// dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let path = std::env::temp_dir().join(format!(
            "shellgate-archive-{tag}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        Self(path)
    }

    fn path(&self) -> &Path {
        &self.0
    }

    fn join(&self, rel: &str) -> PathBuf {
        self.0.join(rel)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        // Read-only directories made by a test must not keep their files.
        fn writable(path: &Path) {
            if let Ok(meta) = std::fs::symlink_metadata(path) {
                if meta.is_dir() {
                    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700));
                    if let Ok(entries) = std::fs::read_dir(path) {
                        for entry in entries.flatten() {
                            writable(&entry.path());
                        }
                    }
                }
            }
        }
        writable(&self.0);
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What a test compares of one entry.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    File {
        mode: u32,
        mtime: i64,
        contents: Vec<u8>,
    },
    Directory {
        mode: u32,
        mtime: i64,
    },
    Symlink {
        target: Vec<u8>,
    },
    Other {
        mode: u32,
    },
}

/// Every entry below `dir` (not `dir` itself), by relative path.
fn snapshot(dir: &Path) -> BTreeMap<Vec<u8>, Node> {
    fn walk(dir: &Path, prefix: &[u8], out: &mut BTreeMap<Vec<u8>, Node>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let mut rel = prefix.to_vec();
            if !rel.is_empty() {
                rel.push(b'/');
            }
            rel.extend_from_slice(entry.file_name().as_bytes());
            let meta = std::fs::symlink_metadata(entry.path()).unwrap();
            let mode = meta.mode() & 0o7777;
            let node = if meta.file_type().is_symlink() {
                Node::Symlink {
                    target: std::fs::read_link(entry.path())
                        .unwrap()
                        .as_os_str()
                        .as_bytes()
                        .to_vec(),
                }
            } else if meta.is_dir() {
                walk(&entry.path(), &rel, out);
                Node::Directory {
                    mode,
                    mtime: meta.mtime(),
                }
            } else if meta.is_file() {
                Node::File {
                    mode,
                    mtime: meta.mtime(),
                    contents: std::fs::read(entry.path()).unwrap(),
                }
            } else {
                Node::Other { mode }
            };
            out.insert(rel, node);
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, b"", &mut out);
    out
}

fn set_mtime(path: &Path, seconds: i64) {
    rfs::utimensat(
        rfs::CWD,
        path,
        &rfs::Timestamps {
            last_access: rfs::Timespec {
                tv_sec: seconds,
                tv_nsec: 0,
            },
            last_modification: rfs::Timespec {
                tv_sec: seconds,
                tv_nsec: 0,
            },
        },
        AtFlags::SYMLINK_NOFOLLOW,
    )
    .unwrap();
}

fn write(dir: &TempDir, rel: &str, contents: &[u8], mode: u32) {
    let path = dir.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, contents).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn export_to_vec(dir: &Path, excludes: &[&str]) -> (Vec<u8>, ExportSummary) {
    let excludes: Vec<String> = excludes.iter().map(|e| e.to_string()).collect();
    let mut out = Vec::new();
    let summary = export(dir, &excludes, &mut out).unwrap();
    (out, summary)
}

/// The member paths of a tar stream, in order (read with the `tar` crate).
fn member_paths(tar: &[u8]) -> Vec<String> {
    let mut archive = tar::Archive::new(tar);
    archive
        .entries()
        .unwrap()
        .map(|e| String::from_utf8_lossy(&e.unwrap().path_bytes()).into_owned())
        .collect()
}

// ---- raw archives -----------------------------------------------------------

/// One member from a raw header: any name (up to 100 bytes), type and link,
/// which the builder would refuse.
fn raw(kind: u8, name: &[u8], link: &[u8], data: &[u8]) -> Vec<u8> {
    raw_sized(kind, name, link, data, data.len() as u64)
}

/// As [`raw`], with a declared size that may differ from the data.
fn raw_sized(kind: u8, name: &[u8], link: &[u8], data: &[u8], size: u64) -> Vec<u8> {
    let mut header = tar::Header::new_gnu();
    {
        let old = header.as_old_mut();
        old.name[..name.len()].copy_from_slice(name);
        old.linkname[..link.len()].copy_from_slice(link);
    }
    header.set_mode(0o644);
    header.set_size(size);
    header.set_mtime(1_600_000_000);
    header.set_entry_type(tar::EntryType::new(kind));
    header.set_cksum();
    let mut bytes = header.as_bytes().to_vec();
    bytes.extend_from_slice(data);
    bytes.resize(bytes.len().div_ceil(BLOCK) * BLOCK, 0);
    bytes
}

fn file(name: &str, data: &[u8]) -> Vec<u8> {
    raw(b'0', name.as_bytes(), b"", data)
}

fn directory(name: &str) -> Vec<u8> {
    raw(b'5', name.as_bytes(), b"", b"")
}

fn symlink_member(name: &str, target: &str) -> Vec<u8> {
    raw(b'2', name.as_bytes(), target.as_bytes(), b"")
}

fn hard_link(name: &str, target: &str) -> Vec<u8> {
    raw(b'1', name.as_bytes(), target.as_bytes(), b"")
}

/// A GNU long-name header carrying `name` (NUL-terminated, as GNU tar
/// writes it).
fn long_name(name: &[u8]) -> Vec<u8> {
    let mut data = name.to_vec();
    data.push(0);
    raw(b'L', b"././@LongLink", b"", &data)
}

/// A PAX extended header with these records.
fn pax(records: &[(&str, &[u8])]) -> Vec<u8> {
    let mut data = Vec::new();
    for (key, value) in records {
        let body_len = key.len() + value.len() + 3; // ' ', '=', '\n'
        let mut len = body_len + 1;
        while len != body_len + len.to_string().len() {
            len = body_len + len.to_string().len();
        }
        data.extend_from_slice(format!("{len} {key}=").as_bytes());
        data.extend_from_slice(value);
        data.push(b'\n');
    }
    raw(b'x', b"././@PaxHeader", b"", &data)
}

/// Members followed by tar's end-of-archive marker.
fn archive(members: &[Vec<u8>]) -> Vec<u8> {
    let mut out: Vec<u8> = members.concat();
    out.extend_from_slice(&[0; 2 * BLOCK]);
    out
}

fn import_bytes(tar: &[u8], dir: &Path) -> Result<ImportSummary, ArchiveError> {
    import(&mut &tar[..], dir, &ImportLimits::default())
}

/// Imports `tar` into a directory holding a few entries, and checks it is
/// refused with nothing changed (no staging directory left either).
fn refused(tar: &[u8]) -> ArchiveError {
    refused_with(tar, &ImportLimits::default())
}

fn refused_with(tar: &[u8], limits: &ImportLimits) -> ArchiveError {
    let dir = TempDir::new("refused");
    write(&dir, "keep.txt", b"old contents", 0o644);
    write(&dir, "sub/inner", b"inner", 0o600);
    std::fs::create_dir(dir.join("empty")).unwrap();
    let before = snapshot(dir.path());
    let error = import(&mut &tar[..], dir.path(), limits).unwrap_err();
    assert_eq!(
        snapshot(dir.path()),
        before,
        "the directory changed ({error})"
    );
    error
}

fn assert_refused(error: &ArchiveError, expected: &str) {
    assert!(
        matches!(error, ArchiveError::Refused { .. }) && error.to_string().contains(expected),
        "expected a refusal mentioning {expected:?}, got {error:?}"
    );
    assert!(error.is_invalid_request());
}

// ---- export ---------------------------------------------------------------

/// A tree with what a workspace holds: modes, symlinks (as links), empty
/// directories, binary files, long and non-UTF-8 names, set mtimes.
fn sample_tree(dir: &TempDir) {
    write(dir, "a/script.sh", b"#!/bin/sh\necho hi\n", 0o755);
    write(dir, "a/secret", b"s3cret", 0o600);
    write(dir, "a/empty-file", b"", 0o644);
    let binary: Vec<u8> = (0..=255u8).cycle().take(1 << 20).collect();
    write(dir, "bin.dat", &binary, 0o644);
    std::fs::create_dir(dir.join("empty")).unwrap();
    std::fs::set_permissions(dir.join("empty"), std::fs::Permissions::from_mode(0o700)).unwrap();
    symlink("a/script.sh", dir.join("link-to-script")).unwrap();
    symlink("../bin.dat", dir.join("a/up")).unwrap();
    symlink("a", dir.join("link-to-dir")).unwrap();
    symlink("nowhere", dir.join("dangling")).unwrap();
    let long = format!("{}/{}", "d".repeat(150), "f".repeat(200));
    write(dir, &long, b"long name", 0o640);
    let odd = dir.path().join(OsStr::from_bytes(b"caf\xe9"));
    std::fs::write(&odd, b"latin-1 name").unwrap();
    let mut seconds = 1_500_000_000;
    let snapshot = snapshot(dir.path());
    // Deepest first, so a directory's mtime is set after its entries.
    for rel in snapshot.keys().rev() {
        seconds += 1000;
        set_mtime(&dir.path().join(OsStr::from_bytes(rel)), seconds);
    }
    std::fs::set_permissions(dir.join("a"), std::fs::Permissions::from_mode(0o750)).unwrap();
}

#[test]
fn a_tree_round_trips_with_modes_links_and_mtimes() {
    let source = TempDir::new("source");
    sample_tree(&source);
    let (tar, summary) = export_to_vec(source.path(), &[]);
    let target = TempDir::new("target");
    let imported = import_bytes(&tar, target.path()).unwrap();
    assert_eq!(snapshot(target.path()), snapshot(source.path()));
    assert_eq!(summary.entries, imported.entries);
    assert_eq!(summary.bytes, imported.bytes);
    assert_eq!(summary.skipped, 0);
    assert_eq!(summary.entries, snapshot(source.path()).len() as u64);
    // Links are links (never followed): the directory link has no members.
    let paths = member_paths(&tar);
    assert!(paths.contains(&"link-to-dir".to_string()));
    assert!(!paths.iter().any(|p| p.starts_with("link-to-dir/")));
}

#[test]
fn members_are_relative_sorted_and_directories_come_first() {
    let dir = TempDir::new("order");
    write(&dir, "b/z", b"", 0o644);
    write(&dir, "b/a/x", b"", 0o644);
    write(&dir, "a", b"", 0o644);
    write(&dir, "c", b"", 0o644);
    let (tar, _) = export_to_vec(dir.path(), &[]);
    assert_eq!(member_paths(&tar), ["a", "b/", "b/a/", "b/a/x", "b/z", "c"]);
}

#[test]
fn excludes_leave_out_matches_and_whole_directories() {
    let dir = TempDir::new("excludes");
    for rel in [
        "keep.txt",
        "x.log",
        "sub/y.log",
        "sub/keep",
        "node_modules/pkg/index.js",
        "sub/node_modules/z",
        "cache/c1",
        "other/cache",
        "a/b.txt",
        "a/bc.txt",
    ] {
        write(&dir, rel, b"x", 0o644);
    }
    let (tar, summary) = export_to_vec(
        dir.path(),
        &["*.log", "**/node_modules", "./cache/", "a/?.txt"],
    );
    assert_eq!(
        member_paths(&tar),
        [
            "a/",
            "a/bc.txt",
            "keep.txt",
            "other/",
            "other/cache",
            "sub/",
            "sub/keep",
            "sub/y.log"
        ]
    );
    assert_eq!(summary.entries, 8);
    // Directory-only patterns do not match files.
    let (tar, _) = export_to_vec(dir.path(), &["**/cache/"]);
    assert!(member_paths(&tar).contains(&"other/cache".to_string()));
    assert!(!member_paths(&tar).iter().any(|p| p.starts_with("cache")));
}

#[test]
fn an_excluded_round_trip_restores_only_the_rest() {
    let source = TempDir::new("exclude-source");
    sample_tree(&source);
    let (tar, _) = export_to_vec(source.path(), &["a", "*.dat"]);
    let target = TempDir::new("exclude-target");
    import_bytes(&tar, target.path()).unwrap();
    let mut expected = snapshot(source.path());
    expected.retain(|path, _| path != b"a" && !path.starts_with(b"a/") && path != b"bin.dat");
    assert_eq!(snapshot(target.path()), expected);
}

#[test]
fn bad_exclude_patterns_are_refused() {
    let dir = TempDir::new("bad-exclude");
    let mut out = Vec::new();
    let error = export(dir.path(), &["../x".to_string()], &mut out).unwrap_err();
    assert!(
        matches!(error, ArchiveError::InvalidExclude { .. }),
        "{error:?}"
    );
    assert!(out.is_empty());
}

#[test]
fn special_files_are_skipped_never_opened() {
    let dir = TempDir::new("special");
    write(&dir, "regular", b"r", 0o644);
    let fifo = rustix::fs::mknodat(
        rfs::CWD,
        dir.join("fifo").as_path(),
        FileType::Fifo,
        Mode::from_raw_mode(0o644),
        0,
    );
    fifo.unwrap();
    let _socket = std::os::unix::net::UnixListener::bind(dir.join("socket")).unwrap();
    // A device node needs CAP_MKNOD: tested where the test may make one.
    let device = rustix::fs::mknodat(
        rfs::CWD,
        dir.join("null").as_path(),
        FileType::CharacterDevice,
        Mode::from_raw_mode(0o666),
        rustix::fs::makedev(1, 3),
    )
    .is_ok();
    let (tar, summary) = export_to_vec(dir.path(), &[]);
    assert_eq!(member_paths(&tar), ["regular"]);
    assert_eq!(summary.skipped, if device { 3 } else { 2 });
}

#[test]
fn export_does_not_follow_symlinks_out() {
    let outside = TempDir::new("outside");
    write(&outside, "secret", b"outside", 0o644);
    let dir = TempDir::new("links-out");
    symlink(outside.path(), dir.join("out")).unwrap();
    symlink(outside.join("secret"), dir.join("file-out")).unwrap();
    let (tar, summary) = export_to_vec(dir.path(), &[]);
    assert_eq!(member_paths(&tar), ["file-out", "out"]);
    assert_eq!(summary.bytes, 0);
    let mut archive = tar::Archive::new(&tar[..]);
    for entry in archive.entries().unwrap() {
        let entry = entry.unwrap();
        assert_eq!(entry.header().entry_type(), tar::EntryType::Symlink);
    }
}

#[test]
fn export_does_not_cross_into_a_mount_below() {
    // Mounting needs CAP_SYS_ADMIN: tested where the test may mount.
    const CAP_SYS_ADMIN: u32 = 21;
    if !crate::sys::has_capability(CAP_SYS_ADMIN) {
        eprintln!("skipped: no CAP_SYS_ADMIN to mount a tmpfs");
        return;
    }
    let dir = TempDir::new("mount");
    write(&dir, "here", b"h", 0o644);
    std::fs::create_dir(dir.join("mnt")).unwrap();
    let mount_point = dir.join("mnt");
    if crate::sys::mount(
        Some(Path::new("none")),
        &mount_point,
        Some("tmpfs"),
        0,
        Some("size=1m"),
    )
    .is_err()
    {
        eprintln!("skipped: tmpfs could not be mounted");
        return;
    }
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = crate::sys::umount2(&self.0, libc::MNT_DETACH);
        }
    }
    let _unmount = Unmount(mount_point.clone());
    std::fs::write(mount_point.join("other-fs"), b"o").unwrap();
    let (tar, summary) = export_to_vec(dir.path(), &[]);
    assert_eq!(member_paths(&tar), ["here"]);
    assert_eq!(summary.skipped, 1);
}

#[test]
fn ten_thousand_small_files_export_and_import() {
    let source = TempDir::new("many");
    for i in 0..10_000 {
        write(
            &source,
            &format!("d{}/f{i}", i % 100),
            format!("{i}").as_bytes(),
            0o644,
        );
    }
    let (tar, summary) = export_to_vec(source.path(), &[]);
    assert_eq!(summary.entries, 10_100);
    let target = TempDir::new("many-target");
    let imported = import_bytes(&tar, target.path()).unwrap();
    assert_eq!(imported.entries, 10_100);
    assert_eq!(snapshot(target.path()), snapshot(source.path()));
}

#[test]
fn a_failed_export_leaves_the_stream_cut() {
    /// Takes `left` bytes, then fails like a closed connection.
    struct Failing {
        left: usize,
        written: Vec<u8>,
    }
    impl Write for Failing {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.left == 0 {
                return Err(io::Error::from(io::ErrorKind::BrokenPipe));
            }
            let n = buf.len().min(self.left);
            self.left -= n;
            self.written.extend_from_slice(&buf[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let dir = TempDir::new("failing");
    let big: Vec<u8> = vec![7; 1 << 20];
    write(&dir, "big", &big, 0o644);
    write(&dir, "small", b"s", 0o644);
    let mut out = Failing {
        left: 300 * 1024,
        written: Vec::new(),
    };
    let error = export(dir.path(), &[], &mut out).unwrap_err();
    assert!(matches!(error, ArchiveError::Io { .. }), "{error:?}");
    assert!(out.written.len() <= 300 * 1024);
    // What was written does not read as a whole archive.
    let target = TempDir::new("failing-target");
    import_bytes(&out.written, target.path()).unwrap_err();
    assert!(snapshot(target.path()).is_empty());
}

#[test]
fn exports_read_with_gnu_tar_and_gnu_tar_archives_import() {
    if !crate::sys::on_path("tar") {
        eprintln!("skipped: no tar on PATH");
        return;
    }
    let source = TempDir::new("gnu-source");
    sample_tree(&source);
    let (tar, _) = export_to_vec(source.path(), &[]);
    let extracted = TempDir::new("gnu-extracted");
    let mut child = std::process::Command::new("tar")
        .args(["-x", "-p", "-f", "-", "-C"])
        .arg(extracted.path())
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&tar).unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(snapshot(extracted.path()), snapshot(source.path()));

    let made = std::process::Command::new("tar")
        .args(["-c", "-f", "-", "-C"])
        .arg(source.path())
        .arg(".")
        .output()
        .unwrap();
    assert!(made.status.success());
    let target = TempDir::new("gnu-target");
    import_bytes(&made.stdout, target.path()).unwrap();
    assert_eq!(snapshot(target.path()), snapshot(source.path()));
}

// ---- import: what it accepts ------------------------------------------------

#[test]
fn import_merges_directories_and_replaces_files() {
    let dir = TempDir::new("merge");
    write(&dir, "d/old", b"old", 0o644);
    write(&dir, "d/replaced", b"before", 0o644);
    write(&dir, "was-file/x", b"", 0o644);
    std::fs::remove_dir_all(dir.join("was-file")).unwrap();
    write(
        &dir,
        "was-file",
        b"a file where the archive has a directory",
        0o644,
    );
    let outside = TempDir::new("merge-outside");
    symlink(outside.path(), dir.join("was-link")).unwrap();
    let tar = archive(&[
        directory("d/"),
        file("d/new", b"new"),
        file("d/replaced", b"after"),
        file("was-file/inside", b"i"),
        file("was-link/inside", b"j"),
    ]);
    let summary = import_bytes(&tar, dir.path()).unwrap();
    assert_eq!(summary.entries, 5);
    assert_eq!(summary.bytes, 3 + 5 + 1 + 1);
    assert_eq!(std::fs::read(dir.join("d/old")).unwrap(), b"old");
    assert_eq!(std::fs::read(dir.join("d/new")).unwrap(), b"new");
    assert_eq!(std::fs::read(dir.join("d/replaced")).unwrap(), b"after");
    assert_eq!(std::fs::read(dir.join("was-file/inside")).unwrap(), b"i");
    // The pre-existing symlink was replaced, never followed.
    assert!(std::fs::symlink_metadata(dir.join("was-link"))
        .unwrap()
        .is_dir());
    assert_eq!(std::fs::read(dir.join("was-link/inside")).unwrap(), b"j");
    assert!(snapshot(outside.path()).is_empty());
    assert!(!std::fs::read_dir(dir.path()).unwrap().any(|e| e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .starts_with(STAGING_PREFIX)));
}

#[test]
fn a_file_replacing_a_symlink_leaves_its_target_alone() {
    let outside = TempDir::new("link-target");
    write(&outside, "file", b"outside", 0o644);
    let dir = TempDir::new("replace-link");
    symlink(outside.join("file"), dir.join("link")).unwrap();
    import_bytes(&archive(&[file("link", b"inside")]), dir.path()).unwrap();
    assert_eq!(std::fs::read(outside.join("file")).unwrap(), b"outside");
    assert!(std::fs::symlink_metadata(dir.join("link"))
        .unwrap()
        .is_file());
    assert_eq!(std::fs::read(dir.join("link")).unwrap(), b"inside");
}

#[test]
fn hard_links_to_earlier_members_share_the_file() {
    let dir = TempDir::new("hardlink");
    let tar = archive(&[file("f", b"shared"), hard_link("sub/h", "f")]);
    import_bytes(&tar, dir.path()).unwrap();
    let f = std::fs::metadata(dir.join("f")).unwrap();
    let h = std::fs::metadata(dir.join("sub/h")).unwrap();
    assert_eq!(f.ino(), h.ino());
    assert_eq!(std::fs::read(dir.join("sub/h")).unwrap(), b"shared");
}

#[test]
fn root_members_duplicates_pax_and_long_names_are_read() {
    let dir = TempDir::new("accepted");
    let long = format!("{}/{}", "p".repeat(120), "q".repeat(200));
    let tar = archive(&[
        directory("./"),
        file("dup", b"first"),
        file("./dup", b"second"),
        directory("d/"),
        directory("d"),
        pax(&[("path", b"pax-name"), ("mtime", b"1234567890.5")]),
        file("ignored-name", b"from pax"),
        long_name(long.as_bytes()),
        file("truncated", b"long"),
        raw(
            b'g',
            b"pax_global_header",
            b"",
            b"52 comment=0123456789012345678901234567890123456789\n",
        ),
        raw(b'0', b"mode", b"", b"m"),
    ]);
    let summary = import_bytes(&tar, dir.path()).unwrap();
    assert_eq!(summary.entries, 7);
    assert_eq!(std::fs::read(dir.join("dup")).unwrap(), b"second");
    assert_eq!(std::fs::read(dir.join("pax-name")).unwrap(), b"from pax");
    assert_eq!(
        std::fs::metadata(dir.join("pax-name")).unwrap().mtime(),
        1_234_567_890
    );
    assert_eq!(std::fs::read(dir.join(&long)).unwrap(), b"long");
    assert!(!dir.join("ignored-name").exists());
}

#[test]
fn setuid_setgid_and_sticky_bits_are_dropped() {
    let dir = TempDir::new("modes");
    let mut member = tar::Header::new_gnu();
    member.set_path("suid").unwrap();
    member.set_mode(0o4755);
    member.set_size(1);
    member.set_cksum();
    let mut bytes = member.as_bytes().to_vec();
    bytes.push(b'x');
    bytes.resize(2 * BLOCK, 0);
    import_bytes(&archive(&[bytes]), dir.path()).unwrap();
    assert_eq!(
        std::fs::metadata(dir.join("suid")).unwrap().mode() & 0o7777,
        0o755
    );
}

// ---- import: refusals (each leaves the directory as it was) ----------------

#[test]
fn absolute_paths_are_refused() {
    assert_refused(
        &refused(&archive(&[file("ok", b"1"), file("/etc/evil", b"x")])),
        "absolute path",
    );
    assert_refused(
        &refused(&archive(&[
            pax(&[("path", b"/etc/evil")]),
            file("fine", b"x"),
        ])),
        "absolute path",
    );
}

#[test]
fn parent_components_are_refused() {
    for name in ["../evil", "a/../../evil", "a/..", "./.."] {
        assert_refused(
            &refused(&archive(&[file("ok", b"1"), file(name, b"x")])),
            "'..'",
        );
    }
    assert_refused(&refused(&archive(&[directory("../up/")])), "'..'");
}

#[test]
fn symlinks_leaving_the_directory_are_refused() {
    assert_refused(
        &refused(&archive(&[symlink_member("l", "/etc")])),
        "absolute path",
    );
    assert_refused(
        &refused(&archive(&[symlink_member("a/l", "../../x")])),
        "leaves the directory",
    );
    assert_refused(
        &refused(&archive(&[symlink_member("l", "..")])),
        "leaves the directory",
    );
    assert_refused(&refused(&archive(&[symlink_member("l", "")])), "no target");
    // Each link looks inside; together they climb out (`x/y` is `.`, so
    // `x/z` -> `y/..` is the directory's parent), in either order.
    let chain = [
        directory("x/"),
        symlink_member("x/y", ".."),
        symlink_member("x/z", "y/.."),
    ];
    assert_refused(&refused(&archive(&chain)), "through the symlink member");
    let reversed = [
        directory("x/"),
        symlink_member("x/z", "y/.."),
        symlink_member("x/y", ".."),
    ];
    assert_refused(&refused(&archive(&reversed)), "through the symlink member");
    // A link that stays inside is fine.
    let dir = TempDir::new("inside-link");
    import_bytes(&archive(&[symlink_member("a/b/l", "../../c")]), dir.path()).unwrap();
    assert_eq!(
        std::fs::read_link(dir.join("a/b/l")).unwrap(),
        Path::new("../../c")
    );
}

#[test]
fn members_through_earlier_symlinks_or_files_are_refused() {
    // The classic: a link, then a member below it.
    let classic = [
        directory("sub/"),
        symlink_member("link", "sub"),
        file("link/passwd", b"x"),
    ];
    assert_refused(
        &refused(&archive(&classic)),
        "runs through the symlink member \"link\"",
    );
    let through_file = [file("f", b"1"), file("f/x", b"2")];
    assert_refused(
        &refused(&archive(&through_file)),
        "runs through the file member",
    );
    let type_change = [file("same", b"1"), directory("same/")];
    assert_refused(&refused(&archive(&type_change)), "another type");
    let type_change = [directory("same/"), symlink_member("same", "x")];
    assert_refused(&refused(&archive(&type_change)), "another type");
}

#[test]
fn hard_links_to_anything_but_earlier_files_are_refused() {
    assert_refused(
        &refused(&archive(&[hard_link("h", "/etc/passwd")])),
        "absolute path",
    );
    assert_refused(&refused(&archive(&[hard_link("h", "../x")])), "'..'");
    assert_refused(
        &refused(&archive(&[hard_link("h", "passwd")])),
        "not an earlier file member",
    );
    let later = [hard_link("h", "f"), file("f", b"x")];
    assert_refused(&refused(&archive(&later)), "not an earlier file member");
    let to_directory = [directory("d/"), hard_link("h", "d")];
    assert_refused(
        &refused(&archive(&to_directory)),
        "not an earlier file member",
    );
    let to_symlink = [symlink_member("s", "x"), hard_link("h", "s")];
    assert_refused(
        &refused(&archive(&to_symlink)),
        "not an earlier file member",
    );
    assert_refused(
        &refused(&archive(&[file("f", b"x"), hard_link("f", "f")])),
        "itself",
    );
}

#[test]
fn devices_fifos_and_exotic_types_are_refused() {
    for (kind, reason) in [
        (b'3', "character device"),
        (b'4', "block device"),
        (b'6', "FIFO"),
        (b'S', "GNU sparse"),
        (b'V', "volume label"),
        (b'M', "multi-volume"),
        (b'D', "dump directory"),
        (b'N', "old GNU long-name"),
        (b'Z', "unsupported type 'Z'"),
    ] {
        let tar = archive(&[file("ok", b"1"), raw(kind, b"odd", b"", b"")]);
        assert_refused(&refused(&tar), reason);
    }
    let pax_sparse = archive(&[pax(&[("GNU.sparse.major", b"1")]), file("sparse", b"x")]);
    assert_refused(&refused(&pax_sparse), "GNU sparse");
}

#[test]
fn names_with_nul_or_over_path_max_are_refused() {
    assert_refused(
        &refused(&archive(&[long_name(b"a\0b"), file("x", b"")])),
        "NUL",
    );
    assert_refused(
        &refused(&archive(&[pax(&[("path", b"a\0b")]), file("x", b"")])),
        "NUL",
    );
    let deep = "d/".repeat(2100);
    assert_refused(
        &refused(&archive(&[
            pax(&[("path", deep.as_bytes())]),
            file("x", b""),
        ])),
        "PATH_MAX",
    );
    let long_component = "c".repeat(300);
    assert_refused(
        &refused(&archive(&[
            long_name(long_component.as_bytes()),
            file("x", b""),
        ])),
        "255",
    );
    // A long name header larger than any path is refused before it is read.
    let huge = raw_sized(b'L', b"././@LongLink", b"", b"", 1 << 30);
    assert_refused(&refused(&huge), "GNU long name");
    let huge_pax = raw_sized(b'x', b"././@PaxHeader", b"", b"", 1 << 30);
    assert_refused(&refused(&huge_pax), "PAX header");
}

#[test]
fn a_tar_bomb_declaring_100_gib_is_refused_before_its_data() {
    // The header alone: nothing of the 100 GiB is in the stream.
    let tar = [
        file("ok", b"1"),
        raw_sized(b'0', b"bomb", b"", b"", 100 << 30),
    ]
    .concat();
    let error = refused(&tar);
    assert!(
        matches!(error, ArchiveError::TooLarge { ref member, .. } if member == "bomb"),
        "{error:?}"
    );
    // Declared sizes add up.
    let limits = ImportLimits {
        max_bytes: 1000,
        max_entries: 10,
    };
    let tar = archive(&[file("a", &[1; 600]), file("b", &[2; 600])]);
    let error = refused_with(&tar, &limits);
    assert!(
        matches!(error, ArchiveError::TooLarge { ref member, .. } if member == "b"),
        "{error:?}"
    );
}

#[test]
fn two_hundred_thousand_members_are_refused_at_the_limit() {
    /// 200,000 empty members, made as they are read (never all in memory).
    struct Members {
        next: u32,
        block: Vec<u8>,
        at: usize,
    }
    impl Read for Members {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.at == self.block.len() {
                if self.next == 200_000 {
                    return Ok(0);
                }
                self.block = file(&format!("f{}", self.next), b"");
                self.next += 1;
                self.at = 0;
            }
            let n = buf.len().min(self.block.len() - self.at);
            buf[..n].copy_from_slice(&self.block[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }
    let dir = TempDir::new("many-members");
    write(&dir, "keep", b"k", 0o644);
    let before = snapshot(dir.path());
    let mut members = Members {
        next: 0,
        block: Vec::new(),
        at: 0,
    };
    let error = import(&mut members, dir.path(), &ImportLimits::default()).unwrap_err();
    assert!(
        matches!(error, ArchiveError::TooManyEntries { limit: 100_000 }),
        "{error:?}"
    );
    assert_eq!(members.next, 100_001, "read on past the limit");
    assert_eq!(snapshot(dir.path()), before);
    // And with a small limit.
    let tar = archive(&[file("a", b""), file("b", b""), file("c", b"")]);
    let limits = ImportLimits {
        max_bytes: 1 << 20,
        max_entries: 2,
    };
    assert!(matches!(
        refused_with(&tar, &limits),
        ArchiveError::TooManyEntries { limit: 2 }
    ));
}

#[test]
fn cut_and_invalid_streams_are_refused() {
    let whole = archive(&[file("a", b"aaaa"), file("b", &[9; 3000])]);
    let malformed = |tar: &[u8], expected: &str| {
        let error = refused(tar);
        assert!(
            matches!(error, ArchiveError::Malformed { .. }) && error.to_string().contains(expected),
            "expected {expected:?}, got {error:?}"
        );
    };
    // Inside the second member's data; inside a header; at a member
    // boundary without the end-of-archive marker; nothing at all.
    malformed(
        &whole[..BLOCK * 2 + BLOCK + 1000],
        "ends inside member \"b\"",
    );
    malformed(&whole[..BLOCK * 2 + 100], "inside a header");
    malformed(&whole[..whole.len() - 2 * BLOCK], "end-of-archive marker");
    malformed(b"", "end-of-archive marker");
    malformed(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3].repeat(100), "gzip");
    malformed(&[b'x'; 2048], "checksum");
    let mut corrupt = whole.clone();
    corrupt[BLOCK * 2 + 10] ^= 1;
    malformed(&corrupt, "checksum");
    malformed(&archive(&[pax(&[("path", b"x")])]), "no member after it");
}

#[test]
fn a_read_error_midway_leaves_nothing() {
    struct Broken<'a>(&'a [u8]);
    impl Read for Broken<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.0.is_empty() {
                return Err(io::Error::from(io::ErrorKind::ConnectionReset));
            }
            let n = buf.len().min(self.0.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }
    let whole = archive(&[file("a", b"aaaa"), file("b", &[9; 3000])]);
    let dir = TempDir::new("broken");
    let before = snapshot(dir.path());
    let error = import(
        &mut Broken(&whole[..3000]),
        dir.path(),
        &ImportLimits::default(),
    )
    .unwrap_err();
    assert!(matches!(error, ArchiveError::Io { .. }), "{error:?}");
    assert_eq!(snapshot(dir.path()), before);
}

#[test]
fn a_failure_at_member_n_leaves_the_directory_exactly_as_before() {
    let mut members = Vec::new();
    members.push(file("keep.txt", b"new contents"));
    members.push(file("sub/inner", b"replaced"));
    for i in 0..50 {
        members.push(file(&format!("new/f{i}"), b"data"));
    }
    members.push(directory("empty/more/"));
    members.push(symlink_member("new/link", "f1"));
    members.push(raw(b'3', b"dev/tty", b"", b""));
    members.push(file("after", b"never read"));
    let error = refused(&archive(&members));
    assert_refused(&error, "character device");
}

#[test]
fn a_file_over_an_existing_directory_is_refused_before_anything_moves() {
    let dir = TempDir::new("conflict");
    write(&dir, "a-first", b"old", 0o644);
    write(&dir, "d/inside", b"keep me", 0o644);
    let before = snapshot(dir.path());
    let tar = archive(&[file("a-first", b"new"), file("d", b"a file")]);
    let error = import_bytes(&tar, dir.path()).unwrap_err();
    assert!(
        matches!(error, ArchiveError::Conflict { ref member, .. } if member == "d"),
        "{error:?}"
    );
    assert!(error.is_invalid_request());
    assert_eq!(snapshot(dir.path()), before);
}

#[test]
fn a_missing_directory_is_an_error() {
    let dir = TempDir::new("missing");
    let error = import_bytes(&archive(&[]), &dir.join("nope")).unwrap_err();
    assert!(matches!(error, ArchiveError::Directory { .. }), "{error:?}");
    let mut out = Vec::new();
    let error = export(&dir.join("nope"), &[], &mut out).unwrap_err();
    assert!(matches!(error, ArchiveError::Directory { .. }), "{error:?}");
    write(&dir, "file", b"", 0o644);
    assert!(matches!(
        import_bytes(&archive(&[]), &dir.join("file")).unwrap_err(),
        ArchiveError::Directory { .. }
    ));
}

#[test]
fn a_dead_imports_staging_directory_is_removed_by_the_next_one() {
    let dir = TempDir::new("stale");
    write(&dir, ".shellgate-import-dead/half/written", b"x", 0o644);
    write(&dir, ".shellgate-import-alive/in-progress", b"y", 0o644);
    // A running import holds its staging directory locked.
    let alive = File::open(dir.join(".shellgate-import-alive")).unwrap();
    rfs::flock(&alive, rfs::FlockOperation::LockExclusive).unwrap();
    import_bytes(&archive(&[file("new", b"n")]), dir.path()).unwrap();
    assert!(!dir.join(".shellgate-import-dead").exists());
    assert!(dir.join(".shellgate-import-alive/in-progress").exists());
    assert_eq!(std::fs::read(dir.join("new")).unwrap(), b"n");
    // Export leaves staging directories out, and import refuses their names.
    let (tar, _) = export_to_vec(dir.path(), &[]);
    assert_eq!(member_paths(&tar), ["new"]);
    for name in [".shellgate-import-x/f", "a/.shellgate-import-y"] {
        assert_refused(&refused(&archive(&[file(name, b"")])), "reserved");
    }
}

#[test]
fn the_names_kept_for_the_checks_are_bounded() {
    let dir = TempDir::new("names");
    let before = snapshot(dir.path());
    let tar = archive(&[file(&"a".repeat(60), b""), file(&"b".repeat(60), b"")]);
    let error =
        import_bounded(&mut &tar[..], dir.path(), &ImportLimits::default(), 100).unwrap_err();
    assert_refused(&error, "member names exceed 100 bytes");
    assert_eq!(snapshot(dir.path()), before);
}
