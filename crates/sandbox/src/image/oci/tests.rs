// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use sha2::{Digest, Sha256};

use super::{import, OciLimits, SourceFormat};
use crate::error::SandboxError;
use crate::scratch::Scratch;

/// One member of a hand-made layer: any name, any type (no checks).
enum Entry<'a> {
    File(&'a str, &'a [u8], u32),
    Dir(&'a str),
    Symlink(&'a str, &'a str),
    HardLink(&'a str, &'a str),
    CharDevice(&'a str),
}

fn header(name: &str, kind: tar::EntryType, size: u64, mode: u32) -> tar::Header {
    let mut header = tar::Header::new_gnu();
    let bytes = name.as_bytes();
    header.as_old_mut().name[..bytes.len()].copy_from_slice(bytes);
    header.set_entry_type(kind);
    header.set_size(size);
    header.set_mode(mode);
    header.set_uid(0);
    header.set_gid(0);
    header.set_mtime(1_700_000_000);
    header
}

fn layer(entries: &[Entry<'_>]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for entry in entries {
        let (mut header, data): (tar::Header, &[u8]) = match entry {
            Entry::File(name, data, mode) => (
                header(name, tar::EntryType::Regular, data.len() as u64, *mode),
                data,
            ),
            Entry::Dir(name) => (header(name, tar::EntryType::Directory, 0, 0o755), b""),
            Entry::Symlink(name, target) | Entry::HardLink(name, target) => {
                let kind = if matches!(entry, Entry::Symlink(..)) {
                    tar::EntryType::Symlink
                } else {
                    tar::EntryType::Link
                };
                let mut header = header(name, kind, 0, 0o777);
                let bytes = target.as_bytes();
                header.as_old_mut().linkname[..bytes.len()].copy_from_slice(bytes);
                (header, b"")
            }
            Entry::CharDevice(name) => (header(name, tar::EntryType::Char, 0, 0o666), b""),
        };
        header.set_cksum();
        builder.append(&header, data).unwrap();
    }
    builder.into_inner().unwrap()
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(data).unwrap();
    encoder.finish().unwrap()
}

fn digest(data: &[u8]) -> String {
    let hash: String = Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256:{hash}")
}

/// Writes an OCI layout of `layers` (gzip-compressed when `compress`) and
/// `config` into `dir`.
fn oci_layout(dir: &Path, layers: &[Vec<u8>], config: &serde_json::Value, compress: bool) {
    let blobs = dir.join("blobs/sha256");
    fs::create_dir_all(&blobs).unwrap();
    let put = |data: &[u8]| {
        let digest = digest(data);
        fs::write(blobs.join(&digest["sha256:".len()..]), data).unwrap();
        digest
    };
    let config = serde_json::to_vec(config).unwrap();
    let config_digest = put(&config);
    let layer_descriptors: Vec<serde_json::Value> = layers
        .iter()
        .map(|layer| {
            let (data, media_type) = if compress {
                (gzip(layer), "application/vnd.oci.image.layer.v1.tar+gzip")
            } else {
                (layer.clone(), "application/vnd.oci.image.layer.v1.tar")
            };
            serde_json::json!({"mediaType": media_type, "digest": put(&data), "size": data.len()})
        })
        .collect();
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": config.len()},
        "layers": layer_descriptors,
    }))
    .unwrap();
    let manifest_digest = put(&manifest);
    fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    fs::write(
        dir.join("index.json"),
        serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manifest_digest, "size": manifest.len()}],
        }))
        .unwrap(),
    )
    .unwrap();
}

fn run(layers: &[Vec<u8>], compress: bool) -> (Scratch, Result<super::Imported, SandboxError>) {
    let scratch = Scratch::new("layers");
    let source = scratch.0.join("layout");
    let staging = scratch.0.join("root");
    fs::create_dir_all(&staging).unwrap();
    oci_layout(
        &source,
        layers,
        &serde_json::json!({"architecture": "amd64", "os": "linux", "config": {
            "Env": ["PATH=/opt/tool/bin:/usr/bin:/bin", "GREETING=hello world"],
            "WorkingDir": "/srv/app",
            "User": "1000",
            "Cmd": ["sh"],
        }}),
        compress,
    );
    let result = import(&source, &staging, &OciLimits::default()).map(|(imported, format)| {
        assert_eq!(format, SourceFormat::OciLayout);
        imported
    });
    (scratch, result)
}

