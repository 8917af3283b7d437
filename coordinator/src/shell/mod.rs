//! The shell around the core: one mutex, the clock, the store, the worker
//! session outboxes and the timer task. Every event runs as
//! `lock -> core event at clock.now_ms() -> store changes -> deliver frames`,
//! so the store sees changes in event order and sessions see frames in
//! event order.

use crate::clock::Clock;
use crate::config::Config;
use crate::core::{Change, Core, FailureReason, Job, Outbound, SessionId};
use crate::metrics::Metrics;
use crate::store::{Store, StoreError};
use protocol::api::JobStatus;
use rand_chacha::ChaCha20Rng;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::{mpsc, oneshot, Notify};
use uuid::Uuid;

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("payments are already enabled")]
pub struct PaymentsAlreadyEnabled;

/// One unauthenticated connection's place, in total and for its client;
/// given back when dropped (the handshake ended either way).
pub struct HandshakePermit {
    _global: tokio::sync::OwnedSemaphorePermit,
    client: String,
    counts: Arc<Mutex<BTreeMap<String, usize>>>,
}

impl Drop for HandshakePermit {
    fn drop(&mut self) {
        let mut counts = lock_counts(&self.counts);
        if let Some(count) = counts.get_mut(&self.client) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.client);
            }
        }
    }
}

fn lock_counts(m: &Mutex<BTreeMap<String, usize>>) -> MutexGuard<'_, BTreeMap<String, usize>> {
    // Plain counters: a panic elsewhere leaves them consistent.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

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
    /// Set once by `shutdown`; `stopped` waits on `stop`.
    stopping: AtomicBool,
    stop: Notify,
    /// Set once, before serving, when the deployment gates commits on payment.
    payments: std::sync::OnceLock<x402::PaymentGate>,
    /// Bounds connections that have not authenticated yet.
    handshakes: Arc<tokio::sync::Semaphore>,
    /// Unauthenticated connections per client address.
    handshakes_by_client: Arc<Mutex<BTreeMap<String, usize>>>,
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
}

/// Held by a worker session while it runs: shutdown waits until every one
/// is dropped.
pub struct SessionRunning {
    _held: mpsc::Sender<()>,
}

/// The receiving end of a worker session's outbox (see [`State::outboxes`]).
///
/// Frames travel boxed: a channel allocates its first block of 32 slots when
/// it is made, one per connected worker, so slots the size of a pointer
/// instead of an [`Outbound`] (88 bytes) keep about 2.3 KiB less per worker,
/// busy or idle, for one allocation per frame sent.
pub type OutboxRx = mpsc::UnboundedReceiver<Box<Outbound>>;

struct State {
    core: Core,
    /// Unbounded because the core sends at most `slots` assigns and cancels
    /// per session between two reads of the session, plus one result ack per
    /// result the worker sent: the worker itself bounds the backlog.
    outboxes: BTreeMap<SessionId, mpsc::UnboundedSender<Box<Outbound>>>,
    held: HeldPolls,
}

/// Job polls held open (`GET /v1/jobs/{id}?wait_ms=N`), woken by `flush`
/// when an event leaves their job in another status than they saw. Kept
/// under the state lock, so a poll registers in the same critical section
/// as its read and cannot miss a change.
#[derive(Default)]
struct HeldPolls {
    /// Per job, in arrival order; woken in job id order, then arrival order.
    waiters: BTreeMap<Uuid, Vec<Waiter>>,
    /// Held polls alive, counted by their [`HeldSlot`]s.
    total: usize,
    per_client: BTreeMap<String, usize>,
}

struct Waiter {
    /// The status the poll read; any other status wakes it.
    seen: JobStatus,
    wake: oneshot::Sender<()>,
}

/// What a poll with `wait_ms` gets when it arrives: see [`Coordinator::watch_job`].
pub enum Watch {
    /// No such job.
    Unknown,
    /// Answer with this now: the job is terminal, the coordinator is
    /// stopping, or the held-poll bound (total or per client) is reached.
    /// The job is shared, so its record is built after the lock is let go.
    Now(Arc<Job>),
    /// Wait on it, then read the job again.
    Held(HeldPoll),
}

/// A place among the held polls. Dropping it (answered, timed out, or the
/// client went away) gives the place back.
pub struct HeldPoll {
    // Declared first so it is dropped before `_slot` prunes closed waiters.
    woken: oneshot::Receiver<()>,
    /// Kept for its `Drop`, which gives the place back.
    _slot: HeldSlot,
}

struct HeldSlot {
    coordinator: Coordinator,
    job: Uuid,
    client: String,
}

impl HeldPoll {
    /// Resolves when the job's status changes, the coordinator shuts down,
    /// or `wait_ms` passes (tokio time: virtual in the simulation).
    pub async fn wait(mut self, wait_ms: u64) {
        let wait = std::time::Duration::from_millis(wait_ms);
        // Woken or timed out: either way the caller reads the job as it is.
        let _ = tokio::time::timeout(wait, &mut self.woken).await;
    }
}

