//! The upstream adapters' server-sent event reader
//! (`shellgate_model::upstream::sse`): never panics, keeps its caps, and
//! reads the same events however the bytes are cut.
//!
//! `RUSTC_BOOTSTRAP=1 cargo fuzz run sse` (from the repository root); on
//! stable, `cargo test -p shellgate --features fuzzing --test it fuzz::sse`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    shellgate_model::upstream::sse::fuzzing::check_events(data);
});
