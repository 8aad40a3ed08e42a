//! The sandbox service: what every dialect (OpenAI containers, processes
//! and files, the Responses API's hosted tools, Messages, Chat, E2B, the
//! console) asks of a container, in one place: admission against the
//! project's quotas, ownership, billing, the command audit and the live
//! output tap. The handlers translate their wire into these calls; none of
//! them owns a step of it.

pub(crate) mod containers;
pub(crate) mod exec;
pub(crate) mod files;
pub(crate) mod fs;
pub(crate) mod interpreting;
pub(crate) mod processes;
pub(crate) mod skills;
