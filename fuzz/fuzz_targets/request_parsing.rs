//! Request handling never panics, and every refusal is an OpenAI envelope.
//!
//! `RUSTC_BOOTSTRAP=1 cargo fuzz run request_parsing` (from the repository
//! root). The first byte picks a route; the rest is the body or query. The
//! requests go through the server's real router (authentication, extractors,
//! validation, the store), over a backend that holds no containers
//! (`shellgate_server::fuzzing::check_request`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    shellgate_server::fuzzing::check_request(data);
    // The engine's own parsers of untrusted bytes.
    let _ = shellgate_sandbox::protocol::Request::decode(data);
    let _ = shellgate_sandbox::files::relative_path(&String::from_utf8_lossy(data));
});
