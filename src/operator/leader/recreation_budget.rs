//! How many liveReload pod recreations may start per minute: over all VMs, and for each
//! namespace a fair share that always leaves room for one more namespace. With `k`
//! namespaces recreating pods within the minute, each may take `1/(k+1)` of the budget
//! (a namespace alone, half): the rest stays free, so a namespace that starts recreating
//! pods finds budget at once, however many others churn their mappings.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

const WINDOW: Duration = Duration::from_mins(1);

/// A sliding one-minute budget of recreations, shared fairly between namespaces.
#[derive(Debug)]
pub struct RecreationBudget {
    /// Most recreations per minute; 0: no limit.
    per_minute: usize,
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
        RecreationBudget {
            per_minute: usize::try_from(per_minute).unwrap_or(usize::MAX),
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
        // Namespaces with nothing left in the window are forgotten.
        by_namespace.retain(|_, times| {
            spent(times, usize::MAX, now);
            !times.is_empty()
        });
        let others = by_namespace.keys().filter(|n| *n != namespace).count();
        // This namespace, the others recreating pods, and room for one more.
        let share = self.per_minute.div_ceil(others + 2).max(1);
        let mine = by_namespace.entry(namespace.to_string()).or_default();
        if let Some(wait) = spent(mine, share, now) {
            return Err(wait);
        }
        mine.push_back(now);
        all.push_back(now);
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
        for (i, ns) in ["a", "b", "c", "d"].into_iter().enumerate() {
            let at = t0 + Duration::from_secs(5 * i as u64);
            assert!(budget.take_at(ns, at).is_ok(), "{ns}");
        }
        assert_eq!(
            budget.take_at("e", t0 + Duration::from_secs(20)),
            Err(Duration::from_secs(40))
        );
        assert!(budget.take_at("e", t0 + Duration::from_mins(1)).is_ok());
    }

    #[test]
    fn a_namespace_starting_to_recreate_finds_budget_however_many_others_churn() {
        let budget = RecreationBudget::new(60);
        let t0 = Instant::now();
        // Alone, a namespace takes half.
        let took = |budget: &RecreationBudget, ns: &str| {
            (0..100)
                .take_while(|_| budget.take_at(ns, t0).is_ok())
                .count()
        };
        assert_eq!(took(&budget, "churn"), 30);
        // A second finds a third of the budget free at once; a third namespace finds what
        // is left, and so on.
        assert_eq!(took(&budget, "other"), 20);
        assert_eq!(took(&budget, "third"), 10);
        assert!(budget.take_at("fourth", t0).is_err(), "all 60 are taken");
        // A minute later the churners are over their share: the newcomers come first.
        let later = t0 + WINDOW;
        assert!(budget.take_at("fourth", later).is_ok());
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
