//! Settling on completion (decision 0021): a paid job's checked result
//! waits for its payment's settlement before the job is `completed` and its
//! output shown.
//!
//! A job whose payment carries a settle ticket (`PaidWith::ticket`) goes,
//! when its worker's result has been checked, from `assigned`/`running` to
//! *awaiting settlement*: status `running` (the spec has no other word for
//! it), no worker, the output and receipt kept but never shown, one timer
//! at the authorization's `validBefore`. The shell takes the job
//! ([`Core::take_settlements`]), settles outside the lock and reports
//! ([`Core::settled`]): `completed` with the transaction, or `failed`
//! (`payment_failed`, `payment_expired`) without the output. A job that
//! fails earlier never reaches the shell: it is never settled.
//!
//! Before its result, a paid job's pending wait and leases end no later
//! than `validBefore` less `timing.settle_margin_ms`; past it, the job fails
//! `payment_expired` rather than running on unpaid.

use super::{Core, FailureReason, Outbound, SessionId, TimerKind};
use protocol::api::JobStatus;
use protocol::receipt::Receipt;
use protocol::worker::CoordinatorFrame;
use uuid::Uuid;

/// How the shell's settlement of a job ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled {
    /// Money moved: `transaction` is the facilitator's transaction id (the
    /// ticket's reference for local settlement, which moves none).
    Paid { transaction: String },
    /// The facilitator refused: the job fails `payment_failed`.
    Refused,
    /// No settlement was sent before `validBefore` less the margin: the
    /// job fails `payment_expired`, and its payer was not charged.
    Expired,
    /// A settlement may have reached the chain, but no answer said whether
    /// it did before the last retry ([`Core::retry_deadline_ms`]): the job
    /// fails `payment_expired`, and the operator reconciles the payment
    /// against the facilitator's records (the one residual of decision 0021).
    Unconfirmed,
}

/// Why [`Core::settled`] changed nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SettleError {
    #[error("the job does not await settlement")]
    NotAwaiting,
}

impl Core {
    /// A held paid job's checked result: the worker's slot is freed and
    /// the job awaits settlement, or fails unpaid if its authorization
    /// would lapse first.
    pub(super) fn await_settlement(
        &mut self,
        session: SessionId,
        id: Uuid,
        output: serde_json::Value,
        receipt: Receipt,
        now_ms: i64,
    ) {
        self.set_load(session, |jobs| jobs.remove(&id));
        self.outbox.push((
            session,
            Outbound::Frame(CoordinatorFrame::ResultAccepted { job_id: id }),
        ));
        if self.payment_expired(&id, now_ms) {
            self.fail(id, FailureReason::PaymentExpired);
            self.fill(session, now_ms);
            return;
        }
        let valid_before_ms = self.valid_before_ms(&id).expect("a paid job has a ticket");
        let job = self.jobs.get_mut(&id).expect("held job exists");
        job.status = JobStatus::Running;
        job.worker = None;
        job.awaiting_settlement = true;
        job.output = Some(output);
        job.receipt = Some(Box::new(receipt));
        job.deadline_ms = Some(valid_before_ms);
        // The output now counts against the queued budget until the job ends.
        let before = job.footprint_bytes;
        job.footprint_bytes = super::footprint_bytes(job);
        let grown = job.footprint_bytes - before;
        let owner = job.owner.clone();
        self.queued_bytes += grown;
        super::count_queued(&mut self.queued_by_owner, &owner, grown);
        self.add_timer(valid_before_ms, TimerKind::Settle, id);
        self.note_awaiting(id);
        self.job_changed(&id);
        self.fill(session, now_ms);
    }

    /// Lists a job awaiting settlement for the shell.
    pub(super) fn note_awaiting(&mut self, id: Uuid) {
        debug_assert!(
            self.jobs[&id].awaiting_settlement,
            "job {id} is not awaiting"
        );
        if self.awaiting.insert(id) {
            self.to_settle.push(id);
        }
    }

    /// The jobs that began awaiting settlement since the last call (those
    /// a restore found too), with their tickets: the shell settles each.
    pub fn take_settlements(&mut self) -> Vec<(Uuid, x402::SettleTicket)> {
        let ids = std::mem::take(&mut self.to_settle);
        ids.into_iter()
            .filter(|id| self.awaiting.contains(id))
            .filter_map(|id| Some((id, self.jobs.get(&id)?.settle_ticket()?.clone())))
            .collect()
    }

