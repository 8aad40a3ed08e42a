//! Descriptors whose last close may unmount a container's disk.
//!
//! A running container's `/mnt/data` descriptor, and a stopped one's file
//! view, keep its disk's mount alive once no mount namespace shows it: the
//! last close unmounts the ext4, writing back what it held and flushing the
//! loop device beneath, in the closing thread (the kernel's deferred
//! `mntput` runs on that thread's way back from `close`). So a
//! [`MountHold`] is never closed on an async worker: its close goes to the
//! blocking pool, or happens in place on a thread that may block
//! ([`closing_here`]).

use std::cell::Cell;
use std::io;
use std::mem::ManuallyDrop;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

thread_local! {
    /// Set while this thread runs work that may block (see [`closing_here`]).
    static MAY_BLOCK: Cell<bool> = const { Cell::new(false) };
}

/// A descriptor that may hold a mount, closed off the async workers.
pub(crate) struct MountHold {
    fd: ManuallyDrop<OwnedFd>,
}

impl MountHold {
    pub(crate) fn new(fd: OwnedFd) -> Self {
        Self {
            fd: ManuallyDrop::new(fd),
        }
    }

    /// Another descriptor of the same directory (a hold of its own on the
    /// mount: whoever closes last unmounts).
    pub(crate) fn try_clone(&self) -> io::Result<OwnedFd> {
        self.fd.try_clone()
    }
}

impl AsFd for MountHold {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Drop for MountHold {
    fn drop(&mut self) {
        // SAFETY: taken once, here, and never used after.
        let fd = unsafe { ManuallyDrop::take(&mut self.fd) };
        if MAY_BLOCK.with(Cell::get) {
            return drop(fd);
        }
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn_blocking(move || drop(fd));
            }
            // No runtime: a thread of its own, which may block.
            Err(_) => drop(fd),
        }
    }
}

/// Runs `work` with the holds it drops closed in place: for a thread that
/// may block (the blocking pool), when the caller must know the mounts are
/// gone once it returns.
pub(crate) fn closing_here<T>(work: impl FnOnce() -> T) -> T {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            MAY_BLOCK.with(|may| may.set(self.0));
        }
    }
    let _reset = Reset(MAY_BLOCK.with(|may| may.replace(true)));
    work()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// A hold on a pipe's write end, and the read end, which reads its end
    /// once the hold is closed.
    fn a_hold() -> (MountHold, std::fs::File) {
        let (read, write) = rustix::pipe::pipe().unwrap();
        (MountHold::new(write), std::fs::File::from(read))
    }

    #[test]
    fn closed_in_place_where_the_thread_may_block() {
        let (hold, mut read) = a_hold();
        closing_here(|| drop(hold));
        // Not a wait: closed already, the pipe reads its end at once.
        rustix::fs::fcntl_setfl(&read, rustix::fs::OFlags::NONBLOCK).unwrap();
        assert_eq!(read.read(&mut [0u8; 1]).unwrap(), 0);
        assert!(!MAY_BLOCK.with(Cell::get), "the flag is put back");
    }

    #[tokio::test]
    async fn closed_on_the_blocking_pool_from_an_async_task() {
        let (hold, mut read) = a_hold();
        let clone = hold.try_clone().unwrap();
        drop(hold);
        drop(clone);
        // Reads its end once the blocking pool has closed the hold.
        let got = tokio::task::spawn_blocking(move || read.read(&mut [0u8; 1]).unwrap());
        assert_eq!(got.await.unwrap(), 0);
    }
}
