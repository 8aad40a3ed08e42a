//! The sandbox protocol's records (`shellgate_sandbox::protocol`): what the
//! engine reads from a helper or init it does not trust (reports, status
//! records) and the requests init reads never panic, and round-trip.
//!
//! `RUSTC_BOOTSTRAP=1 cargo fuzz run sandbox_protocol` (from the repository root); on
//! stable, `cargo test -p shellgate --features fuzzing --test it fuzz::sandbox_protocol`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    shellgate_sandbox::protocol::fuzzing::check_records(data);
});
