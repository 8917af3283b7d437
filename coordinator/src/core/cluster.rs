//! The core's side of cluster mode (docs/cluster.md):
//! a node's core holds only the jobs its node owns, and never a pending one.
//!
//! - After every event the shell takes the queued jobs out
//!   ([`Core::release_pending`]); the store writes them to the shared pool.
//! - Jobs claimed from the pool come in through [`Core::adopt`]: each goes
//!   to a free eligible worker, or straight back to the pool with its
//!   deadline kept; a job whose pending deadline is due fails here, so the
//!   pool's timers are fired by the same code as a node's own.
//! - Jobs taken over from a node whose lease lapsed come in through
//!   [`Core::recover`], under the restart-recovery rules of `restore.rs`.
//! - [`Core::want`] says what the idle workers can take: the claim filter.

use super::{footprint_bytes, Core, FailureReason, Job, TimerKind};
use crate::core::trust::TrustEntry;
use protocol::api::{JobStatus, JobType, PrivacyClass};
use std::collections::BTreeSet;
use std::sync::Arc;
use uuid::Uuid;

/// What a node's idle workers can take now: the claim filter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Want {
    /// Job types with a free slot, for PUBLIC jobs.
    pub public: BTreeSet<JobType>,
    /// (user, job type) pairs an idle trusted worker can serve, for PRIVATE jobs.
    pub private: BTreeSet<(String, JobType)>,
    /// At most this many jobs (free slots, capped by the caller).
    pub max: usize,
}

impl Want {
    pub fn matches(&self, job: &Job) -> bool {
        let s = &job.submission;
        match s.privacy_class {
            PrivacyClass::Public => self.public.contains(&s.job_type),
            PrivacyClass::Private => self.private.contains(&(s.user_id.clone(), s.job_type)),
        }
    }
}

/// (user, job type) pairs a claim names at most: bounds the query a node
/// with many trusted workers sends.
const WANT_PRIVATE_PAIRS_MAX: usize = 1024;

impl Core {
    /// Takes every queued job out of the core and records it as changed
    /// (pending: the store puts it in the pool). Returns how many.
    pub fn release_pending(&mut self) -> usize {
        let queued: Vec<Uuid> = self
            .queues
            .values()
            .flat_map(|q| q.ids().copied())
            .collect();
        for id in &queued {
            self.dequeue(id);
            self.clear_timer(id);
            let job = self.jobs.remove(id).expect("queued job exists");
            self.queued_bytes -= job.footprint_bytes;
            super::uncount_queued(&mut self.queued_by_owner, &job.owner, job.footprint_bytes);
            if let Some(paid) = &job.paid_with {
                self.paid.remove(&paid.nonce);
            }
            self.changes.push(super::Change::Job(job));
        }
        debug_assert_eq!(self.pending_count, 0);
        self.pool_len += queued.len();
        queued.len()
    }

    /// Learns the shared pool's length, as read from the store: with the
    /// jobs this node adds until the next read, it bounds the pool by
    /// `queue_len_max` cluster-wide (other nodes' commits since the read
    /// are not seen: the bound may be passed by what they commit in one
    /// read interval).
    pub fn set_pool_len(&mut self, pool_len: usize) {
        self.pool_len = pool_len;
    }

    /// The shared pool's length as this node counts it (see
    /// [`Core::set_pool_len`]).
    pub fn pool_len(&self) -> usize {
        self.pool_len
    }

    /// Takes in jobs claimed from the pool: a due one fails
    /// `no_eligible_worker`, the others go to a free eligible worker or
    /// back to the pool, keeping their deadline. Returns how many went
    /// back to the pool (no free worker here may take them: each failed
    /// them, or is busy).
    pub fn adopt(&mut self, jobs: Vec<Job>, now_ms: i64) -> usize {
        self.pool_len = self.pool_len.saturating_sub(jobs.len());
        let mut returned = 0;
        for job in jobs {
            assert_eq!(job.status, JobStatus::Pending, "only pool jobs are adopted");
            let id = job.id;
            let deadline_ms = job
                .deadline_ms
                .unwrap_or(now_ms + self.config.timing.pending_timeout_ms);
            self.insert_held(job);
            if deadline_ms <= now_ms {
                self.fail(id, FailureReason::NoEligibleWorker);
            } else if let Some(session) = self.pick_worker(&id) {
                self.assign(id, session, now_ms);
            } else {
                self.job_changed(&id);
                self.enqueue(id, false);
                self.add_timer(deadline_ms, TimerKind::Pending, id);
                returned += 1;
            }
        }
        returned
    }

