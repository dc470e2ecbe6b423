//! Spreading waits so that many waiters do not act in step.

use std::hash::BuildHasher;
use std::time::{Duration, Instant};

/// `period` plus a random part of up to a fifth of it.
pub fn jittered(period: Duration) -> Duration {
    let random = std::collections::hash_map::RandomState::new().hash_one(Instant::now());
    let fifth = u64::try_from((period / 5).as_nanos())
        .unwrap_or(u64::MAX)
        .max(1);
    period.saturating_add(Duration::from_nanos(random % fifth))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jittered_wait_is_at_least_the_period_and_at_most_a_fifth_more() {
        let period = Duration::from_secs(5);
        for _ in 0..100 {
            let d = jittered(period);
            assert!(d >= period && d < period + Duration::from_secs(1), "{d:?}");
        }
    }
}
