//! The shell around the core: one mutex, the clock, the store, the worker
//! session outboxes and the timer task. Every event runs as
//! `lock -> core event at clock.now_ms() -> store changes -> deliver frames`,
//! so the store sees changes in event order and sessions see frames in
//! event order.
//!
//! Files: `polls.rs` (held long polls), `handshakes.rs` (places for
//! unauthenticated connections), `timers.rs` (the timer task), `proofs.rs`
//! (the nonces of accepted user proofs), `streams.rs` (running jobs'
//! output deltas and the event streams reading them).

use crate::clock::Clock;
use crate::config::Config;
use crate::core::{Change, Core, FailureReason, Job, Outbound, SessionId};
use crate::metrics::Metrics;
use crate::store::{Store, StoreError};

use protocol::worker::CoordinatorFrame;
use rand_chacha::ChaCha20Rng;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::{mpsc, Notify};
use uuid::Uuid;

mod handshakes;
mod outbox;
mod polls;
mod proofs;
mod settlements;
mod streams;
mod timers;

pub use handshakes::{HandshakePermit, WorkerPlace};
pub use outbox::{OutboxRx, PaidCommit};
use polls::HeldPolls;
pub use polls::{HeldPoll, Watch};
pub use proofs::NonceRefused;
pub(crate) use settlements::run_settlements;
pub use settlements::{BACKOFF_FIRST_MS, BACKOFF_MAX_MS, FACILITATOR_STALL_MAX_MS};
pub use streams::{Cursor, StreamView, StreamWatch, StreamsFull};
pub(crate) use timers::run_timers;

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("payments are already enabled")]
pub struct PaymentsAlreadyEnabled;

/// Why a worker session was not registered.
#[derive(Debug, thiserror::Error)]
pub enum RegisterError {
    #[error(transparent)]
    TooManyWorkers(#[from] crate::core::TooManyWorkers),
    #[error("coordinator is shutting down")]
    ShuttingDown,
}

/// Cheap to clone handle on a running coordinator.
#[derive(Clone)]
pub struct Coordinator {
    inner: Arc<Inner>,
}

struct Inner {
    config: Config,
    clock: Arc<dyn Clock>,
    store: Arc<dyn Store>,
    state: Mutex<State>,
    timer_wake: Notify,
    /// Wakes the settlement task when jobs begin awaiting settlement.
    settle_wake: Notify,
    /// Set once by `shutdown`; `stopped` waits on `stop`.
    stopping: AtomicBool,
    stop: Notify,
    /// Set once, before serving, when the deployment gates commits on payment.
    payments: std::sync::OnceLock<x402::PaymentGate>,
    /// Bounds connections that have not authenticated yet.
    handshakes: Arc<tokio::sync::Semaphore>,
    /// Unauthenticated connections per client address.
    handshakes_by_client: Arc<Mutex<BTreeMap<String, usize>>>,
    /// Established worker sessions and their slots per client address.
    workers_by_client: Arc<Mutex<BTreeMap<String, (usize, u32)>>>,
    /// This coordinator's own registry: many coordinators share a process
    /// in the simulation, so there is no global recorder.
    metrics: Metrics,
    /// Origins a worker's login may name (`protocol::origin`): those of the
    /// configured public URLs, else those of the address served.
    worker_origins: std::sync::OnceLock<Vec<String>>,
    /// Set once in cluster mode (the `node` layer above): the core then keeps no
    /// pending job, and idle workers wake the claim loop.
    cluster: std::sync::OnceLock<Arc<crate::cluster::ClusterLink>>,
    /// Called when the state lock is found poisoned, before this panics:
    /// a real process exits there (see [`Coordinator::on_poisoned`]).
    on_poisoned: std::sync::OnceLock<Box<dyn Fn() + Send + Sync>>,
    /// Cloned by every running worker session ([`SessionRunning`]) and let
    /// go by [`Coordinator::sessions_ended`], whose receiver then sees the
    /// channel close once the last session has ended (mini-redis's
    /// `shutdown_complete`).
    sessions: Mutex<Option<mpsc::Sender<()>>>,
    sessions_done: Mutex<Option<mpsc::Receiver<()>>>,
    /// Nonces of the user proofs accepted within the window.
    proof_nonces: proofs::ProofNonces,
    /// Paid commits between admission and creation (`outbox.rs`).
    paid_in_flight: outbox::PaidInFlight,
}

/// A job's id as logs show it: its first 8 hex digits. The whole id is a
/// bearer capability (whoever knows it reads the output), so logs, read by
/// more people than the API's callers, carry a prefix enough to find the
/// job by (issue 29, finding 9).
pub fn job_ref(id: &Uuid) -> String {
    let mut hex = id.simple().to_string();
    hex.truncate(8);
    hex
}

/// Held by a worker session while it runs: shutdown waits until every one
/// is dropped.
pub struct SessionRunning {
    _held: mpsc::Sender<()>,
}

struct State {
    core: Core,
    /// Counted and bounded in bytes (`outbox.rs`): the core sends at most
    /// `slots` assigns per session between two reads of the session only
    /// while no lease lapses before the session's send deadline.
    outboxes: BTreeMap<SessionId, outbox::Outbox>,
    held: HeldPolls,
    streams: streams::Streams,
}

impl Coordinator {
    /// A coordinator over `core` (fresh, or restored by [`Self::open`]);
    /// the composition root (`server.rs`) starts its timer task.
    fn new(core: Core, clock: Arc<dyn Clock>, store: Arc<dyn Store>) -> Self {
        let config = core.config().clone();
        let handshakes_max = config.limits.handshakes_max;
        let worker_origins = std::sync::OnceLock::new();
        if !config.public_urls.is_empty() {
            // `Settings::validate` refused any URL without an origin.
            let origins = config.public_urls.iter();
            let origins = origins.filter_map(|url| protocol::origin::worker_origin(url).ok());
            let _ = worker_origins.set(origins.collect());
        }
        let (sessions, sessions_done) = mpsc::channel(1);
        let inner = Arc::new(Inner {
            config: config.clone(),
            clock,
            store,
            state: Mutex::new(State {
                core,
                outboxes: BTreeMap::new(),
                held: HeldPolls::default(),
                streams: streams::Streams::default(),
            }),
            timer_wake: Notify::new(),
            settle_wake: Notify::new(),
            stopping: AtomicBool::new(false),
            stop: Notify::new(),
            payments: std::sync::OnceLock::new(),
            handshakes: Arc::new(tokio::sync::Semaphore::new(handshakes_max)),
            handshakes_by_client: Arc::new(Mutex::new(BTreeMap::new())),
            workers_by_client: Arc::new(Mutex::new(BTreeMap::new())),
            metrics: Metrics::new(),
            worker_origins,
            cluster: std::sync::OnceLock::new(),
            on_poisoned: std::sync::OnceLock::new(),
            sessions: Mutex::new(Some(sessions)),
            sessions_done: Mutex::new(Some(sessions_done)),
            proof_nonces: proofs::ProofNonces::default(),
            paid_in_flight: outbox::PaidInFlight::default(),
        });
        Self { inner }
    }

