//! The core's invariants, checked on request: the shell runs the check after
//! every event in debug builds and when `Config::check_invariants` is on (the
//! simulation). A breach means the state is corrupt, so the shell panics.
//!
//! Two checks of the same invariants:
//! - [`Core::check_invariants`], the whole state: O(jobs + workers ×
//!   capabilities + trust lookups), plus one dispatch decision per distinct
//!   (queue, avoided session) among pending jobs.
//! - The check after an event ([`Core::assert_invariants`]): the jobs and
//!   workers the event changed (tracked.rs notes them), each checked as the
//!   whole check would, and the core's counters against totals carried from
//!   the last check plus what the changed records now add. A record changed
//!   only through the noting maps, so a breach the event made is in a
//!   record it changed or in a counter. Events whose effect is not bounded
//!   by the records they change (a worker leaving, trust changing, a
//!   restore, old jobs forgotten) get the whole check, and so does every
//!   [`WHOLE_CHECK_EVERY`]th event, as a backstop for a change made around
//!   the maps.

use super::tracked::{idle_entries, JobShare};
use super::{queue_key, Core, Job, Outbound, Queue, QueueKey, SessionId, Timer, TimerKind, Worker};
use protocol::api::{JobStatus, JobType, PrivacyClass, Tier};
use protocol::worker::CoordinatorFrame;
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::{BTreeMap, BTreeSet};
use uuid::Uuid;

/// Every this many checks after an event, the whole state is checked.
pub const WHOLE_CHECK_EVERY: u64 = 512;

/// What the state added up to at the last check.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Totals {
    jobs: JobShare,
    /// Idle-set entries: per worker with a free slot, its job types.
    idle_entries: usize,
}

/// The check's memory between events.
#[derive(Debug, Default)]
pub(super) struct Checked {
    /// The totals found by the last check; `None`: the next one checks all.
    pub(super) totals: Option<Totals>,
    events: u64,
}

impl Checked {
    /// The next check looks at the whole state.
    pub fn whole_next(&mut self) {
        self.totals = None;
    }
}

