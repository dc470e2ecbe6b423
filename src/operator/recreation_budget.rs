//! How many liveReload pod recreations may start per minute: over all VMs, and for each
//! namespace at most half of that, so that one namespace churning its mappings leaves the
//! others at least half the budget.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

const WINDOW: Duration = Duration::from_mins(1);

/// A sliding one-minute budget of recreations, with a per-namespace share.
#[derive(Debug)]
pub struct RecreationBudget {
    /// Most recreations per minute; 0: no limit.
    per_minute: usize,
    /// Most recreations per minute for one namespace.
    share: usize,
    taken: Mutex<Taken>,
}

#[derive(Debug, Default)]
struct Taken {
    all: VecDeque<Instant>,
    by_namespace: HashMap<String, VecDeque<Instant>>,
}

/// Drops what left the window; the wait until the oldest in it leaves, if `limit` is reached.
fn spent(times: &mut VecDeque<Instant>, limit: usize, now: Instant) -> Option<Duration> {
    while times
        .front()
        .is_some_and(|t| now.saturating_duration_since(*t) >= WINDOW)
    {
        times.pop_front();
    }
    (times.len() >= limit).then(|| {
        let oldest = times.front().copied().unwrap_or(now);
        WINDOW.saturating_sub(now.saturating_duration_since(oldest))
    })
}

impl RecreationBudget {
    #[must_use]
    pub fn new(per_minute: u32) -> Self {
        let per_minute = usize::try_from(per_minute).unwrap_or(usize::MAX);
        RecreationBudget {
            per_minute,
            share: per_minute.div_ceil(2).max(1),
            taken: Mutex::new(Taken::default()),
        }
    }

    /// Takes one recreation for a VM of `namespace`; `Err(wait)` when the budget (or the
    /// namespace's share) is spent, with the time until one is free again.
    pub fn take(&self, namespace: &str) -> Result<(), Duration> {
        self.take_at(namespace, Instant::now())
    }

    fn take_at(&self, namespace: &str, now: Instant) -> Result<(), Duration> {
        if self.per_minute == 0 {
            return Ok(());
        }
        // Each update keeps the queues whole: a panicking holder left usable ones.
        let mut taken = self.taken.lock().unwrap_or_else(PoisonError::into_inner);
        let Taken { all, by_namespace } = &mut *taken;
        if let Some(wait) = spent(all, self.per_minute, now) {
            return Err(wait);
        }
        let mine = by_namespace.entry(namespace.to_string()).or_default();
        if let Some(wait) = spent(mine, self.share, now) {
            return Err(wait);
        }
        mine.push_back(now);
        all.push_back(now);
        // Namespaces with nothing in the window are forgotten.
        by_namespace.retain(|_, times| {
            spent(times, usize::MAX, now);
            !times.is_empty()
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_refills_a_minute_after_each_recreation() {
        let budget = RecreationBudget::new(4);
        let t0 = Instant::now();
        assert!(budget.take_at("a", t0).is_ok());
        assert!(budget.take_at("b", t0 + Duration::from_secs(5)).is_ok());
        assert!(budget.take_at("c", t0 + Duration::from_secs(10)).is_ok());
        assert!(budget.take_at("d", t0 + Duration::from_secs(15)).is_ok());
        assert_eq!(
            budget.take_at("e", t0 + Duration::from_secs(20)),
            Err(Duration::from_secs(40))
        );
        assert!(budget.take_at("e", t0 + Duration::from_mins(1)).is_ok());
        assert!(budget.take_at("e", t0 + Duration::from_secs(61)).is_err());
    }

    #[test]
    fn one_namespace_takes_at_most_half_and_leaves_the_rest_to_the_others() {
        let budget = RecreationBudget::new(60);
        let t0 = Instant::now();
        for _ in 0..30 {
            assert!(budget.take_at("churn", t0).is_ok());
        }
        assert_eq!(budget.take_at("churn", t0), Err(WINDOW));
        for _ in 0..30 {
            assert!(budget.take_at("other", t0).is_ok());
        }
        assert!(
            budget.take_at("third", t0).is_err(),
            "the whole budget is spent"
        );
        assert!(budget.take_at("churn", t0 + WINDOW).is_ok());
        // A budget of one is every namespace's share.
        let one = RecreationBudget::new(1);
        assert!(one.take_at("a", t0).is_ok());
        assert!(one.take_at("b", t0).is_err());
    }

    #[test]
    fn zero_means_no_limit() {
        let budget = RecreationBudget::new(0);
        let t0 = Instant::now();
        assert!((0..1000).all(|_| budget.take_at("a", t0).is_ok()));
    }
}
