//! The process's descriptors, which every live container holds some of (its
//! control socket to init, its `/mnt/data`, its egress proxy's sockets). A
//! start that would leave fewer than a reserve free for everything else
//! (connections, the store, a command's pipes, an upload) is refused with
//! an error that says so, rather than let the process run out (`EMFILE`:
//! every accept, open and pipe failing at once, for every tenant).
//!
//! Knowing how many are open means listing `/proc/self/fd`, thousands of
//! entries with thousands of containers: it is done only once the
//! containers' own descriptors pass half the limit. Below that they fit
//! beside the connections, which the listener caps at the other half.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::error::SandboxError;

/// Descriptors kept free for everything but containers, at most (a
/// quarter of a small limit).
const RESERVE: usize = 1024;

/// What the live containers hold.
#[derive(Default)]
pub(super) struct DescriptorBudget {
    held: AtomicUsize,
}

/// Descriptors a live container holds, given back when it is dropped (with
/// the container's run, which closes them).
pub(super) struct DescriptorHold {
    budget: Arc<DescriptorBudget>,
    count: usize,
}

impl Drop for DescriptorHold {
    fn drop(&mut self) {
        self.budget.held.fetch_sub(self.count, Ordering::Relaxed);
    }
}

impl DescriptorBudget {
    /// Holds `needed` descriptors for a container about to start, or
    /// refuses when the process's limit cannot spare them.
    pub(super) async fn admit(
        self: &Arc<Self>,
        needed: usize,
    ) -> Result<DescriptorHold, SandboxError> {
        // The listing is a walk of thousands of entries: off the runtime.
        let count = || async { tokio::task::spawn_blocking(count_open).await.ok().flatten() };
        admit_within(self, needed, soft_limit(), count).await
    }
}

/// [`DescriptorBudget::admit`] against `limit`, counting the open
/// descriptors with `open` when it must.
async fn admit_within<F: std::future::Future<Output = Option<usize>>>(
    budget: &Arc<DescriptorBudget>,
    needed: usize,
    limit: usize,
    open: impl FnOnce() -> F,
) -> Result<DescriptorHold, SandboxError> {
    let held = budget.held.load(Ordering::Relaxed);
    let reserve = RESERVE.min(limit / 4);
    if (held + needed) * 2 > limit {
        // Unknown (no /proc): what the containers hold stands for all.
        let open = open().await.unwrap_or(held);
        if open + needed + reserve > limit {
            return Err(SandboxError::NoRoom(format!(
                "this server has {open} of its {limit} open-file descriptors in use ({held} of them \
                 held by live containers) and keeps {reserve} free for connections: no other \
                 container can start until some stop or are deleted (or raise the server's \
                 RLIMIT_NOFILE)"
            )));
        }
    }
    budget.held.fetch_add(needed, Ordering::Relaxed);
    Ok(DescriptorHold {
        budget: Arc::clone(budget),
        count: needed,
    })
}

/// The process's soft `RLIMIT_NOFILE` (the server raises it to the hard one
/// as it starts).
fn soft_limit() -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills the rlimit we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return usize::MAX;
    }
    usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX)
}

/// How many descriptors the process has open.
fn count_open() -> Option<usize> {
    std::fs::read_dir("/proc/self/fd").ok().map(Iterator::count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_start_is_refused_only_when_it_would_eat_into_the_reserve() {
        let budget = Arc::new(DescriptorBudget::default());
        // Below half the limit: nothing is counted.
        let first = admit_within(&budget, 2, 4096, || async { panic!("counted") })
            .await
            .unwrap();
        assert_eq!(budget.held.load(Ordering::Relaxed), 2);
        // Past half: counted, and admitted while the reserve stays free.
        let many = admit_within(&budget, 2100, 4096, || async { Some(100) })
            .await
            .unwrap();
        let Err(refused) = admit_within(&budget, 5, 4096, || async { Some(4096 - 1024 - 4) }).await
        else {
            panic!("admitted into the reserve");
        };
        assert!(matches!(refused, SandboxError::NoRoom(_)), "{refused}");
        assert!(refused.to_string().contains("4096"), "{refused}");
        // Given back as they stop.
        drop(many);
        drop(first);
        assert_eq!(budget.held.load(Ordering::Relaxed), 0);
        // A small limit keeps a quarter free, not more than it has.
        assert!(admit_within(&budget, 2, 256, || async { Some(150) })
            .await
            .is_ok());
        assert!(admit_within(&budget, 200, 256, || async { Some(10) })
            .await
            .is_err());
    }
}
