//! The egress proxy's HTTP parsing (`shellgate_egress::wire`): request
//! heads never panic on any bytes, and what is accepted has CRLF lines
//! only, one Host, one framing, and is forwarded as a head that reads back
//! the same; chunked bodies and response heads never panic either.
//!
//! `RUSTC_BOOTSTRAP=1 cargo fuzz run egress_http` (from the repository
//! root).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    shellgate_egress::wire::fuzzing::check_request_head(data);
    shellgate_egress::wire::fuzzing::check_bodies(data);
});
