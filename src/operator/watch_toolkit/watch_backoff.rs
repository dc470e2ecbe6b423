//! How soon a failed watch is tried again: from half a second, doubling to at most five
//! seconds (jittered), and from the start again once it works. The ceiling is what bounds
//! the time to notice that the API server is back after a partition; five seconds per
//! failing watch is little load for a server that is down.

use std::time::Duration;

use kube::runtime::utils::Backoff;

use crate::operator::jitter::jittered;

const FIRST: Duration = Duration::from_millis(500);
const CEILING: Duration = Duration::from_secs(5);

/// The backoff of the operator's watches.
#[derive(Debug, Clone)]
pub struct WatchBackoff {
    next: Duration,
}

impl Default for WatchBackoff {
    fn default() -> Self {
        WatchBackoff { next: FIRST }
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let wait = self.next;
        self.next = (self.next * 2).min(CEILING);
        Some(jittered(wait))
    }
}

impl Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.next = FIRST;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_up_to_the_ceiling_and_start_over_after_a_reset() {
        let mut b = WatchBackoff::default();
        let base: Vec<Duration> = (0..6).map(|_| b.next().unwrap()).collect();
        let expected = [500, 1000, 2000, 4000, 5000, 5000].map(Duration::from_millis);
        for (got, want) in base.iter().zip(expected) {
            assert!(
                *got >= want && *got < want + want / 5 + Duration::from_nanos(1),
                "{got:?} vs {want:?}"
            );
        }
        b.reset();
        assert!(b.next().unwrap() < Duration::from_millis(600));
    }
}
