//! The only source of wall-clock time in the coordinator.
//!
//! Production reads the system clock; the simulation and tests inject a clock
//! whose time is an epoch plus tokio's (pausable) elapsed time, or one that a
//! test sets by hand. Waiting always goes through tokio time, never this trait.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

/// Wall-clock time as Unix milliseconds.
pub trait Clock: Send + Sync + 'static {
    fn now_ms(&self) -> i64;
}

/// The real clock, for production.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[allow(clippy::disallowed_methods)] // the one production read of wall time
    fn now_ms(&self) -> i64 {
        let since_epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX)
    }
}

/// Simulated wall time: `epoch_ms` plus tokio time elapsed since creation.
/// Under a paused tokio runtime this advances only when the simulation sleeps.
#[derive(Debug, Clone)]
pub struct TokioClock {
    epoch_ms: i64,
    start: tokio::time::Instant,
}

impl TokioClock {
    pub fn new(epoch_ms: i64) -> Self {
        Self {
            epoch_ms,
            start: tokio::time::Instant::now(),
        }
    }
}

impl Clock for TokioClock {
    fn now_ms(&self) -> i64 {
        let elapsed = tokio::time::Instant::now().duration_since(self.start);
        self.epoch_ms + i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX)
    }
}

/// A clock that moves only when told to; for unit tests.
#[derive(Debug, Clone, Default)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    pub fn new(now_ms: i64) -> Self {
        Self(Arc::new(AtomicI64::new(now_ms)))
    }

    pub fn set(&self, now_ms: i64) {
        self.0.store(now_ms, Ordering::SeqCst);
    }

    pub fn advance(&self, by_ms: i64) {
        self.0.fetch_add(by_ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}
