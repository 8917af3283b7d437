//! The deterministic core: jobs, queues, workers, trust and timers as plain
//! data, changed only by the event methods below, each given `now_ms`.
//!
//! Nothing here does I/O, reads a clock or awaits. Each event leaves frames
//! for worker sessions in `outbox` and the records it changed in `changes`;
//! the shell (`shell/mod.rs`) delivers the first and stores the second.
//!
//! Invariant kept after every event: no pending job has an eligible worker
//! with a free slot. A new job therefore only needs a free worker, and a
//! freed slot only needs the head of the queues that worker can serve.
//! `check_invariants` (invariants.rs) verifies this and the other
//! invariants of the whole state; after every event, in debug builds and
//! in the simulation, the shell runs the same checks on what the event
//! changed (`assert_invariants`), and the whole check every few hundred
//! events.

mod cancel;
mod cluster;
mod dispatch;
mod ended;
mod invariants;
mod queue;
pub mod rate;
mod restore;
mod settle;
#[cfg(test)]
mod tests;
mod timers;
mod tracked;
pub mod trust;

pub use cancel::{cancellable, CancelRefused, CANCEL_FRAME_REASON};
pub use cluster::Want;
pub use ended::{bought_with, percent_of, Forgotten, PASS_JOBS_MAX};
pub use ended::{KEPT_HIGH_WATER_PERCENT, KEPT_LOW_WATER_PERCENT};
pub use invariants::InvariantViolation;
pub use restore::Snapshot;
pub use settle::{SettleError, Settled};

use crate::config::Config;
use crate::core::trust::{ClaimError, CreateError, KeyNotOnCurve, Pairing, Trust, TrustEntry};
use protocol::api::{JobRecord, JobStatus, JobSubmission, JobType, Payload, PrivacyClass, Tier};
use protocol::receipt::Receipt;
use protocol::time::format_ms;
use protocol::worker::{Assignment, CoordinatorFrame, ErrorCode};
use queue::{Queue, Removed};
use rand::{Rng, RngCore};
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use uuid::Uuid;
use x402::NonceKey;

pub type SessionId = u64;

/// Why a job failed or an attempt ended; the string is the job's `result.error`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureReason {
    /// Waited the pending timeout without an eligible worker.
    NoEligibleWorker,
    /// PRIVATE job committed while the user had no trusted worker online.
    NoTrustedWorker,
    /// The worker's connection closed or went silent while it held the job.
    WorkerDisconnected,
    /// The worker held the job past its lease.
    WorkerTimeout,
    /// The worker sent `reject`.
    WorkerRejected,
    /// The result's receipt did not verify.
    InvalidReceipt,
    /// The result's output had the wrong shape for the job.
    InvalidOutput,
    /// The coordinator restarted while the job was held more times than
    /// `attempts_max`: the job itself may be what brings it down.
    CoordinatorRestarted,
    /// Cancelled by its client (`POST /v1/jobs/{id}/cancel`, cancel.rs).
    Cancelled,
    /// Settling on completion: the facilitator refused the settlement; the
    /// output is never shown.
    PaymentFailed,
    /// Settling on completion: the payment's authorization ran out (less
    /// the settle margin) before the job was settled; nothing is charged.
    PaymentExpired,
}

impl FailureReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureReason::NoEligibleWorker => "no_eligible_worker",
            FailureReason::NoTrustedWorker => "no_trusted_worker",
            FailureReason::WorkerDisconnected => "worker_disconnected",
            FailureReason::WorkerTimeout => "worker_timeout",
            FailureReason::WorkerRejected => "worker_rejected",
            FailureReason::InvalidReceipt => "invalid_receipt",
            FailureReason::InvalidOutput => "invalid_output",
            FailureReason::CoordinatorRestarted => "coordinator_restarted",
            FailureReason::Cancelled => "cancelled",
            FailureReason::PaymentFailed => "payment_failed",
            FailureReason::PaymentExpired => "payment_expired",
        }
    }
}

/// Most sessions a job avoids; the oldest is forgotten beyond (bounded
/// memory per job; `attempts_max` is 3 by default, so rarely reached).
pub const AVOIDED_SESSIONS_MAX: usize = 8;

/// The sessions a job avoids (see [`Job::avoid`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct AvoidList(Vec<SessionId>);

impl AvoidList {
    fn add(&mut self, session: SessionId) {
        if self.0.contains(&session) {
            return;
        }
        if self.0.len() >= AVOIDED_SESSIONS_MAX {
            self.0.remove(0);
        }
        self.0.push(session);
    }

    pub fn contains(&self, session: SessionId) -> bool {
        self.0.contains(&session)
    }

    /// The session that failed the job last.
    pub fn last(&self) -> Option<SessionId> {
        self.0.last().copied()
    }
}

/// A job and everything known about it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    pub id: Uuid,
    /// Shared, never changed after commit but once: copying a job (see
    /// [`Change`]) then copies no payload text. When the job ends its
    /// payload is emptied (`payload_digest` keeps its digest).
    pub submission: Arc<JobSubmission>,
    /// The client address (IPv6: its /64) that committed the job, which
    /// the byte budgets charge (decision 0018); [`LOCAL_OWNER`] for
    /// in-process callers and jobs stored before owners were recorded.
    #[serde(default = "local_owner")]
    pub owner: String,
    /// SHA-256 of the payload as JSON, hex, once the job ended and its
    /// payload was dropped: a retried paid commit is compared by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_digest: Option<String>,
    pub tier: Tier,
    pub status: JobStatus,
    pub output: Option<serde_json::Value>,
    pub error: Option<FailureReason>,
    /// Boxed, like `paid_with`: set once a job ends (or never), and 136
    /// bytes inline made every job 8 cache lines where 5 do; dispatch reads
    /// and the copy at `accept` copies a queued job's lines cold (issue 14).
    pub receipt: Option<Box<Receipt>>,
    pub created_at_ms: i64,
    pub completed_at_ms: Option<i64>,
    /// Assignments so far, less those a coordinator restart interrupted.
    pub attempts: u32,
    /// Times a coordinator restart found the job held by a worker.
    #[serde(default)]
    pub recoveries: u32,
    pub payment_ref: Option<String>,
    /// The payment that bought the job, for answering its retries.
    #[serde(default)]
    pub paid_with: Option<Box<PaidWith>>,
    /// Settling on completion: the worker's checked result (in `output`
    /// and `receipt`, never shown) waits for its payment's settlement. The
    /// status stays `running`; no worker holds the job (decision 0021).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub awaiting_settlement: bool,
    /// A `/settle` was (about to be) sent for the job: stored before the
    /// first one, so that after a crash a refusal as "already used" is
    /// known for our own earlier settlement (settle.rs).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub settle_sent: bool,
    /// The settlement's transaction, once settled on completion (the
    /// `payment_transaction` of the job record).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payment_transaction: Option<String>,
    /// While pending: when it fails unassigned. While assigned or running: the lease end.
    pub deadline_ms: Option<i64>,
    /// Commit order; a requeued job keeps it.
    pub seq: u64,
    /// The session holding the job while assigned or running.
    #[serde(skip)]
    pub worker: Option<SessionId>,
    /// The session of the latest assignment, kept after it ends so the
    /// job's terminal log line can name the worker.
    #[serde(skip)]
    pub last_worker: Option<SessionId>,
    /// Sessions whose attempts failed (a reject, a bad result, a lease
    /// that lapsed), at most [`AVOIDED_SESSIONS_MAX`], oldest first: the
    /// job goes to one of them again only when no other eligible worker is
    /// connected. Every one, not only the last: ten workers that reject
    /// everything no longer pass a job among themselves (issue 29,
    /// findings 3 and 7).
    #[serde(skip)]
    avoid: AvoidList,
    /// The job's live timer, removed when a newer one replaces it or the job
    /// ends, so the timer set holds no dead entries.
    #[serde(skip)]
    timer: Option<Timer>,
    /// While pending: the job's position in its queue, removed when it
    /// leaves, so queues hold only pending jobs.
    #[serde(skip)]
    queue_pos: Option<i64>,
    /// What the job counts against the byte budgets (see [`footprint_bytes`]).
    #[serde(skip)]
    footprint_bytes: usize,
}

