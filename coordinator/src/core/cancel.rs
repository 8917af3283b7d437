//! Cancellation (`POST /v1/jobs/{id}/cancel`, decision 0022): a job that
//! has not ended fails `cancelled`; a held one's worker is sent the
//! protocol's `cancel` frame and its slot goes to the next queued job.
//!
//! A job ends through [`Core::fail`] like any other failure, so whatever a
//! failed job's payment gets (released, never settled) a cancelled one
//! gets too.

use super::{Change, Core, FailureReason, Job, Outbound};
use protocol::api::JobStatus;
use protocol::worker::CoordinatorFrame;
use std::sync::Arc;
use uuid::Uuid;

/// The `reason` of the `cancel` frame a worker gets for a cancelled job
/// (a lease that lapsed sends `lease_expired`).
pub const CANCEL_FRAME_REASON: &str = "cancelled";

/// Why a job was not cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CancelRefused {
    /// The core does not hold the job (the store or, in cluster mode,
    /// another node may: the caller looks there).
    #[error("no such job")]
    UnknownJob,
    /// The job is past the point a cancel can stop it.
    #[error("the job is {0} and can no longer be cancelled")]
    NotCancellable(JobStatus),
}

/// Whether a job in `status` can still be cancelled: only before a result
/// was accepted for it. Every status is named, so a new one (a result
/// checked and waiting for its settlement, say) is decided here, not
/// cancellable by default.
pub fn cancellable(status: JobStatus) -> bool {
    match status {
        JobStatus::Pending | JobStatus::Assigned | JobStatus::Running => true,
        JobStatus::Completed | JobStatus::Failed => false,
    }
}

impl Core {
    /// Cancels job `id`: a pending one leaves its queue; a held one's worker
    /// gets a `cancel` frame and its freed slot is filled from the queues.
    /// Either way the job fails `cancelled`, so a later result from that
    /// worker is refused (`not_assigned`) and never completes it. Returns
    /// the cancelled job: it may have left memory already (a finished-job
    /// cache of 0 evicts it as it ends; found by the swarm, seed 35).
    pub fn cancel(&mut self, id: Uuid, now_ms: i64) -> Result<Arc<Job>, CancelRefused> {
        let job = self.jobs.get(&id).ok_or(CancelRefused::UnknownJob)?;
        // A job whose result waits for its settlement is `running` with no
        // worker: its work is done and its payment is being taken, so it
        // ends as the settlement decides, not by a cancel (decision 0021).
        if !cancellable(job.status) || job.awaiting_settlement() {
            return Err(CancelRefused::NotCancellable(job.status));
        }
        let holder = job.worker;
        match (job.status, holder) {
            (JobStatus::Pending, _) => {
                self.dequeue(&id);
                self.fail(id, FailureReason::Cancelled);
            }
            (_, Some(session)) => {
                self.outbox.push((
                    session,
                    Outbound::Frame(CoordinatorFrame::Cancel {
                        job_id: id,
                        reason: CANCEL_FRAME_REASON.into(),
                    }),
                ));
                self.set_load(session, |jobs| jobs.remove(&id));
                self.fail(id, FailureReason::Cancelled);
                // The freed slot takes the most urgent job waiting for it.
                self.fill(session, now_ms);
            }
            (status, None) => unreachable!("job {id} is {status} without a holder"),
        }
        // `fail` recorded the job as it ended (before it may leave memory).
        let ended = self.changes.iter().rev().find_map(|change| match change {
            Change::Job(job) if job.id == id => Some(Arc::clone(job)),
            _ => None,
        });
        let ended = ended.expect("a failed job is recorded as changed");
        debug_assert_eq!(ended.error, Some(FailureReason::Cancelled));
        debug_assert!(ended.timer.is_none(), "cancelled job {id} kept a timer");
        Ok(ended)
    }
}
