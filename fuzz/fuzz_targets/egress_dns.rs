//! The egress proxy's DNS parsers (`shellgate_egress::dns`): a container's
//! query and an upstream's response never panic; an accepted question is
//! answered with exactly the addresses of its type.
//!
//! `RUSTC_BOOTSTRAP=1 cargo fuzz run egress_dns` (from the repository root); on
//! stable, `cargo test -p shellgate --features fuzzing --test it fuzz::egress_dns`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    shellgate_egress::dns::fuzzing::check_query(data);
});