/// The first invariant found broken, with what it takes to debug it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvariantViolation {
    #[error("byte budgets: counted {counted:?} (queued, kept) but the jobs hold {held:?}")]
    JobBytes {
        counted: (usize, usize),
        held: (usize, usize),
    },
    #[error("dispatch: pending job {job} (attempts {attempts}, avoiding {avoid:?}) could go to free worker {session}")]
    PendingWithFreeWorker {
        job: Uuid,
        attempts: u32,
        avoid: super::AvoidList,
        session: SessionId,
    },
    #[error("deadline: job {job} ({status:?}, attempts {attempts}) has deadline {deadline_ms:?} and timer {timer:?}; a non-terminal job needs exactly one live deadline of its kind, a terminal job none")]
    Deadline {
        job: Uuid,
        status: JobStatus,
        attempts: u32,
        deadline_ms: Option<i64>,
        timer: Option<(TimerKind, i64)>,
    },
    #[error("deadline: {timers} timers for {jobs} non-terminal jobs")]
    StrayTimers { timers: usize, jobs: usize },
    #[error("deadline: job {job} ({status:?}) ends at {deadline_ms}, more than {horizon_ms} ms after now ({now_ms})")]
    DeadlineTooFar {
        job: Uuid,
        status: JobStatus,
        deadline_ms: i64,
        horizon_ms: i64,
        now_ms: i64,
    },
    #[error("slots: worker {session} holds {load} jobs in {slots} slots")]
    Overloaded {
        session: SessionId,
        load: u32,
        slots: u32,
    },
    #[error("idle set of {job_type:?}: entry (load {load}, session {session}) is {}", if *listed { "listed but the worker is gone, full, or at another load" } else { "missing for a worker with a free slot" })]
    IdleSet {
        job_type: JobType,
        load: u32,
        session: SessionId,
        listed: bool,
    },
    #[error("settlement: job {job}: {problem}")]
    Settlement { job: Uuid, problem: &'static str },
    #[error(
        "holder: job {job} ({status:?}, holder {holder:?}, seen at worker {session:?}): {problem}"
    )]
    Holder {
        job: Uuid,
        status: Option<JobStatus>,
        holder: Option<SessionId>,
        session: Option<SessionId>,
        problem: &'static str,
    },
    #[error("trust: PRIVATE job {job} ({status:?}) of user {user_id:?} is held by session {session} whose key {pubkey} the user does not trust")]
    UntrustedHolder {
        job: Uuid,
        status: JobStatus,
        user_id: String,
        session: SessionId,
        pubkey: String,
    },
    #[error("attempts: job {job} ({status:?}) has {attempts} attempts; at most {attempts_max}, at least 1 while held")]
    Attempts {
        job: Uuid,
        status: JobStatus,
        attempts: u32,
        attempts_max: u32,
    },
    #[error("queue {queue}: job {job} ({status:?}, position {position:?}): {problem}")]
    Queue {
        queue: String,
        job: Uuid,
        status: Option<JobStatus>,
        position: Option<i64>,
        problem: &'static str,
    },
    #[error("queue {queue} is empty but kept")]
    EmptyQueue { queue: String },
    #[error("pending count is {counted}, but {pending} jobs are pending and {queued} queued")]
    PendingCount {
        counted: usize,
        pending: usize,
        queued: usize,
    },
    #[error("tier order: CHEAP job {cheap} went to session {session} while FAST job {fast}, which it could take, was pending")]
    TierOrder {
        cheap: Uuid,
        fast: Uuid,
        session: SessionId,
    },
    #[error("idle sets list {listed} entries, but the workers with a free slot need {needed}")]
    IdleCount { listed: usize, needed: usize },
    #[error("finished jobs: {problem} ({held} held, {listed} listed, at most {cap})")]
    Ended {
        problem: &'static str,
        held: usize,
        listed: usize,
        cap: usize,
    },
    #[error("sessions: {keys} keys index {workers} workers")]
    SessionCount { keys: usize, workers: usize },
    #[error("sessions: key {pubkey} and session {session}: {problem}")]
    SessionIndex {
        pubkey: String,
        session: SessionId,
        problem: &'static str,
    },
    #[error("store rows: unfinished job {job} ({status:?}) has no row in the store and is not in its pending batch: a deletion reached a live job")]
    Unstored { job: Uuid, status: JobStatus },
}

impl Core {
    /// Checks every invariant of the state; `now_ms` is the time of the
    /// event just handled. Pure: it reads, never changes, the core.
    pub fn check_invariants(&self, now_ms: i64) -> Result<(), InvariantViolation> {
        self.check_jobs(now_ms)?;
        self.check_workers()?;
        self.check_queues()?;
        self.check_dispatch()?;
        self.check_tier_order()?;
        self.check_ended()?;
        self.check_bytes()
    }

    /// Panics with the violation when `Config::check_invariants` is on (by
    /// default in debug builds, and always in the simulation). The shell
    /// calls it after each event.
    pub fn assert_invariants(&mut self, now_ms: i64) {
        if self.config.check_invariants {
            if let Err(v) = self.check_event(now_ms) {
                broken(now_ms, v);
            }
        }
    }

    /// Panics, when `Config::check_invariants` is on, if an unfinished job
    /// the core holds has no row in the store and no change in its pending
    /// batch (`stored` answers that). The simulation's store writer calls
    /// it after every commit, retention's deletions included: a deletion
    /// that reaches a live job is seen at once, not only after a crash
    /// reloads the store without it (issue 33, item 7).
    pub fn assert_stored(&self, now_ms: i64, stored: &dyn Fn(&Uuid) -> bool) {
        if !self.config.check_invariants {
            return;
        }
        if let Err(v) = self.check_stored(stored) {
            broken(now_ms, v);
        }
    }

