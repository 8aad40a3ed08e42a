//! The bundle reader's invariants, checked on any input: shared by the
//! cargo-fuzz target `skill_bundle` and this crate's mutation test.

// An invariant checker: a broken invariant is a panic, which is what a fuzzer
// reports.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::bundle::{from_zip, Limits};

/// Inputs to start from: the curated skills' zips.
pub fn seeds() -> Vec<Vec<u8>> {
    crate::curated::CURATED
        .iter()
        .filter_map(|curated| curated.bundle().ok())
        .map(|bundle| bundle.to_zip())
        .collect()
}

/// Reads `bytes` as a skill zip; if it is accepted, checks that its files
/// unpack below their directory only, as regular files and folders, and
/// that the zip it is written back as reads the same. Panics on a broken
/// invariant; returns whether the input was accepted.
pub fn check_zip(bytes: &[u8]) -> bool {
    let Ok(bundle) = from_zip(bytes, &Limits::default()) else {
        return false;
    };
    let again = from_zip(&bundle.to_zip(), &Limits::default()).expect("its own zip reads back");
    // The zip is normalized: its folder is the manifest's name.
    assert_eq!(
        (&again.manifest, &again.files),
        (&bundle.manifest, &bundle.files)
    );
    let dir = std::env::temp_dir().join(format!(
        "shellgate-skill-check-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    bundle.unpack(&dir.join("skill")).expect("unpack");
    let mut stack = vec![dir.clone()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).expect("read_dir") {
            let entry = entry.expect("entry");
            let kind = entry.file_type().expect("type");
            assert!(kind.is_file() || kind.is_dir(), "{:?}", entry.path());
            assert!(entry.path().starts_with(&dir));
            if kind.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    std::fs::remove_dir_all(&dir).expect("clean up");
    true
}
