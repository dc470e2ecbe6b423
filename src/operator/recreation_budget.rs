//! How many liveReload pod recreations may start per minute, over all VMs.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

const WINDOW: Duration = Duration::from_mins(1);

/// A sliding one-minute budget of recreations.
#[derive(Debug)]
pub struct RecreationBudget {
    /// Most recreations per minute; 0: no limit.
    per_minute: usize,
    taken: Mutex<VecDeque<Instant>>,
}

impl RecreationBudget {
    #[must_use]
    pub fn new(per_minute: u32) -> Self {
        RecreationBudget {
            per_minute: usize::try_from(per_minute).unwrap_or(usize::MAX),
            taken: Mutex::new(VecDeque::new()),
        }
    }

    /// Takes one recreation; `Err(wait)` when the budget is spent, with the time until one
    /// is free again.
    pub fn take(&self) -> Result<(), Duration> {
        self.take_at(Instant::now())
    }

    fn take_at(&self, now: Instant) -> Result<(), Duration> {
        if self.per_minute == 0 {
            return Ok(());
        }
        // Each update keeps the queue whole: a panicking holder left a usable one.
        let mut taken = self.taken.lock().unwrap_or_else(PoisonError::into_inner);
        while taken
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) >= WINDOW)
        {
            taken.pop_front();
        }
        if taken.len() >= self.per_minute {
            let oldest = taken.front().copied().unwrap_or(now);
            return Err(WINDOW.saturating_sub(now.saturating_duration_since(oldest)));
        }
        taken.push_back(now);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_refills_a_minute_after_each_recreation() {
        let budget = RecreationBudget::new(2);
        let t0 = Instant::now();
        assert!(budget.take_at(t0).is_ok());
        assert!(budget.take_at(t0 + Duration::from_secs(10)).is_ok());
        assert_eq!(
            budget.take_at(t0 + Duration::from_secs(20)),
            Err(Duration::from_secs(40))
        );
        assert!(budget.take_at(t0 + Duration::from_mins(1)).is_ok());
        assert!(budget.take_at(t0 + Duration::from_secs(61)).is_err());
    }

    #[test]
    fn zero_means_no_limit() {
        let budget = RecreationBudget::new(0);
        let t0 = Instant::now();
        assert!((0..1000).all(|_| budget.take_at(t0).is_ok()));
    }
}