    /// The check of [`Core::assert_stored`].
    pub fn check_stored(&self, stored: &dyn Fn(&Uuid) -> bool) -> Result<(), InvariantViolation> {
        let live = self
            .jobs
            .values()
            .filter(|job| !matches!(job.status, JobStatus::Completed | JobStatus::Failed));
        for job in live {
            if !stored(&job.id) {
                return Err(InvariantViolation::Unstored {
                    job: job.id,
                    status: job.status,
                });
            }
        }
        Ok(())
    }

    /// The check after an event: what it changed, or all (see the module doc).
    pub(super) fn check_event(&mut self, now_ms: i64) -> Result<(), InvariantViolation> {
        self.checked.events += 1;
        let backstop = self.checked.events % WHOLE_CHECK_EVERY == 0;
        let noting = self.jobs.noting() && self.workers.noting();
        let result = match self.checked.totals {
            Some(before) if noting && !backstop => self.check_changes(now_ms, before),
            _ => self
                .check_invariants(now_ms)
                .map(|()| self.totals())
                .inspect(|_| self.forget_changes()),
        };
        self.checked.totals = result.as_ref().ok().copied();
        result.map(|_| ())
    }

    fn forget_changes(&mut self) {
        self.jobs.take_touched();
        self.workers.take_touched();
    }

    /// What the whole state adds up to.
    fn totals(&self) -> Totals {
        let mut jobs = JobShare::default();
        for job in self.jobs.values() {
            jobs = jobs.plus(JobShare::of(job));
        }
        let idle_entries = self.workers.values().map(idle_entries).sum();
        Totals { jobs, idle_entries }
    }

    /// The records changed since the last check, and the counters against
    /// `before` plus what those records add now less what they added then.
    pub(super) fn check_changes(
        &mut self,
        now_ms: i64,
        before: Totals,
    ) -> Result<Totals, InvariantViolation> {
        let jobs = self.jobs.take_touched();
        let workers = self.workers.take_touched();
        let totals = self.changed_totals(before, &jobs, &workers);
        for id in jobs.keys() {
            if let Some(job) = self.jobs.get(id) {
                self.check_job(job, now_ms)?;
                self.check_queued(job)?;
                if job.status == JobStatus::Pending {
                    self.check_queue_dispatch(std::iter::once(id))?;
                }
            }
        }
        for session in workers.keys() {
            if let Some(worker) = self.workers.get(session) {
                self.check_worker(*session, worker)?;
                self.check_free_worker_dispatch(worker)?;
            }
        }
        self.check_tier_order()?;
        self.check_counters(&totals)?;
        Ok(totals)
    }

    fn changed_totals(
        &self,
        before: Totals,
        jobs: &FxHashMap<Uuid, JobShare>,
        workers: &BTreeMap<SessionId, usize>,
    ) -> Totals {
        let mut totals = before;
        for (id, was) in jobs {
            let now = self
                .jobs
                .get(id)
                .map_or_else(JobShare::default, |j| JobShare::of(j));
            totals.jobs = totals.jobs.plus(now).minus(*was);
        }
        for (session, was) in workers {
            let now = self.workers.get(session).map_or(0, idle_entries);
            totals.idle_entries = totals.idle_entries.wrapping_add(now).wrapping_sub(*was);
        }
        totals
    }

