//! The model crate's integration tests as one test binary, a module per
//! subject (every test binary links the crate graph again).
//!
//! `cargo test -p shellgate-model --test it MODULE::` runs one module's tests.

mod guardrail_corpus;
mod upstream_bounds;
