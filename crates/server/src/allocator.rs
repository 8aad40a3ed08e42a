//! Giving freed memory back to the kernel.
//!
//! The server allocates through glibc's malloc, which keeps what is freed
//! in its arenas (one per thread that allocated, up to eight per core) and
//! hands memory back to the kernel only from the top of each heap. A burst
//! of connections (hundreds of streams nobody reads, then closed) leaves
//! their buffers scattered through the heaps, and the server's resident
//! memory stays at its peak long after they are gone. `malloc_trim(0)`
//! walks every arena and gives back each whole free page (`MADV_DONTNEED`),
//! wherever it lies: measured with 500 non-reading E2B streams closed, the
//! server's RSS went from 79 MiB (its idle size was 41 MiB) back to 43.
//!
//! So a task trims a second after connections or output streams ended,
//! once for every burst of them ([`trim_soon`]): one trim a second at most
//! while they churn (a walk of the arenas, a few milliseconds at the
//! heaps' sizes here), none while nothing ends. mimalloc instead (a C
//! build of 15 s) held more, not less, in the same measurement: its idle
//! server was 62 MiB, each stream held twice what it does with glibc, and
//! 90 of its 112 MiB stayed resident after the streams closed.

use std::time::Duration;

use tokio::sync::Notify;

/// How long after the first end of a burst the trim runs: the rest of the
/// burst ends meanwhile, and one trim gives all of it back.
const SETTLE: Duration = Duration::from_secs(1);

/// Told of every end; the trimmer waits on it (one stored permit, so ends
/// during a trim make exactly one more).
static ENDED: Notify = Notify::const_new();

/// Something that held memory ended (a connection, a stream): the memory
/// goes back to the kernel within [`SETTLE`].
pub(crate) fn trim_soon() {
    ENDED.notify_one();
}

/// Trims after every burst of ends, until the returned task is aborted.
pub(crate) fn spawn_trimmer() -> tokio::task::JoinHandle<()> {
    tokio::spawn(async {
        loop {
            ENDED.notified().await;
            tokio::time::sleep(SETTLE).await;
            trim();
        }
    })
}

/// Gives every whole free page of every arena back to the kernel.
fn trim() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim takes the arenas' locks itself and only releases
    // pages no allocation uses; it is safe to call from any thread.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The resident anonymous memory of this process, in KiB.
    #[cfg(target_env = "gnu")]
    fn anonymous_kib() -> u64 {
        let rollup = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap();
        rollup
            .lines()
            .find(|line| line.starts_with("Anonymous:"))
            .and_then(|line| line.split_whitespace().nth(1))
            .and_then(|kib| kib.parse().ok())
            .unwrap()
    }

    #[test]
    #[cfg(target_env = "gnu")]
    fn a_trim_gives_freed_fragmented_memory_back() {
        // Many small blocks, every other one kept: freeing the rest leaves
        // holes no heap top can give back, the shape streams leave.
        let blocks: Vec<Vec<u8>> = (0..20_000).map(|i| vec![i as u8; 4096]).collect();
        let (kept, freed): (Vec<_>, Vec<_>) = blocks
            .into_iter()
            .enumerate()
            .partition(|(i, _)| i % 16 == 0);
        let holding = anonymous_kib();
        drop(freed);
        trim();
        let after = anonymous_kib();
        assert!(
            holding - after > 40 * 1024,
            "trimming gave back {} KiB of ~75 MiB freed",
            holding.saturating_sub(after)
        );
        drop(kept);
    }
}
