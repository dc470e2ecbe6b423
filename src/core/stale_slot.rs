//! A slot whose running image differs from what its rules resolve to now — what live reload
//! acts on, for NeonVM's runner pods and for workloads' pods alike — and how a list of them
//! is told in an Event.

use std::collections::BTreeMap;

use crate::core::excerpt::excerpt_to;

/// A slot whose running image differs from what the rules resolve to now.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct StaleSlot {
    pub slot: String,
    pub running: String,
    pub resolved: String,
}

/// The slots whose running image differs from the resolved one (slots the pod lacks, or
/// imagemap cannot resolve, are not judged). A followed tag whose digest is not held here
/// is current when the pod runs it pinned to any digest.
#[must_use]
pub fn stale_slots(
    running: &BTreeMap<String, String>,
    resolved: &BTreeMap<String, String>,
) -> Vec<StaleSlot> {
    resolved
        .iter()
        .filter_map(|(slot, resolved)| {
            let running = running.get(slot)?;
            let pinned = running
                .strip_prefix(resolved.as_str())
                .is_some_and(|rest| rest.starts_with('@') && !resolved.contains('@'));
            (running != resolved && !pinned).then(|| StaleSlot {
                slot: slot.clone(),
                running: running.clone(),
                resolved: resolved.clone(),
            })
        })
        .collect()
}

/// Most changes an Event lists.
const LISTED: usize = 4;

/// `rootDisk a → b, runner c → d` (each part an excerpt; at most [`LISTED`], and how many
/// more).
pub fn listed(changes: &[StaleSlot]) -> String {
    let text = changes
        .iter()
        .take(LISTED)
        .map(|c| {
            let cut = |s: &str| excerpt_to(s, 200);
            format!(
                "{} {} → {}",
                cut(&c.slot),
                cut(&c.running),
                cut(&c.resolved)
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    match changes.len().checked_sub(LISTED) {
        Some(more) if more > 0 => format!("{text} and {more} more"),
        _ => text,
    }
}
