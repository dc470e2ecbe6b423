//! Every replica serves the certificate the leader keeps in the webhook's Secret
//! (`--webhook-secret`), watched by name: a new one is served from the next handshake on.
//! An empty Secret (the leader has not filled it yet) or one gone serves nothing new; a
//! certificate that cannot be used leaves the one served (said once while it lasts).

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};

use crate::core::excerpt::excerpt;
use crate::core::namespaced_name::NamespacedName;
use crate::core::webhook_certificate::{CERT, KEY};
use crate::operator::replica::webhook::tls::Certificates;
use crate::operator::watch_toolkit::listed::Listed;
use crate::operator::watch_toolkit::watch_backoff::WatchBackoff;

/// The serving certificate and key a Secret holds, when it holds both.
fn pair(secret: &Secret) -> Option<(String, String)> {
    let data = secret.data.as_ref()?;
    let text = |key: &str| {
        data.get(key)
            .filter(|v| !v.0.is_empty())
            .map(|v| String::from_utf8_lossy(&v.0).into_owned())
    };
    Some((text(CERT)?, text(KEY)?))
}

/// Serves what the Secret `name` holds in `certificates` until the future is dropped;
/// `read` is marked once the Secret was first read (or found absent).
pub async fn follow(
    client: Client,
    name: NamespacedName,
    certificates: Arc<Certificates>,
    read: Listed,
) {
    let api: Api<Secret> = Api::namespaced(client, &name.namespace);
    let mut events = watcher::watch_object(api, &name.name)
        .backoff(WatchBackoff::default())
        .boxed();
    let mut served: Option<(String, String)> = None;
    let mut failing = false;
    while let Some(event) = events.next().await {
        let secret = match event {
            Ok(secret) => secret,
            Err(e) => {
                if !std::mem::replace(&mut failing, true) {
                    tracing::warn!(secret = %name, error = %excerpt(&e.to_string()), "cannot watch the webhook's Secret: serving the certificate held");
                }
                continue;
            }
        };
        failing = false;
        let now = secret.as_ref().and_then(pair);
        if let Some((cert, key)) = now.as_ref().filter(|now| Some(*now) != served.as_ref()) {
            match certificates.replace(cert, key) {
                Ok(()) => {
                    tracing::info!(secret = %name, "serving the webhook's certificate");
                }
                Err(e) => {
                    tracing::warn!(secret = %name, error = %excerpt(&e.to_string()), "the webhook's Secret holds a certificate that cannot be served: keeping the one served");
                }
            }
            served = now;
        }
        read.mark();
    }
}
