//! A NeonVM migration's target pod runs what its source pod runs, not what the rules say
//! now: a VM does not change its disks mid-migration. Each container of the target in a slot
//! the source has takes the source's image there; admission maps the others by the rules.

use std::collections::BTreeMap;

use json_patch::PatchOperation;

use crate::core::pod::pod_slots::PodSlot;

/// The patch operations that make each of `slots` run what the source runs in it (`source`:
/// slot → image); a slot already running it needs none.
#[must_use]
pub fn ops(slots: &[PodSlot], source: &BTreeMap<String, String>) -> Vec<PatchOperation> {
    slots
        .iter()
        .filter_map(|slot| {
            let image = source.get(&slot.key)?;
            (*image != slot.image).then(|| slot.set_image(image))
        })
        .collect()
}
