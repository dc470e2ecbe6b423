//! Restarts after a runner pod that ended soon back off as the kubelet's do: the first
//! waits 10 s after the pod finished, each next one twice as long, up to 5 minutes; a pod
//! that ran 10 minutes starts the count again.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::core::runner_pod::runner_ran;

/// The wait before the first restart after a short run.
pub const FIRST_WAIT: Duration = Duration::from_secs(10);
/// The longest wait.
pub const MAX_WAIT: Duration = Duration::from_mins(5);
/// A pod that ran this long ends the back-off.
pub const RESET_AFTER: Duration = Duration::from_mins(10);

/// The restart that follows a finished (or vanished) pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NextRestart {
    /// Restarts in a row after short runs, this one included.
    pub crash_loop_count: i32,
    /// When it may start; `None`: at once.
    pub not_before: Option<Time>,
}

/// The wait after `count` restarts in a row after short runs.
#[must_use]
pub fn wait(count: i32) -> Duration {
    let doublings = u32::try_from(count.saturating_sub(1).clamp(0, 16)).unwrap_or(16);
    FIRST_WAIT.saturating_mul(1 << doublings).min(MAX_WAIT)
}

/// The restart after `pod` (`None`: it vanished, so how long it ran is unknown), given the
/// restarts in a row after short runs so far. Without the kubelet's start and finish times
/// there is nothing to wait from: the restart starts at once, and counts as after a short run.
#[must_use]
pub fn next_restart(count_so_far: i32, pod: Option<&Pod>) -> NextRestart {
    let Some((started, finished)) = pod.and_then(runner_ran) else {
        return NextRestart {
            crash_loop_count: count_so_far.saturating_add(1),
            not_before: None,
        };
    };
    let ran = finished.0.duration_since(started.0);
    let ran = Duration::try_from(ran).unwrap_or_default();
    if ran >= RESET_AFTER {
        return NextRestart {
            crash_loop_count: 0,
            not_before: None,
        };
    }
    let count = count_so_far.saturating_add(1);
    let not_before = finished.0.checked_add(wait(count)).ok().map(Time);
    NextRestart {
        crash_loop_count: count,
        not_before,
    }
}

impl NextRestart {
    /// The wait left at `now`, if any.
    #[must_use]
    pub fn wait_left(&self, now: &Time) -> Option<Duration> {
        let not_before = self.not_before.as_ref()?;
        let left = Duration::try_from(not_before.0.duration_since(now.0)).ok()?;
        (!left.is_zero()).then_some(left)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateTerminated, ContainerStatus, PodStatus,
    };
    use k8s_openapi::jiff::Timestamp;

    fn at(second: i64) -> Time {
        Time(Timestamp::from_second(1_800_000_000 + second).unwrap())
    }

    fn ended(started: i64, finished: i64) -> Pod {
        Pod {
            status: Some(PodStatus {
                phase: Some("Failed".into()),
                container_statuses: Some(vec![ContainerStatus {
                    name: crate::core::runner_pod::RUNNER_CONTAINER.into(),
                    state: Some(ContainerState {
                        terminated: Some(ContainerStateTerminated {
                            started_at: Some(at(started)),
                            finished_at: Some(at(finished)),
                            ..ContainerStateTerminated::default()
                        }),
                        ..ContainerState::default()
                    }),
                    ..ContainerStatus::default()
                }]),
                ..PodStatus::default()
            }),
            ..Pod::default()
        }
    }

    #[test]
    fn waits_double_from_ten_seconds_to_five_minutes() {
        let waits: Vec<u64> = (1..=7).map(|n| wait(n).as_secs()).collect();
        assert_eq!(waits, [10, 20, 40, 80, 160, 300, 300]);
        assert_eq!(wait(i32::MAX), MAX_WAIT);
    }

    #[test]
    fn a_short_run_backs_off_from_its_finish_and_a_long_one_resets() {
        // Ran 5 s, finished at 100: the second restart in a row may start at 120.
        let next = next_restart(1, Some(&ended(95, 100)));
        assert_eq!(next.crash_loop_count, 2);
        assert_eq!(next.not_before, Some(at(120)));
        assert_eq!(next.wait_left(&at(110)), Some(Duration::from_secs(10)));
        assert_eq!(next.wait_left(&at(120)), None);
        // Ran 10 minutes: at once, and the count starts again.
        let next = next_restart(6, Some(&ended(0, 600)));
        assert_eq!(
            next,
            NextRestart {
                crash_loop_count: 0,
                not_before: None
            }
        );
        // Vanished, or no times reported: at once, counted as short.
        assert_eq!(next_restart(2, None).crash_loop_count, 3);
        assert_eq!(next_restart(2, Some(&Pod::default())).not_before, None);
    }
}
