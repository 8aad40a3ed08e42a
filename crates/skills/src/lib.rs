//! Skill bundles: versioned folders of instructions (`SKILL.md`) and
//! scripts that containers get read-only. This crate reads them from
//! untrusted zips and directory uploads ([`bundle`]), checks their
//! manifest ([`manifest`]), writes them back as a zip and unpacks them;
//! it also carries the skills that ship with shellgate ([`curated`]).
//! It touches no store and no container: the server does.

pub mod bundle;
pub mod curated;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
pub mod manifest;

pub use bundle::{
    from_files, from_zip, from_zip_measured, Bundle, BundleError, BundleFile, Limits, WorkDone,
};
pub use curated::{Curated, CURATED};
pub use manifest::Manifest;
