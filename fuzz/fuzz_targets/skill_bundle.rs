//! The skill bundle reader (`shellgate_skills::from_zip`) never panics on
//! any bytes, and what it accepts unpacks only below its directory, as
//! regular files and folders, and round-trips through its own zip.
//!
//! `RUSTC_BOOTSTRAP=1 cargo fuzz run skill_bundle` (from the repository
//! root); seed it with real skill zips in `fuzz/corpus/skill_bundle/`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    shellgate_skills::fuzzing::check_zip(data);
});