#[test]
fn layers_apply_in_order_with_whiteouts_and_the_config_is_read() {
    let base = layer(&[
        Entry::Dir("bin/"),
        Entry::File("bin/sh", b"#!shell", 0o755),
        Entry::Dir("etc/"),
        Entry::File("etc/keep", b"kept", 0o644),
        Entry::File("etc/gone", b"removed later", 0o644),
        Entry::Dir("opt/"),
        Entry::File("opt/old", b"hidden by an opaque dir", 0o644),
        Entry::Symlink("etc/alternative", "/usr/bin/real"),
    ]);
    let top = layer(&[
        Entry::File("etc/.wh.gone", b"", 0o644),
        Entry::Dir("opt/"),
        Entry::File("opt/.wh..wh..opq", b"", 0o644),
        Entry::File("opt/new", b"from the top", 0o644),
        Entry::File("etc/keep", b"replaced", 0o644),
        Entry::HardLink("etc/keep-link", "etc/keep"),
    ]);
    for compress in [false, true] {
        let (scratch, result) = run(&[base.clone(), top.clone()], compress);
        let imported = result.unwrap_or_else(|e| panic!("compress={compress}: {e}"));
        let root = scratch.0.join("root");
        let read = |p: &str| fs::read_to_string(root.join(p)).unwrap_or_else(|e| format!("<{e}>"));
        assert_eq!(read("etc/keep"), "replaced", "compress={compress}");
        assert_eq!(read("etc/keep-link"), "replaced");
        assert!(
            !root.join("etc/gone").exists(),
            "a whiteout removes its file"
        );
        assert!(
            !root.join("opt/old").exists(),
            "an opaque dir hides the layers below"
        );
        assert_eq!(read("opt/new"), "from the top");
        assert_eq!(
            fs::read_link(root.join("etc/alternative")).unwrap(),
            Path::new("/usr/bin/real"),
            "absolute link targets are kept: they resolve inside the container"
        );
        assert_eq!(imported.layers, 2);
        assert_eq!(
            imported.config.env,
            vec!["PATH=/opt/tool/bin:/usr/bin:/bin", "GREETING=hello world"]
        );
        assert_eq!(imported.config.working_dir.as_deref(), Some("/srv/app"));
        assert_eq!(imported.config.user.as_deref(), Some("1000"));
        assert_eq!(imported.config.cmd, vec!["sh"]);
    }
}

#[test]
fn setid_bits_are_dropped_and_devices_not_made() {
    let (scratch, result) = run(
        &[layer(&[
            Entry::Dir("bin/"),
            Entry::File("bin/su", b"setuid root", 0o4755),
            Entry::File("bin/wall", b"setgid", 0o2755),
            Entry::Dir("dev/"),
            Entry::CharDevice("dev/mem"),
        ])],
        true,
    );
    let imported = result.unwrap_or_else(|e| panic!("{e}"));
    let root = scratch.0.join("root");
    let mode = |p: &str| fs::metadata(root.join(p)).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode("bin/su"), 0o755, "setuid dropped");
    assert_eq!(mode("bin/wall"), 0o755, "setgid dropped");
    assert!(
        fs::symlink_metadata(root.join("dev/mem")).is_err(),
        "no device node is made"
    );
    assert_eq!(
        imported.neutralised.setid_bits, 2,
        "{:?}",
        imported.neutralised
    );
    assert_eq!(
        imported.neutralised.special_files, 1,
        "{:?}",
        imported.neutralised
    );
    assert_eq!(fs::metadata(root.join("bin/su")).unwrap().uid(), 0);
}

