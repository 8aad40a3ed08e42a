//! The binary's integration tests as one test binary, a module per subject:
//! every test binary links the whole crate graph, so one binary links it
//! once where a binary per subject would link it a dozen times. Two are
//! binaries of their own, because they must run alone: `leaks.rs` counts
//! this process's children and descriptors (any other test's would be
//! counted), and `tenant_isolation.rs` measures latency on two cores (any
//! other test's servers would compete).
//!
//! `cargo test -p shellgate --test it MODULE::` runs one module's tests.

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;

mod architecture;
mod cli;
mod fs_paths;
// The stable fuzz runner: every fuzz target's check (the crates' `fuzzing`
// modules, behind the `fuzzing` feature), fed seeded mutations.
#[cfg(feature = "fuzzing")]
mod fuzz;
mod hardening;
mod http_api;
mod http_robustness;
mod image_builds;
mod images;
mod interpreter;
mod processes;
mod robustness;
mod sandbox;
mod secrets;
