//! Host id ranges: every running container maps its ids 0..65536 to a
//! range of its own, `uid_base + slot × 65536`, so no two running
//! containers share a host uid.
//!
//! A container's disk image holds its files under the container's own ids
//! and is shown to it through an idmapped mount (`mount_setattr(2)`,
//! `MOUNT_ATTR_IDMAP`) of its range: the slot is leased when it starts and
//! returned when its processes are gone ([`SlotLease`]), so a stopped
//! container holds none and suspended ones are bounded by disk, not by the
//! 65,536 ranges below 2^32. Its `uid-slot` file says `idmapped`.
//!
//! Files that must hold host ids (plain-directory disks, hosts mapping one
//! id, disks made before idmapped mounts) keep their slot for the
//! container's life: its `uid-slot` file holds the number, so a restarted
//! engine maps it to the same host ids and its files keep their owners.
//! Slot 0 is never handed out. A missing, corrupt, out-of-range or
//! duplicated slot file is refused (the container is quarantined), never
//! mapped to a range another container uses.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::error::{IoContext, SandboxError};

/// Ids mapped into a container in root mode.
pub(crate) const ID_RANGE: u32 = 65_536;

/// Name of the file holding a container's slot.
const SLOT_FILE: &str = "uid-slot";

/// What the slot file of a container whose disk holds its own ids says.
const IDMAPPED: &str = "idmapped";

/// Which ids a container's files hold on its disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DiskIds {
    /// The container's own (`0..65536`), shown through an idmapped mount
    /// of whichever slot it runs in.
    Own,
    /// The host ids of this slot's range, which the container keeps.
    Shifted(u32),
}

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

    /// Whether every container maps only the host's one id (rootless, or
    /// `map_invoking_user`): there are no ranges to shift between.
    pub fn maps_one_id(&self) -> bool {
        self.rootless
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

    /// Host (uid, gid) of the sandbox user's and of container root's files
    /// on a disk holding `ids`, as the disk stores them.
    pub fn disk_owners(&self, ids: DiskIds, sandbox_uid: u32) -> ((u32, u32), (u32, u32)) {
        match ids {
            DiskIds::Own => ((sandbox_uid, sandbox_uid), (0, 0)),
            DiskIds::Shifted(slot) => self.host_ids(slot, sandbox_uid),
        }
    }

    /// How far a disk holding `ids` offsets the container's ids (0: it
    /// holds them as they are, or the host maps one id).
    pub fn disk_id_base(&self, ids: DiskIds) -> u32 {
        match ids {
            DiskIds::Shifted(slot) if !self.rootless => self.id_base(slot),
            _ => 0,
        }
    }

    /// A free slot for one run, returned when the lease is dropped.
    pub fn lease(self: &Arc<Self>) -> Result<SlotLease, SandboxError> {
        Ok(SlotLease {
            slot: self.allocate()?,
            slots: Arc::clone(self),
        })
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

    /// Records which ids a container's disk holds in its directory.
    pub fn write(dir: &Path, ids: DiskIds) -> Result<(), SandboxError> {
        let text = match ids {
            DiskIds::Own => IDMAPPED.to_owned(),
            DiskIds::Shifted(slot) => slot.to_string(),
        };
        fs::write(dir.join(SLOT_FILE), text).context(|| "write uid-slot".into())
    }

    /// Reads which ids a container's disk holds, refusing anything but
    /// `idmapped` or a number in `1..capacity`.
    pub fn read(&self, dir: &Path) -> Result<DiskIds, String> {
        let text = fs::read_to_string(dir.join(SLOT_FILE))
            .map_err(|e| format!("cannot read {SLOT_FILE}: {e}"))?;
        if text.trim() == IDMAPPED {
            return Ok(DiskIds::Own);
        }
        parse_slot(&text, capacity(self.uid_base)).map(DiskIds::Shifted)
    }
}

/// A slot held for one run of a container; released when dropped, which
/// happens once the run's handle is gone (its processes ended with it).
pub(crate) struct SlotLease {
    slots: Arc<IdSlots>,
    slot: u32,
}

impl SlotLease {
    pub fn slot(&self) -> u32 {
        self.slot
    }
}

impl Drop for SlotLease {
    fn drop(&mut self) {
        self.slots.release(self.slot);
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

    #[test]
    fn a_lease_returns_its_slot_when_dropped() {
        let slots = Arc::new(IdSlots::new(3_000_000_000, false));
        let first = slots.lease().expect("lease");
        let second = slots.lease().expect("lease");
        assert_eq!((first.slot(), second.slot()), (1, 2));
        drop(first);
        assert_eq!(slots.lease().expect("lease").slot(), 1);
    }

    #[test]
    fn a_slot_file_names_either_a_kept_slot_or_idmapped_files() {
        let dir = crate::scratch::Scratch::new("slot-file");
        let slots = IdSlots::new(3_000_000_000, false);
        for ids in [DiskIds::Own, DiskIds::Shifted(7)] {
            IdSlots::write(dir.path(), ids).expect("write");
            assert_eq!(slots.read(dir.path()), Ok(ids));
        }
        fs::write(dir.path().join(SLOT_FILE), "idmapped-ish").expect("write");
        assert!(slots.read(dir.path()).is_err());
    }
}
