//! The settlement task (decision 0021): settles the payments of jobs whose
//! results await settlement, outside the core's lock, and feeds the core
//! each outcome (`Core::settled`). A thin adapter: the core decides what a
//! job becomes, the facilitator whether money moves.
//!
//! A first `/settle` is sent only before the job's settlement deadline
//! (`validBefore` less `timing.settle_margin_ms`); past it the job fails
//! `payment_expired`, its payer not charged. A lost answer (transport
//! error, timeout, 5xx) is retried with the same ticket, so the same
//! `/settle` body, with backoff from [`BACKOFF_FIRST_MS`] doubling to
//! [`BACKOFF_MAX_MS`], until the retry deadline (`validBefore` less the
//! facilitator's timeout): a retry that finds the authorization spent has
//! found its own settlement, and the job completes. A second send of one
//! authorization is never a second charge: the chain spends it once.
//! Nothing is sent before the job's awaiting record is durable (marked as
//! sent), so a restart, or a node taking over, finds it and retries rather
//! than running the job again or failing a job that was paid.

use super::Coordinator;
use crate::buggify::{self, Site};
use crate::core::Settled;
use std::time::Duration;
use tokio::task::JoinSet;
use uuid::Uuid;
use x402::{SettleOutcome, SettleTicket};

/// The first wait after a lost answer, ms.
pub const BACKOFF_FIRST_MS: u64 = 500;
/// The longest wait between two attempts, ms.
pub const BACKOFF_MAX_MS: u64 = 15_000;
/// The longest a `facilitator.slow` fault point holds one `/settle`, ms.
pub const FACILITATOR_STALL_MAX_MS: u64 = 2_000;

/// Settles every job the core hands over, each in its own task of a
/// `JoinSet` this task owns (dropped with it when the server stops).
pub(crate) async fn run_settlements(c: Coordinator) {
    let mut running = JoinSet::new();
    loop {
        let notified = c.inner.settle_wake.notified();
        let due = c.lock().core.take_settlements();
        for (id, ticket) in due {
            running.spawn(settle_job(c.clone(), id, ticket));
        }
        tokio::select! {
            biased;
            _ = notified => {}
            Some(_) = running.join_next(), if !running.is_empty() => {}
        }
    }
}

/// Settles one job's payment and reports the outcome to the core.
async fn settle_job(c: Coordinator, id: Uuid, ticket: SettleTicket) {
    let job = super::job_ref(&id);
    // The awaiting record, marked as sent, first: a crash after a
    // settlement must find the job awaiting (never run it again) and know
    // that an "already used" refusal may be its own settlement.
    let Ok(sent) = c.with(|core, _| core.settle_sending(id)) else {
        return;
    };
    if let Err(e) = c.durable().await {
        tracing::error!(error = %e, %job, "store failed before settlement; the job is not settled");
        return;
    }
    let Some(gate) = c.payments().cloned() else {
        // Payments off since the job was paid: its timer fails it unpaid.
        tracing::warn!(%job, "a job awaits settlement but payments are off");
        return;
    };
    let outcome = settle_until_known(&c, &gate, id, &ticket, sent).await;
    report(&c, id, outcome);
}

