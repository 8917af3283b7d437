//! The settlement ledger of a simulated instance: every payment any of its
//! nodes settled, counted by the authorization's nonce, whichever way it
//! settles (locally or through the scripted facilitator). The safety keys
//! `charged_for_failed_job`, `settled_twice` and `output_before_settlement`
//! judge a run against it (decision 0021), and `charged_off_price` judges
//! the amount each settlement moved.
//!
//! It also plays the chain's part, which neither local settlement nor the
//! scripted facilitator does: an authorization settles once, and sending it
//! again is refused `invalid_exact_evm_nonce_already_used` (as after a crash
//! between a settlement and its record), moving nothing; and from the
//! authorization's `validBefore` on, every settlement of it is refused
//! `invalid_exact_evm_payload_authorization_valid_before` whether or not it
//! was spent, as a facilitator checks the time before the chain (so the
//! simulation never tells a late retry more than a real facilitator would).

use super::build::SLOW_SETTLE_MS;
use coordinator::clock::{Clock, TokioClock};
use coordinator::shell::{BACKOFF_MAX_MS, FACILITATOR_STALL_MAX_MS};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use x402::settle::BoxFuture;
use x402::{Reason, SettleOutcome, SettleRequest, SettleTicket, Settlement, Settler};

/// Successful settlements by authorization nonce (`0x…`, lowercase), the
/// verdicts of `/verify` by nonce (`unfunded_job_accepted`), the amount
/// (atomic units, decimal) each nonce's settlements moved
/// (`charged_off_price`), and what decides whether a coordinator could have
/// learned that a settlement landed (`charged_for_failed_job`'s one excuse).
#[derive(Clone, Default)]
pub struct SettleLedger(Arc<Mutex<Ledger>>);

#[derive(Default)]
struct Ledger {
    counts: BTreeMap<String, usize>,
    verdicts: BTreeMap<String, Verdicts>,
    values: BTreeMap<String, BTreeSet<String>>,
    /// When each nonce's (first) settlement landed, and its retry deadline.
    landings: BTreeMap<String, Landing>,
    /// The instance's node processes going up (`true`) and down, in time
    /// order: judged for one-node instances only.
    life: Vec<(i64, bool)>,
}

/// A settlement that moved money, as the chain saw it.
#[derive(Debug, Clone, Copy)]
struct Landing {
    landed_ms: i64,
    /// `validBefore` less the facilitator's timeout: the last moment a
    /// coordinator sends a retry (decision 0021's retry deadline).
    retry_deadline_ms: i64,
}

/// The longest a running coordinator takes to learn that a settlement of
/// its own landed: the attempt in flight (the `facilitator.slow` stall and
/// the slowest scripted facilitator, `slow_settle`'s 20 s), then, its
/// answer lost, the longest backoff and one more attempt, answered at once
/// by the chain ("already used") after the stall, and a second of margin.
/// A process that ran this long between the landing and the retry deadline
/// must have learned it.
pub const LEARN_SETTLED_MS: i64 =
    (2 * FACILITATOR_STALL_MAX_MS + SLOW_SETTLE_MS + BACKOFF_MAX_MS) as i64 + 1_000;

/// What `/verify` answered for one authorization.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Verdicts {
    pub valid: bool,
    pub refused: bool,
}

