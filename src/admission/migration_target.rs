//! A NeonVM migration's target pod runs what its source pod runs, not what the rules say
//! now: a VM does not change its disks mid-migration. Each container of the target takes
//! the image of the source's container in the same slot; the others are left as they are.

use std::collections::BTreeMap;

use json_patch::Patch;

use crate::admission::pod_mutation::{Decision, Outcome};
use crate::admission::pod_slots::PodSlot;

/// The decision for a target pod of `slots`, its source pod running `source` (slot →
/// image).
#[must_use]
pub fn decide(slots: &[PodSlot], source: &BTreeMap<String, String>) -> Decision {
    let ops: Vec<_> = slots
        .iter()
        .filter_map(|slot| {
            let image = source.get(&slot.key)?;
            (*image != slot.image).then(|| slot.set_image(image))
        })
        .collect();
    Decision {
        outcome: if ops.is_empty() {
            Outcome::Unchanged
        } else {
            Outcome::Mutated
        },
        patch: Patch(ops),
        warnings: Vec::new(),
        unpinned: 0,
        dry_run: 0,
    }
}
