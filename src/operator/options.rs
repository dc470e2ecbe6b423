//! Operator settings (the `imagemap run` flags).

pub mod token_file;

use std::sync::Arc;
use std::time::Duration;

use crate::core::allowed_registries::AllowedRegistries;
use crate::core::local_registry::{LocalRegistry, Vantage};
use crate::core::namespaced_name::NamespacedName;
use crate::core::rules::CompileOptions;
use crate::core::vm_images;
use crate::operator::acts_in::ActsIn;
use crate::registry::Reach;

/// Operator settings (the `imagemap run` flags).
#[derive(Debug, Clone)]
pub struct Options {
    /// Runner image of VMs that name none.
    pub default_runner_image: String,
    /// Namespaces to act in; empty: all.
    pub namespaces: Vec<String>,
    /// Registries rewrites may point to and the operator may contact (with no list, it
    /// follows no tag).
    pub allowed_registries: AllowedRegistries,
    /// Most liveReload pod recreations per minute, over all VMs; 0: no limit.
    pub max_recreates_per_minute: u32,
    /// Most VM reconciles at once (and so API requests in flight for them).
    pub concurrency: u16,
    /// How often each followed tag is checked at its registry.
    pub tag_poll_interval: Duration,
    /// Registries (`host[:port]`) reached over plain HTTP.
    pub insecure_registries: Vec<String>,
    /// Where the operator reaches the cluster's local registry from.
    pub local_registry_vantage: Vantage,
    /// Where registries post push notifications, when they do.
    pub registry_notifications: Option<RegistryNotifications>,
    /// The `kubernetes.io/dockerconfigjson` Secret digest checks take credentials from;
    /// `None`: registries are asked anonymously.
    pub registry_credentials: Option<NamespacedName>,
    /// Namespaces whose ImageMappings' followed tags are checked with the credentials too
    /// (the ClusterImageMappings' always are).
    pub registry_credentials_namespaces: Vec<String>,
    /// The admission webhook; `None` serves none.
    pub webhook: Option<Webhook>,
    /// `--neonvm-default-runner-image`: the runner image NeonVM's controller gives a VM that
    /// names none (its `VM_RUNNER_IMAGE`); `None`: unknown, and such a VM's runner slot is
    /// neither compared nor live-reloaded.
    pub neonvm_default_runner_image: Option<String>,
    /// Where the leader publishes the digests it verified for every replica (under leader
    /// election); `None`: no other replica to tell.
    pub published_digests: Option<NamespacedName>,
    /// The least time between two passes over one namespace's pods, after rule changes.
    pub pod_scan_namespace_interval: Duration,
    /// How often the leader counts every namespace's pods.
    pub pod_count_interval: Duration,
    /// Where this replica tells the leader the followed tags it admitted without a digest
    /// (under leader election); `None`: it leads alone, and tells it in memory.
    pub asks: Option<AsksPlace>,
}

/// Where a replica writes its asks: the ConfigMap every replica writes its own key of, and
/// its key.
#[derive(Debug, Clone)]
pub struct AsksPlace {
    pub configmap: NamespacedName,
    pub key: String,
}

/// The push notification endpoint: its address and the file holding the bearer token
/// requests must carry.
#[derive(Debug, Clone)]
pub struct RegistryNotifications {
    pub addr: String,
    pub token: std::sync::Arc<token_file::TokenFile>,
}

/// The admission webhook: where it listens, where its certificate comes from, and which
/// namespaces it never maps.
#[derive(Debug, Clone)]
pub struct Webhook {
    /// `--webhook-addr`.
    pub addr: String,
    /// `--webhook-drain-seconds`: how long a stopping replica keeps answering at most.
    pub drain: Duration,
    pub certificate: WebhookCertificate,
    /// The namespaces never mapped: the cluster's own, the operator's and
    /// `--webhook-exclude-namespaces`.
    pub excluded: crate::core::admission::scope::Excluded,
}

/// Where the webhook's serving certificate comes from.
#[derive(Debug, Clone)]
pub enum WebhookCertificate {
    /// `--webhook-url`: the operator runs outside the cluster, makes its own CA and
    /// certificate for the URL's host, and registers (and on exit deletes) its own
    /// MutatingWebhookConfiguration named `configuration`.
    Local { url: String, configuration: String },
    /// `--webhook-cert-dir`: cert-manager's `tls.crt` and `tls.key`, read again when they
    /// change (its cainjector keeps the configuration's `caBundle`).
    Dir(std::path::PathBuf),
    /// `--webhook-secret`: the leader keeps a CA and serving certificate in `secret` (which
    /// every replica serves) and the `caBundle` of the MutatingWebhookConfiguration
    /// `configuration`; both are the install's, never created here.
    Secret {
        secret: NamespacedName,
        configuration: String,
        lifetimes: crate::core::webhook_certificate::plan::Lifetimes,
    },
}

/// The default of [`Options::tag_poll_interval`].
pub const DEFAULT_TAG_POLL_INTERVAL: Duration = Duration::from_secs(30);

/// The default of [`Options::pod_scan_namespace_interval`]: a Tilt loop changing a rule on
/// every build lists a namespace's pods at most once a minute.
pub const DEFAULT_POD_SCAN_NAMESPACE_INTERVAL: Duration = Duration::from_mins(1);

/// The default of [`Options::pod_count_interval`].
pub const DEFAULT_POD_COUNT_INTERVAL: Duration = Duration::from_mins(5);

/// The default of [`Options::concurrency`].
pub const DEFAULT_CONCURRENCY: u16 = 32;

impl Default for Options {
    fn default() -> Self {
        Options {
            default_runner_image: vm_images::DEFAULT_RUNNER_IMAGE.into(),
            namespaces: Vec::new(),
            allowed_registries: AllowedRegistries::any(),
            max_recreates_per_minute: 0,
            concurrency: DEFAULT_CONCURRENCY,
            tag_poll_interval: DEFAULT_TAG_POLL_INTERVAL,
            insecure_registries: Vec::new(),
            local_registry_vantage: Vantage::Host,
            registry_notifications: None,
            registry_credentials: None,
            registry_credentials_namespaces: Vec::new(),
            webhook: None,
            neonvm_default_runner_image: None,
            published_digests: None,
            pod_scan_namespace_interval: DEFAULT_POD_SCAN_NAMESPACE_INTERVAL,
            pod_count_interval: DEFAULT_POD_COUNT_INTERVAL,
            asks: None,
        }
    }
}

impl Options {
    /// The namespaces the operator acts in.
    #[must_use]
    pub fn acts_in(&self) -> ActsIn {
        ActsIn::new(self.namespaces.clone())
    }

    /// How mappings are compiled, with the cluster's local registry `local`.
    #[must_use]
    pub fn compile_options(&self, local: Option<Arc<LocalRegistry>>) -> CompileOptions {
        CompileOptions {
            allowed_registries: self.allowed_registries.clone(),
            follow_needs_list: true,
            local_registry: local,
        }
    }

    /// Where digest checks may go.
    #[must_use]
    pub fn reach(&self) -> Reach {
        Reach {
            allowed: self.allowed_registries.clone(),
            insecure: self.insecure_registries.clone(),
            needs_list: true,
        }
    }
}