impl Drop for HeldSlot {
    fn drop(&mut self) {
        self.coordinator.release_hold(&self.job, &self.client);
    }
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
            }),
            timer_wake: Notify::new(),
            stopping: AtomicBool::new(false),
            stop: Notify::new(),
            payments: std::sync::OnceLock::new(),
            handshakes: Arc::new(tokio::sync::Semaphore::new(handshakes_max)),
            handshakes_by_client: Arc::new(Mutex::new(BTreeMap::new())),
            metrics: Metrics::new(),
            worker_origins,
            cluster: std::sync::OnceLock::new(),
            on_poisoned: std::sync::OnceLock::new(),
            sessions: Mutex::new(Some(sessions)),
            sessions_done: Mutex::new(Some(sessions_done)),
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

    /// Turns on payment gating of the commit endpoints (x402). Call once,
    /// before serving; a second call is refused and changes nothing.
    pub fn enable_payments(&self, gate: x402::PaymentGate) -> Result<(), PaymentsAlreadyEnabled> {
        self.inner
            .payments
            .set(gate)
            .map_err(|_| PaymentsAlreadyEnabled)
    }

    /// A place for one more unauthenticated connection, if there is one.
    /// A place for one more unauthenticated connection from `client`, if
    /// there is one both in total and for that client.
    pub fn handshake_permit(&self, client: &str) -> Option<HandshakePermit> {
        let per_client_max = self.inner.config.limits.handshakes_per_client_max;
        let global = self.inner.handshakes.clone().try_acquire_owned().ok()?;
        let mut counts = lock_counts(&self.inner.handshakes_by_client);
        let count = counts.entry(client.to_owned()).or_insert(0);
        if *count >= per_client_max {
            return None;
        }
        *count += 1;
        // Bounded: every entry holds at least one global permit.
        debug_assert!(counts.len() <= self.inner.config.limits.handshakes_max);
        Some(HandshakePermit {
            _global: global,
            client: client.to_owned(),
            counts: self.inner.handshakes_by_client.clone(),
        })
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
            // Queued jobs go to the cluster's pool (ARCHITECTURE.md, Several nodes).
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
        if !state.held.waiters.is_empty() {
            state.held.wake_changed(&changes);
        }
        let mut outbox = state.core.take_outbox();
        for (session, out) in outbox.drain(..) {
            if let Some(tx) = state.outboxes.get(&session) {
                // A closed outbox means the session is ending; it unregisters itself.
                let _ = tx.send(Box::new(out));
            }
        }
        state.core.reuse_buffers(changes, outbox);
    }

    /// Reads a job for a poll that may wait (`wait_ms`), and registers the
    /// wait under the same lock, so no change between the read and the
    /// wait is missed.
    pub fn watch_job(&self, id: Uuid, client: &str) -> Watch {
        let mut guard = self.lock();
        let state = &mut *guard;
        let Some(job) = state.core.job_shared(&id) else {
            return Watch::Unknown;
        };
        match self.hold(&mut state.held, id, job.status, client) {
            Some(held) => Watch::Held(held),
            None => Watch::Now(job),
        }
    }

    /// Cluster mode: holds a poll of a job another node holds, last read
    /// from the shared store in status `seen`, under the same bounds as a
    /// held poll of a job held here; `None` if the poll is answered now.
    /// The remote watch (`node.rs`) wakes it when the store shows another
    /// status.
    pub fn watch_remote(&self, id: Uuid, seen: JobStatus, client: &str) -> Option<HeldPoll> {
        let mut state = self.lock();
        self.hold(&mut state.held, id, seen, client)
    }

    /// Registers a held poll of `id` seen in `seen`, if the poll may wait:
    /// the job is not terminal, the coordinator is not stopping, and the
    /// held-poll bounds (total, per client) have room.
    fn hold(
        &self,
        held: &mut HeldPolls,
        id: Uuid,
        seen: JobStatus,
        client: &str,
    ) -> Option<HeldPoll> {
        let limits = &self.inner.config.limits;
        let client_held = held.per_client.get(client).copied().unwrap_or(0);
        if seen.is_terminal()
            || self.is_stopping()
            || held.total >= limits.held_polls_max
            || client_held >= limits.held_polls_per_client_max
        {
            return None;
        }
        let (wake, woken) = oneshot::channel();
        held.waiters
            .entry(id)
            .or_default()
            .push(Waiter { seen, wake });
        held.total += 1;
        *held.per_client.entry(client.to_owned()).or_default() += 1;
        assert!(held.total <= limits.held_polls_max);
        Some(HeldPoll {
            woken,
            _slot: HeldSlot {
                coordinator: self.clone(),
                job: id,
                client: client.to_owned(),
            },
        })
    }

    /// Cluster mode: the jobs held polls wait on that this node does not
    /// hold, in id order after `after`, at most `max`: what the remote
    /// watch reads.
    pub fn remote_watched(&self, after: Option<Uuid>, max: usize) -> Vec<Uuid> {
        use std::ops::Bound;
        let state = self.lock();
        let from = after.map_or(Bound::Unbounded, Bound::Excluded);
        let ids = state.held.waiters.range((from, Bound::Unbounded));
        ids.map(|(id, _)| *id)
            .filter(|id| state.core.job(id).is_none())
            .take(max)
            .collect()
    }

    /// Cluster mode: wakes the held polls of jobs another node holds whose
    /// status in the shared store is no longer the one they saw.
    pub fn wake_remote(&self, statuses: &[(Uuid, JobStatus)]) {
        let mut state = self.lock();
        for &(id, status) in statuses {
            state.held.wake(id, status);
        }
    }

    /// Held polls alive now (total, and of `client`).
    pub fn held_polls(&self, client: &str) -> (usize, usize) {
        let state = self.lock();
        let of_client = state.held.per_client.get(client).copied().unwrap_or(0);
        (state.held.total, of_client)
    }

    fn release_hold(&self, job: &Uuid, client: &str) {
        // Runs in `Drop`: a poisoned lock means the process is going down.
        let Ok(mut state) = self.inner.state.lock() else {
            return;
        };
        let held = &mut state.held;
        assert!(held.total > 0, "a held poll released twice");
        held.total -= 1;
        match held.per_client.get_mut(client) {
            Some(1) => {
                held.per_client.remove(client);
            }
            Some(n) => *n -= 1,
            None => unreachable!("a held poll of an uncounted client"),
        }
        // A poll that timed out leaves its waiter behind; drop it now so
        // waiters stay bounded by the held polls alive.
        if let Some(list) = held.waiters.get_mut(job) {
            list.retain(|w| !w.wake.is_closed());
            if list.is_empty() {
                held.waiters.remove(job);
            }
        }
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
            tracing::info!(
                job_id = %job.id,
                tier = %job.tier,
                status = %job.status,
                reason = job.error.map(FailureReason::as_str),
                worker_session = job.last_worker,
                attempts = job.attempts,
                duration_ms = ended_ms - job.created_at_ms,
                "job {}", job.status
            );
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
        let (tx, rx) = mpsc::unbounded_channel();
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
        for (_, waiters) in std::mem::take(&mut state.held.waiters) {
            for waiter in waiters {
                let _ = waiter.wake.send(());
            }
        }
        for out in state.outboxes.values() {
            let close = Outbound::Close(
                protocol::worker::ErrorCode::ShuttingDown,
                "coordinator is shutting down".into(),
            );
            // A closed outbox means the session is ending anyway.
            let _ = out.send(Box::new(close));
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

impl HeldPolls {
    /// Wakes the polls of every job an event left in another status than
    /// the poll saw. Only a job's last record in `changes` counts: one
    /// event may requeue and reassign a job, which is no change to a poll.
    fn wake_changed(&mut self, changes: &[Change]) {
        let mut last: BTreeMap<Uuid, JobStatus> = BTreeMap::new();
        for change in changes {
            if let Change::Job(job) = change {
                if self.waiters.contains_key(&job.id) {
                    last.insert(job.id, job.status);
                }
            }
        }
        for (id, status) in last {
            self.wake(id, status);
        }
    }

    /// Wakes the polls of `id` that saw another status than `status`.
    fn wake(&mut self, id: Uuid, status: JobStatus) {
        let Some(list) = self.waiters.remove(&id) else {
            return;
        };
        let (wake, keep): (Vec<Waiter>, Vec<Waiter>) =
            list.into_iter().partition(|w| w.seen != status);
        for waiter in wake {
            // A closed receiver is a poll that already ended.
            let _ = waiter.wake.send(());
        }
        if !keep.is_empty() {
            self.waiters.insert(id, keep);
        }
    }
}

/// Sleeps until the core's next deadline, fires due timers, repeats; ends
/// on shutdown. A `notify_one` that arrives while no one waits is kept as a
/// permit, so a deadline added between the read and the wait is not missed.
pub(crate) async fn run_timers(c: Coordinator) {
    loop {
        let wait_ms = c
            .read(|core| core.next_deadline_ms())
            .map(|at| at - c.now_ms());
        if let Some(ms) = wait_ms {
            if ms <= 0 {
                c.with(|core, now_ms| core.tick(now_ms));
                continue;
            }
        }
        let sleep = async {
            match wait_ms {
                Some(ms) => tokio::time::sleep(std::time::Duration::from_millis(ms as u64)).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            _ = c.inner.timer_wake.notified() => {}
            _ = sleep => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::sync::atomic::AtomicUsize;

    /// A panic inside an event poisons the state; the next user of the
    /// lock runs the hook (the binary exits there) before panicking too,
    /// rather than leaving the process up to answer 500 to everything.
    #[test]
    fn a_poisoned_state_runs_the_hook_before_anything_else_happens() {
        let c = Coordinator::new(
            Core::new(Config::default(), ChaCha20Rng::seed_from_u64(1)),
            Arc::new(protocol::clock::FixedClock(0)),
            Arc::new(crate::store::MemoryStore::default()),
        );
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