/// The payment a job was bought with: its identity in the nonce store, and
/// the `PAYMENT-RESPONSE` value its 201 carried, so that a retry of the same
/// payment gets the same answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaidWith {
    pub nonce: NonceKey,
    /// Empty when the payment was not settled at commit (no header then).
    pub response_header: String,
    /// Settling on completion: what settles the payment once the job's
    /// result is checked; stored with the job, so a restart settles it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ticket: Option<Box<x402::SettleTicket>>,
}

/// A settled payment, as the core records it with the job it bought.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Payment {
    pub payment_ref: String,
    pub paid_with: PaidWith,
}

/// The owner of jobs committed in-process (tests, benches) and of jobs
/// stored without one: the client key a request without a peer address
/// gets (`api::extract::ClientAddr`).
pub const LOCAL_OWNER: &str = "local";

fn local_owner() -> String {
    LOCAL_OWNER.to_owned()
}

/// Bytes a job is taken to hold, in memory and on disk, beyond its
/// variable parts: ids, times, status, receipt, owner (a client key, at
/// most 45 bytes), payload digest, map and index entries.
const JOB_OVERHEAD_BYTES: usize = 1024;

/// What a job counts against the byte budgets: a fixed overhead plus its
/// variable parts (user id, payload text, output).
fn footprint_bytes(job: &Job) -> usize {
    let output_bytes = job.output.as_ref().map_or(0, json_len);
    JOB_OVERHEAD_BYTES + submission_bytes(&job.submission) + output_bytes
}

/// The length of `value` as compact JSON, counted without building the
/// text: what the store writes, escapes included (a control character
/// is six bytes there), so the budgets count what the disk holds.
pub fn json_len(value: &impl Serialize) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    serde_json::to_writer(&mut count, value).map_or(0, |()| count.0)
}

impl Job {
    /// The job as `GET /v1/jobs/{id}` shows it.
    pub fn record(&self) -> JobRecord {
        let result = match self.status {
            JobStatus::Completed => Some(serde_json::json!({ "output": self.output })),
            JobStatus::Failed => Some(serde_json::json!({
                "error": self.error.map_or("failed", FailureReason::as_str)
            })),
            _ => None,
        };
        // The receipt signs the output: shown with it, once settled.
        let receipt = match self.status {
            JobStatus::Completed => self.receipt.as_deref().cloned(),
            _ => None,
        };
        JobRecord {
            id: self.id,
            status: self.status,
            result,
            receipt,
            payment_transaction: self.payment_transaction.clone(),
            created_at: format_ms(self.created_at_ms),
            completed_at: self.completed_at_ms.map(format_ms),
        }
    }

    /// Settling on completion: the ticket that settles the job's payment.
    pub fn settle_ticket(&self) -> Option<&x402::SettleTicket> {
        self.paid_with.as_ref()?.ticket.as_deref()
    }

    /// Whether the job's result waits for its settlement: `running` to
    /// pollers, no worker holds it, and it is finished for cancellation.
    pub fn awaiting_settlement(&self) -> bool {
        self.awaiting_settlement
    }
}

/// A record that changed and must be stored.
///
/// A job change shares the core's copy of the job: the core changes a job
/// through `Arc::make_mut`, so a change already taken keeps the version it
/// recorded (the job is copied only if the store still holds it then), and
/// recording a change costs a reference count, not a copy of the job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Change {
    Job(Arc<Job>),
    Pairing(Pairing),
    Trust(TrustEntry),
    /// A payment was settled and bought the job changed in the same event;
    /// a store that also holds the nonces writes both in one transaction.
    NonceSpent(NonceKey),
}

/// What a session must do, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Outbound {
    Frame(CoordinatorFrame),
    /// Send an error frame, then close the connection.
    Close(ErrorCode, String),
}

/// Why a job would not be admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    NoTrustedWorker,
    QueueFull,
    /// The byte budget of queued or kept jobs is used up.
    StorageFull,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommitError {
    #[error("no_trusted_worker")]
    NoTrustedWorker(Uuid),
    #[error("the job queue is full; retry later")]
    QueueFull,
    #[error("job storage is full; retry later")]
    StorageFull,
    /// The client's refusals this minute are used up: nothing recorded.
    #[error("too many refused commits from this client; retry after {retry_after_ms} ms")]
    RateLimited { retry_after_ms: i64 },
}

/// Why a worker frame about a job was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("no such job")]
    UnknownJob,
    #[error("the job is not assigned to this session")]
    NotAssigned,
}

