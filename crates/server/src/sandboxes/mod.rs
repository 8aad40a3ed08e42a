//! The sandbox service: what every dialect (OpenAI, Responses, Messages,
//! Chat, E2B, the console) and a cluster's replicas share about
//! containers, below all of them.

pub mod reuse;
