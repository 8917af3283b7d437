//! Retention: when finished jobs are deleted.
//!
//! A finished job is kept for polling until it is older than
//! `--retention-hours`, or until the kept jobs' bytes pass
//! [`KEPT_HIGH_WATER_PERCENT`] of `limits.kept_bytes_max`, whichever comes
//! first; the oldest go first. A log with both a time and a size limit
//! drops its oldest segments the same way (Kafka's `retention.ms` and
//! `retention.bytes`).
//!
//! Why by size too: 1 GiB of finished jobs is about 950,000 small ones:
//! three minutes at 5,000 jobs/s, or a day at 11 jobs/s. With the age cut
//! alone, a busy coordinator filled the budget and then answered every
//! commit 503 until its oldest jobs were a day old. Clients read a result
//! within seconds of its end (a held poll at once), so the oldest results
//! are the ones nobody reads; refusing new work to keep them served no one.
//! A commit still gets 503 when its bytes would not fit at all, which now
//! takes deletion falling behind (jobs ending faster than one pass a second
//! can delete: more than a tenth of the budget a second).
//!
//! The decision is the core's ([`Core::size_cut_ms`], plain code over its
//! counters); the loops that act on it are the stores' (the SQLite store in
//! `server.rs`, the cluster's in `node/tasks.rs`). Without a retention task
//! (tests and the simulation, `Settings::retention_hours` `None`) nothing
//! is deleted and the budget refuses at its limit.
//!
//! [`Core::size_cut_ms`]: crate::core::Core::size_cut_ms
//! [`KEPT_HIGH_WATER_PERCENT`]: crate::core::KEPT_HIGH_WATER_PERCENT

use crate::shell::Coordinator;
use std::time::Duration;

/// How often the age cut is applied.
pub const AGE_INTERVAL_MS: u64 = 5 * 60 * 1000;

/// How often the kept bytes are compared with their high-water mark. The
/// budget's last tenth lasts about 18 s at 5,000 small jobs a second.
pub const SIZE_CHECK_INTERVAL_MS: u64 = 1_000;

/// Why a retention pass deletes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// Jobs older than the retention period.
    Age,
    /// The oldest jobs, to bring the kept bytes under the high-water mark.
    Size,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Age => "age",
            Reason::Size => "size",
        }
    }
}

/// When the next pass is due, and what it cuts.
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

    /// The cut to apply now, if any: terminal jobs created before it are
    /// deleted. The later of the age cut (every [`AGE_INTERVAL_MS`]) and
    /// the size cut.
    pub fn due(&mut self, c: &Coordinator) -> Option<(i64, Reason)> {
        let now_ms = c.now_ms();
        let age = match self.retention_ms {
            Some(retention_ms) if now_ms >= self.next_age_pass_ms => {
                self.next_age_pass_ms = now_ms.saturating_add(AGE_INTERVAL_MS as i64);
                Some(now_ms.saturating_sub(retention_ms))
            }
            _ => None,
        };
        let size = c.read(|core| core.size_cut_ms());
        match (age, size) {
            (Some(age), Some(size)) if size > age => Some((size, Reason::Size)),
            (Some(age), _) => Some((age, Reason::Age)),
            (None, Some(size)) => Some((size, Reason::Size)),
            (None, None) => None,
        }
    }
}
