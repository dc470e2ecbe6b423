//! A pod's image slots, read from the pod as the API server sent it (JSON, so that no field
//! of a pod the operator's types do not know is lost or refused): every init container,
//! container and ephemeral container with its image, keyed the same way everywhere —
//! `name` for a container, `init:name` and `ephemeral:name` for the others.

use json_patch::jsonptr::PointerBuf;
use json_patch::{PatchOperation, ReplaceOperation};
use serde_json::Value;

/// Which list of the pod spec a container is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SlotKind {
    Init,
    Container,
    Ephemeral,
}

impl SlotKind {
    /// The field of the pod spec that lists these containers.
    #[must_use]
    pub fn field(self) -> &'static str {
        match self {
            SlotKind::Init => "initContainers",
            SlotKind::Container => "containers",
            SlotKind::Ephemeral => "ephemeralContainers",
        }
    }

    /// The slot key of the container `name` of this kind.
    #[must_use]
    pub fn key(self, name: &str) -> String {
        match self {
            SlotKind::Init => format!("init:{name}"),
            SlotKind::Container => name.to_string(),
            SlotKind::Ephemeral => format!("ephemeral:{name}"),
        }
    }
}

/// One container's image, and where it is in the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodSlot {
    /// `name`, `init:name` or `ephemeral:name` (for a NeonVM runner pod, the VM's slot:
    /// `rootDisk`, `kernel`, `extraInitContainers/name`, `runner`).
    pub key: String,
    pub kind: SlotKind,
    /// Its position in its list.
    pub index: usize,
    /// The image the container names now.
    pub image: String,
}

impl PodSlot {
    /// The patch operation that makes this container run `image`.
    #[must_use]
    pub fn set_image(&self, image: &str) -> PatchOperation {
        PatchOperation::Replace(ReplaceOperation {
            path: PointerBuf::from_tokens([
                "spec",
                self.kind.field(),
                &self.index.to_string(),
                "image",
            ]),
            value: Value::String(image.to_string()),
        })
    }
}

/// The slots of `spec` (a pod's `spec`) of the given kinds, in pod order. A container
/// without a name or an image has no slot: the API server refuses such a pod after
/// admission.
#[must_use]
pub fn pod_slots(spec: &Value, kinds: &[SlotKind]) -> Vec<PodSlot> {
    pod_slots_named(spec, kinds, SlotKind::key)
}

/// [`pod_slots`], each keyed by `naming` (a NeonVM runner pod's by the VM's slots).
#[must_use]
pub fn pod_slots_named(
    spec: &Value,
    kinds: &[SlotKind],
    naming: fn(SlotKind, &str) -> String,
) -> Vec<PodSlot> {
    let mut out = Vec::new();
    for &kind in kinds {
        let Some(list) = spec.get(kind.field()).and_then(Value::as_array) else {
            continue;
        };
        for (index, container) in list.iter().enumerate() {
            let name = container.get("name").and_then(Value::as_str);
            let image = container.get("image").and_then(Value::as_str);
            if let (Some(name), Some(image)) = (name, image) {
                out.push(PodSlot {
                    key: naming(kind, name),
                    kind,
                    index,
                    image: image.to_string(),
                });
            }
        }
    }
    out
}

/// The slot keys that more than one container of `slots` has. The API server refuses such
/// a pod after admission (mutation runs before validation), so it is left as it is.
#[must_use]
pub fn duplicate_keys(slots: &[PodSlot]) -> Vec<&str> {
    let mut keys: Vec<&str> = slots.iter().map(|s| s.key.as_str()).collect();
    keys.sort_unstable();
    let mut dups: Vec<&str> = keys
        .windows(2)
        .filter(|w| w[0] == w[1])
        .map(|w| w[0])
        .collect();
    dups.dedup();
    dups
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn slots_are_keyed_by_list_and_name_in_pod_order() {
        let spec = json!({
            "initContainers": [{"name": "init", "image": "busybox"}],
            "containers": [{"name": "app", "image": "nginx:1.27"}, {"name": "noimage"}],
            "ephemeralContainers": [{"name": "debug", "image": "alpine"}],
        });
        let all = [SlotKind::Init, SlotKind::Container, SlotKind::Ephemeral];
        let keys: Vec<(String, usize, String)> = pod_slots(&spec, &all)
            .into_iter()
            .map(|s| (s.key, s.index, s.image))
            .collect();
        assert_eq!(
            keys,
            [
                ("init:init".to_string(), 0, "busybox".to_string()),
                ("app".to_string(), 0, "nginx:1.27".to_string()),
                ("ephemeral:debug".to_string(), 0, "alpine".to_string()),
            ]
        );
        let only = pod_slots(&spec, &[SlotKind::Ephemeral]);
        assert_eq!(only.len(), 1);
        assert_eq!(only[0].kind, SlotKind::Ephemeral);
    }

    #[test]
    fn duplicate_names_are_found_within_a_list_only() {
        let spec = json!({
            "initContainers": [{"name": "a", "image": "x"}],
            "containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}, {"name": "b", "image": "z"}],
        });
        let slots = pod_slots(&spec, &[SlotKind::Init, SlotKind::Container]);
        assert_eq!(duplicate_keys(&slots), ["b"]);
    }
}
