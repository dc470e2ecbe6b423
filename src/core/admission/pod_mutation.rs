//! What admission does to one pod (pure): which containers the rules rewrite, to what, the
//! JSON patch that says so, the records the pod keeps, and the warnings `kubectl` prints
//! for what could not be mapped.
//!
//! - A pod is created: its init containers and containers are mapped, through the same
//!   engine and rules as VirtualMachines (the pod's namespace's ImageMappings whose
//!   selector matches its labels — unless it opts out with `imagemap.dev/skip` — and the
//!   ClusterImageMappings whose namespace selector matches its namespace). A container that
//!   already has a recorded original (the API server invoked the webhook again) is resolved
//!   from that original, so mapping stays single pass.
//! - Ephemeral containers are added (`kubectl debug`): only the ones the request adds are
//!   mapped; that subresource keeps no metadata, so they are told in warnings only.
//! - A followed tag is pinned to the digest the replica holds (`name:tag@digest`); one not
//!   yet known is admitted as the rule writes it, and counted.

use std::collections::{BTreeMap, HashSet};

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation};
use serde_json::Value;

use crate::core::admission::migration_target;
use crate::core::admission::pod_follows::PodFollows;
use crate::core::admission::pod_view::Admission;
use crate::core::neonvm::{self, RunnerOwner};
use crate::core::pod::pod_slots::{PodSlot, SlotKind, duplicate_keys, pod_slots_named};
use crate::core::pod::records::{
    self, DRY_RUN, IMAGE_RULES, MAPPED, MAPPED_LABEL, ORIGINAL_IMAGES, Records, string_map,
};
use crate::core::rules::{Mode, Requester};
use crate::core::slot_resolution::{ImageSlot, SlotResolution, resolve_slot};

/// What the request asks of the pod.
#[derive(Debug, Clone, Copy)]
pub enum PodChange<'a> {
    /// The pod is created.
    Create,
    /// Ephemeral containers are added to it (`pods/ephemeralcontainers`); `old` is the pod
    /// before.
    EphemeralContainers { old: &'a Value },
}

/// One pod's admission request, as the pure core needs it.
#[derive(Clone, Copy)]
pub struct PodRequest<'a> {
    pub namespace: &'a str,
    /// The pod as the request carries it.
    pub pod: &'a Value,
    pub change: PodChange<'a>,
}

/// What admission concluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Images were rewritten.
    Mutated,
    /// No image changed (none matched, or none could be mapped).
    Unchanged,
}

/// The decision for one pod.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub outcome: Outcome,
    /// The changes to the pod (empty: none).
    pub patch: Patch,
    /// What `kubectl` prints: containers not mapped and why, refused rules that matched;
    /// ephemeral rewrites.
    pub warnings: Vec<String>,
    /// How many warnings of each reason the pod gave, told or not (for metrics).
    pub warned: BTreeMap<&'static str, usize>,
    /// The followed tags admitted without a digest (a container each), and their rules.
    pub unpinned: Vec<PodFollows>,
    /// Containers a dry-run mapping would rewrite.
    pub dry_run: usize,
}

impl Decision {
    fn unchanged(warnings: Warnings) -> Decision {
        let (warnings, warned) = warnings.into_parts();
        Decision {
            outcome: Outcome::Unchanged,
            patch: Patch(Vec::new()),
            warnings,
            warned,
            unpinned: Vec::new(),
            dry_run: 0,
        }
    }
}

/// Most containers of a pod admission maps (a pod with more is left as it is).
pub const MAX_SLOTS: usize = 512;
/// Most warnings an answer carries, besides a count of the rest (the API server keeps at
/// most 4 KiB of them).
pub const MAX_WARNINGS: usize = 8;

/// One container as admission resolved it.
struct Mapped {
    slot: PodSlot,
    /// What the container asked for: its recorded original, else its image.
    requested: String,
    resolution: SlotResolution,
    /// The image it runs after admission.
    image: String,
    pinned: bool,
}

