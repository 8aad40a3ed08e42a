//! Loop devices given back once their containers are gone.
//!
//! A container's disk is mounted through a loop device the helper takes
//! with `LOOP_CTL_GET_FREE`, which makes a new one when none is free; when
//! the container's processes end the device detaches (`LO_FLAGS_AUTOCLEAR`)
//! but stays registered, so the host keeps as many block devices as
//! containers ever ran at once. Each costs kernel memory, and every
//! `sysinfo()` on the host walks all of them (`nr_blockdev_pages`): with
//! 9,000 left after a burst of containers, the call took 177 µs instead of
//! a few for every program on the host (a sandbox's own call is init's to
//! answer, see `helper::init::sysinfo`). So the devices numbered [`KEPT`]
//! and above that this engine's containers used are removed
//! (`LOOP_CTL_REMOVE`) once detached; the first [`KEPT`] stay for the next
//! containers to take without making one. A device still attached or open
//! (its file system still held: a file view, a helper that just took it)
//! refuses the removal with `EBUSY` and is tried again later.
//!
//! A removal takes the kernel about 50 ms (its disk's teardown waits for
//! grace periods), so a background task removes them, sixteen at a time
//! (the waits overlap), and a stop never waits for it: with 1,000 devices
//! to remove, a final pass made a stop take 27 s, not 3. What is left at
//! shutdown is written down (`run/loops-ended`) for the next start's
//! remover; until then the devices stay registered, for any container to
//! take (`LOOP_CTL_GET_FREE` hands out a free device before it makes one).

use std::collections::BTreeSet;
use std::fs::OpenOptions;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

/// Loop devices below this number are never removed.
pub(super) const KEPT: u32 = 64;
const LOOP_CTL_REMOVE: libc::c_ulong = 0x4C81;
/// How long after a device's run ended it is first tried (its detach is
/// asynchronous), and how often a busy one is tried again.
const SETTLE: Duration = Duration::from_secs(2);
/// Threads removing devices side by side.
const REMOVERS: usize = 16;

/// The devices this engine's runs ended on, until removed.
#[derive(Debug, Default)]
pub(super) struct LoopDevices {
    ended: Mutex<BTreeSet<u32>>,
    ending: Notify,
}

impl LoopDevices {
    fn ended(&self) -> std::sync::MutexGuard<'_, BTreeSet<u32>> {
        self.ended.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A run started on loop device `number`: taken again, it is not for
    /// removal (it would only be found busy for as long as the run lasts).
    pub(super) fn run_started(&self, number: Option<u32>) {
        if let Some(number) = number {
            self.ended().remove(&number);
        }
    }

    /// A run on loop device `number` ended (its init exited).
    pub(super) fn run_ended(&self, number: Option<u32>) {
        if let Some(number) = number.filter(|n| *n >= KEPT) {
            self.ended().insert(number);
            self.ending.notify_one();
        }
    }

    /// Removes every ended device that is detached and closed; those still
    /// busy stay for the next pass. Blocking (`ioctl`s).
    pub(super) fn remove_detached(&self) {
        let numbers: Vec<u32> = self.ended().iter().copied().collect();
        if numbers.is_empty() {
            return;
        }
        let control = match OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/loop-control")
        {
            Ok(control) => control,
            Err(e) => {
                tracing::debug!("loop devices not removed: /dev/loop-control: {e}");
                return;
            }
        };
        // Several at once: a removal mostly waits in the kernel (its
        // disk's teardown), and side by side the waits overlap (1,000 took
        // 48 s one at a time, 2.4 s sixteen at a time).
        let per_thread = numbers.len().div_ceil(REMOVERS);
        std::thread::scope(|scope| {
            for share in numbers.chunks(per_thread.max(1)) {
                let control = &control;
                scope.spawn(move || {
                    for &number in share {
                        self.remove_one(control, number);
                    }
                });
            }
        });
    }