impl FrameError {
    pub fn code(self) -> ErrorCode {
        match self {
            FrameError::UnknownJob => ErrorCode::UnknownJob,
            FrameError::NotAssigned => ErrorCode::NotAssigned,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("too many workers connected")]
pub struct TooManyWorkers;

#[derive(Debug)]
struct Worker {
    pubkey: String,
    capabilities: Vec<JobType>,
    slots: u32,
    jobs: WorkerJobs,
}

impl Worker {
    fn load(&self) -> u32 {
        self.jobs.len() as u32
    }
}

/// The jobs a worker holds, in id order: a sorted `Vec`, as a worker holds
/// at most `slots_max` (64) jobs, where a `BTreeSet` searched and moved
/// tree nodes on every assign and result (issue 14).
#[derive(Debug, Default)]
struct WorkerJobs(Vec<Uuid>);

impl WorkerJobs {
    fn len(&self) -> usize {
        self.0.len()
    }

    fn contains(&self, id: &Uuid) -> bool {
        self.0.binary_search(id).is_ok()
    }

    fn insert(&mut self, id: Uuid) {
        if let Err(at) = self.0.binary_search(&id) {
            self.0.insert(at, id);
        }
    }

    fn remove(&mut self, id: &Uuid) {
        if let Ok(at) = self.0.binary_search(id) {
            self.0.remove(at);
        }
    }
}

impl<'a> IntoIterator for &'a WorkerJobs {
    type Item = &'a Uuid;
    type IntoIter = std::slice::Iter<'a, Uuid>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl IntoIterator for WorkerJobs {
    type Item = Uuid;
    type IntoIter = std::vec::IntoIter<Uuid>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum QueueKey {
    Public(Tier, JobType),
    Private(Tier, JobType, String),
}

/// What a job's deadline ends: its wait in the queue or its lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TimerKind {
    Pending,
    Lease,
    /// The end of a paid job's authorization, while its result awaits
    /// settlement (settle.rs).
    Settle,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Timer {
    at_ms: i64,
    seq: u64,
    kind: TimerKind,
    job: Uuid,
}

/// Largest buffer of changes or frames kept for the next event (see
/// [`Core::reuse_buffers`]).
const REUSED_LEN_MAX: usize = 256;

pub struct Core {
    config: Config,
    rng: ChaCha20Rng,
    /// Keyed by ids the core draws from its own RNG, never by a value a
    /// client chooses, so a fast unkeyed hash (FxHash) cannot be flooded:
    /// lookups of chosen ids only miss. Maps keyed by client-chosen values
    /// (`session_of`, `paid`) keep std's per-process keyed SipHash.
    /// A job is changed through `Arc::make_mut` (in `Jobs::get_mut`): copied
    /// first only if a change not yet dropped (by the store) still shares it.
    jobs: tracked::Jobs,
    /// Only non-empty queues.
    queues: BTreeMap<QueueKey, Queue>,
    pending_count: usize,
    /// Cluster mode: the shared pool's pending jobs as last read, plus
    /// those this node put there since (`cluster.rs`); counts against
    /// `queue_len_max` with `pending_count`. Always 0 on a single node.
    pool_len: usize,
    workers: tracked::Workers,
    session_of: HashMap<String, SessionId>,
    /// Per job type, workers with a free slot, least loaded first.
    idle: BTreeMap<JobType, BTreeSet<(u32, SessionId)>>,
    trust: Trust,
    /// Jobs bought with a payment, by the payment's nonce, with their
    /// creation time (retention forgets evicted ones by it).
    paid: HashMap<NonceKey, (Uuid, i64)>,
    /// Finished jobs held, in the order they ended, and what the evicted
    /// ones still count (ended.rs).
    ended: ended::Ended,
    /// Footprint of the non-terminal jobs (`limits.queued_bytes_max`).
    queued_bytes: usize,
    /// The same by owner (`limits.queued_bytes_per_client_max`); owners
    /// with nothing queued are not listed.
    queued_by_owner: BTreeMap<String, usize>,
    /// Footprint of the terminal jobs kept, both ledgers (ended.rs).
    kept_bytes: usize,
    /// Refused commits by client (`limits.refusals_per_client_per_minute_max`).
    refusals_by_client: rate::Windows,
    /// The latest retention cut applied: terminal jobs created before it
    /// may be gone (restore.rs).
    retention_cut_ms: Option<i64>,
    timers: timers::Timers,
    next_seq: u64,
    next_session: SessionId,
    outbox: Vec<(SessionId, Outbound)>,
    /// How much of `outbox` the invariant check has seen: the frames after
    /// it are the last event's (checks run after every event). A cursor
    /// only, so the check can stay `&self`; it never reaches a decision.
    outbox_checked: std::cell::Cell<usize>,
    changes: Vec<Change>,
    /// What the check after each event compares with (invariants.rs).
    checked: invariants::Checked,
    /// Jobs whose results await settlement (settle.rs).
    awaiting: BTreeSet<Uuid>,
    /// Of those, the ones the shell has not been handed yet.
    to_settle: Vec<Uuid>,
}

impl Core {
    pub fn new(config: Config, rng: ChaCha20Rng) -> Self {
        let note = config.check_invariants;
        Self {
            config,
            rng,
            jobs: tracked::Jobs::new(note),
            queues: BTreeMap::new(),
            pending_count: 0,
            pool_len: 0,
            workers: tracked::Workers::new(note),
            session_of: HashMap::new(),
            idle: BTreeMap::new(),
            trust: Trust::default(),
            paid: HashMap::new(),
            ended: ended::Ended::default(),
            queued_bytes: 0,
            queued_by_owner: BTreeMap::new(),
            kept_bytes: 0,
            refusals_by_client: rate::Windows::default(),
            retention_cut_ms: None,
            timers: timers::Timers::default(),
            next_seq: 0,
            next_session: 1,
            outbox: Vec::new(),
            outbox_checked: std::cell::Cell::new(0),
            changes: Vec::new(),
            checked: invariants::Checked::default(),
            awaiting: BTreeSet::new(),
            to_settle: Vec::new(),
        }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Frames for sessions produced since the last call.
    pub fn take_outbox(&mut self) -> Vec<(SessionId, Outbound)> {
        self.outbox_checked.set(0);
        std::mem::take(&mut self.outbox)
    }

    /// Records changed since the last call.
    pub fn take_changes(&mut self) -> Vec<Change> {
        std::mem::take(&mut self.changes)
    }

    /// Takes back, emptied, the buffers `take_changes` and `take_outbox`
    /// returned, so the next event fills memory already held instead of
    /// growing new vectors (a few allocations per event otherwise). A
    /// buffer a large event grew (a restore, say) is dropped, not kept.
    pub fn reuse_buffers(
        &mut self,
        mut changes: Vec<Change>,
        mut outbox: Vec<(SessionId, Outbound)>,
    ) {
        let fits = |capacity: usize, held: usize| held < capacity && capacity <= REUSED_LEN_MAX;
        if self.changes.is_empty() && fits(changes.capacity(), self.changes.capacity()) {
            changes.clear();
            self.changes = changes;
        }
        if self.outbox.is_empty() && fits(outbox.capacity(), self.outbox.capacity()) {
            outbox.clear();
            self.outbox = outbox;
        }
    }

    pub fn next_deadline_ms(&self) -> Option<i64> {
        self.timers.first().map(|t| t.at_ms)
    }

    /// The id the next registered session will get.
    pub fn peek_next_session(&self) -> SessionId {
        self.next_session
    }

    pub fn workers_online(&self) -> usize {
        self.workers.len()
    }

    pub fn pending_jobs(&self) -> usize {
        self.pending_count
    }

    /// Pending jobs of each tier, for the queue depth gauge. Walks the
    /// queues (at most one per pending job): for scrapes, not the hot path.
    pub fn pending_by_tier(&self) -> BTreeMap<Tier, usize> {
        let mut depth = BTreeMap::new();
        for (key, queue) in &self.queues {
            let (QueueKey::Public(tier, _) | QueueKey::Private(tier, _, _)) = key;
            *depth.entry(*tier).or_insert(0) += queue.len();
        }
        depth
    }

    /// A live job, or a finished one still in memory (ended.rs); `None`
    /// for a job evicted since, which only the store still has.
    pub fn job(&self, id: &Uuid) -> Option<&Job> {
        self.jobs.get(id).map(|job| &**job)
    }

    /// [`Core::job`], shared: for a reader outside the state lock.
    pub fn job_shared(&self, id: &Uuid) -> Option<Arc<Job>> {
        self.jobs.get(id).cloned()
    }

    /// Records that job `id` changed: the change shares the job as it is now.
    fn job_changed(&mut self, id: &Uuid) {
        let job = Arc::clone(&self.jobs[id]);
        self.changes.push(Change::Job(job));
    }

    /// 32 random bytes as `0x` hex, for a worker's auth challenge.
    pub fn challenge_nonce(&mut self) -> String {
        let mut nonce = [0u8; 32];
        self.rng.fill_bytes(&mut nonce);
        format!("0x{}", hex::encode(nonce))
    }

    // ---- jobs ----

    /// Bytes held by non-terminal and by kept terminal jobs.
    pub fn job_bytes(&self) -> (usize, usize) {
        (self.queued_bytes, self.kept_bytes)
    }

    /// The client with the most queued bytes but `except`, and those bytes
    /// (`("", 0)` when there is none): the accounted figures and the
    /// refusals `honest_starved` judges (`crate::resources`).
    pub fn heaviest_queued_owner(&self, except: Option<&str>) -> (String, usize) {
        let others = self.queued_by_owner.iter();
        let others = others.filter(|(owner, _)| Some(owner.as_str()) != except);
        // The first of the heaviest in owner order: deterministic.
        let heaviest = others.fold(
            None::<(&String, usize)>,
            |best, (owner, &bytes)| match best {
                Some((_, b)) if b >= bytes => best,
                _ => Some((owner, bytes)),
            },
        );
        heaviest.map_or((String::new(), 0), |(o, b)| (o.clone(), b))
    }

    /// The kept bytes by ledger (ended.rs): results (`kept_bytes_max`),
    /// failure records (`failed_kept_bytes_max`).
    pub fn kept_bytes_by_ledger(&self) -> (usize, usize) {
        (self.ended.results().bytes(), self.ended.failures().bytes())
    }

    /// Whether a job would be accepted now: a PRIVATE job needs a trusted
    /// worker of its user online with the capability, and the queue and the
    /// byte budgets need room.
    fn admission(&self, submission: &JobSubmission, owner: &str) -> Result<(), Refused> {
        let private = submission.privacy_class == PrivacyClass::Private;
        if private
            && self
                .trusted_sessions(&submission.user_id, submission.job_type)
                .next()
                .is_none()
        {
            return Err(Refused::NoTrustedWorker);
        }
        self.room_for(submission, owner)
    }

    /// Whether the queue and the byte budgets have room for a job of
    /// `owner`'s: the whole budgets, and the owner's share of the queued one.
    fn room_for(&self, submission: &JobSubmission, owner: &str) -> Result<(), Refused> {
        if self.pending_count + self.pool_len >= self.config.limits.queue_len_max {
            return Err(Refused::QueueFull);
        }
        let limits = &self.config.limits;
        let bytes = JOB_OVERHEAD_BYTES + submission_bytes(submission);
        let results = self.ended.results();
        let queued_by_owner = self.queued_by_owner.get(owner).copied().unwrap_or(0);
        // It must fit where it waits and where it will be kept once done
        // (its output then counts too; see docs/operations.md, "Limits").
        if self.queued_bytes + bytes > limits.queued_bytes_max
            || queued_by_owner + bytes > limits.queued_bytes_per_client_max
            || results.bytes() + bytes > limits.kept_bytes_max
        {
            return Err(Refused::StorageFull);
        }
        // No share is checked here: retention deletes an owner's results
        // beyond its share within a second once the budget passes its mark
        // (refusing the owner in between made a lone busy client's commits
        // 503 where they fit; found by the swarm, seed 15).
        Ok(())
    }

    /// Admission and its refusal as one decision: `Ok` if the job would be
    /// accepted now; else why not, with a refused PRIVATE job recorded as
    /// `failed` / `no_trusted_worker` (without its payload). A paid commit
    /// asks this before settling, so a refusal is free, and then commits
    /// with its payment, which is never refused: nothing decided here is
    /// ever decided again.
    pub fn admit(
        &mut self,
        submission: &JobSubmission,
        tier: Tier,
        now_ms: i64,
    ) -> Result<(), CommitError> {
        self.admit_from(LOCAL_OWNER, submission, tier, now_ms)
    }

    /// [`Self::admit`] for a job of `owner`'s (its client address).
    pub fn admit_from(
        &mut self,
        owner: &str,
        submission: &JobSubmission,
        tier: Tier,
        now_ms: i64,
    ) -> Result<(), CommitError> {
        match self.admission(submission, owner) {
            Ok(()) => Ok(()),
            Err(Refused::QueueFull) => {
                self.note_refusal(owner, now_ms);
                Err(CommitError::QueueFull)
            }
            Err(Refused::StorageFull) => {
                self.note_refusal(owner, now_ms);
                Err(CommitError::StorageFull)
            }
            Err(Refused::NoTrustedWorker) => {
                Err(self.record_refusal(owner, submission, tier, now_ms))
            }
        }
    }

    /// Notes a commit of `owner`'s refused for capacity, with the heaviest
    /// other client's queued bytes then, for `honest_starved` (a note only
    /// in a watched simulated world: `crate::resources`).
    fn note_refusal(&self, owner: &str, now_ms: i64) {
        if !crate::resources::watching() {
            return;
        }
        let (other, bytes) = self.heaviest_queued_owner(Some(owner));
        crate::resources::note_refusal(crate::resources::Refusal {
            at_ms: now_ms,
            owner: owner.to_owned(),
            heaviest_other: (bytes > 0).then_some((other, bytes)),
            share_bytes: self.config.limits.queued_bytes_per_client_max,
        });
    }

    /// Keeps a PRIVATE job refused for want of a trusted worker as a failed
    /// job, pollable, without its payload: a refusal must not let a client
    /// park data here. Returns the refusal to answer.
    fn record_refusal(
        &mut self,
        owner: &str,
        submission: &JobSubmission,
        tier: Tier,
        now_ms: i64,
    ) -> CommitError {
        let limits = &self.config.limits;
        let (max, keys_max) = (
            limits.refusals_per_client_per_minute_max,
            limits.rate_limited_keys_max,
        );
        if let Err(limited) = self.refusals_by_client.take(owner, now_ms, max, keys_max) {
            return CommitError::RateLimited {
                retry_after_ms: limited.retry_after_ms,
            };
        }
        let submission = without_payload(submission);
        let mut job = self.new_job(owner, submission, tier, None, now_ms);
        // Refusals are failure records: their own ledger and budget, so a
        // flood of them never deletes results (ended.rs).
        let failures = self.ended.failures().bytes();
        if failures + job.footprint_bytes > self.config.limits.failed_kept_bytes_max {
            return CommitError::StorageFull;
        }
        let id = job.id;
        job.status = JobStatus::Failed;
        job.error = Some(FailureReason::NoTrustedWorker);
        self.kept_bytes += job.footprint_bytes;
        let job = Arc::new(job);
        self.changes.push(Change::Job(Arc::clone(&job)));
        self.jobs.insert(job);
        self.job_ended(id);
        CommitError::NoTrustedWorker(id)
    }

    /// Accepts a validated job. Unpaid, it goes through [`Self::admit`]. A
    /// paid job was admitted before settlement and is never refused: if its
    /// trusted worker left in the meantime it waits in the queue like any
    /// PRIVATE job whose worker is away. Its nonce is spent in the same
    /// change set as the job is created, so a store writes both or neither.
    pub fn commit(
        &mut self,
        submission: JobSubmission,
        tier: Tier,
        payment: Option<Payment>,
        now_ms: i64,
    ) -> Result<Uuid, CommitError> {
        self.commit_from(LOCAL_OWNER, submission, tier, payment, now_ms)
    }

    /// [`Self::commit`] for a job of `owner`'s (its client address).
    pub fn commit_from(
        &mut self,
        owner: &str,
        submission: JobSubmission,
        tier: Tier,
        payment: Option<Payment>,
        now_ms: i64,
    ) -> Result<Uuid, CommitError> {
        if payment.is_none() {
            self.admit_from(owner, &submission, tier, now_ms)?;
        }
        Ok(self.enter(owner, submission, tier, payment, now_ms))
    }

    /// Creates an admitted (or paid) job and places it.
    fn enter(
        &mut self,
        owner: &str,
        submission: JobSubmission,
        tier: Tier,
        payment: Option<Payment>,
        now_ms: i64,
    ) -> Uuid {
        let job = self.new_job(owner, submission, tier, payment, now_ms);
        let id = job.id;
        self.queued_bytes += job.footprint_bytes;
        count_queued(&mut self.queued_by_owner, owner, job.footprint_bytes);
        let spent = job.paid_with.as_ref().map(|p| p.nonce);
        self.jobs.insert(Arc::new(job));
        self.place(id, false, now_ms);
        if let Some(nonce) = spent {
            self.paid.insert(nonce, (id, now_ms));
            self.changes.push(Change::NonceSpent(nonce));
        }
        id
    }

    /// The id of the job a payment bought, held or evicted (ended.rs): the
    /// shell reads the job and answers a retry of the paid commit as the
    /// first (see [`bought_with`]).
    pub fn paid_job_id(&self, nonce: &NonceKey) -> Option<Uuid> {
        self.paid.get(nonce).map(|&(id, _)| id)
    }

    /// A fresh pending job with the next id and commit order.
    fn new_job(
        &mut self,
        owner: &str,
        submission: JobSubmission,
        tier: Tier,
        payment: Option<Payment>,
        now_ms: i64,
    ) -> Job {
        let id = uuid::Builder::from_random_bytes(self.rng.gen()).into_uuid();
        let seq = self.next_seq;
        self.next_seq += 1;
        let (payment_ref, paid_with) = match payment {
            Some(p) => (Some(p.payment_ref), Some(Box::new(p.paid_with))),
            None => (None, None),
        };
        let mut job = Job {
            id,
            submission: Arc::new(submission),
            owner: owner.to_owned(),
            payload_digest: None,
            tier,
            status: JobStatus::Pending,
            output: None,
            error: None,
            receipt: None,
            created_at_ms: now_ms,
            completed_at_ms: None,
            attempts: 0,
            recoveries: 0,
            payment_ref,
            paid_with,
            awaiting_settlement: false,
            settle_sent: false,
            payment_transaction: None,
            deadline_ms: None,
            seq,
            worker: None,
            last_worker: None,
            avoid: AvoidList::default(),
            timer: None,
            queue_pos: None,
            footprint_bytes: 0,
        };
        job.footprint_bytes = footprint_bytes(&job);
        job
    }

    /// Hands a pending job to the best free eligible worker (other than
    /// `avoid` when there is a choice), or queues it. A worker that has a
    /// more urgent job waiting (FAST before CHEAP, then commit order) takes
    /// that one first: a retried job must not pass a queued FAST job (found
    /// by the swarm: `scenarios/swarm-tier-order-*.toml`). Between events no
    /// free worker has a job waiting (the dispatch invariant), so this costs
    /// nothing on a commit.
    fn place(&mut self, id: Uuid, to_front: bool, now_ms: i64) {
        while let Some(session) = self.pick_worker(&id) {
            let rank = (self.jobs[&id].tier, self.jobs[&id].seq);
            let waiting = if self.pending_count > 0 {
                self.best_head(session)
            } else {
                None
            };
            match waiting {
                // Each turn fills a slot, so the loop ends.
                Some((better, other)) if better < rank => {
                    self.dequeue(&other);
                    self.assign(other, session, now_ms);
                }
                _ => {
                    self.assign(id, session, now_ms);
                    return;
                }
            }
        }
        // One lookup for the state, the queue and the timer: each lookup
        // of a shared job is a hash and an atomic compare-and-swap.
        let deadline = self.capped_ms(&id, now_ms + self.config.timing.pending_timeout_ms);
        let timer = self.new_timer(deadline, TimerKind::Pending, id);
        let job = self.jobs.get_mut(&id).expect("placed job exists");
        job.status = JobStatus::Pending;
        job.worker = None;
        job.deadline_ms = Some(deadline);
        push_queued(&mut self.queues, job, to_front);
        self.pending_count += 1;
        set_timer(&mut self.timers, job, timer);
        // Recorded last: a change shares the job, so changing it after
        // recording would copy it (see `Change`).
        self.job_changed(&id);
    }

    fn enqueue(&mut self, id: Uuid, to_front: bool) {
        let job = self.jobs.get_mut(&id).expect("queued job exists");
        push_queued(&mut self.queues, job, to_front);
        self.pending_count += 1;
    }

    /// Takes a pending job out of its queue.
    fn dequeue(&mut self, id: &Uuid) {
        let job = self.jobs.get_mut(id).expect("dequeued job exists");
        let Some(pos) = job.queue_pos.take() else {
            return;
        };
        self.pending_count -= 1;
        let key = queue_key(job);
        let queue = self.queues.get_mut(&key);
        debug_assert!(queue.is_some(), "job {id} has no queue");
        let Some(queue) = queue else {
            return;
        };
        let removed = queue.remove(pos);
        debug_assert!(removed.is_some(), "job {id} was not at its position");
        if removed == Some(Removed::Compacted) {
            // The jobs' positions changed; they are not stored (a restart
            // queues again), so no change is recorded.
            for (pos, id) in queue.positions() {
                let job = self.jobs.get_mut(id).expect("queued job exists");
                job.queue_pos = Some(pos);
            }
        }
        if queue.is_empty() {
            self.queues.remove(&key);
        }
    }

    fn assign(&mut self, id: Uuid, session: SessionId, now_ms: i64) {
        let indexed = self.workers[&session].load();
        self.hand_over(id, session, now_ms);
        self.reindex(session, indexed);
    }

    /// Assigns a job to a worker with a free slot, leaving the idle index
    /// to the caller ([`Self::reindex`]).
    fn hand_over(&mut self, id: Uuid, session: SessionId, now_ms: i64) {
        let lease_ms = self.config.timing.lease_ms;
        let lease_end_ms = self.capped_ms(&id, now_ms + lease_ms);
        let timer = self.new_timer(lease_end_ms, TimerKind::Lease, id);
        let job = self.jobs.get_mut(&id).expect("assigned job exists");
        job.status = JobStatus::Assigned;
        job.worker = Some(session);
        job.last_worker = Some(session);
        job.attempts += 1;
        job.deadline_ms = Some(lease_end_ms);
        let frame = CoordinatorFrame::Assign(Assignment {
            job_id: id,
            job_type: job.submission.job_type,
            payload: job.submission.payload.clone(),
            privacy_class: job.submission.privacy_class,
            payment_ref: job.payment_ref.clone(),
            lease_ms: lease_ms.max(0) as u64,
        });
        let worker = self
            .workers
            .get_mut(&session)
            .expect("assigned worker exists");
        debug_assert!(
            worker.load() < worker.slots,
            "job {id} assigned to a full worker"
        );
        worker.jobs.insert(id);
        self.outbox.push((session, Outbound::Frame(frame)));
        set_timer(&mut self.timers, job, timer);
        // Last, as in `place`.
        self.job_changed(&id);
    }

    /// Fills a worker's free slots from the heads of the queues it can serve:
    /// FAST before CHEAP, then commit order.
    fn fill(&mut self, session: SessionId, now_ms: i64) {
        if let Some(worker) = self.workers.get(&session) {
            self.fill_from(session, worker.load(), now_ms);
        }
    }

    /// [`Self::fill`] for a worker the idle index lists at load `indexed`:
    /// a caller that has just taken a job off the worker leaves the index to
    /// this, so a result followed by the next assignment (the common case)
    /// changes the index not at all, where it took three tree operations.
    fn fill_from(&mut self, session: SessionId, indexed: u32, now_ms: i64) {
        while let Some(worker) = self.workers.get(&session) {
            if worker.load() >= worker.slots {
                break;
            }
            let Some((_, id)) = self.best_head(session) else {
                break;
            };
            self.dequeue(&id);
            self.hand_over(id, session, now_ms);
        }
        self.reindex(session, indexed);
    }

    /// Ends an attempt: requeues the job, or fails it once attempts run out.
    fn retry_or_fail(
        &mut self,
        id: Uuid,
        reason: FailureReason,
        avoid: Option<SessionId>,
        now_ms: i64,
    ) {
        let job = self.jobs.get_mut(&id).expect("retried job exists");
        if let Some(session) = avoid {
            job.avoid.add(session);
        }
        if job.attempts >= self.config.timing.attempts_max {
            self.fail(id, reason);
        } else if self.payment_expired(&id, now_ms) {
            self.fail(id, FailureReason::PaymentExpired);
        } else {
            self.place(id, true, now_ms);
        }
    }

    /// Ends several attempts in one event. They are retried FAST before
    /// CHEAP, then in commit order: one at a time in any other order (a
    /// worker's jobs by id, leases by deadline), a CHEAP job could take the
    /// free worker a FAST job released a moment later in the same event
    /// needed (found by the swarm: `scenarios/swarm-tier-order-*.toml`).
    fn retry_in_order(
        &mut self,
        mut ended: Vec<(Uuid, Option<SessionId>)>,
        reason: FailureReason,
        now_ms: i64,
    ) {
        ended.sort_by_key(|(id, _)| {
            let job = &self.jobs[id];
            (job.tier, job.seq)
        });
        for (id, avoid) in ended {
            self.retry_or_fail(id, reason, avoid, now_ms);
        }
    }

    fn fail(&mut self, id: Uuid, reason: FailureReason) {
        self.clear_timer(&id);
        if self.awaiting.remove(&id) {
            // Never settled, so never shown (decision 0021).
            let job = self.jobs.get_mut(&id).expect("failed job exists");
            job.awaiting_settlement = false;
            job.output = None;
            job.receipt = None;
        }
        let job = self.jobs.get_mut(&id).expect("failed job exists");
        debug_assert!(!job.status.is_terminal(), "job {id} failed twice");
        debug_assert!(job.output.is_none(), "failed job {id} has an output");
        self.queued_bytes -= job.footprint_bytes;
        uncount_queued(&mut self.queued_by_owner, &job.owner, job.footprint_bytes);
        drop_payload(job);
        job.footprint_bytes = footprint_bytes(job);
        self.kept_bytes += job.footprint_bytes;
        job.status = JobStatus::Failed;
        job.error = Some(reason);
        job.worker = None;
        job.deadline_ms = None;
        self.job_changed(&id);
        self.job_ended(id);
    }

    /// Checks that `session` holds `id` right now.
    fn held_by(&self, id: &Uuid, session: SessionId) -> Result<&Job, FrameError> {
        let job = self.jobs.get(id).ok_or(FrameError::UnknownJob)?;
        let active = matches!(job.status, JobStatus::Assigned | JobStatus::Running);
        if active && job.worker == Some(session) {
            Ok(job)
        } else {
            Err(FrameError::NotAssigned)
        }
    }

    /// The worker started the job.
    pub fn accept(&mut self, session: SessionId, id: Uuid) -> Result<(), FrameError> {
        if self.held_by(&id, session)?.status == JobStatus::Assigned {
            let job = self.jobs.get_mut(&id).expect("held job exists");
            job.status = JobStatus::Running;
            self.job_changed(&id);
        }
        Ok(())
    }

    /// The worker delivered a result whose receipt the session has verified.
    pub fn complete(
        &mut self,
        session: SessionId,
        id: Uuid,
        output: serde_json::Value,
        receipt: Receipt,
        now_ms: i64,
    ) -> Result<(), FrameError> {
        if self.held_by(&id, session)?.settle_ticket().is_some() {
            self.await_settlement(session, id, output, receipt, now_ms);
            return Ok(());
        }
        // The idle index is left to `fill_from`, below.
        let worker = self
            .workers
            .get_mut(&session)
            .expect("holding worker exists");
        let indexed = worker.load();
        worker.jobs.remove(&id);
        let job = self.jobs.get_mut(&id).expect("held job exists");
        // `clear_timer`, without a second lookup.
        if let Some(timer) = job.timer.take() {
            self.timers.remove(&timer);
        }
        job.output = Some(output);
        job.receipt = Some(Box::new(receipt));
        self.finish_completed(id, now_ms);
        self.outbox.push((
            session,
            Outbound::Frame(CoordinatorFrame::ResultAccepted { job_id: id }),
        ));
        self.fill_from(session, indexed, now_ms);
        Ok(())
    }

    /// Makes a job whose output and receipt are set `completed`: its bytes
    /// move from the queued to the kept ledger, its payload goes.
    fn finish_completed(&mut self, id: Uuid, now_ms: i64) {
        let job = self.jobs.get_mut(&id).expect("completed job exists");
        debug_assert!(job.timer.is_none(), "completed job {id} keeps a timer");
        debug_assert!(job.output.is_some(), "job {id} completed without an output");
        job.status = JobStatus::Completed;
        self.queued_bytes -= job.footprint_bytes;
        uncount_queued(&mut self.queued_by_owner, &job.owner, job.footprint_bytes);
        drop_payload(job);
        job.footprint_bytes = footprint_bytes(job);
        self.kept_bytes += job.footprint_bytes;
        job.completed_at_ms = Some(now_ms);
        job.worker = None;
        job.deadline_ms = None;
        self.job_changed(&id);
        self.job_ended(id);
    }

    /// The attempt ended without a usable result: a reject, or a result
    /// that failed verification. The job goes to another worker if it can.
    pub fn attempt_failed(
        &mut self,
        session: SessionId,
        id: Uuid,
        reason: FailureReason,
        now_ms: i64,
    ) -> Result<(), FrameError> {
        self.held_by(&id, session)?;
        self.set_load(session, |jobs| {
            jobs.remove(&id);
        });
        self.retry_or_fail(id, reason, Some(session), now_ms);
        self.fill(session, now_ms);
        Ok(())
    }

    // ---- workers ----

    /// Registers an authenticated worker. A second session with the same key
    /// replaces the first, whose jobs are requeued.
    pub fn register(
        &mut self,
        pubkey: &str,
        capabilities: Vec<JobType>,
        slots: u32,
        now_ms: i64,
    ) -> Result<SessionId, TooManyWorkers> {
        if let Some(&old) = self.session_of.get(pubkey) {
            self.outbox.push((
                old,
                Outbound::Close(
                    ErrorCode::Replaced,
                    "another session authenticated with this key".into(),
                ),
            ));
            self.unregister(old, now_ms);
        }
        if self.workers.len() >= self.config.limits.workers_max {
            return Err(TooManyWorkers);
        }
        let session = self.next_session;
        self.next_session += 1;
        let mut capabilities = capabilities;
        capabilities.sort_unstable();
        capabilities.dedup();
        // A worker without slots is never idle (sessions refuse zero slots;
        // the core does not rely on it).
        if slots > 0 {
            for &job_type in &capabilities {
                self.idle.entry(job_type).or_default().insert((0, session));
            }
        }
        self.workers.insert(
            session,
            Worker {
                pubkey: pubkey.to_owned(),
                capabilities,
                slots,
                jobs: WorkerJobs::default(),
            },
        );
        self.session_of.insert(pubkey.to_owned(), session);
        self.fill(session, now_ms);
        Ok(session)
    }

    /// The session ended; its jobs go back to the queue.
    pub fn unregister(&mut self, session: SessionId, now_ms: i64) {
        let Some(worker) = self.workers.remove(&session) else {
            return;
        };
        // Who else could take a job changed: the next check looks at all.
        self.checked.whole_next();
        for job_type in &worker.capabilities {
            if let Some(set) = self.idle.get_mut(job_type) {
                set.remove(&(worker.load(), session));
            }
        }
        if self.session_of.get(&worker.pubkey) == Some(&session) {
            self.session_of.remove(&worker.pubkey);
        }
        // The worker's jobs first: placing one offers it to a free worker
        // only if nothing more urgent waits for that worker (see `place`).
        let held = worker.jobs.into_iter().map(|id| (id, None)).collect();
        self.retry_in_order(held, FailureReason::WorkerDisconnected, now_ms);
        // A job kept from a worker because this one could take it instead is
        // now that worker's to take. Idle workers with queued jobs exist only
        // in that case (and for PRIVATE jobs), so this is rarely any work.
        // Filling before the retries above gave such a kept CHEAP job the
        // slot a FAST job of this worker needed (found by the swarm at seed
        // 6497 of 0..10000: `scenarios/swarm-tier-order-kept-job-passes-fast.toml`).
        if self.pending_count > 0 {
            let idle: Vec<SessionId> = self
                .workers
                .iter()
                .filter(|(_, w)| w.load() < w.slots)
                .map(|(s, _)| *s)
                .collect();
            for s in idle {
                self.fill(s, now_ms);
            }
        }
    }

    /// Changes a worker's job set and keeps the idle index in step.
    fn set_load(&mut self, session: SessionId, change: impl FnOnce(&mut WorkerJobs)) {
        let worker = self
            .workers
            .get_mut(&session)
            .expect("loaded worker exists");
        let before = worker.load();
        change(&mut worker.jobs);
        self.reindex(session, before);
    }

    /// Moves a worker in the idle index from load `before` (where the index
    /// lists it) to its load now.
    fn reindex(&mut self, session: SessionId, before: u32) {
        let Some(worker) = self.workers.get(&session) else {
            return;
        };
        let after = worker.load();
        if after == before {
            return;
        }
        for job_type in &worker.capabilities {
            let set = self.idle.entry(*job_type).or_default();
            set.remove(&(before, session));
            if after < worker.slots {
                set.insert((after, session));
            }
        }
    }

    // ---- timers ----

    fn add_timer(&mut self, at_ms: i64, kind: TimerKind, job: Uuid) {
        let timer = self.new_timer(at_ms, kind, job);
        match self.jobs.get_mut(&job) {
            Some(j) => set_timer(&mut self.timers, j, timer),
            None => {
                self.timers.insert(timer);
            }
        }
    }

    /// A timer with the next sequence number (shared with commit order).
    fn new_timer(&mut self, at_ms: i64, kind: TimerKind, job: Uuid) -> Timer {
        let seq = self.next_seq;
        self.next_seq += 1;
        Timer {
            at_ms,
            seq,
            kind,
            job,
        }
    }

    /// Drops a job's live timer, if it has one.
    fn clear_timer(&mut self, job: &Uuid) {
        if let Some(timer) = self.jobs.get_mut(job).and_then(|j| j.timer.take()) {
            self.timers.remove(&timer);
        }
    }

    /// Fires every timer due at `now_ms`. Timers are removed when they are
    /// replaced or their job ends, so each one fired is its job's live one.
    /// Jobs whose leases ended are retried together, after every timer has
    /// fired (see `Core::retry_in_order`).
    pub fn tick(&mut self, now_ms: i64) {
        if self.timers.first().is_none_or(|t| t.at_ms > now_ms) {
            return;
        }
        let mut expired: Vec<(Uuid, Option<SessionId>)> = Vec::new();
        while let Some(timer) = self.timers.first().copied() {
            if timer.at_ms > now_ms {
                break;
            }
            self.timers.pop_first();
            let Some(job) = self.jobs.get_mut(&timer.job) else {
                continue;
            };
            if job.timer != Some(timer) {
                continue;
            }
            job.timer = None;
            match (timer.kind, job.status) {
                (TimerKind::Pending, JobStatus::Pending) => {
                    self.dequeue(&timer.job);
                    let reason = match self.payment_expired(&timer.job, now_ms) {
                        true => {
                            crate::buggify::sometimes(
                                "a paid job's payment expired while it waited",
                            );
                            FailureReason::PaymentExpired
                        }
                        false => FailureReason::NoEligibleWorker,
                    };
                    self.fail(timer.job, reason);
                }
                (TimerKind::Settle, JobStatus::Running) => {
                    crate::buggify::sometimes("a payment expired before its settlement ended");
                    self.fail(timer.job, FailureReason::PaymentExpired);
                }
                (TimerKind::Lease, JobStatus::Assigned | JobStatus::Running) => {
                    crate::buggify::sometimes("a lease expired on a held job");
                    let session = job.worker.expect("held job has a worker");
                    self.outbox.push((
                        session,
                        Outbound::Frame(CoordinatorFrame::Cancel {
                            job_id: timer.job,
                            reason: "lease_expired".into(),
                        }),
                    ));
                    self.set_load(session, |jobs| {
                        jobs.remove(&timer.job);
                    });
                    expired.push((timer.job, Some(session)));
                }
                _ => {}
            }
        }
        let sessions: BTreeSet<SessionId> = expired.iter().filter_map(|(_, s)| *s).collect();
        self.retry_in_order(expired, FailureReason::WorkerTimeout, now_ms);
        for session in sessions {
            self.fill(session, now_ms);
        }
    }

    // ---- trust ----

    /// A pairing code for `user_id`; with `bound_to` (a canonical key) only
    /// that key may claim it.
    pub fn create_pairing(
        &mut self,
        user_id: &str,
        bound_to: Option<&str>,
        client: &str,
        now_ms: i64,
    ) -> Result<Pairing, CreateError> {
        let pairing = self.trust.create(
            user_id,
            bound_to,
            client,
            now_ms,
            &self.config,
            &mut self.rng,
        )?;
        self.changes.push(Change::Pairing(pairing.clone()));
        Ok(pairing)
    }

    /// Claims `code` for `provider_pubkey` (canonical form, or why it is
    /// unusable: reported only after the code checks, as the spec orders).
    pub fn claim_pairing(
        &mut self,
        code: &str,
        provider_pubkey: Result<&str, KeyNotOnCurve>,
        client: &str,
        now_ms: i64,
    ) -> Result<TrustEntry, ClaimError> {
        let (pairing, entry) =
            self.trust
                .claim(code, provider_pubkey, client, now_ms, &self.config.limits)?;
        self.changes.push(Change::Pairing(pairing));
        self.changes.push(Change::Trust(entry.clone()));
        // Who may take which queue changed: the next check looks at all.
        self.checked.whole_next();
        // The newly trusted worker may be online with PRIVATE jobs waiting for it.
        if let Some(&session) = self.session_of.get(&entry.provider_pubkey) {
            self.fill(session, now_ms);
        }
        Ok(entry)
    }

    pub fn trusted_providers(&self, user_id: &str) -> Vec<TrustEntry> {
        self.trust.list(user_id)
    }
}

/// The variable bytes of a submission: its user id and payload text.
/// A submission's bytes as the store writes them (JSON, escapes
/// included): counting the raw text let prompts of control characters
/// take up to six times their count on disk (issue 29).
fn submission_bytes(s: &JobSubmission) -> usize {
    let (payload, model) = match &s.payload {
        Payload::Llm { prompt, model, .. } => (prompt, model.as_deref().unwrap_or("")),
        Payload::Task { input, .. } => (input, ""),
    };
    escaped_len(&s.user_id) + escaped_len(payload) + escaped_len(model)
}

/// A string's length in JSON, escapes included, without its quotes: what
/// `serde_json` writes for it, counted in one pass over the bytes instead
/// of through the serializer (a 200 KiB prompt is counted at every commit
/// and every restore; the serializer's escape loop was 3 % of a swarm
/// world's CPU where big inputs are drawn).
fn escaped_len(text: &str) -> usize {
    let bytes = text.as_bytes();
    // The common case, no byte to escape, counted without branches in
    // byte-wide lanes (chunks of 255 cannot overflow a `u8`), which the
    // compiler vectorises.
    let to_escape: usize = bytes
        .chunks(255)
        .map(|chunk| {
            let n: u8 = chunk
                .iter()
                .map(|&b| u8::from(b < 0x20) | u8::from(b == b'"') | u8::from(b == b'\\'))
                .sum();
            usize::from(n)
        })
        .sum();
    if to_escape == 0 {
        return bytes.len();
    }
    bytes.iter().map(|&b| escaped_byte_len(b)).sum()
}

/// How many bytes `serde_json` writes for one byte of a string: `\"`,
/// `\\` and the short escapes of `\b \t \n \f \r` take two, every other
/// control character `\u00XX` six. Bytes of multi-byte characters are
/// written as they are.
fn escaped_byte_len(b: u8) -> usize {
    match b {
        b'"' | b'\\' | 0x08 | b'\t' | b'\n' | 0x0c | b'\r' => 2,
        0x00..=0x1f => 6,
        _ => 1,
    }
}

/// The submission with its payload emptied, as a finished job keeps it.
fn without_payload(s: &JobSubmission) -> JobSubmission {
    let payload = match &s.payload {
        Payload::Llm { max_tokens, .. } => Payload::Llm {
            prompt: String::new(),
            max_tokens: *max_tokens,
            model: None,
        },
        Payload::Task { task_type, .. } => Payload::Task {
            task_type: *task_type,
            input: String::new(),
        },
    };
    JobSubmission {
        job_type: s.job_type,
        user_id: s.user_id.clone(),
        payload,
        privacy_class: s.privacy_class,
    }
}

/// SHA-256 of a payload as JSON, hex.
fn payload_digest(payload: &Payload) -> String {
    use sha2::{Digest, Sha256};
    let text = serde_json::to_vec(payload).unwrap_or_default();
    hex::encode(Sha256::digest(&text))
}

/// Drops a finished job's payload, keeping its digest: no poll returns
/// it, and the disk then holds outputs, not inputs (issue 29).
fn drop_payload(job: &mut Job) {
    if job.payload_digest.is_some() {
        return;
    }
    job.payload_digest = Some(payload_digest(&job.submission.payload));
    job.submission = Arc::new(without_payload(&job.submission));
}

/// Whether `submission` is the one `job` was committed with: whole while
/// the job is live, by the payload's digest once it ended.
pub(crate) fn same_submission(job: &Job, submission: &JobSubmission) -> bool {
    match &job.payload_digest {
        None => *job.submission == *submission,
        Some(digest) => {
            *job.submission == without_payload(submission)
                && *digest == payload_digest(&submission.payload)
        }
    }
}

/// Counts `bytes` queued for `owner` (`limits.queued_bytes_per_client_max`).
fn count_queued(by_owner: &mut BTreeMap<String, usize>, owner: &str, bytes: usize) {
    match by_owner.get_mut(owner) {
        Some(held) => *held += bytes,
        None => {
            by_owner.insert(owner.to_owned(), bytes);
        }
    }
}

/// Takes `bytes` off what `owner` has queued; an owner at zero leaves.
fn uncount_queued(by_owner: &mut BTreeMap<String, usize>, owner: &str, bytes: usize) {
    if let Some(held) = by_owner.get_mut(owner) {
        *held -= bytes;
        if *held == 0 {
            by_owner.remove(owner);
        }
    }
}

/// Puts `job`, borrowed out of the job map, in its queue (the caller
/// counts it pending). Functions of the fields they change, not methods, so
/// a caller holding the job makes one lookup for a whole change.
fn push_queued(queues: &mut BTreeMap<QueueKey, Queue>, job: &mut Job, to_front: bool) {
    debug_assert!(job.queue_pos.is_none(), "job {} queued twice", job.id);
    let pos = queues
        .entry(queue_key(job))
        .or_default()
        .push(job.id, to_front);
    job.queue_pos = Some(pos);
}

/// Makes `timer` the live timer of `job` (borrowed out of the job map),
/// dropping the one it replaces.
fn set_timer(timers: &mut timers::Timers, job: &mut Job, timer: Timer) {
    if let Some(old) = job.timer.replace(timer) {
        timers.remove(&old);
    }
    timers.insert(timer);
}

fn queue_key(job: &Job) -> QueueKey {
    let s = &job.submission;
    match s.privacy_class {
        PrivacyClass::Public => QueueKey::Public(job.tier, s.job_type),
        PrivacyClass::Private => QueueKey::Private(job.tier, s.job_type, s.user_id.clone()),
    }
}

fn tier_of(key: &QueueKey) -> Tier {
    match key {
        QueueKey::Public(tier, _) | QueueKey::Private(tier, _, _) => *tier,
    }
}
