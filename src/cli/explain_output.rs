//! How `imagemap explain` prints what it explained: a table (each slot, its evidence, then a
//! workload's pods in one line each, at most 20 and then counts), or a versioned JSON or
//! YAML document whose verdict names scripts may rely on.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{Value, json};

use super::table;
use crate::core::explain::explained_pod::SlotExplanation;

/// The version of `-o json` and `-o yaml`.
pub const SCHEMA: &str = "imagemap.dev/explain/v1";
/// Most pods of a workload shown one by one; the rest are counted by verdict.
const PODS_SHOWN: usize = 20;

/// What was explained: the object's slots, and the pods it owns (a workload's).
pub struct Explained {
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    pub slots: Vec<SlotExplanation>,
    pub pods: Vec<(String, Vec<SlotExplanation>)>,
    pub notes: Vec<String>,
}

/// The table: the object's slots, each with its evidence, then its pods in one line each.
pub fn to_table(e: &Explained) -> String {
    let mut out = format!("{} {}/{}\n", e.kind, e.namespace, e.name);
    let mut rows = vec![[
        "SLOT".to_string(),
        "REQUESTED".into(),
        "RUNS".into(),
        "NOW".into(),
        "RULE".into(),
        "VERDICT".into(),
    ]];
    for s in &e.slots {
        rows.push([
            s.slot.clone(),
            format!("{} ({})", s.requested, s.requested_from),
            s.runs.clone().unwrap_or_else(|| "-".into()),
            s.now.clone().unwrap_or_else(|| "-".into()),
            s.rule.clone().unwrap_or_else(|| "-".into()),
            s.verdict.name().into(),
        ]);
    }
    out.push_str(&table::render(&rows));
    // A verdict of the whole pod (left alone, never sent, not mapped whole) is said once.
    let evidence: Vec<String> = e.slots.iter().map(|s| s.verdict.evidence()).collect();
    if e.slots.len() > 1 && evidence.windows(2).all(|w| w[0] == w[1]) {
        let _ = writeln!(out, "  every slot: {}", evidence[0]);
    } else {
        for (s, said) in e.slots.iter().zip(&evidence) {
            let _ = writeln!(out, "  {}: {said}", s.slot);
        }
    }
    if !e.pods.is_empty() {
        let _ = write!(out, "\npods ({}):\n", e.pods.len());
        for (name, slots) in e.pods.iter().take(PODS_SHOWN) {
            let said: Vec<String> = slots
                .iter()
                .map(|s| format!("{} {}", s.slot, s.verdict.name()))
                .collect();
            let _ = writeln!(out, "  {name}: {}", said.join("; "));
        }
        if e.pods.len() > PODS_SHOWN {
            let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
            for (_, slots) in e.pods.iter().skip(PODS_SHOWN) {
                for s in slots {
                    *counts.entry(s.verdict.name()).or_default() += 1;
                }
            }
            let counted: Vec<String> = counts.iter().map(|(v, n)| format!("{n} {v}")).collect();
            let _ = writeln!(
                out,
                "  and {} more pods: {}",
                e.pods.len() - PODS_SHOWN,
                counted.join(", ")
            );
        }
    }
    out
}

/// The JSON (and YAML) document, versioned.
pub fn to_json(e: &Explained) -> Value {
    let slots = |s: &[SlotExplanation]| -> Vec<Value> {
        s.iter()
            .map(|s| {
                let mut v = serde_json::to_value(s).unwrap_or(Value::Null);
                v["evidence"] = json!(s.verdict.evidence());
                v
            })
            .collect()
    };
    let pods: Vec<Value> = e
        .pods
        .iter()
        .take(PODS_SHOWN)
        .map(|(name, s)| json!({"name": name, "slots": slots(s)}))
        .collect();
    json!({
        "apiVersion": SCHEMA,
        "kind": e.kind,
        "namespace": e.namespace,
        "name": e.name,
        "slots": slots(&e.slots),
        "pods": pods,
        "podCount": e.pods.len(),
        "notes": e.notes,
    })
}