/// Decides what admission does to `request`'s pod, answering from `admission`.
#[must_use]
pub fn decide(admission: &Admission<'_>, request: &PodRequest<'_>) -> Decision {
    let metadata = request.pod.get("metadata");
    let labels = string_map(metadata.and_then(|m| m.get("labels")));
    let annotations = string_map(metadata.and_then(|m| m.get("annotations")));
    let runner = metadata.and_then(neonvm::runner_owner);
    let mut slots = match slots_to_map(request, runner.is_some()) {
        Ok(slots) => slots,
        Err(left) => return left,
    };
    // A migration's target runs its source's images in the slots the source has; any
    // other container (an owner reference anyone can write) goes through the rules.
    let mut migrated = Vec::new();
    if let (PodChange::Create, Some(RunnerOwner::Migration { vm })) = (request.change, &runner) {
        let source = vm
            .as_deref()
            .and_then(|vm| (admission.runner_images)(request.namespace, vm));
        if let Some(source) = source {
            let (from_source, rest): (Vec<PodSlot>, Vec<PodSlot>) = slots
                .into_iter()
                .partition(|s: &PodSlot| source.contains_key(&s.key));
            migrated = migration_target::ops(&from_source, &source);
            slots = rest;
        }
    }
    let namespace_labels = (admission.namespace_labels)(request.namespace);
    let who = records::pod_requester(request.namespace, &labels, &namespace_labels);
    let recorded = records::originals(&annotations);
    let Resolved {
        mapped,
        mut warnings,
        unpinned,
        dry_run,
    } = resolve_all(admission, &who, slots, &recorded);
    let mut ops = image_ops(&mapped);
    let rewritten = mapped.iter().filter(|m| m.image != m.requested).count() + migrated.len();
    ops.extend(migrated);
    if let PodChange::EphemeralContainers { .. } = request.change {
        for m in mapped.iter().filter(|m| m.image != m.requested) {
            warnings.add(EPHEMERAL, || {
                format!(
                    "imagemap: ephemeral container {} runs {} instead of {} ({})",
                    m.slot.key,
                    m.image,
                    m.requested,
                    rule_of(m)
                )
            });
        }
        let (warnings, warned) = warnings.into_parts();
        return Decision {
            outcome: outcome(rewritten),
            patch: Patch(ops),
            warnings,
            warned,
            unpinned,
            dry_run,
        };
    }
    let mut records = Records::default();
    for m in mapped.iter().filter(|m| m.image != m.requested) {
        records
            .originals
            .insert(m.slot.key.clone(), m.requested.clone());
        records.rules.insert(m.slot.key.clone(), rule_of(m));
    }
    let values = match records.annotations(&annotations) {
        Ok(values) => values,
        Err(e) => {
            let mut warnings = warnings;
            warnings.add_past_bound(
                POD_NOT_MAPPED,
                format!("imagemap: the pod is not mapped: {e}"),
            );
            return Decision::unchanged(warnings);
        }
    };
    let label = if records.originals.is_empty() {
        (dry_run > 0).then_some(DRY_RUN)
    } else {
        Some(MAPPED)
    };
    ops.extend(record_ops(request.pod, &records, values, label));
    let (warnings, warned) = warnings.into_parts();
    Decision {
        outcome: outcome(rewritten),
        patch: Patch(ops),
        warnings,
        warned,
        unpinned,
        dry_run,
    }
}

/// The slots admission maps in `request`'s pod (a NeonVM runner pod's named by the VM's
/// slots), or the decision to leave the pod as it is.
fn slots_to_map(request: &PodRequest<'_>, runner: bool) -> Result<Vec<PodSlot>, Decision> {
    let spec = request.pod.get("spec").unwrap_or(&Value::Null);
    let kinds: &[SlotKind] = match request.change {
        PodChange::Create => &[SlotKind::Init, SlotKind::Container],
        PodChange::EphemeralContainers { .. } => &[SlotKind::Ephemeral],
    };
    let naming = if runner {
        neonvm::runner_slot
    } else {
        SlotKind::key
    };
    let mut slots = pod_slots_named(spec, kinds, naming);
    if slots.len() > MAX_SLOTS {
        return Err(Decision::unchanged(Warnings::one(
            POD_NOT_MAPPED,
            format!(
                "imagemap: the pod has {} containers, over the {MAX_SLOTS} admission maps: it is not mapped",
                slots.len()
            ),
        )));
    }
    let duplicates = duplicate_keys(&slots);
    if !duplicates.is_empty() {
        return Err(Decision::unchanged(Warnings::one(
            POD_NOT_MAPPED,
            format!(
                "imagemap: containers share names ({}): the pod is not mapped",
                duplicates.join(", ")
            ),
        )));
    }
    if let PodChange::EphemeralContainers { old } = request.change {
        let before: HashSet<String> =
            pod_slots_named(old.get("spec").unwrap_or(&Value::Null), kinds, naming)
                .into_iter()
                .map(|s| s.key)
                .collect();
        slots.retain(|s| !before.contains(&s.key));
    }
    Ok(slots)
}

