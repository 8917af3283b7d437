//! A circuit breaker per chain's coordinator, as LiteLLM cools a failing
//! deployment down: after `failures_max` consecutive failures of a
//! coordinator, calls skip it for `cooldown_ms` instead of paying its
//! timeout on every call. The first call after the cooldown tries it again
//! (half-open); a success closes the breaker, a failure opens it at once.
//!
//! Only the coordinator's own failures count (no answer, 5xx or 429, a
//! malformed answer, a job that failed or timed out, a bad receipt); what
//! the caller asked for wrongly (4xx, a PRIVATE job without a trusted worker,
//! a price above `max_price`, no payment client) says nothing of its health.
//! Time is tokio's clock, which the simulation pauses and advances.

use crate::error::AdapterError;
use crate::route::Chain;
use std::collections::BTreeMap;
use std::sync::Mutex;
use tokio::time::{Duration, Instant};

/// When a coordinator is skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerConfig {
    /// Consecutive failures that open the breaker; 0 turns it off.
    pub failures_max: u32,
    /// How long an open breaker skips the coordinator.
    pub cooldown_ms: u64,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self {
            failures_max: 3,
            cooldown_ms: 30_000,
        }
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct State {
    failures: u32,
    open_until: Option<Instant>,
}

/// Every chain's breaker, shared by the router's clones.
#[derive(Debug, Default)]
pub(crate) struct Breakers {
    config: BreakerConfig,
    states: Mutex<BTreeMap<Chain, State>>,
}

impl Breakers {
    pub fn new(config: BreakerConfig) -> Self {
        Self {
            config,
            states: Mutex::default(),
        }
    }

    /// `Err(remaining_ms)` while `chain`'s breaker is open.
    pub fn check(&self, chain: Chain) -> Result<(), u64> {
        let now = Instant::now();
        match self.lock().get(&chain).and_then(|s| s.open_until) {
            Some(until) if until > now => {
                let remaining = until.duration_since(now).as_millis();
                Err(u64::try_from(remaining).unwrap_or(u64::MAX))
            }
            _ => Ok(()),
        }
    }

    /// Records how a call to `chain`'s coordinator ended.
    pub fn record(&self, chain: Chain, outcome: Result<(), &AdapterError>) {
        if self.config.failures_max == 0 {
            return;
        }
        let mut states = self.lock();
        let state = states.entry(chain).or_default();
        match outcome {
            Ok(()) => *state = State::default(),
            Err(e) if e.is_coordinator_failure() => {
                state.failures = state.failures.saturating_add(1);
                if state.failures >= self.config.failures_max {
                    let cooldown = Duration::from_millis(self.config.cooldown_ms);
                    state.open_until = Some(Instant::now() + cooldown);
                }
            }
            Err(_) => {}
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Chain, State>> {
        // Each update is a whole `State` written at once; poisoning is harmless.
        self.states.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Stage;

    fn down() -> AdapterError {
        AdapterError::HttpStatus {
            stage: Stage::Quote,
            status: 503,
            message: "down".into(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn opens_after_consecutive_failures_and_half_opens_after_the_cooldown() {
        let b = Breakers::new(BreakerConfig {
            failures_max: 2,
            cooldown_ms: 1_000,
        });
        b.record(Chain::ChainA, Err(&down()));
        assert_eq!(b.check(Chain::ChainA), Ok(()));
        b.record(Chain::ChainA, Err(&down()));
        assert_eq!(b.check(Chain::ChainA), Err(1_000));
        assert_eq!(b.check(Chain::ChainB), Ok(()), "one chain's breaker only");
        tokio::time::advance(Duration::from_millis(600)).await;
        assert_eq!(b.check(Chain::ChainA), Err(400));
        tokio::time::advance(Duration::from_millis(400)).await;
        assert_eq!(b.check(Chain::ChainA), Ok(()), "half-open: one try");
        b.record(Chain::ChainA, Err(&down()));
        assert_eq!(
            b.check(Chain::ChainA),
            Err(1_000),
            "one more failure reopens it"
        );
        tokio::time::advance(Duration::from_millis(1_000)).await;
        b.record(Chain::ChainA, Ok(()));
        b.record(Chain::ChainA, Err(&down()));
        assert_eq!(
            b.check(Chain::ChainA),
            Ok(()),
            "a success starts the count again"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_callers_mistakes_do_not_count_and_zero_turns_it_off() {
        let b = Breakers::new(BreakerConfig {
            failures_max: 1,
            cooldown_ms: 1_000,
        });
        let private = AdapterError::NoTrustedWorker { job_id: "j".into() };
        b.record(Chain::ChainA, Err(&private));
        assert_eq!(b.check(Chain::ChainA), Ok(()));
        let off = Breakers::new(BreakerConfig {
            failures_max: 0,
            cooldown_ms: 1_000,
        });
        off.record(Chain::ChainA, Err(&down()));
        assert_eq!(off.check(Chain::ChainA), Ok(()));
    }
}
