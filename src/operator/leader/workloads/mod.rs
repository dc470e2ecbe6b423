//! Live reload for workloads, on the leader: the labelled pods and the workloads watched
//! ([`workload_watcher`] into [`workload_state`]), and the roller that evicts stale pods one
//! at a time per workload ([`workload_roller`], through `writes::eviction`).

pub mod workload_roller;
pub mod workload_state;
pub mod workload_watcher;