    /// The core's counters against the totals of the records.
    fn check_counters(&self, totals: &Totals) -> Result<(), InvariantViolation> {
        let kept = totals.jobs.kept_bytes + self.ended.evicted_bytes();
        let held = (totals.jobs.queued_bytes, kept);
        if held != (self.queued_bytes, self.kept_bytes) {
            return Err(InvariantViolation::JobBytes {
                counted: (self.queued_bytes, self.kept_bytes),
                held,
            });
        }
        if self.timers.len() != totals.jobs.live {
            return Err(InvariantViolation::StrayTimers {
                timers: self.timers.len(),
                jobs: totals.jobs.live,
            });
        }
        self.check_ended_count(self.jobs.len() - totals.jobs.live)?;
        let mut queued = 0;
        for (key, queue) in &self.queues {
            if queue.is_empty() {
                return Err(InvariantViolation::EmptyQueue {
                    queue: format!("{key:?}"),
                });
            }
            queued += queue.len();
        }
        let pending = totals.jobs.pending;
        if pending != queued || self.pending_count != pending {
            return Err(InvariantViolation::PendingCount {
                counted: self.pending_count,
                pending,
                queued,
            });
        }
        let listed = self.idle.values().map(BTreeSet::len).sum();
        if listed != totals.idle_entries {
            return Err(InvariantViolation::IdleCount {
                listed,
                needed: totals.idle_entries,
            });
        }
        // With every connected worker found by its own key (checked for
        // each changed worker), equal sizes leave no stray key.
        if self.session_of.len() != self.workers.len() {
            return Err(InvariantViolation::SessionCount {
                keys: self.session_of.len(),
                workers: self.workers.len(),
            });
        }
        Ok(())
    }

    /// A job is pending exactly when it sits in its own queue at its position.
    fn check_queued(&self, job: &Job) -> Result<(), InvariantViolation> {
        let key = queue_key(job);
        let problem = match (job.status == JobStatus::Pending, job.queue_pos) {
            (true, Some(pos)) => {
                let at = self.queues.get(&key).and_then(|q| q.get(pos));
                (at != Some(&job.id)).then_some("job is queued at another position")
            }
            (true, None) => Some("pending job is not queued"),
            (false, Some(_)) => Some("job that is not pending keeps a queue position"),
            (false, None) => None,
        };
        match problem {
            Some(problem) => Err(queue_violation(&key, job.id, Some(job), problem)),
            None => Ok(()),
        }
    }

    /// A worker with a free slot leaves no job in the queues it may serve
    /// that dispatch would give it or another free worker.
    fn check_free_worker_dispatch(&self, worker: &Worker) -> Result<(), InvariantViolation> {
        if worker.load() >= worker.slots {
            return Ok(());
        }
        for &job_type in &worker.capabilities {
            for tier in [Tier::Fast, Tier::Cheap] {
                let public = self.queues.get(&QueueKey::Public(tier, job_type));
                for queue in
                    public
                        .into_iter()
                        .chain(
                            self.trust
                                .users_trusting(&worker.pubkey)
                                .filter_map(|user| {
                                    self.queues.get(&QueueKey::Private(
                                        tier,
                                        job_type,
                                        user.clone(),
                                    ))
                                }),
                        )
                {
                    self.check_queue_dispatch(queue.ids())?;
                }
            }
        }
        Ok(())
    }

    /// Per job: deadline and timer, attempts, holder.
    fn check_jobs(&self, now_ms: i64) -> Result<(), InvariantViolation> {
        let mut live = 0;
        for job in self.jobs.values() {
            if !job.status.is_terminal() {
                live += 1;
            }
            self.check_job(job, now_ms)?;
        }
        if self.timers.len() != live {
            return Err(InvariantViolation::StrayTimers {
                timers: self.timers.len(),
                jobs: live,
            });
        }
        Ok(())
    }

    /// As many finished jobs held as listed in the order they ended, and
    /// no more than the cache holds.
    fn check_ended_count(&self, held: usize) -> Result<(), InvariantViolation> {
        let (listed, cap) = (
            self.ended.len(),
            self.config.limits.finished_jobs_cached_max,
        );
        let problem = if held != listed {
            "finished jobs held and listed differ"
        } else if listed > cap {
            "more finished jobs held than the cache holds"
        } else {
            return Ok(());
        };
        Err(InvariantViolation::Ended {
            problem,
            held,
            listed,
            cap,
        })
    }

