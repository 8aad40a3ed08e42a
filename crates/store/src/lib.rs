//! shellgate's metadata store: projects and their API keys, containers,
//! uploaded files, container files and sandbox-time usage, in SQLite (WAL).
//!
//! Every query that reads or changes tenant data takes the project, so one
//! project can never see another's rows. API keys are stored as SHA-256
//! hashes only. Migrations are numbered and applied in one transaction each.
//!
//! The store is synchronous: callers on an async runtime run it on blocking
//! threads. Writes go through one connection; reads use a small pool of
//! their own (WAL lets them proceed while a write transaction is open), so a
//! long write never makes another tenant's key lookup wait. The database and
//! its `-wal` and `-shm` files are created private (0600) from their first
//! byte: they hold key hashes and every tenant's ids.

mod backup;
mod batches;
mod commands;
mod connection;
mod console_changes;
mod console_sessions;
mod container_files;
mod containers;
mod e2b;
mod e2b_templates;
mod egress;
mod error;
mod exec_credits;
mod files;
mod image_builds;
mod images;
mod keys;
mod leases;
mod migrations;
mod nodes;
mod paging;
mod responses;
mod sessions;
mod skills;
mod snapshots;
mod sql;
mod sweep;
#[cfg(test)]
mod testing;
mod usage;
mod values;
mod volumes;

pub use backup::backup_sqlite;
pub use batches::{BatchCounts, BatchRequestRow, BatchRow};
pub use commands::CommandRow;
pub use connection::Store;
pub use console_changes::Change;
pub use console_sessions::{ConsoleSessionRow, SESSIONS_PER_KEY};
pub use container_files::{ContainerFileRow, PresentFile};
pub use containers::{ActiveLoad, ContainerPage, ContainerRow, ContainerSearch, Quotas, Refusal};
pub use e2b::{E2bListFilter, E2bSandboxRow};
pub use e2b_templates::{
    E2bTemplateRow, TEMPLATE_BUILDING, TEMPLATE_ERROR, TEMPLATE_READY, TEMPLATE_WAITING,
};
pub use egress::EgressRow;
pub use error::{CorruptValue, Result, StoreError};
pub use exec_credits::{CreditAsk, CreditTake};
pub use files::FileRow;
pub use image_builds::{
    ImageBuildRow, IMAGE_BUILD_BUILDING, IMAGE_BUILD_ERROR, IMAGE_BUILD_QUEUED, IMAGE_BUILD_READY,
};
pub use images::ImageRow;
pub use keys::{hash_key, key_id, KeyGrant, KeyRecord, KeyRole};
pub use nodes::{HeldContainer, LostDeletion, NodeLoad, NodeRow, Restored, BUILD_NODE_LOST};
pub use paging::Page;
pub use responses::{ResponseRow, ResponseSummary};
pub use skills::{SkillRow, SkillVersionDelete, SkillVersionRow};
pub use snapshots::{SnapshotRefusal, SnapshotRow};
pub use sql::{Dialect, PostgresOptions};
pub use usage::{session_cost, ModelTokens, ProjectSummary, UsageLedger, SESSION_MINIMUM_SECONDS};
pub use values::{
    BatchOutcome, BatchStatus, ChangeTopic, CommandOutcome, ContainerStatus, EgressVerdict,
    FileSource, NodeStatus, ResponseStatus,
};
pub use volumes::{VolumeDelete, VolumeRefusal, VolumeRow};

#[cfg(test)]
mod tests;
