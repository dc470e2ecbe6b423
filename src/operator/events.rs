//! Recording a plan's Events on its VM.

use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::reflector::ObjectRef;

use crate::api::VirtualMachine;
use crate::vm_plan::VmEvent;

/// The API server refuses Event notes over 1 KiB.
const NOTE_LIMIT: usize = 1024;

/// `text` cut to at most `limit` bytes on a character boundary, with an ellipsis when cut.
fn truncate_note(text: &str, limit: usize) -> String {
    const ELLIPSIS: &str = "…";
    if text.len() <= limit {
        return text.to_string();
    }
    let mut end = limit.saturating_sub(ELLIPSIS.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{ELLIPSIS}", &text[..end])
}

/// Records `events` on `vm`; a failure is logged, never fatal.
pub async fn publish<'a>(
    recorder: &Recorder,
    vm: &VirtualMachine,
    events: impl Iterator<Item = &'a VmEvent>,
) {
    for ev in events {
        let event = Event {
            type_: if ev.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: ev.reason.into(),
            note: Some(truncate_note(&ev.message, NOTE_LIMIT)),
            action: ev.reason.into(),
            secondary: None,
        };
        if let Err(e) = recorder.publish(&event, &vm.object_ref(&())).await {
            tracing::warn!(vm = %ObjectRef::from_obj(vm), error = %e, "could not record event");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::truncate_note;

    #[test]
    fn notes_are_cut_to_bytes_on_a_character_boundary() {
        assert_eq!(truncate_note("short", 1024), "short");
        let long = "é".repeat(600); // 1200 bytes
        let cut = truncate_note(&long, 1024);
        assert!(cut.len() <= 1024, "{}", cut.len());
        assert!(cut.ends_with('…'));
        assert!(cut.trim_end_matches('…').chars().all(|c| c == 'é'));
    }
}