    /// Every listed finished job is held, finished, and listed once.
    fn check_ended(&self) -> Result<(), InvariantViolation> {
        let held = self
            .jobs
            .values()
            .filter(|j| j.status.is_terminal())
            .count();
        self.check_ended_count(held)?;
        let mut seen = FxHashSet::default();
        for id in self.ended.ids() {
            let finished = self.jobs.get(id).is_some_and(|j| j.status.is_terminal());
            if !finished || !seen.insert(*id) {
                return Err(InvariantViolation::Ended {
                    problem: "a listed job is not held, not finished, or listed twice",
                    held,
                    listed: self.ended.len(),
                    cap: self.config.limits.finished_jobs_cached_max,
                });
            }
        }
        Ok(())
    }

    /// The byte budgets' counters match the jobs they count, held or evicted.
    fn check_bytes(&self) -> Result<(), InvariantViolation> {
        // The ledgers' totals against their entries, and against the kept
        // bytes; the queued bytes by owner against their total.
        let ledgers = self.ended.results().bytes() + self.ended.failures().bytes();
        let summed = self.ended.results().bytes_summed() + self.ended.failures().bytes_summed();
        let by_owner: usize = self.queued_by_owner.values().sum();
        if (ledgers, summed, by_owner) != (self.kept_bytes, self.kept_bytes, self.queued_bytes) {
            return Err(InvariantViolation::JobBytes {
                counted: (self.queued_bytes, self.kept_bytes),
                held: (by_owner, summed),
            });
        }
        let evicted = self.ended.evicted_bytes();
        let mut held = (0, evicted);
        for job in self.jobs.values() {
            if job.status.is_terminal() {
                held.1 += job.footprint_bytes;
            } else {
                held.0 += job.footprint_bytes;
            }
        }
        if held != (self.queued_bytes, self.kept_bytes) {
            return Err(InvariantViolation::JobBytes {
                counted: (self.queued_bytes, self.kept_bytes),
                held,
            });
        }
        Ok(())
    }

    fn check_job(&self, job: &Job, now_ms: i64) -> Result<(), InvariantViolation> {
        self.check_settlement(job)?;
        self.check_deadline(job, now_ms)?;
        self.check_attempts(job)?;
        self.check_holder(job)
    }

    fn check_deadline(&self, job: &Job, now_ms: i64) -> Result<(), InvariantViolation> {
        let kind = match job.status {
            JobStatus::Pending => Some(TimerKind::Pending),
            JobStatus::Running if job.awaiting_settlement => Some(TimerKind::Settle),
            JobStatus::Assigned | JobStatus::Running => Some(TimerKind::Lease),
            JobStatus::Completed | JobStatus::Failed => None,
        };
        let ok = match (kind, job.timer) {
            (None, None) => job.deadline_ms.is_none(),
            (Some(kind), Some(t)) => {
                t.kind == kind
                    && t.job == job.id
                    && job.deadline_ms == Some(t.at_ms)
                    && self.timers.contains(&t)
            }
            _ => false,
        };
        if !ok {
            return Err(InvariantViolation::Deadline {
                job: job.id,
                status: job.status,
                attempts: job.attempts,
                deadline_ms: job.deadline_ms,
                timer: job.timer.map(|t: Timer| (t.kind, t.at_ms)),
            });
        }
        // Deadlines are set from the event's time, so none is further away
        // than the longer of the two waits: no job stays non-terminal forever.
        let t = &self.config.timing;
        let horizon_ms = t.pending_timeout_ms.max(t.lease_ms);
        if job.awaiting_settlement {
            // Bounded by the authorization instead, which the payment gate
            // bounds (decision 0020); `check_settlement` ties the two.
            return Ok(());
        }
        match job.deadline_ms {
            Some(deadline_ms) if deadline_ms > now_ms.saturating_add(horizon_ms) => {
                Err(InvariantViolation::DeadlineTooFar {
                    job: job.id,
                    status: job.status,
                    deadline_ms,
                    horizon_ms,
                    now_ms,
                })
            }
            _ => Ok(()),
        }
    }

