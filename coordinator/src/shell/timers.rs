//! The timer task: fires the core's deadlines on the injected clock.

use super::Coordinator;
use crate::buggify::{self, Site};

/// Sleeps until the core's next deadline, fires due timers, repeats, until
/// the server stops it (its `Tasks`, on shutdown, crash or drop). A
/// `notify_one` that arrives while no one waits is kept as a permit, so a
/// deadline added between the read and the wait is not missed.
pub(crate) async fn run_timers(c: Coordinator) {
    loop {
        let wait_ms = c
            .read(|core| core.next_deadline_ms())
            .map(|at| at - c.now_ms());
        if let Some(ms) = wait_ms {
            if ms <= 0 {
                buggify::stall(Site::TimerLate, 50).await;
                c.with(|core, now_ms| core.tick(now_ms));
                continue;
            }
        }
        let sleep = async {
            match wait_ms {
                Some(ms) => tokio::time::sleep(std::time::Duration::from_millis(ms as u64)).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            _ = c.inner.timer_wake.notified() => {}
            _ = sleep => {}
        }
    }
}