    /// The shell is about to send job `id`'s first `/settle` of this
    /// process: recorded (the shell makes it durable before sending).
    /// Returns whether one was sent before (by an earlier process or node).
    pub fn settle_sending(&mut self, id: Uuid) -> Result<bool, SettleError> {
        if !self.awaiting.contains(&id) {
            return Err(SettleError::NotAwaiting);
        }
        let job = self.jobs.get_mut(&id).expect("awaiting job exists");
        let before = std::mem::replace(&mut job.settle_sent, true);
        if !before {
            self.job_changed(&id);
        }
        Ok(before)
    }

    /// Whether jobs wait to be handed to the shell.
    pub fn has_settlements(&self) -> bool {
        !self.to_settle.is_empty()
    }

    /// Jobs whose results await settlement (a gauge).
    pub fn awaiting_settlement(&self) -> usize {
        self.awaiting.len()
    }

    /// The shell's settlement of job `id` ended: `completed` with the
    /// transaction, or `failed` with its output dropped.
    pub fn settled(&mut self, id: Uuid, outcome: Settled, now_ms: i64) -> Result<(), SettleError> {
        if !self.awaiting.contains(&id) {
            return Err(SettleError::NotAwaiting);
        }
        match outcome {
            Settled::Paid { transaction } => {
                self.clear_timer(&id);
                self.awaiting.remove(&id);
                let job = self.jobs.get_mut(&id).expect("awaiting job exists");
                debug_assert!(job.payment_transaction.is_none(), "job {id} settled twice");
                job.awaiting_settlement = false;
                job.payment_transaction = Some(transaction);
                self.finish_completed(id, now_ms);
            }
            Settled::Refused => self.fail(id, FailureReason::PaymentFailed),
            Settled::Expired | Settled::Unconfirmed => self.fail(id, FailureReason::PaymentExpired),
        }
        Ok(())
    }

    /// The authorization's `validBefore` of a paid job settled on
    /// completion, in ms.
    pub(super) fn valid_before_ms(&self, id: &Uuid) -> Option<i64> {
        let seconds = self.jobs.get(id)?.settle_ticket()?.valid_before_seconds;
        Some(i64::try_from(seconds).unwrap_or(i64::MAX / 1000) * 1000)
    }

    /// The last moment a paid job may still be settled: `validBefore` less
    /// the settle margin. `None` for a job settled at commit or unpaid.
    pub fn settle_deadline_ms(&self, id: &Uuid) -> Option<i64> {
        let margin_ms = self.config.timing.settle_margin_ms;
        Some(self.valid_before_ms(id)?.saturating_sub(margin_ms))
    }

    /// The last moment a settlement that may already have reached the
    /// chain is retried: `validBefore` less the facilitator's timeout, so
    /// the last attempt is answered before the authorization (and the
    /// job's backstop timer) runs out. Never before the settlement
    /// deadline. A retry is never a second charge, and only a retry can
    /// learn that an earlier send whose answer was lost (or whose process
    /// died) landed: the chain then answers "already used".
    pub fn retry_deadline_ms(&self, id: &Uuid) -> Option<i64> {
        let timeout_ms = i64::try_from(x402::settle::DEFAULT_FACILITATOR_TIMEOUT.as_millis())
            .expect("the facilitator timeout fits in i64 ms");
        let last_ms = self.valid_before_ms(id)?.saturating_sub(timeout_ms);
        Some(last_ms.max(self.settle_deadline_ms(id)?))
    }

    /// Whether a paid job's settlement deadline has come.
    pub(super) fn payment_expired(&self, id: &Uuid, now_ms: i64) -> bool {
        self.settle_deadline_ms(id).is_some_and(|d| now_ms >= d)
    }

    /// `at_ms`, or the job's settlement deadline if that comes first: a
    /// pending wait or lease never outlives the payment.
    pub(super) fn capped_ms(&self, id: &Uuid, at_ms: i64) -> i64 {
        self.settle_deadline_ms(id).map_or(at_ms, |d| at_ms.min(d))
    }

    /// A stored job awaiting settlement, taken back by a restart (or from
    /// a node whose lease lapsed): it awaits again, with its timer.
    pub(super) fn restore_awaiting(&mut self, id: Uuid) {
        let valid_before_ms = self
            .valid_before_ms(&id)
            .expect("an awaiting job has a ticket");
        let job = self.jobs.get_mut(&id).expect("restored job exists");
        job.deadline_ms = Some(valid_before_ms);
        self.add_timer(valid_before_ms, TimerKind::Settle, id);
        self.note_awaiting(id);
    }
}
