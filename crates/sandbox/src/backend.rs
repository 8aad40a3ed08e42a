//! The engine interface the API layer talks to, and the values that cross
//! it: they live in the `shellgate-sandbox-api` crate (so the model loop and
//! the server depend on the interface, not the engine) and are re-exported
//! here for the engine's own code.

pub use shellgate_sandbox_api::backend::*;
