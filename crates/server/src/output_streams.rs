//! [`StreamBudgets`]: how many streams of a process's output are open at
//! once (`processes/{id}/output?stream=true`, the process WebSocket, E2B's
//! `process.Process/Start` and `Connect`), bounded per process
//! (`max_streams_per_process`) and per project (`max_streams_per_project`).
//!
//! Each stream holds little: it reads one small page of the process's
//! buffer only when its client took the one before, so a client that never
//! reads pins one page and its connection's write buffer, never a queue
//! (see `processes`). These bounds make the number of such streams one
//! tenant holds finite as well: past either, a new stream is refused with a
//! 429 in its dialect's envelope (OpenAI's error JSON; E2B's Connect error
//! `resource_exhausted`). Counted by this server (a node, in a cluster: the
//! memory they hold is its own), and a slot is given back when its stream
//! is dropped, whatever ended it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::config::SandboxSettings;
use crate::error::{ApiError, ApiResult};
use shellgate_wire::ErrorCode;

/// The streams open now, per process and per project.
#[derive(Default)]
struct Open {
    /// By (container, process).
    processes: HashMap<(String, String), u32>,
    projects: HashMap<String, u32>,
}

impl Open {
    fn release(&mut self, project: &str, process: &(String, String)) {
        if let Some(count) = self.processes.get_mut(process) {
            *count -= 1;
            if *count == 0 {
                self.processes.remove(process);
            }
        }
        if let Some(count) = self.projects.get_mut(project) {
            *count -= 1;
            if *count == 0 {
                self.projects.remove(project);
            }
        }
    }
}

pub(crate) struct StreamBudgets {
    per_process: u32,
    per_project: u32,
    open: Arc<Mutex<Open>>,
}

/// One open stream, counted until dropped.
pub(crate) struct StreamSlot {
    open: Arc<Mutex<Open>>,
    project: String,
    process: (String, String),
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.release(&self.project, &self.process);
        // What the stream held goes back to the kernel (see `allocator`).
        crate::allocator::trim_soon();
    }
}

impl StreamBudgets {
    pub(crate) fn new(config: &SandboxSettings) -> Self {
        Self {
            per_process: config.max_streams_per_process,
            per_project: config.max_streams_per_project,
            open: Arc::default(),
        }
    }

    /// A slot for a new stream of `project`'s process `process` in
    /// `container`, or a 429 naming the bound it would pass.
    pub(crate) fn open(
        &self,
        project: &str,
        container: &str,
        process: &str,
    ) -> ApiResult<StreamSlot> {
        let key = (container.to_owned(), process.to_owned());
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let of_process = open.processes.get(&key).copied().unwrap_or(0);
        if of_process >= self.per_process {
            return Err(ApiError::quota(
                ErrorCode::TooManyProcessStreams,
                format!(
                    "Process '{process}' already has {of_process} output streams open; the limit \
                     (max_streams_per_process) is {}. Close one.",
                    self.per_process
                ),
            ));
        }
        let of_project = open.projects.get(project).copied().unwrap_or(0);
        if of_project >= self.per_project {
            return Err(ApiError::quota(
                ErrorCode::TooManyOutputStreams,
                format!(
                    "Project '{project}' already has {of_project} process output streams open; \
                     the limit (max_streams_per_project) is {}. Close one.",
                    self.per_project
                ),
            ));
        }
        *open.processes.entry(key.clone()).or_default() += 1;
        *open.projects.entry(project.to_owned()).or_default() += 1;
        Ok(StreamSlot {
            open: Arc::clone(&self.open),
            project: project.to_owned(),
            process: key,
        })
    }

    /// Streams open now, on every process of every project.
    #[cfg(test)]
    fn total(&self) -> u32 {
        let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.projects.values().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budgets(per_process: u32, per_project: u32) -> StreamBudgets {
        StreamBudgets::new(&SandboxSettings {
            max_streams_per_process: per_process,
            max_streams_per_project: per_project,
            ..SandboxSettings::default()
        })
    }

    #[test]
    fn streams_are_bounded_per_process_and_per_project_and_given_back_when_dropped() {
        let budgets = budgets(2, 3);
        let one = budgets.open("alpha", "c1", "p1").unwrap();
        let _two = budgets.open("alpha", "c1", "p1").unwrap();
        let refused = budgets.open("alpha", "c1", "p1").err().unwrap();
        assert_eq!(refused.status().as_u16(), 429);
        assert_eq!(refused.code.code(), Some("too_many_process_streams"));
        // Another process of the project, up to the project's bound.
        let _three = budgets.open("alpha", "c1", "p2").unwrap();
        let refused = budgets.open("alpha", "c2", "p9").err().unwrap();
        assert_eq!(refused.code.code(), Some("too_many_output_streams"));
        assert!(refused.message.contains("max_streams_per_project"));
        // Another project is not affected.
        let _other = budgets.open("beta", "c3", "p1").unwrap();
        // A stream that ends gives its slot back.
        drop(one);
        let _again = budgets.open("alpha", "c1", "p1").unwrap();
        drop((_two, _three, _other, _again));
        assert_eq!(budgets.total(), 0);
        assert!(budgets.open.lock().unwrap().processes.is_empty());
    }
}
