//! The sandbox service: what every dialect (OpenAI containers, processes
//! and files, the Responses API's hosted tools, Messages, Chat, E2B, the
//! console) and a cluster's replicas share about containers, below all of
//! them, in one place: admission against the project's quotas, ownership,
//! billing, the command audit, the live output tap and container reuse. The
//! handlers translate their wire into these calls; none of them owns a step
//! of it.

pub(crate) mod containers;
pub(crate) mod exec;
pub(crate) mod files;
pub(crate) mod fs;
pub(crate) mod hosted;
pub(crate) mod interpreting;
pub(crate) mod kernels_slept;
pub(crate) mod paused_cells;
pub(crate) mod processes;
pub mod reuse;
pub(crate) mod skills;
pub(crate) mod snapshot_source;
pub(crate) mod snapshots;
pub(crate) mod volume_files;
pub(crate) mod volumes;
