//! Which containers' code interpreter kernels ended with their suspension,
//! owned by the server's state and told by `interpreting`.

use std::collections::HashSet;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// The containers whose code interpreter kernel ended with their
/// suspension. The engine suspends a container by stopping it: every
/// process ends, the kernel too, and with it the Python objects in its
/// memory (only the files stay; nothing here freezes or checkpoints a
/// process). The next cell runs on a new kernel, and is told so (see
/// `Interpretation::kernel_lost`) rather than finding its variables
/// silently gone. Kept in memory: a restarted server has no kernels, and
/// its first cells start fresh ones as the first cell of a container does.
#[derive(Debug, Default)]
pub struct KernelsSlept(Mutex<HashSet<String>>);

impl KernelsSlept {
    fn lock(&self) -> MutexGuard<'_, HashSet<String>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `container`'s kernel ended while it slept.
    pub fn remember(&self, container: &str) {
        self.lock().insert(container.to_owned());
    }

    /// Whether `container`'s kernel ended while it slept, forgetting it
    /// (the next cell is told once).
    pub fn take(&self, container: &str) -> bool {
        self.lock().remove(container)
    }
}
