//! Host id ranges: every container maps its ids 0..65536 to a range of its
//! own, `uid_base + slot × 65536`, so no two containers share a host uid.
//!
//! A container's slot is kept in its `uid-slot` file, so a restarted engine
//! maps it to the same host ids and its files keep their owners. Slot 0 owns
//! the formatted disks' root directories and is never handed out. A missing,
//! corrupt, out-of-range or duplicated slot file is refused (the container is
//! quarantined), never mapped to a range another container uses.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;
use std::sync::Mutex;

use crate::error::{IoContext, SandboxError};

/// Ids mapped into a container in root mode.
pub(crate) const ID_RANGE: u32 = 65_536;

/// Name of the file holding a container's slot.
const SLOT_FILE: &str = "uid-slot";

/// How many id slots fit above `uid_base`: every range must end below
/// `u32::MAX`, which is `(uid_t)-1`, never a real id.
pub(crate) fn capacity(uid_base: u32) -> u32 {
    let room = u64::from(u32::MAX).saturating_sub(u64::from(uid_base));
    (room / u64::from(ID_RANGE)).min(u64::from(u32::MAX)) as u32
}

/// The slots in use and how they map to host ids.
pub(crate) struct IdSlots {
    uid_base: u32,
    rootless: bool,
    used: Mutex<BTreeSet<u32>>,
}

impl IdSlots {
    pub fn new(uid_base: u32, rootless: bool) -> Self {
        Self {
            uid_base,
            rootless,
            used: Mutex::new(BTreeSet::new()),
        }
    }

    /// First host id of `slot`'s range.
    pub fn id_base(&self, slot: u32) -> u32 {
        self.uid_base + slot * ID_RANGE
    }

    /// Host (uid, gid) of the sandbox user and of container root in `slot`.
    pub fn host_ids(&self, slot: u32, sandbox_uid: u32) -> ((u32, u32), (u32, u32)) {
        if self.rootless {
            // SAFETY: getuid/getgid cannot fail.
            let me = unsafe { (libc::getuid(), libc::getgid()) };
            (me, me)
        } else {
            let base = self.id_base(slot);
            ((base + sandbox_uid, base + sandbox_uid), (base, base))
        }
    }

    /// A free slot (the lowest), reserved until `release`.
    pub fn allocate(&self) -> Result<u32, SandboxError> {
        let capacity = capacity(self.uid_base);
        let mut used = super::lock(&self.used);
        let slot = (1..capacity)
            .find(|s| !used.contains(s))
            .ok_or_else(|| SandboxError::Setup("every host id range is in use".into()))?;
        used.insert(slot);
        Ok(slot)
    }

    /// Reserves a slot read from a container's directory at start-up;
    /// `false` if it is already taken.
    pub fn claim(&self, slot: u32) -> bool {
        super::lock(&self.used).insert(slot)
    }

    pub fn release(&self, slot: u32) {
        super::lock(&self.used).remove(&slot);
    }

    /// Records a container's slot in its directory.
    pub fn write(dir: &Path, slot: u32) -> Result<(), SandboxError> {
        fs::write(dir.join(SLOT_FILE), slot.to_string()).context(|| "write uid-slot".into())
    }

    /// Reads a container's slot, refusing anything but a number in
    /// `1..capacity`.
    pub fn read(&self, dir: &Path) -> Result<u32, String> {
        let text = fs::read_to_string(dir.join(SLOT_FILE))
            .map_err(|e| format!("cannot read {SLOT_FILE}: {e}"))?;
        parse_slot(&text, capacity(self.uid_base))
    }
}

/// A slot file's text, checked: digits only, 1 ≤ slot < capacity.
fn parse_slot(text: &str, capacity: u32) -> Result<u32, String> {
    let trimmed = text.trim();
    if trimmed.is_empty() || !trimmed.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{SLOT_FILE} holds {trimmed:?}, not a number"));
    }
    match trimmed.parse::<u32>() {
        Ok(slot) if (1..capacity).contains(&slot) => Ok(slot),
        _ => Err(format!(
            "{SLOT_FILE} holds {trimmed}, outside the usable slots 1..{capacity}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_id_range_ends_below_the_invalid_id() {
        for base in [0u32, 100_000, 3_000_000_000, u32::MAX - ID_RANGE, u32::MAX] {
            let capacity = capacity(base);
            if capacity == 0 {
                continue;
            }
            // Slots run 1..capacity; the last range must fit entirely.
            let last = u64::from(capacity - 1);
            let end = u64::from(base) + last * u64::from(ID_RANGE) + u64::from(ID_RANGE);
            assert!(
                end <= u64::from(u32::MAX),
                "base {base}: range ends at {end}"
            );
        }
        assert_eq!(capacity(3_000_000_000), 19_759);
        assert_eq!(capacity(u32::MAX), 0);
    }

    #[test]
    fn corrupt_slot_files_are_refused_never_mapped_to_slot_zero() {
        let capacity = capacity(3_000_000_000);
        assert_eq!(parse_slot("7\n", capacity), Ok(7));
        for bad in ["", "0", "-1", "x", "1e3", "99999999999", " 12 34", "19759"] {
            assert!(parse_slot(bad, capacity).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn a_claimed_slot_cannot_be_claimed_or_allocated_again() {
        let slots = IdSlots::new(3_000_000_000, false);
        assert!(slots.claim(1));
        assert!(!slots.claim(1));
        assert_eq!(slots.allocate().ok(), Some(2));
        slots.release(1);
        assert_eq!(slots.allocate().ok(), Some(1));
    }
}