/// Sends job `id`'s settlement until its outcome is known or its time is
/// up. `sent`: an earlier attempt (of this process or an earlier one) may
/// have reached the chain with its answer lost. A first send is bounded by
/// the settlement deadline; once one may have landed, retries go on to the
/// retry deadline, because only a retry can learn that it landed.
async fn settle_until_known(
    c: &Coordinator,
    gate: &x402::PaymentGate,
    id: Uuid,
    ticket: &SettleTicket,
    mut sent: bool,
) -> Settled {
    let job = super::job_ref(&id);
    let deadlines = c.read(|core| (core.settle_deadline_ms(&id), core.retry_deadline_ms(&id)));
    let (first_ms, retry_ms) = (deadlines.0.unwrap_or(0), deadlines.1.unwrap_or(0));
    let mut backoff_ms = BACKOFF_FIRST_MS;
    loop {
        let deadline_ms = if sent { retry_ms } else { first_ms };
        if c.now_ms() >= deadline_ms {
            return match sent {
                true => unconfirmed(id),
                false => Settled::Expired,
            };
        }
        match settle_once(gate, ticket).await {
            SettleOutcome::Settled(s) => {
                return Settled::Paid {
                    transaction: s.response.transaction,
                }
            }
            // Only our own earlier attempt can have spent the authorization
            // (or the payer, cancelling it in the same instant: decision 0021).
            SettleOutcome::Refused(x402::Reason::NonceAlreadyUsed) if sent => {
                buggify::sometimes("settlement found its own lost settlement spent");
                tracing::warn!(%job, "the authorization was spent by an earlier settlement whose answer was lost; counted settled, transaction unknown");
                return Settled::Paid {
                    transaction: ticket.payment_ref.clone(),
                };
            }
            SettleOutcome::Refused(reason) if sent && inconclusive(&reason) => {
                tracing::warn!(%job, reason = reason.as_str(), "settlement refused in a way an earlier, landed settlement could explain; retrying");
            }
            SettleOutcome::Refused(reason) => {
                tracing::info!(%job, reason = reason.as_str(), "settlement refused");
                return Settled::Refused;
            }
            SettleOutcome::Lost(e) => {
                sent = true;
                buggify::sometimes("settlement answer lost and retried");
                c.metrics().settlement("lost");
                tracing::warn!(%job, error = %e, "settlement answer lost; retrying the same payment");
            }
        }
        let left_ms = u64::try_from(retry_ms - c.now_ms()).unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(backoff_ms.min(left_ms))).await;
        backoff_ms = (backoff_ms * 2).min(BACKOFF_MAX_MS);
    }
}

/// Whether a refusal of a retry leaves open that an earlier attempt of
/// the same authorization landed: the payer's balance may be short because
/// our own transfer moved it, and a late retry is refused for the time
/// whatever the chain holds. Every other refusal would have refused the
/// earlier attempt too.
fn inconclusive(reason: &x402::Reason) -> bool {
    matches!(
        reason,
        x402::Reason::InsufficientFunds | x402::Reason::ValidBefore
    )
}

/// The retry deadline passed with a settlement's outcome unknown.
fn unconfirmed(id: Uuid) -> Settled {
    buggify::sometimes("settlement outcome unknown at its retry deadline");
    tracing::error!(job = %super::job_ref(&id), "no answer said whether this job's settlement landed before its authorization ran out; the job fails payment_expired; reconcile its payment against the facilitator's records");
    Settled::Unconfirmed
}

/// One `/settle` call, with its fault points: a facilitator that answers
/// late, or settles and loses its answer (the retry must then count the
/// spent authorization as its own settlement, not charge twice).
async fn settle_once(gate: &x402::PaymentGate, ticket: &SettleTicket) -> SettleOutcome {
    buggify::stall(Site::FacilitatorSlow, FACILITATOR_STALL_MAX_MS).await;
    match gate.settle_ticket(ticket).await {
        SettleOutcome::Settled(_) if buggify::fire(Site::FacilitatorLost) => {
            SettleOutcome::Lost("buggify: the facilitator's answer was lost".into())
        }
        outcome => outcome,
    }
}

/// Feeds the core a settlement's outcome and counts it.
fn report(c: &Coordinator, id: Uuid, outcome: Settled) {
    let label = match &outcome {
        Settled::Paid { .. } => "settled",
        Settled::Refused => "refused",
        Settled::Expired => "expired",
        Settled::Unconfirmed => "unconfirmed",
    };
    c.metrics().settlement(label);
    let paid = matches!(outcome, Settled::Paid { .. });
    let reported = c.with(|core, now_ms| core.settled(id, outcome, now_ms));
    if let (Err(e), true) = (reported, paid) {
        // Cannot happen while attempts end before the job's timer (the
        // margin exceeds the facilitator's timeout); if it does, a payer
        // was charged for a job it will not see: say so loudly.
        tracing::error!(job = %super::job_ref(&id), error = %e, "a payment was settled for a job that no longer awaits it");
    }
}
