//! The egress proxy's ClientHello (SNI) reader (`shellgate_egress::wire`):
//! never panics, never reads past its bytes, names only what is there.
//!
//! `RUSTC_BOOTSTRAP=1 cargo fuzz run egress_tls` (from the repository root); on
//! stable, `cargo test -p shellgate --features fuzzing --test it fuzz::egress_tls`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    shellgate_egress::wire::fuzzing::check_client_hello(data);
});