impl SettleLedger {
    fn lock(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn record(&self, nonce: Option<String>, value: Option<String>, landing: Landing) {
        let nonce = nonce.unwrap_or_default();
        let mut ledger = self.lock();
        if let Some(value) = value {
            ledger
                .values
                .entry(nonce.clone())
                .or_default()
                .insert(value);
        }
        ledger.landings.entry(nonce.clone()).or_insert(landing);
        *ledger.counts.entry(nonce).or_insert(0) += 1;
    }

    fn record_verify(&self, nonce: Option<String>, valid: bool) {
        let Some(nonce) = nonce else { return };
        let mut ledger = self.lock();
        let seen = ledger
            .verdicts
            .entry(nonce.to_ascii_lowercase())
            .or_default();
        seen.valid |= valid;
        seen.refused |= !valid;
    }

    /// Whether the chain has spent this authorization already.
    fn spent(&self, nonce: Option<&String>) -> bool {
        nonce.is_some_and(|n| self.lock().counts.contains_key(n))
    }

    /// A node process of the instance started (`up`) or stopped, at `now_ms`.
    pub fn node_life(&self, now_ms: i64, up: bool) {
        self.lock().life.push((now_ms, up));
    }

    /// The counts so far.
    pub fn counts(&self) -> BTreeMap<String, usize> {
        self.lock().counts.clone()
    }

    /// The amounts each authorization's settlements moved, by nonce.
    pub fn values(&self) -> BTreeMap<String, BTreeSet<String>> {
        self.lock().values.clone()
    }

    /// The authorizations `/verify` refused and never found valid: unfunded
    /// (or otherwise refused) payments, which must buy nothing.
    pub fn refused_only(&self) -> BTreeSet<String> {
        let ledger = self.lock();
        let refused = ledger
            .verdicts
            .iter()
            .filter(|(_, v)| v.refused && !v.valid);
        refused.map(|(nonce, _)| nonce.clone()).collect()
    }

    /// Decision 0021's residual, for a one-node instance: the settlements
    /// that landed while no process of the instance ran for
    /// [`LEARN_SETTLED_MS`] at a stretch before their retry deadline, so no
    /// answer or retry could tell the coordinator (the process was down, or
    /// up only briefly between crashes). Such a job may fail
    /// `payment_expired` with its payment spent, as documented.
    pub fn unlearnable(&self) -> BTreeSet<String> {
        let ledger = self.lock();
        let landings = ledger.landings.iter();
        let unlearned = landings.filter(|(_, l)| !ran_long_enough(&ledger.life, l));
        unlearned.map(|(nonce, _)| nonce.clone()).collect()
    }
}

/// Whether a process of the node started before the retry deadline and
/// then ran for [`LEARN_SETTLED_MS`] at a stretch after the landing (a
/// process still running at the end of the run counts).
fn ran_long_enough(life: &[(i64, bool)], landing: &Landing) -> bool {
    let (from_ms, until_ms) = (landing.landed_ms, landing.retry_deadline_ms);
    let mut up_since = None;
    for &(at_ms, up) in life {
        match (up, up_since) {
            (true, None) if at_ms < until_ms => up_since = Some(at_ms),
            (false, Some(since_ms)) => {
                if at_ms - i64::max(since_ms, from_ms) >= LEARN_SETTLED_MS {
                    return true;
                }
                up_since = None;
            }
            _ => {}
        }
    }
    up_since.is_some()
}

/// The nonce of a `/settle` body's EIP-3009 authorization.
fn body_nonce(body: &serde_json::Value) -> Option<String> {
    let nonce = body.pointer("/paymentPayload/payload/authorization/nonce")?;
    Some(nonce.as_str()?.to_ascii_lowercase())
}

/// The amount a `/settle` body's EIP-3009 authorization moves.
fn body_value(body: &serde_json::Value) -> Option<String> {
    let value = body.pointer("/paymentPayload/payload/authorization/value")?;
    Some(value.as_str()?.to_owned())
}

/// A node's settler, recording each success in its instance's
/// [`SettleLedger`]. A crashed process reaches no peer (`crash_after`), the
/// facilitator included: its attempts are lost.
pub struct RecordingSettler {
    pub inner: Arc<dyn Settler>,
    pub ledger: SettleLedger,
    pub crashed: Arc<AtomicBool>,
    /// The simulated wall clock, for `validBefore`.
    pub clock: Arc<TokioClock>,
}

impl RecordingSettler {
    fn dead(&self) -> bool {
        self.crashed.load(Ordering::SeqCst)
    }

    /// Whether the ticket's authorization has run out.
    fn lapsed(&self, ticket: &SettleTicket) -> bool {
        self.clock.now_ms() >= valid_before_ms(ticket)
    }

