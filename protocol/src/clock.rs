//! The one source of wall-clock time for every peer (coordinator, workers,
//! stubs, router payer): a `Clock` giving Unix milliseconds.
//!
//! Production reads the system clock in exactly one place ([`SystemClock`]);
//! the simulation injects [`TokioClock`] (an epoch plus tokio's pausable
//! elapsed time); tests can use [`ManualClock`], [`FixedClock`] or a closure.
//! Waiting always goes through tokio time, never this trait.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

/// Wall-clock time as Unix milliseconds.
pub trait Clock: Send + Sync {
    fn now_ms(&self) -> i64;
}

/// A clock shared between components.
pub type SharedClock = Arc<dyn Clock>;

impl<F> Clock for F
where
    F: Fn() -> i64 + Send + Sync,
{
    fn now_ms(&self) -> i64 {
        self()
    }
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

/// `epoch_ms` plus the tokio time elapsed since creation. Under a paused
/// runtime this advances only when the simulation sleeps; with `epoch_ms`
/// taken from the system clock and time running, it is wall time.
#[derive(Debug, Clone, Copy)]
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

    pub fn shared(epoch_ms: i64) -> SharedClock {
        Arc::new(Self::new(epoch_ms))
    }
}

impl Clock for TokioClock {
    fn now_ms(&self) -> i64 {
        let elapsed_ms = i64::try_from(self.start.elapsed().as_millis()).unwrap_or(i64::MAX);
        self.epoch_ms.saturating_add(elapsed_ms)
    }
}

/// A clock that moves only when told to; clones share the time.
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

/// A clock that never moves; for unit tests of pure functions.
#[derive(Debug, Clone, Copy)]
pub struct FixedClock(pub i64);

impl Clock for FixedClock {
    fn now_ms(&self) -> i64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn tokio_clock_follows_virtual_time() {
        let c = TokioClock::new(1_000);
        assert_eq!(c.now_ms(), 1_000);
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        assert_eq!(c.now_ms(), 1_250);
    }

    #[test]
    fn closures_and_manual_clocks() {
        let c: SharedClock = Arc::new(|| 42);
        assert_eq!(c.now_ms(), 42);
        let m = ManualClock::new(5);
        let shared = m.clone();
        m.advance(10);
        assert_eq!(shared.now_ms(), 15);
    }
}
