//! Embeds every file under `assets/` in the binary: generates `assets.rs`,
//! a sorted table of (path, content type, ETag, bytes, gzipped bytes) with
//! `include_bytes!`, so a file dropped into `assets/` is served without a
//! line of Rust. Text files are also gzipped here (best compression, once,
//! at build time), kept where that saves something.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn main() {
    let root =
        PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default()).join("assets");
    println!("cargo:rerun-if-changed={}", root.display());
    let mut files = Vec::new();
    collect(&root, &root, &mut files);
    files.sort();
    let mut table = String::from("&[\n");
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_default());
    for (index, (relative, absolute)) in files.iter().enumerate() {
        println!("cargo:rerun-if-changed={}", absolute.display());
        let bytes = std::fs::read(absolute).unwrap_or_default();
        let kind = content_type(relative);
        let gzip = if kind.starts_with("text/") || kind.ends_with("json") || kind.ends_with("xml") {
            gzipped(&bytes)
                .filter(|packed| packed.len() < bytes.len())
                .and_then(|packed| {
                    let path = out_dir.join(format!("asset-{index}.gz"));
                    std::fs::write(&path, packed).ok().map(|()| path)
                })
        } else {
            None
        };
        let gzip = match gzip {
            Some(path) => format!("Some(include_bytes!({:?}))", path.display().to_string()),
            None => "None".to_owned(),
        };
        let _ = writeln!(
            table,
            "    Asset {{ path: {relative:?}, content_type: {kind:?}, etag: \"\\\"{:016x}\\\"\", bytes: include_bytes!({:?}), gzip: {gzip} }},",
            fnv1a(&bytes),
            absolute.display().to_string(),
        );
    }
    table.push(']');
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_default()).join("assets.rs");
    if let Err(error) = std::fs::write(&out, table) {
        panic!("cannot write {}: {error}", out.display());
    }
}

/// Every regular file below `dir`, with its path relative to `root`
/// (`/`-separated); dot files are left out (editor leftovers).
fn collect(root: &Path, dir: &Path, files: &mut Vec<(String, PathBuf)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        if path.is_dir() {
            collect(root, &path, files);
        } else if let Ok(relative) = path.strip_prefix(root) {
            let relative = relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            files.push((relative, path));
        }
    }
}

fn content_type(path: &str) -> &'static str {
    match path.rsplit('.').next().unwrap_or_default() {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "json" => "application/json",
        "txt" | "md" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

/// `bytes` gzipped at the best level (`None` if the encoder failed).
fn gzipped(bytes: &[u8]) -> Option<Vec<u8>> {
    use std::io::Write as _;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(bytes).ok()?;
    encoder.finish().ok()
}

/// FNV-1a, 64 bits: a content hash for the ETag (not a security boundary:
/// it only lets a browser keep what it already has).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}
