//! The injected time source. Library code never reads the system clock: under
//! the simulation, time is the scenario epoch plus tokio's (paused) elapsed time.

use std::sync::Arc;

/// Unix milliseconds, as seen by a worker or stub.
pub trait Clock: Send + Sync {
    fn now_ms(&self) -> i64;
}

pub type SharedClock = Arc<dyn Clock>;

impl<F> Clock for F
where
    F: Fn() -> i64 + Send + Sync,
{
    fn now_ms(&self) -> i64 {
        self()
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

/// `epoch_ms` plus the tokio time elapsed since construction. Under a paused
/// runtime this is virtual time, so it is deterministic; in a real run the
/// binary passes the real epoch once at start.
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
    fn closures_are_clocks() {
        let c: SharedClock = Arc::new(|| 42);
        assert_eq!(c.now_ms(), 42);
    }
}
