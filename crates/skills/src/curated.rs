//! The skills that ship with shellgate, referenced by id like OpenAI's
//! curated ones (`{"type": "skill_reference", "skill_id":
//! "shellgate-spreadsheet-analyst"}`): their files are compiled into the
//! binary, so every install has the same version of them.

use crate::bundle::{from_files, Bundle, BundleError, Limits};

/// One curated skill: its id and its files (paths inside its folder).
pub struct Curated {
    pub id: &'static str,
    /// Other ids it answers to (OpenAI's name for the same job).
    pub aliases: &'static [&'static str],
    pub folder: &'static str,
    files: &'static [(&'static str, &'static [u8])],
}

macro_rules! files {
    ($folder:literal: $($path:literal),+ $(,)?) => {
        &[$(($path, include_bytes!(concat!("../curated/", $folder, "/", $path)))),+]
    };
}

/// Every curated skill.
pub const CURATED: &[Curated] = &[
    Curated {
        id: "shellgate-spreadsheet-analyst",
        aliases: &["openai-spreadsheets"],
        folder: "spreadsheet-analyst",
        files: files!("spreadsheet-analyst": "SKILL.md", "scripts/analyze.py"),
    },
    Curated {
        id: "shellgate-report-writer",
        aliases: &[],
        folder: "report-writer",
        files: files!("report-writer": "SKILL.md", "scripts/render.py"),
    },
];

impl Curated {
    /// The curated skill an id names, if any.
    pub fn find(id: &str) -> Option<&'static Curated> {
        CURATED
            .iter()
            .find(|c| c.id == id || c.aliases.contains(&id))
    }

    /// Its bundle, checked like an upload.
    pub fn bundle(&self) -> Result<Bundle, BundleError> {
        from_files(
            self.files
                .iter()
                .map(|(path, bytes)| (format!("{}/{path}", self.folder), bytes.to_vec())),
            &Limits::default(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_curated_skill_is_a_valid_bundle_named_after_its_folder() {
        for curated in CURATED {
            let bundle = curated.bundle().expect(curated.id);
            assert_eq!(bundle.manifest.name, curated.folder);
            assert!(!bundle.manifest.description.is_empty());
            assert!(bundle
                .files
                .iter()
                .any(|f| f.path.ends_with(".py") && f.executable));
        }
        assert_eq!(
            Curated::find("openai-spreadsheets").map(|c| c.id),
            Some("shellgate-spreadsheet-analyst")
        );
        assert!(Curated::find("skill_123").is_none());
    }
}