    /// A settlement landing now, whose retries end at `retry_deadline_ms`.
    fn landing(&self, retry_deadline_ms: i64) -> Landing {
        Landing {
            landed_ms: self.clock.now_ms(),
            retry_deadline_ms,
        }
    }
}

/// The ticket's `validBefore`, ms.
fn valid_before_ms(ticket: &SettleTicket) -> i64 {
    i64::try_from(ticket.valid_before_seconds).map_or(i64::MAX, |s| s.saturating_mul(1000))
}

/// How long a coordinator waits for a facilitator's answer, ms: its retry
/// deadline is `validBefore` less this (`Core::retry_deadline_ms`; the
/// settlement margin is at least as long).
fn facilitator_timeout_ms() -> i64 {
    i64::try_from(x402::settle::DEFAULT_FACILITATOR_TIMEOUT.as_millis()).unwrap_or(i64::MAX)
}

impl Settler for RecordingSettler {
    fn settle<'a>(&'a self, req: SettleRequest<'a>) -> BoxFuture<'a, Result<Settlement, Reason>> {
        Box::pin(async move {
            let nonce = req.verified.map(|v| v.nonce.to_string());
            let value = req.verified.map(|v| v.value.to_string());
            if self.dead() {
                return Err(Reason::UnexpectedSettleError);
            }
            if self.ledger.spent(nonce.as_ref()) {
                return Err(Reason::NonceAlreadyUsed);
            }
            let settled = self.inner.settle(req).await;
            if settled.is_ok() {
                // At commit (decision 0009): no later retry to judge.
                self.ledger.record(nonce, value, self.landing(i64::MAX));
            }
            settled
        })
    }

    fn verify<'a>(&'a self, req: SettleRequest<'a>) -> BoxFuture<'a, Result<(), Reason>> {
        Box::pin(async move {
            let nonce = req.verified.map(|v| v.nonce.to_string());
            let verdict = self.inner.verify(req).await;
            self.ledger.record_verify(nonce, verdict.is_ok());
            verdict
        })
    }

    fn settle_ticket<'a>(&'a self, ticket: &'a SettleTicket) -> BoxFuture<'a, SettleOutcome> {
        Box::pin(async move {
            let nonce = body_nonce(&ticket.body);
            if self.dead() {
                return SettleOutcome::Lost("the process crashed".into());
            }
            if self.lapsed(ticket) {
                return SettleOutcome::Refused(Reason::ValidBefore);
            }
            if self.ledger.spent(nonce.as_ref()) {
                return SettleOutcome::Refused(Reason::NonceAlreadyUsed);
            }
            let outcome = self.inner.settle_ticket(ticket).await;
            if matches!(outcome, SettleOutcome::Settled(_)) {
                let retry_deadline_ms =
                    valid_before_ms(ticket).saturating_sub(facilitator_timeout_ms());
                let landing = self.landing(retry_deadline_ms);
                self.ledger.record(nonce, body_value(&ticket.body), landing);
            }
            outcome
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A settlement landing at 100 s whose retries end at 400 s.
    fn ledger_with(life: &[(i64, bool)]) -> SettleLedger {
        let ledger = SettleLedger::default();
        let landing = Landing {
            landed_ms: 100_000,
            retry_deadline_ms: 400_000,
        };
        ledger.record(Some("0xaa".into()), None, landing);
        for &(at_ms, up) in life {
            ledger.node_life(at_ms, up);
        }
        ledger
    }

    fn unlearnable(life: &[(i64, bool)]) -> bool {
        ledger_with(life).unlearnable().contains("0xaa")
    }

    #[test]
    fn a_process_down_from_before_the_landing_past_the_deadline_cannot_learn() {
        assert!(unlearnable(&[(0, true), (90_000, false), (401_000, true)]));
        assert!(unlearnable(&[(0, true), (90_000, false)]));
    }

    #[test]
    fn a_process_running_long_enough_after_the_landing_must_learn() {
        // Running on past the landing.
        assert!(!unlearnable(&[(0, true)]));
        assert!(!unlearnable(&[
            (0, true),
            (100_000 + LEARN_SETTLED_MS, false)
        ]));
        // Restarted before the deadline and still running, however late.
        assert!(!unlearnable(&[(0, true), (90_000, false), (399_999, true)]));
        // Restarted, then running long enough before crashing again.
        let life = [
            (0, true),
            (90_000, false),
            (200_000, true),
            (250_000, false),
        ];
        assert!(!unlearnable(&life));
    }

    #[test]
    fn brief_runs_between_crashes_cannot_learn() {
        let short_ms = LEARN_SETTLED_MS - 1;
        let life = [(0, true), (100_000 + short_ms, false)];
        assert!(unlearnable(&life));
        let life = [
            (0, true),
            (90_000, false),
            (200_000, true),
            (200_000 + short_ms, false),
        ];
        assert!(unlearnable(&life));
        // Restarted exactly at the deadline: no retry is sent any more.
        assert!(unlearnable(&[(0, true), (90_000, false), (400_000, true)]));
    }
}