    /// Starts a coordinator on the state `store` holds: loads it and
    /// restores the core (see `core/restore.rs` for the rules), then writes
    /// back what recovery changed before serving anything.
    pub(crate) async fn open(
        config: Config,
        clock: Arc<dyn Clock>,
        rng: ChaCha20Rng,
        store: Arc<dyn Store>,
    ) -> Result<Self, StoreError> {
        // The stored jobs stream into a core no one else sees yet, one at a
        // time; a store that fails part-way leaves nothing half-restored.
        let now_ms = clock.now_ms();
        let mut core = Core::new(config, rng);
        let mut restoring = core.begin_restore();
        let (pairings, trust) =
            store.load_into(&mut |job| core.restore_job(&mut restoring, job, now_ms))?;
        core.finish_restore(restoring, pairings, trust, now_ms);
        let c = Self::new(core, clock, store);
        // An empty event: the invariant check, and what recovery changed
        // written back, as after any event.
        c.with(|_, _| ());
        c.durable().await?;
        Ok(c)
    }

    /// Resolves once every change made so far is durable. Await it before
    /// answering a client about anything the answer depends on.
    pub async fn durable(&self) -> Result<(), StoreError> {
        self.inner.store.flush().await
    }

    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The check a store runs after each of its commits (the simulation's
    /// SQLite writer, `SqliteStore::after_commit`): every unfinished job
    /// of this coordinator is stored ([`Core::assert_stored`]). It holds
    /// the coordinator weakly: the store it is given to outlives nothing.
    pub fn rows_check(&self) -> impl Fn(&dyn Fn(&Uuid) -> bool) + Send + Sync + 'static {
        let inner = Arc::downgrade(&self.inner);
        move |stored| {
            if let Some(inner) = inner.upgrade() {
                let c = Coordinator { inner };
                let now_ms = c.now_ms();
                c.read(|core| core.assert_stored(now_ms, stored));
            }
        }
    }