/// Each hostile layer set is refused, naming the member and why, and
/// writes nothing outside the staging root.
#[test]
fn hostile_layers_are_refused_with_the_member_named() {
    let cases: Vec<(&str, Vec<Vec<u8>>, &str)> = vec![
        (
            "absolute path",
            vec![layer(&[Entry::File("/etc/owned", b"x", 0o644)])],
            "an absolute path",
        ),
        (
            "dot-dot",
            vec![layer(&[Entry::File("a/../../owned", b"x", 0o644)])],
            "'..'",
        ),
        (
            "write through a symlink",
            vec![
                layer(&[Entry::Symlink("escape", "/")]),
                layer(&[Entry::File("escape/owned", b"x", 0o644)]),
            ],
            "symbolic link",
        ),
        (
            "write through a relative symlink out",
            vec![layer(&[
                Entry::Symlink("up", "../../.."),
                Entry::File("up/owned", b"x", 0o644),
            ])],
            "symbolic link",
        ),
        (
            "hard link to a host file",
            vec![layer(&[Entry::HardLink("shadow", "/etc/shadow")])],
            "an absolute path",
        ),
        (
            "hard link out of the tree",
            vec![layer(&[Entry::HardLink("shadow", "../../../etc/shadow")])],
            "'..'",
        ),
        (
            "hard link through a symlink",
            vec![layer(&[
                Entry::Symlink("etc", "/etc"),
                Entry::HardLink("shadow", "etc/shadow"),
            ])],
            "not a file of the image",
        ),
        (
            "hard link to a directory",
            vec![layer(&[Entry::Dir("d/"), Entry::HardLink("x", "d")])],
            "not a regular file",
        ),
    ];
    for (what, layers, expected) in cases {
        let (scratch, result) = run(&layers, false);
        match result {
            Err(SandboxError::InvalidRequest { message, .. }) => assert!(
                message.contains(expected) && message.contains("layer"),
                "{what}: the refusal says {message:?}, expected it to mention {expected:?}"
            ),
            Err(other) => panic!("{what}: refused, but not as a bad request: {other}"),
            Ok(_) => panic!("{what}: imported"),
        }
        assert!(
            !scratch.0.join("owned").exists() && !Path::new("/owned").exists(),
            "{what}: wrote outside the root"
        );
    }
}

#[test]
fn limits_bound_bytes_and_entries_across_layers() {
    let scratch = Scratch::new("limits");
    let source = scratch.0.join("layout");
    let staging = scratch.0.join("root");
    fs::create_dir_all(&staging).unwrap();
    let big = vec![b'x'; 4096];
    oci_layout(
        &source,
        &[
            layer(&[Entry::File("a", &big, 0o644)]),
            layer(&[Entry::File("b", &big, 0o644)]),
        ],
        &serde_json::json!({"config": {}}),
        true,
    );
    let too_small = OciLimits {
        max_bytes: 6000,
        max_entries: 100,
    };
    let error = import(&source, &staging, &too_small)
        .err()
        .map(|e| e.to_string());
    assert!(
        error
            .as_deref()
            .is_some_and(|e| e.contains("more than 6000 bytes")),
        "{error:?}"
    );
    let few = OciLimits {
        max_bytes: 1 << 20,
        max_entries: 1,
    };
    let error = import(&source, &staging, &few).err().map(|e| e.to_string());
    assert!(
        error
            .as_deref()
            .is_some_and(|e| e.contains("more than 1 members")),
        "{error:?}"
    );
}

#[test]
fn a_layer_that_does_not_match_its_digest_is_refused() {
    let scratch = Scratch::new("digest");
    let source = scratch.0.join("layout");
    let staging = scratch.0.join("root");
    fs::create_dir_all(&staging).unwrap();
    oci_layout(
        &source,
        &[layer(&[Entry::File("a", b"original", 0o644)])],
        &serde_json::json!({"config": {}}),
        false,
    );
    // Swap the layer's bytes for another layer of the same length.
    let blobs = source.join("blobs/sha256");
    let swapped = layer(&[Entry::File("a", b"tampered", 0o644)]);
    for entry in fs::read_dir(&blobs).unwrap().flatten() {
        if fs::read(entry.path()).unwrap().len() == swapped.len() {
            fs::write(entry.path(), &swapped).unwrap();
        }
    }
    let error = import(&source, &staging, &OciLimits::default())
        .err()
        .map(|e| e.to_string());
    assert!(
        error
            .as_deref()
            .is_some_and(|e| e.contains("does not match its digest")),
        "{error:?}"
    );
}
