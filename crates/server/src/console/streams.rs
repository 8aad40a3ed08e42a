//! [`Streams`]: how many live streams (SSE) each project has open in the
//! console, bounded: a stream holds a task and a subscription for as long
//! as it is open, so one tenant opening thousands must not hold the
//! server's memory or its other tenants' share of the change broadcast.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::error::{ApiError, ApiResult};

/// The most live streams one project keeps open (every tab of every
/// member's console: two or three streams a tab).
pub(super) const STREAMS_PER_PROJECT: usize = 64;

#[derive(Default)]
pub(crate) struct Streams(Arc<Mutex<HashMap<String, usize>>>);

/// One open stream, counted until dropped.
pub(super) struct StreamSlot {
    counts: Arc<Mutex<HashMap<String, usize>>>,
    project: String,
}

impl Streams {
    /// A slot for a new stream of `project`, or a 429 past the bound.
    pub(super) fn open(&self, project: &str) -> ApiResult<StreamSlot> {
        let mut counts = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let count = counts.entry(project.to_owned()).or_default();
        if *count >= STREAMS_PER_PROJECT {
            return Err(ApiError::quota(
                "too_many_console_streams",
                format!(
                    "Project '{project}' has {STREAMS_PER_PROJECT} console live streams open; close a console tab."
                ),
            ));
        }
        *count += 1;
        Ok(StreamSlot {
            counts: Arc::clone(&self.0),
            project: project.to_owned(),
        })
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = counts.get_mut(&self.project) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                counts.remove(&self.project);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_project_has_a_bounded_number_of_streams_and_closing_frees_one() {
        let streams = Streams::default();
        let mut open: Vec<_> = (0..STREAMS_PER_PROJECT)
            .map(|_| streams.open("alpha").unwrap())
            .collect();
        assert_eq!(
            streams.open("alpha").err().map(|e| e.status.as_u16()),
            Some(429)
        );
        assert!(
            streams.open("beta").is_ok(),
            "another project is not affected"
        );
        open.pop();
        assert!(streams.open("alpha").is_ok());
        drop(open);
        assert!(streams
            .0
            .lock()
            .unwrap()
            .get("alpha")
            .is_none_or(|c| *c <= 1));
    }
}