/// The containers of a pod as admission resolved them, and what it has to say.
struct Resolved {
    mapped: Vec<Mapped>,
    warnings: Warnings,
    unpinned: Vec<PodFollows>,
    dry_run: usize,
}

/// Resolves every slot, each from its recorded original when it has one.
fn resolve_all(
    admission: &Admission<'_>,
    who: &Requester<'_>,
    slots: Vec<PodSlot>,
    recorded: &BTreeMap<String, String>,
) -> Resolved {
    let mut out = Resolved {
        mapped: Vec::new(),
        warnings: Warnings::default(),
        unpinned: Vec::new(),
        dry_run: 0,
    };
    let dry_runs = admission.rules.has_dry_run();
    for slot in slots {
        // A recorded original stands only while the container runs what the rules make of
        // it (the API server called again with imagemap's own output); an image set since
        // — by the user, or another webhook — is what is asked for.
        let again = recorded
            .get(&slot.key)
            .map(|original| map_container(admission, who, slot.clone(), original.clone()))
            .filter(|again| again.resolution.outcome.is_ok() && again.image == slot.image);
        let m = again.unwrap_or_else(|| {
            let image = slot.image.clone();
            map_container(admission, who, slot, image)
        });
        if let Err(e) = &m.resolution.outcome {
            out.warnings.add(NOT_MAPPED, || {
                format!(
                    "imagemap: container {} ({}) is not mapped: {e}",
                    m.slot.key, m.requested
                )
            });
        }
        for refused in &m.resolution.refused {
            out.warnings.add(REFUSED_RULE, || {
                format!(
                    "imagemap: container {} ({}): {} matches but is refused: {}",
                    m.slot.key, m.requested, refused.rule, refused.problem
                )
            });
        }
        if let (true, false, Ok(reference)) =
            (m.resolution.follow_tag, m.pinned, &m.resolution.outcome)
        {
            out.unpinned.push(PodFollows {
                reference: reference.clone(),
                rule: m.resolution.rule.clone(),
            });
        }
        if dry_runs {
            let preview = resolve_slot(
                admission.rules,
                image_slot(&m.slot, &m.requested),
                who,
                Mode::Preview,
            );
            out.dry_run += usize::from(preview.outcome.ok() != m.resolution.outcome.clone().ok());
        }
        out.mapped.push(m);
    }
    out
}

/// Why admission warns, as the metric counts it: a container not mapped, a refused rule
/// that matched, an ephemeral container rewritten, a pod not mapped at all.
pub const NOT_MAPPED: &str = "not_mapped";
pub const REFUSED_RULE: &str = "refused_rule";
pub const EPHEMERAL: &str = "ephemeral";
pub const POD_NOT_MAPPED: &str = "pod_not_mapped";

/// Warnings, at most [`MAX_WARNINGS`] and a count of the rest (none is even built), and how
/// many of each reason were given.
#[derive(Debug, Default)]
struct Warnings {
    said: Vec<String>,
    more: usize,
    /// After the bounded list: why the pod as a whole is not mapped.
    last: Option<String>,
    counts: BTreeMap<&'static str, usize>,
}

impl Warnings {
    fn one(reason: &'static str, text: String) -> Warnings {
        let mut out = Warnings::default();
        out.add(reason, || text);
        out
    }

