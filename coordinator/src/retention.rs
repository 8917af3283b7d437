//! Retention: when finished jobs are deleted (decisions 0010 and 0018).
//!
//! A finished job is kept for polling until it is older than
//! `--retention-hours`, or until its ledger's bytes pass
//! [`KEPT_HIGH_WATER_PERCENT`] of their budget: then the heaviest client's
//! oldest finished jobs go first, down to 80 % (core/ended.rs: results
//! younger than `limits.kept_min_ms` only from a client over its share;
//! failure records, which carry no result, in a ledger and budget apart).
//! A log with both a time and a size limit drops its oldest segments the
//! same way (Kafka's `retention.ms` and `retention.bytes`); charging the
//! heaviest client first is what keeps one client's flood from deleting
//! everyone else's results (issue 29).
//!
//! Why by size too: 1 GiB of finished jobs is about 950,000 small ones:
//! three minutes at 5,000 jobs/s, or a day at 11 jobs/s. With the age cut
//! alone, a busy coordinator filled the budget and then answered every
//! commit 503 until its oldest jobs were a day old.
//!
//! The decision is the core's ([`Core::retention_pass`], plain code over
//! its ledgers), which returns the ids it forgot; the loops here and in
//! `node/tasks.rs` have the store delete exactly those, so a cluster node
//! deletes only jobs its own ledger counts. Without a retention task
//! (tests and the simulation, `Settings::retention_hours` `None`) nothing
//! is deleted and the budgets refuse at their limits.
//!
//! [`Core::retention_pass`]: crate::core::Core::retention_pass
//! [`KEPT_HIGH_WATER_PERCENT`]: crate::core::KEPT_HIGH_WATER_PERCENT

use crate::core::Forgotten;
use crate::shell::Coordinator;
use std::time::Duration;

/// How often the age cut is applied.
pub const AGE_INTERVAL_MS: u64 = 5 * 60 * 1000;

/// How often the ledgers are compared with their high-water marks. A
/// budget's last tenth lasts about 18 s at 5,000 small jobs a second.
pub const SIZE_CHECK_INTERVAL_MS: u64 = 1_000;

/// When the next age cut is due.
#[derive(Debug)]
pub struct Retention {
    /// `None`: no age limit (`--retention-hours 0`), the size limit only.
    retention_ms: Option<i64>,
    next_age_pass_ms: i64,
}

impl Retention {
    pub fn new(hours: u64) -> Self {
        let retention_ms =
            (hours > 0).then(|| i64::try_from(hours.saturating_mul(3_600_000)).unwrap_or(i64::MAX));
        Self {
            retention_ms,
            next_age_pass_ms: i64::MIN,
        }
    }

    /// The checks' timer: a tick every [`SIZE_CHECK_INTERVAL_MS`], the
    /// first at once; a late tick is not made up for.
    pub fn ticks() -> tokio::time::Interval {
        let mut every = tokio::time::interval(Duration::from_millis(SIZE_CHECK_INTERVAL_MS));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        every
    }

    /// The age cut to apply now, if one is due (every [`AGE_INTERVAL_MS`]).
    pub fn age_cut(&mut self, now_ms: i64) -> Option<i64> {
        let retention_ms = self.retention_ms?;
        if now_ms < self.next_age_pass_ms {
            return None;
        }
        self.next_age_pass_ms = now_ms.saturating_add(AGE_INTERVAL_MS as i64);
        Some(now_ms.saturating_sub(retention_ms))
    }

    /// One pass: what the core forgets now (by age when due, by size when
    /// a ledger is past its mark). The caller deletes the same ids from
    /// its store.
    pub fn pass(&mut self, c: &Coordinator) -> Forgotten {
        let age = self.age_cut(c.now_ms());
        c.with(|core, now_ms| core.retention_pass(now_ms, age))
    }
}

/// Counts and logs a pass that deleted `forgotten` from the store.
pub fn report(c: &Coordinator, forgotten: &Forgotten) {
    for (reason, jobs) in [("age", forgotten.by_age), ("size", forgotten.by_size)] {
        if jobs > 0 {
            c.metrics().jobs_deleted(reason, jobs as u64);
        }
    }
    let (_, kept_bytes) = c.read(|core| core.job_bytes());
    tracing::info!(
        by_age = forgotten.by_age,
        by_size = forgotten.by_size,
        kept_bytes,
        "retention: finished jobs deleted"
    );
}
