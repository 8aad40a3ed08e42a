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
    /// The ids of Anthropic's skills (`type: "anthropic"`) it stands for:
    /// the ones whose job it does.
    pub anthropic: &'static [&'static str],
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
        anthropic: &["xlsx"],
        folder: "spreadsheet-analyst",
        files: files!("spreadsheet-analyst": "SKILL.md", "scripts/analyze.py"),
    },
    Curated {
        id: "shellgate-report-writer",
        aliases: &[],
        // It writes PDF and DOCX files; Anthropic's `pdf` and `docx` skills
        // also read and edit them, which plain Python in the container does.
        anthropic: &["docx", "pdf"],
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

    /// The curated skill an Anthropic skill id (`type: "anthropic"`)
    /// names: one of Anthropic's it stands for, or its own id or alias.
    pub fn find_anthropic(id: &str) -> Option<&'static Curated> {
        CURATED
            .iter()
            .find(|c| c.anthropic.contains(&id))
            .or_else(|| Self::find(id))
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

    #[test]
    fn anthropics_skill_names_find_the_skill_that_does_their_job() {
        for (name, id) in [
            ("xlsx", Some("shellgate-spreadsheet-analyst")),
            ("docx", Some("shellgate-report-writer")),
            ("pdf", Some("shellgate-report-writer")),
            ("pptx", None),
            ("shellgate-report-writer", Some("shellgate-report-writer")),
        ] {
            assert_eq!(Curated::find_anthropic(name).map(|c| c.id), id, "{name}");
        }
        assert!(
            Curated::find("xlsx").is_none(),
            "Anthropic's names are Anthropic's only"
        );
    }
}