    /// Decision 0021: an output exists only on a completed job or one
    /// awaiting settlement; a job awaits settlement only while running, with
    /// a ticket, listed, its timer at the authorization's end; a job settled
    /// on completion is completed; a completed paid job settled on
    /// completion has its transaction.
    fn check_settlement(&self, job: &Job) -> Result<(), InvariantViolation> {
        let problem = |problem| InvariantViolation::Settlement {
            job: job.id,
            problem,
        };
        let completed = job.status == JobStatus::Completed;
        if job.output.is_some() && !completed && !job.awaiting_settlement {
            return Err(problem(
                "an output on a job neither completed nor awaiting settlement",
            ));
        }
        let listed = self.awaiting.contains(&job.id);
        if job.awaiting_settlement {
            let timed =
                job.deadline_ms.is_some() && job.deadline_ms == self.valid_before_ms(&job.id);
            if job.status != JobStatus::Running || !listed || !timed || job.output.is_none() {
                return Err(problem("awaits settlement but is not running, listed, timed to its authorization and with an output"));
            }
        } else if listed {
            return Err(problem("listed as awaiting settlement but not awaiting"));
        }
        let ticketed = job.settle_ticket().is_some();
        if job.payment_transaction.is_some() != (completed && ticketed) {
            return Err(problem(
                "a transaction on a job not completed by settlement, or none on one that is",
            ));
        }
        Ok(())
    }

    fn check_attempts(&self, job: &Job) -> Result<(), InvariantViolation> {
        let attempts_max = self.config.timing.attempts_max;
        let held = matches!(job.status, JobStatus::Assigned | JobStatus::Running);
        if job.attempts > attempts_max || (held && job.attempts == 0) {
            return Err(InvariantViolation::Attempts {
                job: job.id,
                status: job.status,
                attempts: job.attempts,
                attempts_max,
            });
        }
        Ok(())
    }

    /// A held job has a connected holder that lists it and may hold it; any
    /// other job has none.
    fn check_holder(&self, job: &Job) -> Result<(), InvariantViolation> {
        let held = matches!(job.status, JobStatus::Assigned | JobStatus::Running)
            && !job.awaiting_settlement;
        let problem = |problem| InvariantViolation::Holder {
            job: job.id,
            status: Some(job.status),
            holder: job.worker,
            session: job.worker,
            problem,
        };
        let Some(session) = job.worker else {
            return if held {
                Err(problem("an assigned or running job has no worker"))
            } else {
                Ok(())
            };
        };
        if !held {
            return Err(problem("only assigned or running jobs have a worker"));
        }
        let Some(worker) = self.workers.get(&session) else {
            return Err(problem("the holder is not connected"));
        };
        if !worker.jobs.contains(&job.id) {
            return Err(problem("the holder does not count the job in its slots"));
        }
        if self.eligible(job, worker) {
            return Ok(());
        }
        if job.submission.privacy_class == PrivacyClass::Private
            && worker.capabilities.contains(&job.submission.job_type)
        {
            return Err(InvariantViolation::UntrustedHolder {
                job: job.id,
                status: job.status,
                user_id: job.submission.user_id.clone(),
                session,
                pubkey: worker.pubkey.clone(),
            });
        }
        Err(problem("the holder does not serve the job type"))
    }

    /// Slots, the jobs each worker counts, the idle sets and the key index.
    fn check_workers(&self) -> Result<(), InvariantViolation> {
        let mut expected_idle: BTreeMap<JobType, BTreeSet<(u32, SessionId)>> = BTreeMap::new();
        for (&session, worker) in self.workers.iter() {
            self.check_worker(session, worker)?;
            let load = worker.load();
            if load < worker.slots {
                for &job_type in &worker.capabilities {
                    expected_idle
                        .entry(job_type)
                        .or_default()
                        .insert((load, session));
                }
            }
        }
        if let Some((pubkey, &session)) = self
            .session_of
            .iter()
            .find(|(key, s)| self.workers.get(s).is_none_or(|w| &w.pubkey != *key))
        {
            return Err(InvariantViolation::SessionIndex {
                pubkey: pubkey.clone(),
                session,
                problem: "a key points to a session that is gone or has another key",
            });
        }
        self.check_idle(&expected_idle)
    }