    /// Takes in jobs another node held when its lease lapsed, as a restart
    /// of that node would: a held job's interrupted attempt is given back
    /// and the job requeued (or failed `coordinator_restarted` past
    /// `attempts_max` recoveries); a pending one keeps its deadline.
    ///
    /// Jobs are placed FAST first, then in the order given (the store's
    /// commit order), as every placement is: a free worker must not get an
    /// older CHEAP job while a FAST one it could take waits.
    pub fn recover(&mut self, mut jobs: Vec<Job>, now_ms: i64) {
        jobs.sort_by_key(|job| job.tier);
        let recoveries_max = self.config.timing.attempts_max;
        for mut job in jobs {
            let id = job.id;
            match job.status {
                JobStatus::Pending => {
                    self.adopt(vec![job], now_ms);
                }
                // Settled by this node now, with the same ticket.
                JobStatus::Running if job.awaiting_settlement && job.settle_ticket().is_some() => {
                    self.insert_held(job);
                    self.restore_awaiting(id);
                }
                JobStatus::Assigned | JobStatus::Running => {
                    job.awaiting_settlement = false;
                    job.attempts = job.attempts.saturating_sub(1);
                    job.recoveries = job.recoveries.saturating_add(1);
                    self.insert_held(job);
                    if self.jobs[&id].recoveries > recoveries_max {
                        self.fail(id, FailureReason::CoordinatorRestarted);
                    } else {
                        self.place(id, true, now_ms);
                    }
                }
                // Terminal jobs are never taken over; nothing to do.
                JobStatus::Completed | JobStatus::Failed => {}
            }
        }
    }

    /// Puts a non-terminal job from the shared store into the core's maps
    /// and budgets, held by no session yet.
    fn insert_held(&mut self, mut job: Job) {
        job.worker = None;
        job.footprint_bytes = footprint_bytes(&job);
        self.queued_bytes += job.footprint_bytes;
        super::count_queued(&mut self.queued_by_owner, &job.owner, job.footprint_bytes);
        if let Some(paid) = &job.paid_with {
            self.paid.insert(paid.nonce, (job.id, job.created_at_ms));
        }
        let id = job.id;
        assert!(!self.jobs.contains_key(&id), "job {id} adopted while held");
        self.jobs.insert(Arc::new(job));
    }

    /// Whether some worker has a free slot: then the pool may hold work
    /// for it. Cheap enough for every event (one set per job type).
    pub fn has_idle(&self) -> bool {
        self.idle.values().any(|set| !set.is_empty())
    }

    /// What the idle workers can take now, at most `max` jobs.
    pub fn want(&self, max: usize) -> Want {
        let mut want = Want::default();
        let mut free = 0usize;
        for worker in self.workers.values() {
            let slots = worker.slots.saturating_sub(worker.load()) as usize;
            if slots == 0 {
                continue;
            }
            free += slots;
            want.public.extend(worker.capabilities.iter().copied());
            for user in self.trust.users_trusting(&worker.pubkey) {
                for &job_type in &worker.capabilities {
                    if want.private.len() < WANT_PRIVATE_PAIRS_MAX {
                        want.private.insert((user.clone(), job_type));
                    }
                }
            }
        }
        want.max = free.min(max);
        want
    }

    /// The (worker key, job type) pairs connected here, for the shared
    /// presence.
    pub fn presence(&self) -> std::collections::BTreeSet<(String, protocol::api::JobType)> {
        let workers = self.workers.values();
        workers
            .flat_map(|w| w.capabilities.iter().map(|&t| (w.pubkey.clone(), t)))
            .collect()
    }

    /// Whether a worker `user_id` trusts is connected here with `job_type`.
    pub fn trusted_online_here(&self, user_id: &str, job_type: protocol::api::JobType) -> bool {
        self.trusted_sessions(user_id, job_type).next().is_some()
    }

    /// Commits a PRIVATE job whose user's trusted worker is connected to
    /// another node (the shared presence says so): admitted as any job on
    /// queue and byte room, then, like every queued job, released to the
    /// pool, where only that worker's node claims it.
    pub fn commit_trusted_elsewhere(
        &mut self,
        owner: &str,
        submission: protocol::api::JobSubmission,
        tier: protocol::api::Tier,
        payment: Option<super::Payment>,
        now_ms: i64,
    ) -> Result<Uuid, super::CommitError> {
        if payment.is_none() {
            self.admit_trusted_elsewhere(owner, &submission)?;
        }
        Ok(self.enter(owner, submission, tier, payment, now_ms))
    }

    /// Admission of such a job: queue and byte room only.
    pub fn admit_trusted_elsewhere(
        &self,
        owner: &str,
        submission: &protocol::api::JobSubmission,
    ) -> Result<(), super::CommitError> {
        self.room_for(submission, owner)
            .map_err(|refused| match refused {
                super::Refused::QueueFull => super::CommitError::QueueFull,
                _ => super::CommitError::StorageFull,
            })
    }

    /// Whether `client` may try a pairing claim now (its failure budgets).
    pub fn claim_allowed(&mut self, client: &str, now_ms: i64) -> bool {
        let limits = &self.config.limits;
        self.trust.claim_allowed(client, now_ms, limits).is_ok()
    }

    /// Takes a pairing as the shared store holds it, replacing what this
    /// node knew of the code.
    pub fn learn_pairing(&mut self, pairing: crate::core::trust::Pairing, now_ms: i64) {
        let retention_ms = self.config.timing.pairing_code_retention_ms;
        self.trust.learn(pairing, retention_ms, now_ms);
    }

    /// Adds trust entries another node recorded; a newly trusted idle
    /// worker finds nothing to fill (the core holds no pending job), so no
    /// dispatch follows here: the next claim names the new pairs.
    pub fn learn_trust(&mut self, entries: Vec<TrustEntry>) {
        let retention_ms = self.config.timing.pairing_code_retention_ms;
        self.trust.restore(Vec::new(), entries, retention_ms, 0);
    }
}
