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

use coordinator::clock::{Clock, TokioClock};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use x402::settle::BoxFuture;
use x402::{Reason, SettleOutcome, SettleRequest, SettleTicket, Settlement, Settler};

/// Successful settlements by authorization nonce (`0x…`, lowercase), the
/// verdicts of `/verify` by nonce (`unfunded_job_accepted`), and the
/// amount (atomic units, decimal) each nonce's settlements moved
/// (`charged_off_price`).
#[derive(Clone, Default)]
pub struct SettleLedger(
    Arc<Mutex<BTreeMap<String, usize>>>,
    Arc<Mutex<BTreeMap<String, Verdicts>>>,
    Arc<Mutex<BTreeMap<String, BTreeSet<String>>>>,
);

/// What `/verify` answered for one authorization.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Verdicts {
    pub valid: bool,
    pub refused: bool,
}

impl SettleLedger {
    fn record(&self, nonce: Option<String>, value: Option<String>) {
        let nonce = nonce.unwrap_or_default();
        if let Some(value) = value {
            let mut values = self.2.lock().unwrap_or_else(|p| p.into_inner());
            values.entry(nonce.clone()).or_default().insert(value);
        }
        let mut ledger = self.0.lock().unwrap_or_else(|p| p.into_inner());
        *ledger.entry(nonce).or_insert(0) += 1;
    }

    fn record_verify(&self, nonce: Option<String>, valid: bool) {
        let Some(nonce) = nonce else { return };
        let mut verdicts = self.1.lock().unwrap_or_else(|p| p.into_inner());
        let seen = verdicts.entry(nonce.to_ascii_lowercase()).or_default();
        seen.valid |= valid;
        seen.refused |= !valid;
    }

    /// Whether the chain has spent this authorization already.
    fn spent(&self, nonce: Option<&String>) -> bool {
        let ledger = self.0.lock().unwrap_or_else(|p| p.into_inner());
        nonce.is_some_and(|n| ledger.contains_key(n))
    }

    /// The counts so far.
    pub fn counts(&self) -> BTreeMap<String, usize> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The amounts each authorization's settlements moved, by nonce.
    pub fn values(&self) -> BTreeMap<String, BTreeSet<String>> {
        self.2.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The authorizations `/verify` refused and never found valid: unfunded
    /// (or otherwise refused) payments, which must buy nothing.
    pub fn refused_only(&self) -> BTreeSet<String> {
        let verdicts = self.1.lock().unwrap_or_else(|p| p.into_inner());
        let refused = verdicts.iter().filter(|(_, v)| v.refused && !v.valid);
        refused.map(|(nonce, _)| nonce.clone()).collect()
    }
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
        let valid_before_ms =
            i64::try_from(ticket.valid_before_seconds).map_or(i64::MAX, |s| s.saturating_mul(1000));
        self.clock.now_ms() >= valid_before_ms
    }
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
                self.ledger.record(nonce, value);
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
                self.ledger.record(nonce, body_value(&ticket.body));
            }
            outcome
        })
    }
}