    /// One worker: slots, the jobs it counts (each held by it, and its to
    /// hold), its own idle-set entries, and its key's entry in the index.
    fn check_worker(&self, session: SessionId, worker: &Worker) -> Result<(), InvariantViolation> {
        let load = worker.load();
        if load > worker.slots {
            return Err(InvariantViolation::Overloaded {
                session,
                load,
                slots: worker.slots,
            });
        }
        for id in &worker.jobs {
            let job = self.jobs.get(id);
            match job {
                Some(job) if job.worker == Some(session) => self.check_holder(job)?,
                _ => {
                    return Err(InvariantViolation::Holder {
                        job: *id,
                        status: job.map(|j| j.status),
                        holder: job.and_then(|j| j.worker),
                        session: Some(session),
                        problem: "a worker counts a job it does not hold",
                    })
                }
            }
        }
        let free = load < worker.slots;
        for &job_type in &worker.capabilities {
            let listed = self
                .idle
                .get(&job_type)
                .is_some_and(|set| set.contains(&(load, session)));
            if listed != free {
                return Err(InvariantViolation::IdleSet {
                    job_type,
                    load,
                    session,
                    listed,
                });
            }
        }
        if self.session_of.get(&worker.pubkey) != Some(&session) {
            return Err(InvariantViolation::SessionIndex {
                pubkey: worker.pubkey.clone(),
                session,
                problem: "a connected worker is not found by its key",
            });
        }
        Ok(())
    }

    fn check_idle(
        &self,
        expected: &BTreeMap<JobType, BTreeSet<(u32, SessionId)>>,
    ) -> Result<(), InvariantViolation> {
        let empty = BTreeSet::new();
        let job_types: BTreeSet<JobType> =
            expected.keys().chain(self.idle.keys()).copied().collect();
        for job_type in job_types {
            let want = expected.get(&job_type).unwrap_or(&empty);
            let have = self.idle.get(&job_type).unwrap_or(&empty);
            let stray = have.difference(want).next().map(|e| (e, true));
            let missing = || want.difference(have).next().map(|e| (e, false));
            if let Some((&(load, session), listed)) = stray.or_else(missing) {
                return Err(InvariantViolation::IdleSet {
                    job_type,
                    load,
                    session,
                    listed,
                });
            }
        }
        Ok(())
    }

    /// Queues hold exactly the pending jobs, each once, in its own queue.
    fn check_queues(&self) -> Result<(), InvariantViolation> {
        let mut queued = 0;
        for (key, queue) in &self.queues {
            if queue.is_empty() {
                return Err(InvariantViolation::EmptyQueue {
                    queue: format!("{key:?}"),
                });
            }
            for (pos, id) in queue.positions() {
                queued += 1;
                let job = self.job(id);
                let problem = match job {
                    None => Some("queued job does not exist"),
                    Some(j) if j.status != JobStatus::Pending => Some("queued job is not pending"),
                    Some(j) if &queue_key(j) != key => Some("job is in another job's queue"),
                    Some(j) if j.queue_pos != Some(pos) => {
                        Some("job is queued at another position")
                    }
                    Some(_) => None,
                };
                if let Some(problem) = problem {
                    return Err(queue_violation(key, *id, job, problem));
                }
            }
        }
        let mut pending = 0;
        for job in self.jobs.values() {
            let is_pending = job.status == JobStatus::Pending;
            pending += usize::from(is_pending);
            if is_pending != job.queue_pos.is_some() {
                let problem = if is_pending {
                    "pending job is not queued"
                } else {
                    "job that is not pending keeps a queue position"
                };
                return Err(queue_violation(&queue_key(job), job.id, Some(job), problem));
            }
        }
        if pending != queued || self.pending_count != pending {
            return Err(InvariantViolation::PendingCount {
                counted: self.pending_count,
                pending,
                queued,
            });
        }
        Ok(())
    }