    /// Turns on payment gating of the commit endpoints (x402). Call once,
    /// before serving; a second call is refused and changes nothing.
    pub fn enable_payments(&self, gate: x402::PaymentGate) -> Result<(), PaymentsAlreadyEnabled> {
        self.inner
            .payments
            .set(gate)
            .map_err(|_| PaymentsAlreadyEnabled)
    }

    /// The origins a worker's login may name; empty until set.
    pub fn worker_origins(&self) -> &[String] {
        self.inner.worker_origins.get().map_or(&[], Vec::as_slice)
    }

    /// Sets the origins when no public URL was configured (the server
    /// derives them from the address it serves); false if already set.
    pub fn default_worker_origins(&self, origins: Vec<String>) -> bool {
        self.inner.worker_origins.set(origins).is_ok()
    }

    /// Makes this coordinator a node of a cluster; once, before serving.
    /// Its queued jobs (those restored at start too) go to the pool now.
    pub fn join_cluster(&self, link: Arc<crate::cluster::ClusterLink>) -> bool {
        let joined = self.inner.cluster.set(link).is_ok();
        self.with(|_, _| ());
        joined
    }

    /// The cluster this coordinator is a node of, in cluster mode.
    pub fn cluster(&self) -> Option<&Arc<crate::cluster::ClusterLink>> {
        self.inner.cluster.get()
    }

    /// The payment gate, when commits must be paid.
    pub fn payments(&self) -> Option<&x402::PaymentGate> {
        self.inner.payments.get()
    }

    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// The metrics in the Prometheus text format, gauges read from the core now.
    pub fn render_metrics(&self) -> String {
        let (text, pool_jobs) =
            self.read(|core| (self.inner.metrics.render(core), core.pool_len()));
        match self.cluster() {
            Some(link) => crate::cluster::with_node_info(text, &link.node, pool_jobs),
            None => text,
        }
    }

    pub fn now_ms(&self) -> i64 {
        self.inner.clock.now_ms()
    }

    /// The injected clock (what times the connection spans of
    /// the `connections` module).
    pub fn clock(&self) -> Arc<dyn Clock> {
        self.inner.clock.clone()
    }

    /// Accepts a verified user proof's nonce of `address` once within the
    /// proof window (it is remembered until `issued_at_ms` + the window).
    pub fn accept_proof_nonce(
        &self,
        address: &str,
        nonce: &str,
        issued_at_ms: i64,
    ) -> Result<(), NonceRefused> {
        let config = &self.inner.config;
        self.inner.proof_nonces.accept(
            address,
            nonce,
            issued_at_ms.saturating_add(config.timing.user_proof_window_ms),
            self.now_ms(),
            config.limits.user_proof_nonces_max,
        )
    }

    /// Runs one event against the core and applies its effects.
    pub fn with<R>(&self, event: impl FnOnce(&mut Core, i64) -> R) -> R {
        let mut state = self.lock();
        let deadline_before = state.core.next_deadline_ms();
        let now_ms = self.inner.clock.now_ms();
        let out = event(&mut state.core, now_ms);
        state.core.assert_invariants(now_ms);
        self.flush(&mut state);
        if state.core.next_deadline_ms() != deadline_before {
            self.inner.timer_wake.notify_one();
        }
        out
    }

    /// Reads the core without an event.
    pub fn read<R>(&self, read: impl FnOnce(&Core) -> R) -> R {
        read(&self.lock().core)
    }

