//! shellgate's model loop: the Responses API's agent loop over any upstream
//! model.
//!
//! A response is a loop ([`run`]): the conversation goes to an upstream
//! model ([`upstream`]: Chat Completions today) with every tool as a
//! function tool ([`tools`]); what the model asks of the hosted `shell` runs
//! in a sandbox the server provides ([`run::Sandbox`]) and goes back to the
//! model, until it answers; calls the client must answer end the response.
//! Items replayed by clients become the conversation ([`conversation`]).
//! The HTTP layer (the server) owns storage, streaming and containers; this
//! crate owns the loop and the upstream protocols.

pub mod arguments;
pub mod conversation;
mod error;
pub mod google_outcome;
pub mod guardrail;
pub mod reasoning;
pub mod run;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod tools;
pub mod turn;
pub mod upstream;

pub use error::RequestError;