    fn add(&mut self, reason: &'static str, text: impl FnOnce() -> String) {
        *self.counts.entry(reason).or_default() += 1;
        if self.said.len() < MAX_WARNINGS {
            self.said.push(text());
        } else {
            self.more += 1;
        }
    }

    /// `text`, told after the bounded list and its count.
    fn add_past_bound(&mut self, reason: &'static str, text: String) {
        *self.counts.entry(reason).or_default() += 1;
        self.last = Some(text);
    }

    fn into_parts(mut self) -> (Vec<String>, BTreeMap<&'static str, usize>) {
        if self.more > 0 {
            self.said
                .push(format!("imagemap: and {} more warnings", self.more));
        }
        self.said.extend(self.last);
        (self.said, self.counts)
    }
}

/// The patch operations that set the images of the containers whose image changes.
fn image_ops(mapped: &[Mapped]) -> Vec<PatchOperation> {
    mapped
        .iter()
        .filter(|m| m.image != m.slot.image)
        .map(|m| m.slot.set_image(&m.image))
        .collect()
}

fn outcome(rewritten: usize) -> Outcome {
    if rewritten > 0 {
        Outcome::Mutated
    } else {
        Outcome::Unchanged
    }
}

fn image_slot(slot: &PodSlot, requested: &str) -> ImageSlot {
    ImageSlot {
        slot: slot.key.clone(),
        requested: requested.to_string(),
    }
}

fn rule_of(m: &Mapped) -> String {
    m.resolution
        .rule
        .as_ref()
        .map_or_else(|| "no rule".to_string(), ToString::to_string)
}

/// Resolves one container; it keeps its image when the rules cannot map it.
fn map_container(
    admission: &Admission<'_>,
    who: &Requester<'_>,
    slot: PodSlot,
    requested: String,
) -> Mapped {
    let outcome = admission.slot(who, &slot.key, &requested);
    let image = outcome.image.unwrap_or_else(|| slot.image.clone());
    Mapped {
        slot,
        requested,
        resolution: outcome.resolution,
        image,
        pinned: outcome.pinned,
    }
}

/// The patch operations that make the pod's records and label `records`, `values` and
/// `label` (removing what it recorded before and no longer does).
fn record_ops(
    pod: &Value,
    records: &Records,
    values: [(&'static str, String); 2],
    label: Option<&str>,
) -> Vec<PatchOperation> {
    let metadata = pod.get("metadata");
    let has = |map: &str, key: &str| {
        metadata
            .and_then(|m| m.get(map))
            .and_then(|m| m.get(key))
            .is_some()
    };
    let map_exists = |map: &str| {
        metadata
            .and_then(|m| m.get(map))
            .is_some_and(Value::is_object)
    };
    let mut ops = Vec::new();
    let mut set = |map: &'static str, entries: Vec<(&str, Option<String>)>| {
        let adds: Vec<(&str, String)> = entries
            .iter()
            .filter_map(|(k, v)| v.clone().map(|v| (*k, v)))
            .collect();
        if !map_exists(map) {
            if !adds.is_empty() {
                let object: serde_json::Map<String, Value> = adds
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), Value::String(v)))
                    .collect();
                ops.push(PatchOperation::Add(AddOperation {
                    path: PointerBuf::from_tokens(["metadata", map]),
                    value: Value::Object(object),
                }));
            }
            return;
        }
        for (key, value) in entries {
            let path = PointerBuf::from_tokens(["metadata", map, key]);
            match value {
                Some(v) => ops.push(PatchOperation::Add(AddOperation {
                    path,
                    value: Value::String(v),
                })),
                None if has(map, key) => {
                    ops.push(PatchOperation::Remove(RemoveOperation { path }));
                }
                None => {}
            }
        }
    };
    let recording = !records.originals.is_empty();
    let [(_, originals), (_, rules)] = values;
    set(
        "annotations",
        vec![
            (ORIGINAL_IMAGES, recording.then_some(originals)),
            (IMAGE_RULES, recording.then_some(rules)),
        ],
    );
    set("labels", vec![(MAPPED_LABEL, label.map(str::to_string))]);
    ops
}

#[cfg(test)]
mod tests;