    fn remove_one(&self, control: &std::fs::File, number: u32) {
        // SAFETY: LOOP_CTL_REMOVE takes the device's number by value.
        let removed = unsafe {
            libc::ioctl(
                control.as_raw_fd(),
                LOOP_CTL_REMOVE,
                number as libc::c_ulong,
            )
        };
        // Removed, or gone already (`ENODEV`): not ours to try again.
        // Busy: the next pass tries it.
        let busy =
            removed < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EBUSY);
        if !busy {
            self.ended().remove(&number);
        }
    }

    /// Removes ended devices as they detach, until the task is aborted.
    pub(super) fn spawn_remover(devices: Arc<Self>) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            loop {
                if devices.ended().is_empty() {
                    devices.ending.notified().await;
                }
                tokio::time::sleep(SETTLE).await;
                let removing = Arc::clone(&devices);
                let _ = tokio::task::spawn_blocking(move || removing.remove_detached()).await;
            }
        })
    }

    /// Writes down the devices not removed yet, at `path`, for the next
    /// start's remover ([`Self::load`]). Nothing to write removes the file.
    pub(super) fn save(&self, path: &Path) {
        let numbers: String = self.ended().iter().map(|n| format!("{n}\n")).collect();
        let saved = if numbers.is_empty() {
            match std::fs::remove_file(path) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                other => other,
            }
        } else {
            std::fs::write(path, numbers)
        };
        if let Err(e) = saved {
            tracing::warn!(
                "ended loop devices not written down ({}): {e}",
                path.display()
            );
        }
    }

    /// The devices a previous run wrote down at `path` (then removed), for
    /// removal: those still detached. One bound since is someone else's
    /// now (a reboot between, another program's), never ours to remove.
    pub(super) fn load(&self, path: &Path) {
        let Ok(text) = std::fs::read_to_string(path) else {
            return;
        };
        let _ = std::fs::remove_file(path);
        let mut ended = self.ended();
        for number in text
            .lines()
            .filter_map(|line| line.trim().parse::<u32>().ok())
        {
            let device = Path::new("/sys/block").join(format!("loop{number}"));
            if number >= KEPT && device.exists() && !device.join("loop/backing_file").exists() {
                ended.insert(number);
            }
        }
    }

    /// How many ended devices are waiting to be removed.
    #[cfg(test)]
    pub(super) fn waiting(&self) -> usize {
        self.ended().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_devices_past_the_kept_ones_are_remembered() {
        let devices = LoopDevices::default();
        devices.run_ended(None);
        devices.run_ended(Some(KEPT - 1));
        assert_eq!(devices.waiting(), 0);
        devices.run_ended(Some(KEPT));
        devices.run_ended(Some(KEPT));
        assert_eq!(devices.waiting(), 1);
    }

    #[test]
    fn a_device_taken_again_is_not_for_removal() {
        let devices = LoopDevices::default();
        devices.run_ended(Some(KEPT + 1));
        devices.run_started(Some(KEPT + 1));
        assert_eq!(devices.waiting(), 0);
    }

    #[test]
    fn what_is_left_at_shutdown_is_written_down_and_read_once() {
        let dir = std::env::temp_dir().join(format!("shellgate-loops-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("loops-ended");
        // No device of this number exists: read, then dropped as nothing
        // to remove.
        let devices = LoopDevices::default();
        devices.run_ended(Some(u32::MAX - 1));
        devices.save(&path);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            format!("{}\n", u32::MAX - 1)
        );
        let next = LoopDevices::default();
        next.load(&path);
        assert_eq!(next.waiting(), 0);
        assert!(!path.exists());
        // Nothing left: no file.
        next.save(&path);
        assert!(!path.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_device_is_removed_once_nothing_holds_it() {
        let Ok(control) = OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/loop-control")
        else {
            return; // not root: nothing to remove either
        };
        const LOOP_CTL_ADD: libc::c_ulong = 0x4C80;
        // A number of its own, far above what containers take.
        let number = (60_000..61_000)
            .map(|n| n + std::process::id() % 1_000)
            .find(|n| {
                // SAFETY: LOOP_CTL_ADD takes the device's number by value.
                unsafe { libc::ioctl(control.as_raw_fd(), LOOP_CTL_ADD, *n as libc::c_ulong) >= 0 }
            })
            .expect("a loop device added");
        let node = format!("/dev/loop{number}");
        let held = OpenOptions::new()
            .read(true)
            .open(&node)
            .expect("the device opens");
        let devices = LoopDevices::default();
        devices.run_ended(Some(number));
        devices.remove_detached();
        // Open: busy, kept for the next pass.
        assert_eq!(devices.waiting(), 1);
        let sys = std::path::PathBuf::from(format!("/sys/block/loop{number}"));
        assert!(sys.exists());
        drop(held);
        devices.remove_detached();
        assert_eq!(devices.waiting(), 0);
        assert!(!sys.exists());
    }
}
