//! Whether the caches have listed: the operator acts only on caches that hold what the
//! API server had.

use std::sync::Arc;

use tokio::sync::watch;

/// Whether a cache has listed once: marked by its watch stream when every namespace it
/// covers has listed and the store holds the lists. Any number of tasks may wait on it (kube's
/// `Store::wait_until_ready` wakes only the last of several waiters).
#[derive(Debug, Clone, Default)]
pub struct Listed(Arc<watch::Sender<bool>>);

impl Listed {
    /// The cache has listed.
    pub fn mark(&self) {
        self.0
            .send_if_modified(|listed| !std::mem::replace(listed, true));
    }

    /// Whether the cache has listed.
    #[must_use]
    pub fn is_marked(&self) -> bool {
        *self.0.borrow()
    }

    /// Waits until the cache has listed.
    pub async fn wait(&self) {
        // The sender lives in `self`: the channel cannot close while this waits.
        let _ = self.0.subscribe().wait_for(|listed| *listed).await;
    }
}

/// Which caches have listed.
#[derive(Debug, Clone, Default)]
pub struct CachesListed {
    pub vms: Listed,
    pub pods: Listed,
    pub mappings: Listed,
    pub cluster_mappings: Listed,
    pub namespaces: Listed,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_waiter_wakes_when_a_cache_has_listed() {
        let listed = Listed::default();
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let l = listed.clone();
                tokio::spawn(async move { l.wait().await })
            })
            .collect();
        tokio::task::yield_now().await;
        assert!(waiters.iter().all(|w| !w.is_finished()));
        listed.mark();
        for w in waiters {
            w.await.unwrap();
        }
        // Marked once, waiting returns at once.
        listed.wait().await;
    }
}