    /// No pending job has a free worker that dispatch would give it to: the
    /// question is asked of `pick_worker`, the function dispatch uses. Its
    /// answer depends only on the queue (job type, privacy, user) and the
    /// session the job avoids, so it is asked once per such pair.
    fn check_dispatch(&self) -> Result<(), InvariantViolation> {
        self.queues
            .values()
            .try_for_each(|queue: &Queue| self.check_queue_dispatch(queue.ids()))
    }

    /// No job of `ids` (pending jobs of one queue) has a free worker that
    /// dispatch would give it to.
    fn check_queue_dispatch<'a>(
        &self,
        ids: impl Iterator<Item = &'a Uuid>,
    ) -> Result<(), InvariantViolation> {
        let mut asked: BTreeSet<&super::AvoidList> = BTreeSet::new();
        for id in ids {
            let job = &self.jobs[id];
            if !asked.insert(&job.avoid) {
                continue;
            }
            if let Some(session) = self.pick_worker(id) {
                return Err(InvariantViolation::PendingWithFreeWorker {
                    job: *id,
                    attempts: job.attempts,
                    avoid: job.avoid.clone(),
                    session,
                });
            }
        }
        Ok(())
    }
}

impl Core {
    /// FAST before CHEAP: a worker given a CHEAP job by the last event (its
    /// frames are the outbox's since the previous check) has no FAST job
    /// pending that it could take, as `fill` and `queue_pick` decide it.
    /// Cost: per CHEAP assignment, one queue head per FAST queue the worker
    /// serves.
    fn check_tier_order(&self) -> Result<(), InvariantViolation> {
        let event = self.outbox.get(self.outbox_checked.get()..).unwrap_or(&[]);
        self.outbox_checked.set(self.outbox.len());
        for (session, out) in event {
            let Outbound::Frame(CoordinatorFrame::Assign(assign)) = out else {
                continue;
            };
            let cheap = self.jobs.get(&assign.job_id).map(|j| j.tier);
            let Some(worker) = self.workers.get(session) else {
                continue;
            };
            if cheap != Some(Tier::Cheap) {
                continue;
            }
            for &job_type in &worker.capabilities {
                let users = self.trust.users_trusting(&worker.pubkey);
                let keys = std::iter::once(QueueKey::Public(Tier::Fast, job_type))
                    .chain(users.map(|u| QueueKey::Private(Tier::Fast, job_type, u.clone())));
                for key in keys {
                    if let Some(fast) = self.queue_pick(&key, *session) {
                        return Err(InvariantViolation::TierOrder {
                            cheap: assign.job_id,
                            fast,
                            session: *session,
                        });
                    }
                }
            }
        }
        Ok(())
    }
}

fn queue_violation(
    key: &QueueKey,
    id: Uuid,
    job: Option<&Job>,
    problem: &'static str,
) -> InvariantViolation {
    InvariantViolation::Queue {
        queue: format!("{key:?}"),
        job: id,
        status: job.map(|j| j.status),
        position: job.and_then(|j| j.queue_pos),
        problem,
    }
}

thread_local! {
    /// The violation `assert_invariants` last panicked with on this thread,
    /// typed: a panic hook takes it (the harness keys failures by it) instead
    /// of parsing the panic message, which stays a string for everyone else.
    static LAST_BROKEN: std::cell::RefCell<Option<InvariantViolation>> =
        const { std::cell::RefCell::new(None) };
}

impl InvariantViolation {
    /// The violation this thread's last invariant panic carried, once.
    pub fn take_last_broken() -> Option<Self> {
        LAST_BROKEN.with(|last| last.borrow_mut().take())
    }
}

/// Panics with the violation, kept typed for [`InvariantViolation::take_last_broken`].
#[track_caller]
fn broken(now_ms: i64, v: InvariantViolation) -> ! {
    LAST_BROKEN.with(|last| *last.borrow_mut() = Some(v.clone()));
    panic!("core invariant broken after an event at {now_ms} ms: {v}");
}
