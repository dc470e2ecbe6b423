//! What imagemap reads of a pod and writes on it, below admission and live reload alike: its
//! image slots ([`pod_slots`]) and the records a mapped pod keeps, with the labels that
//! opt a pod out of its namespace's rules or into live reload ([`records`]).

pub mod pod_slots;
pub mod records;