    /// A job as the core holds it, else as the store has it: a finished
    /// job the core evicted from memory (core/ended.rs). An evicted job's
    /// last version reached the store before it left the core (both happen
    /// under the state lock, the store's `apply` in the same event or an
    /// earlier one), so a miss in both is a job this node never had.
    pub fn job(&self, id: &Uuid) -> Result<Option<Arc<Job>>, StoreError> {
        match self.read(|core| core.job_shared(id)) {
            Some(job) => Ok(Some(job)),
            None => self.inner.store.job(id),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        match self.inner.state.lock() {
            Ok(state) => state,
            Err(_) => self.poisoned(),
        }
    }

    /// A panic while holding the lock may have left the core half-changed;
    /// there is no safe way on, so poisoning is not recovered from: the
    /// hook runs (a real process exits), else this panics.
    #[cold]
    fn poisoned(&self) -> ! {
        if let Some(hook) = self.inner.on_poisoned.get() {
            hook();
        }
        panic!("coordinator state lock poisoned")
    }

    /// Sets what happens when a panic has poisoned the state lock, before
    /// the lock's user panics too; once. The binary exits: otherwise every
    /// later request would answer 500 while the process looks alive (and,
    /// in cluster mode, keeps its node lease and so its jobs).
    pub fn on_poisoned(&self, hook: impl Fn() + Send + Sync + 'static) {
        let _ = self.inner.on_poisoned.set(Box::new(hook));
    }

    fn flush(&self, state: &mut State) {
        if let Some(link) = self.inner.cluster.get() {
            // Queued jobs go to the cluster's pool (docs/cluster.md).
            state.core.release_pending();
            if state.core.has_idle() {
                link.claim_wake.notify_one();
            }
        }
        let changes = state.core.take_changes();
        self.observe_jobs(&changes);
        if !changes.is_empty() {
            if let Err(e) = self.inner.store.apply(&changes) {
                tracing::error!(error = %e, "store write failed");
            }
        }
        if state.held.any_waiting() {
            state.held.wake_changed(&changes);
        }
        state.streams.observe(&changes, self.inner.clock.now_ms());
        if state.core.has_settlements() {
            self.inner.settle_wake.notify_one();
        }
        let mut outbox = state.core.take_outbox();
        for (session, out) in outbox.drain(..) {
            let Some(tx) = state.outboxes.get(&session) else {
                continue;
            };
            self.note_assign(&out);
            // A closed outbox means the session is ending; it unregisters
            // itself. One past its bound is closed here: the session's task
            // sees its end once it has sent what was queued before.
            if tx.send(out).is_err() {
                tracing::warn!(
                    worker_session = session,
                    "a worker session's outbox reached its bound; closing the session"
                );
                state.outboxes.remove(&session);
            }
        }
        state.core.reuse_buffers(changes, outbox);
        self.check_resources(state);
    }

    /// In a simulated cluster, notes an `assign` this node queues (the
    /// harness judges it against the job's owner in the shared store at
    /// this moment: `buggify::ownership_noted`). Free otherwise.
    fn note_assign(&self, out: &Outbound) {
        let (Some(link), Outbound::Frame(CoordinatorFrame::Assign(a))) =
            (self.inner.cluster.get(), out)
        else {
            return;
        };
        crate::buggify::ownership_noted(crate::buggify::Ownership::Assigned {
            node: link.node.clone(),
            job: a.job_id,
            at_ms: self.inner.clock.now_ms(),
        });
    }

    /// Counts every job change in the metrics, and logs one info line per
    /// job reaching a terminal state, for operators. The line names the
    /// job, never its submission or output.
    fn observe_jobs(&self, changes: &[Change]) {
        if changes.is_empty() {
            return;
        }
        let now_ms = self.inner.clock.now_ms();
        for change in changes {
            let Change::Job(job) = change else { continue };
            self.inner.metrics.observe_job(job, now_ms);
            if !job.status.is_terminal() {
                continue;
            }
            let ended_ms = job.completed_at_ms.unwrap_or(now_ms);
            // A job no worker ever held (a refused commit, mostly) is a
            // debug line: at INFO a flood of refusals was one line each,
            // 46 GB a day at 2,000 a second (issue 29, finding 9).
            let level_info = job.attempts > 0;
            macro_rules! job_line {
                ($level:ident) => {
                    tracing::$level!(
                        job = %job_ref(&job.id),
                        tier = %job.tier,
                        status = %job.status,
                        reason = job.error.map(FailureReason::as_str),
                        worker_session = job.last_worker,
                        attempts = job.attempts,
                        duration_ms = ended_ms - job.created_at_ms,
                        "job {}", job.status
                    )
                };
            }
            if level_info {
                job_line!(info);
            } else {
                job_line!(debug);
            }
        }
    }

    /// Registers an authenticated worker session and returns its id and
    /// the receiving end of its outbox.
    pub fn register_worker(
        &self,
        pubkey: &str,
        capabilities: Vec<protocol::api::JobType>,
        slots: u32,
    ) -> Result<(SessionId, OutboxRx), RegisterError> {
        let bound = crate::resources::outbox_bytes_max(&self.inner.config.limits, slots);
        let (tx, rx) = outbox::outbox(bound);
        let mut state = self.lock();
        if self.is_stopping() {
            return Err(RegisterError::ShuttingDown);
        }
        let now_ms = self.inner.clock.now_ms();
        // The outbox must exist before the core fills the new worker's slots.
        let next = state.core.peek_next_session();
        state.outboxes.insert(next, tx);
        let registered = state.core.register(pubkey, capabilities, slots, now_ms);
        state.core.assert_invariants(now_ms);
        match registered {
            Ok(session) => {
                debug_assert_eq!(session, next);
                self.flush(&mut state);
                if let Some(link) = self.inner.cluster.get() {
                    link.presence_wake.notify_one();
                }
                self.inner.timer_wake.notify_one();
                Ok((session, rx))
            }
            Err(e) => {
                state.outboxes.remove(&next);
                self.flush(&mut state);
                Err(e.into())
            }
        }
    }

    pub fn unregister_worker(&self, session: SessionId) {
        let mut state = self.lock();
        state.outboxes.remove(&session);
        let now_ms = self.inner.clock.now_ms();
        state.core.unregister(session, now_ms);
        state.core.assert_invariants(now_ms);
        self.flush(&mut state);
        if let Some(link) = self.inner.cluster.get() {
            link.presence_wake.notify_one();
        }
        self.inner.timer_wake.notify_one();
    }

    /// Graceful shutdown: no new sessions, and every session is asked to
    /// close, in session order. Serving stops once `stopped` resolves.
    pub fn shutdown(&self) {
        let mut state = self.lock();
        self.inner.stopping.store(true, Ordering::SeqCst);
        // Held polls answer now with the job as it is; new ones are not held.
        state.held.wake_all();
        state.streams.wake_all();
        for out in state.outboxes.values() {
            let close = Outbound::Close(
                protocol::worker::ErrorCode::ShuttingDown,
                "coordinator is shutting down".into(),
            );
            // A closed outbox means the session is ending anyway; a close
            // is never refused for the bound.
            let _ = out.send(close);
        }
        drop(state);
        self.inner.stop.notify_waiters();
    }

    /// Marks a worker session running until the mark is dropped; `None`
    /// once [`Coordinator::sessions_ended`] was called.
    pub fn session_running(&self) -> Option<SessionRunning> {
        let sessions = self.inner.sessions.lock();
        let sessions = sessions.unwrap_or_else(|p| p.into_inner());
        let held = sessions.as_ref()?.clone();
        Some(SessionRunning { _held: held })
    }

    /// Resolves once every worker session has ended. Call after
    /// [`Coordinator::shutdown`] (which asks them to) and after serving
    /// stopped (so no session starts any more).
    pub async fn sessions_ended(&self) {
        let mut sessions = self.inner.sessions.lock();
        drop(sessions.as_mut().unwrap_or_else(|p| p.get_mut()).take());
        drop(sessions);
        let done = self.inner.sessions_done.lock();
        let done = done.unwrap_or_else(|p| p.into_inner()).take();
        if let Some(mut done) = done {
            // Nothing is sent: `None` once every sender has been dropped.
            while done.recv().await.is_some() {}
        }
    }

    pub fn is_stopping(&self) -> bool {
        self.inner.stopping.load(Ordering::SeqCst)
    }

    /// Resolves once `shutdown` has been called.
    pub fn stopped(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let c = self.clone();
        async move {
            loop {
                let notified = c.inner.stop.notified();
                if c.is_stopping() {
                    return;
                }
                notified.await;
            }
        }
    }
}

/// A coordinator over `config` and `clock` for the shell's unit tests: a
/// fresh core seeded with 1 and a store in memory.
#[cfg(test)]
pub(crate) fn test_coordinator(config: Config, clock: Arc<dyn Clock>) -> Coordinator {
    use rand::SeedableRng;
    let core = Core::new(config, ChaCha20Rng::seed_from_u64(1));
    Coordinator::new(core, clock, Arc::new(crate::store::MemoryStore::default()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::sync::atomic::AtomicUsize;

    /// A panic inside an event poisons the state; the next user of the
    /// lock runs the hook (the binary exits there) before panicking too,
    /// rather than leaving the process up to answer 500 to everything.
    #[test]
    fn a_poisoned_state_runs_the_hook_before_anything_else_happens() {
        let c = test_coordinator(Config::default(), Arc::new(protocol::clock::FixedClock(0)));
        let called = Arc::new(AtomicUsize::new(0));
        let seen = called.clone();
        c.on_poisoned(move || {
            seen.fetch_add(1, Ordering::SeqCst);
        });
        c.read(|_| ());
        assert_eq!(called.load(Ordering::SeqCst), 0, "not before a panic");
        let event = catch_unwind(AssertUnwindSafe(|| c.with(|_, _| panic!("a broken event"))));
        assert!(event.is_err());
        let next = catch_unwind(AssertUnwindSafe(|| c.read(|_| ())));
        assert!(next.is_err(), "the poisoned state is not used");
        assert_eq!(called.load(Ordering::SeqCst), 1);
    }
}
