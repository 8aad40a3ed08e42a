//! A directory of one test's own under the temporary directory, removed
//! when dropped (the engine's unit tests that need real files).

use std::fs;
use std::path::{Path, PathBuf};

/// A fresh directory, named by the test's tag, the process and the time
/// (two tests, or two runs, never share one); removed on drop.
pub(crate) struct Scratch(pub(crate) PathBuf);

impl Scratch {
    pub(crate) fn new(tag: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir = std::env::temp_dir().join(format!(
            "shellgate-test-{tag}-{}-{nanos:x}",
            std::process::id()
        ));
        fs::create_dir_all(&dir).expect("create the test's directory");
        Self(dir)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}
