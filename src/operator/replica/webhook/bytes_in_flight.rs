//! The bytes of requests the webhook reads at once, over every connection. A request reserves
//! the length it announces and waits, for a bounded time, until that fits beside the others.
//! Unlike a fair semaphore, a small review never queues behind a large one: whatever fits goes
//! at once, so a few senders announcing 6 MiB and stalling hold up no ordinary pod.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

/// At most `limit` bytes reserved at once.
#[derive(Debug)]
pub struct BytesInFlight {
    limit: usize,
    used: AtomicUsize,
    released: Notify,
}

/// Bytes held until dropped.
#[derive(Debug)]
pub struct Reservation<'a> {
    budget: &'a BytesInFlight,
    bytes: usize,
}

impl BytesInFlight {
    #[must_use]
    pub fn new(limit: usize) -> Self {
        BytesInFlight {
            limit,
            used: AtomicUsize::new(0),
            released: Notify::new(),
        }
    }

    fn try_reserve(&self, bytes: usize) -> Option<Reservation<'_>> {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|&total| total <= self.limit)
            })
            .ok()
            .map(|_| Reservation {
                budget: self,
                bytes,
            })
    }

    /// Reserves `bytes`, waiting at most `wait` for them to fit; `None` if they did not (or
    /// never can: more than the limit).
    pub async fn reserve(&self, bytes: usize, wait: Duration) -> Option<Reservation<'_>> {
        if bytes > self.limit {
            return None;
        }
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let released = self.released.notified();
            tokio::pin!(released);
            // Registered before the check, so a release between the two is not missed.
            released.as_mut().enable();
            if let Some(reservation) = self.try_reserve(bytes) {
                return Some(reservation);
            }
            if tokio::time::timeout_at(deadline, released).await.is_err() {
                return None;
            }
        }
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.bytes, Ordering::AcqRel);
        self.budget.released.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WAIT: Duration = Duration::from_millis(200);

    #[tokio::test]
    async fn a_small_request_passes_a_large_one_waiting() {
        let budget = BytesInFlight::new(10);
        let held = budget.reserve(8, WAIT).await.unwrap();
        let large = budget.reserve(8, Duration::from_secs(5));
        tokio::pin!(large);
        // The large one waits...
        assert!(
            tokio::time::timeout(Duration::from_millis(20), large.as_mut())
                .await
                .is_err()
        );
        // ...and a small one that fits goes at once.
        let small = budget.reserve(2, Duration::ZERO).await;
        assert!(small.is_some());
        drop(small);
        drop(held);
        // Once room is released the large one gets it.
        assert!(large.await.is_some());
    }

    #[tokio::test]
    async fn a_request_that_does_not_fit_in_time_is_refused() {
        let budget = BytesInFlight::new(10);
        let _held = budget.reserve(10, WAIT).await.unwrap();
        assert!(budget.reserve(1, WAIT).await.is_none());
        assert!(budget.reserve(11, WAIT).await.is_none());
    }

    #[tokio::test]
    async fn released_bytes_are_counted_back() {
        let budget = BytesInFlight::new(10);
        for _ in 0..100 {
            let _a = budget.reserve(6, WAIT).await.unwrap();
            let _b = budget.reserve(4, WAIT).await.unwrap();
        }
        assert_eq!(budget.used.load(Ordering::Acquire), 0);
    }
}
