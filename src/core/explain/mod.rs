//! Why a pod runs what it runs (`imagemap explain`), pure: each container slot's request,
//! what it runs, what the rules in force make of it now through the one admission view, and
//! one verdict from a closed set with its evidence ([`slot_verdict`]), from what the pod
//! records and what the cluster says ([`explained_pod`], from [`pod_facts`]; imagemap's own
//! VMs: [`explained_vm`]); which namespaces the webhook is
//! sent ([`sent_namespaces`]). The command line reads the cluster and prints it.

pub mod explained_pod;
pub mod explained_vm;
pub mod pod_facts;
pub mod sent_namespaces;
pub mod slot_verdict;
