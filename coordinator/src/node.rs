//! One node of a cluster (ARCHITECTURE.md, "Several nodes"): the shell
//! around a node's core that keeps it in step with the shared store.
//!
//! - [`NodeStore`] is the node's [`Store`]: every event's changes are
//!   written behind, batched, in event order, one shared-store transaction
//!   a batch; `flush` waits for the batch holding the caller's changes.
//! - [`run_lease`] renews the node's lease and takes over lapsed nodes' jobs.
//! - [`run_claims`] learns trust other nodes wrote and claims pool jobs for
//!   idle workers, woken by the store's notifications, by a freed slot, and
//!   every [`CLAIM_INTERVAL_MS`].
//! - [`run_presence`] keeps the shared presence (who is connected here) for
//!   PRIVATE admission and the health count on every node.
//! - A node that loses a job or its lease *fences itself*: its store
//!   refuses every further flush (so no client or worker is told anything
//!   more) and the process is told to stop ([`Fence`]).
//!
//! Time comes from the coordinator's injected clock; tokio time drives the
//! intervals, so the simulation can run nodes on its paused clock.

use crate::cluster::{ClusterError, NodeId, SharedStore};
use crate::coordinator::Coordinator;
use crate::core::Change;
use crate::store::{Snapshot, Store, StoreError};
use rand::RngCore;
use rand_chacha::ChaCha20Rng;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::{oneshot, watch, Notify};

/// Jobs one claim takes at most.
pub const CLAIM_BATCH_MAX: usize = 256;
/// Backstop for a lost notification, and how often due pool jobs are looked for.
pub const CLAIM_INTERVAL_MS: u64 = 1_000;
/// How long a node's lease lasts unrenewed (renewed every third of it).
pub const NODE_LEASE_MS: i64 = 10_000;
/// Pause between attempts to write a batch the store could not take.
const WRITE_RETRY_MS: u64 = 50;

/// What makes a process one node of a cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterSettings {
    /// `postgres://…` (or `postgresql://…`).
    pub url: String,
    /// The PostgreSQL schema the tables live in (default: the URL's).
    pub schema: Option<String>,
    pub node_id: NodeId,
    pub node_lease_ms: i64,
}

/// Whether `db` names a PostgreSQL database (cluster mode).
pub fn is_postgres_url(db: &str) -> bool {
    db.starts_with("postgres://") || db.starts_with("postgresql://")
}

/// The default node id: `node-` and 8 hex digits from a stream of the
/// injected RNG of its own, so the node's ids and codes are drawn as they
/// would be without it. Unique per process in production (OS entropy),
/// reproducible in the simulation (seeded).
pub fn default_node_id(rng: &ChaCha20Rng) -> NodeId {
    let mut rng = rng.clone();
    rng.set_stream(0x6e6f_6465);
    format!("node-{:08x}", rng.next_u32())
}

/// What the node does once fenced: a process exits (another node owns its
/// jobs now); the simulation would crash the node.
pub type Fence = Arc<dyn Fn(&ClusterError) + Send + Sync>;

/// What a coordinator in cluster mode knows of its cluster.
pub struct ClusterLink {
    pub node: NodeId,
    pub shared: Arc<dyn SharedStore>,
    pub node_lease_ms: i64,
    /// Woken after an event that left a worker idle: the claim loop asks
    /// the pool if it may hold something.
    pub claim_wake: Notify,
    /// Woken when a worker registers or leaves: the presence task writes
    /// what is connected here.
    pub presence_wake: Notify,
    /// Places for held polls of jobs other nodes hold (`held_polls_max`).
    pub remote_polls: tokio::sync::Semaphore,
}

/// The node's store: write-behind into the shared store.
pub struct NodeStore {
    node: NodeId,
    shared: Arc<dyn SharedStore>,
    /// Pairings and trust from the join, for the core's restore.
    joined: Mutex<Option<Snapshot>>,
    /// Jobs the node still held under its id, recovered once the
    /// coordinator is a node (see [`NodeStore::take_held`]).
    held: Mutex<Vec<crate::core::Job>>,
    pending: Mutex<Pending>,
    wake: Notify,
    written: Mutex<Written>,
    fenced: AtomicBool,
    fence: Fence,
    node_lease_ms: i64,
}

/// What is committed, and who waits for it.
#[derive(Default)]
struct Written {
    /// The count of `apply` calls whose changes are committed.
    upto: u64,
    /// `flush` calls waiting for `upto` to reach their target, in call
    /// order, answered in that order (`true`: committed; `false`: fenced),
    /// so the tasks they wake run in an order that does not depend on the
    /// runtime's internals (as the SQLite store's). A watch channel would
    /// wake them in the order of its randomly chosen notify shards.
    waiters: VecDeque<(u64, oneshot::Sender<bool>)>,
}

#[derive(Default)]
struct Pending {
    changes: Vec<Change>,
    /// `apply` calls so far.
    applied: u64,
}

impl NodeStore {
    /// Joins the cluster as `node` and starts its writer task.
    pub async fn join(
        shared: Arc<dyn SharedStore>,
        settings: &ClusterSettings,
        now_ms: i64,
        fence: Fence,
    ) -> Result<Arc<Self>, ClusterError> {
        let node = settings.node_id.clone();
        let mut snapshot = shared.join(&node, now_ms, settings.node_lease_ms).await?;
        let held = std::mem::take(&mut snapshot.jobs);
        let store = Arc::new(Self {
            node,
            shared,
            joined: Mutex::new(Some(snapshot)),
            held: Mutex::new(held),
            pending: Mutex::new(Pending::default()),
            wake: Notify::new(),
            written: Mutex::new(Written::default()),
            fenced: AtomicBool::new(false),
            fence,
            node_lease_ms: settings.node_lease_ms,
        });
        tokio::spawn(store.clone().run_writer());
        Ok(store)
    }

    fn pending(&self) -> MutexGuard<'_, Pending> {
        // Appends and takes only: a panic cannot leave it half-changed.
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the snapshot the core opens on ([`Store::load`]) holds jobs
    /// or pairings, so the core moves its RNG by them (see
    /// `server::node_rng`). Held jobs are recovered later, not loaded.
    pub fn restores_state(&self) -> bool {
        let joined = self.joined.lock().unwrap_or_else(|p| p.into_inner());
        joined
            .as_ref()
            .is_some_and(|s| !s.jobs.is_empty() || !s.pairings.is_empty())
    }

    /// The jobs this node id still held when it joined (it restarted
    /// before its lease lapsed), for `Core::recover` once the coordinator
    /// is a node: recovered then, their requeues go to the pool.
    pub fn take_held(&self) -> Vec<crate::core::Job> {
        std::mem::take(&mut *self.held.lock().unwrap_or_else(|p| p.into_inner()))
    }

    pub fn is_fenced(&self) -> bool {
        self.fenced.load(Ordering::SeqCst)
    }

    /// Stops writing, as a killed process does (the simulation's crash):
    /// what was not committed is lost, and the fence does not run.
    pub fn halt(&self) {
        self.fenced.store(true, Ordering::SeqCst);
        self.answer_waiters();
    }

    /// Stops the node: no flush succeeds any more, and the fence runs once.
    pub fn fence(&self, why: &ClusterError) {
        if !self.fenced.swap(true, Ordering::SeqCst) {
            tracing::error!(node = %self.node, error = %why, "node fenced: stopping");
            self.answer_waiters();
            (self.fence)(why);
        }
    }

    /// Commits pending batches as they come, in order, one transaction
    /// each. A store that cannot be reached is retried until half the node
    /// lease has passed; then the node fences itself, since others are
    /// about to take its jobs.
    async fn run_writer(self: Arc<Self>) {
        let retries_max = (self.node_lease_ms / 2) as u64 / WRITE_RETRY_MS;
        loop {
            let (changes, applied) = {
                let mut p = self.pending();
                (std::mem::take(&mut p.changes), p.applied)
            };
            if changes.is_empty() {
                self.committed(applied);
                self.wake.notified().await;
                continue;
            }
            let mut retries = 0;
            loop {
                if self.is_fenced() {
                    return;
                }
                match self.shared.write(&self.node, &changes).await {
                    Ok(()) => break,
                    Err(ClusterError::Unavailable(e)) if retries < retries_max => {
                        retries += 1;
                        tracing::warn!(error = %e, retries, "shared store write failed; retrying");
                        tokio::time::sleep(Duration::from_millis(WRITE_RETRY_MS)).await;
                    }
                    Err(e) => {
                        self.fence(&e);
                        return;
                    }
                }
            }
            self.committed(applied);
        }
    }

    fn written(&self) -> MutexGuard<'_, Written> {
        // Plain assignments and queue moves: a panic leaves it whole.
        self.written.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records that the first `applied` calls' changes are committed.
    fn committed(&self, applied: u64) {
        let mut w = self.written();
        if applied > w.upto {
            w.upto = applied;
        }
        drop(w);
        self.answer_waiters();
    }

    /// Answers, in call order, the waiters whose changes are committed,
    /// and every waiter once the node is fenced.
    fn answer_waiters(&self) {
        let mut w = self.written();
        let fenced = self.is_fenced();
        while let Some(&(target, _)) = w.waiters.front() {
            if !fenced && target > w.upto {
                break;
            }
            let (_, tx) = w.waiters.pop_front().expect("a front waiter");
            let _ = tx.send(!fenced);
        }
    }
}

impl Store for NodeStore {
    fn apply(&self, changes: &[Change]) -> Result<(), StoreError> {
        if self.is_fenced() {
            return Err(StoreError(format!("node {} is fenced", self.node)));
        }
        let mut p = self.pending();
        p.changes.extend_from_slice(changes);
        p.applied += 1;
        drop(p);
        self.wake.notify_one();
        Ok(())
    }

    fn flush(&self) -> Pin<Box<dyn Future<Output = Result<(), StoreError>> + Send + '_>> {
        let target = self.pending().applied;
        Box::pin(async move {
            let fenced = || StoreError(format!("node {} is fenced", self.node));
            let answer = {
                // Fencing sets the flag before it answers the waiters
                // under this lock: a waiter queued here is answered.
                let mut w = self.written();
                if self.is_fenced() {
                    return Err(fenced());
                }
                if w.upto >= target {
                    return Ok(());
                }
                let (tx, rx) = oneshot::channel();
                w.waiters.push_back((target, tx));
                rx
            };
            match answer.await {
                Ok(true) => Ok(()),
                Ok(false) | Err(_) => Err(fenced()),
            }
        })
    }

    fn load(&self) -> Result<Snapshot, StoreError> {
        let mut joined = self.joined.lock().unwrap_or_else(|p| p.into_inner());
        Ok(joined.take().unwrap_or_default())
    }
}

/// Renews the lease every third of it, takes over lapsed nodes' jobs and
/// learns trust written elsewhere. Fences the node once it could not renew
/// for half its lease.
pub async fn run_lease(c: Coordinator, link: Arc<ClusterLink>, store: Arc<NodeStore>) {
    let every = Duration::from_millis((link.node_lease_ms / 3).max(1) as u64);
    let mut last_renewed_ms = c.now_ms();
    loop {
        tokio::time::sleep(every).await;
        if store.is_fenced() {
            return;
        }
        let now_ms = c.now_ms();
        match link
            .shared
            .renew(&link.node, now_ms, link.node_lease_ms)
            .await
        {
            Ok(()) => last_renewed_ms = now_ms,
            Err(e @ ClusterError::Fenced { .. }) => return store.fence(&e),
            Err(e) => {
                tracing::warn!(error = %e, "lease renewal failed");
                if now_ms - last_renewed_ms >= link.node_lease_ms / 2 {
                    return store.fence(&e);
                }
                continue;
            }
        }
        match link.shared.take_over_lapsed(&link.node, now_ms).await {
            Ok(jobs) if !jobs.is_empty() => {
                tracing::warn!(
                    jobs = jobs.len(),
                    "recovering jobs of a node whose lease lapsed"
                );
                let jobs = fast_first(jobs);
                c.with(|core, now_ms| core.recover(jobs, now_ms));
            }
            Ok(_) => {}
            Err(e @ ClusterError::Fenced { .. }) => return store.fence(&e),
            Err(e) => tracing::warn!(error = %e, "take-over failed"),
        }
    }
}

/// Jobs to recover, FAST before CHEAP (otherwise in the order given):
/// `Core::recover` places them one at a time, so a CHEAP job placed first
/// would take an idle worker that a FAST one taken over with it could have
/// had (the core's tier-order invariant).
pub fn fast_first(mut jobs: Vec<crate::core::Job>) -> Vec<crate::core::Job> {
    jobs.sort_by_key(|j| crate::cluster::tier_rank(j.tier));
    jobs
}

/// Writes what is connected here to the shared presence whenever a worker
/// registers or leaves (and again every lease renewal period, in case a
/// write failed).
pub async fn run_presence(c: Coordinator, link: Arc<ClusterLink>, store: Arc<NodeStore>) {
    let every = Duration::from_millis((link.node_lease_ms / 3).max(1) as u64);
    let mut written = None;
    loop {
        tokio::select! {
            biased;
            _ = link.presence_wake.notified() => {}
            _ = tokio::time::sleep(every) => {}
        }
        if store.is_fenced() {
            return;
        }
        let now = c.read(|core| core.presence());
        if written.as_ref() == Some(&now) {
            continue;
        }
        match link.shared.set_presence(&link.node, &now).await {
            Ok(()) => written = Some(now),
            Err(e) => tracing::warn!(error = %e, "presence write failed"),
        }
    }
}

/// Whether a PRIVATE submission's user has a trusted worker connected to
/// another node (and none here): then this node admits it for that one.
/// False outside cluster mode, for PUBLIC jobs, and when the shared store
/// cannot say (the job is then refused as on one node).
pub async fn trusted_elsewhere(c: &Coordinator, submission: &protocol::api::JobSubmission) -> bool {
    let Some(link) = c.cluster() else {
        return false;
    };
    if submission.privacy_class != protocol::api::PrivacyClass::Private {
        return false;
    }
    learn_trust_of(c, &submission.user_id).await;
    let (here, keys) = c.read(|core| {
        let here = core.trusted_online_here(&submission.user_id, submission.job_type);
        let keys: Vec<String> = core
            .trusted_providers(&submission.user_id)
            .into_iter()
            .map(|e| e.provider_pubkey)
            .collect();
        (here, keys)
    });
    if here || keys.is_empty() {
        return false;
    }
    match link.shared.present(&keys, submission.job_type).await {
        Ok(present) => present,
        Err(e) => {
            tracing::warn!(error = %e, "presence lookup failed");
            false
        }
    }
}

/// Workers online for `GET /v1/health`: the whole cluster's in cluster
/// mode (from the shared presence), else this coordinator's.
pub async fn workers_online(c: &Coordinator) -> u64 {
    let here = c.read(|core| core.workers_online()) as u64;
    let Some(link) = c.cluster() else {
        return here;
    };
    match link.shared.workers_online().await {
        Ok(all) => all,
        Err(e) => {
            tracing::warn!(error = %e, "presence count failed");
            here
        }
    }
}

/// Learns trust entries other nodes wrote, then claims pool jobs for the
/// node's idle workers. The pool may hold
/// something after a notification, after a claim that got all it asked
/// for, and at every interval (which also fails due pool jobs).
pub async fn run_claims(c: Coordinator, link: Arc<ClusterLink>, store: Arc<NodeStore>) {
    let mut pool = link.shared.pool_changed();
    let mut maybe_more = true;
    let mut trust_version = 0;
    let interval = Duration::from_millis(CLAIM_INTERVAL_MS);
    loop {
        let mut due = false;
        tokio::select! {
            biased;
            changed = pool.changed() => {
                if changed.is_err() {
                    // The notifications ended; the interval still claims.
                    pool = watch::channel(0).1;
                }
                maybe_more = true;
            }
            _ = link.claim_wake.notified() => {}
            _ = tokio::time::sleep(interval) => {
                maybe_more = true;
                due = true;
            }
        }
        if store.is_fenced() {
            return;
        }
        if !maybe_more {
            continue;
        }
        // Trust first: a pairing made on another node names new PRIVATE
        // jobs this node's workers may claim.
        match link.shared.trust_after(trust_version).await {
            Ok((entries, version)) => {
                trust_version = version;
                if !entries.is_empty() {
                    c.with(|core, _| core.learn_trust(entries));
                }
            }
            Err(e) => tracing::warn!(error = %e, "trust sync failed"),
        }
        if due {
            if let Err(e) = fail_due(&c, &link).await {
                if matches!(e, ClusterError::Fenced { .. }) {
                    return store.fence(&e);
                }
                tracing::warn!(error = %e, "claim of due jobs failed");
            }
        }
        let want = c.read(|core| core.want(CLAIM_BATCH_MAX));
        if want.max == 0 {
            continue;
        }
        let now_ms = c.now_ms();
        match link.shared.claim(&link.node, &want, now_ms).await {
            Ok(jobs) => {
                maybe_more = jobs.len() == want.max;
                if !jobs.is_empty() {
                    c.with(|core, now_ms| core.adopt(jobs, now_ms));
                }
            }
            Err(e @ ClusterError::Fenced { .. }) => return store.fence(&e),
            Err(e) => tracing::warn!(error = %e, "claim failed"),
        }
    }
}

/// Claims pool jobs past their pending deadline, whatever their kind, in
/// batches until none is left, and fails them (`Core::adopt`): the pool's
/// pending timers, fired by whichever node looks first.
async fn fail_due(c: &Coordinator, link: &ClusterLink) -> Result<(), ClusterError> {
    let due_only = crate::cluster::Want {
        max: CLAIM_BATCH_MAX,
        ..Default::default()
    };
    loop {
        let jobs = link.shared.claim(&link.node, &due_only, c.now_ms()).await?;
        let full = jobs.len() == CLAIM_BATCH_MAX;
        if !jobs.is_empty() {
            c.with(|core, now_ms| core.adopt(jobs, now_ms));
        }
        if !full {
            return Ok(());
        }
    }
}

/// The metrics text with the node's info series added (before the
/// OpenMetrics `# EOF`), so every scrape names the node.
pub fn with_node_info(mut text: String, node: &str) -> String {
    let info = format!(
        "# HELP coordinator_node_info The node of a cluster this coordinator is.\n\
         # TYPE coordinator_node_info gauge\n\
         coordinator_node_info{{node=\"{node}\"}} 1\n"
    );
    let at = text.rfind("# EOF").unwrap_or(text.len());
    text.insert_str(at, &info);
    text
}

/// The payment gate's nonce store in cluster mode: every reservation is a
/// row of the shared store, so one payment buys one job across nodes. The
/// spend is written with the job it bought (`Change::NonceSpent` rides in
/// the same batch), so `mark_spent` has nothing left to do.
pub struct SharedNonces {
    pub node: NodeId,
    pub shared: Arc<dyn SharedStore>,
}

impl SharedNonces {
    /// Runs a shared-store call from the gate's synchronous interface: on a
    /// multi-threaded runtime (a real process) by blocking this worker
    /// thread, as the SQLite store's nonce statements do; on the
    /// simulation's current-thread runtime the in-memory store answers at
    /// once.
    fn call<T>(&self, call: crate::cluster::Call<'_, T>) -> Result<T, ClusterError> {
        use tokio::runtime::{Handle, RuntimeFlavor};
        let handle = Handle::current();
        match handle.runtime_flavor() {
            RuntimeFlavor::CurrentThread => {
                let mut call = call;
                let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
                match call.as_mut().poll(&mut cx) {
                    std::task::Poll::Ready(out) => out,
                    std::task::Poll::Pending => Err(ClusterError::Unavailable(
                        "a blocking store call on a current-thread runtime".into(),
                    )),
                }
            }
            _ => tokio::task::block_in_place(|| handle.block_on(call)),
        }
    }
}

impl x402::NonceStore for SharedNonces {
    fn check_and_mark(
        &self,
        key: x402::NonceKey,
        valid_before: u64,
    ) -> Result<(), x402::NonceUsed> {
        match self.call(self.shared.reserve_nonce(&self.node, key, valid_before)) {
            Ok(true) => Ok(()),
            Ok(false) => Err(x402::NonceUsed),
            Err(e) => {
                // Refusing is safe: the payer may retry; accepting could
                // let one payment buy two jobs.
                tracing::error!(error = %e, "payment nonce reservation failed");
                Err(x402::NonceUsed)
            }
        }
    }

    fn mark_spent(&self, _key: &x402::NonceKey) {}

    fn release(&self, key: &x402::NonceKey) {
        if let Err(e) = self.call(self.shared.release_nonce(&self.node, *key)) {
            tracing::error!(error = %e, "payment nonce release failed");
        }
    }

    /// Expired rows are left to the operator's retention for now: a row is
    /// small and refusing an expired payment does not need it.
    fn purge_expired(&self, _now_seconds: u64) {}

    fn state(&self, _key: &x402::NonceKey) -> Option<x402::replay::NonceState> {
        None
    }
}

/// Log lines that name the node: a text line starts with `node=ID `, a
/// JSON object gets a `"node"` field first.
pub struct NodeLogs<F> {
    pub node: NodeId,
    pub inner: F,
}

impl<S, N, F> tracing_subscriber::fmt::FormatEvent<S, N> for NodeLogs<F>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
    F: tracing_subscriber::fmt::FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let mut line = String::new();
        let into = tracing_subscriber::fmt::format::Writer::new(&mut line);
        self.inner.format_event(ctx, into, event)?;
        match line.strip_prefix('{') {
            Some(rest) => {
                let node = serde_json::to_string(&self.node).map_err(|_| std::fmt::Error)?;
                write!(writer, "{{\"node\":{node},{rest}")
            }
            None => write!(writer, "node={} {line}", self.node),
        }
    }
}

/// How often a held poll on a job another node holds reads it again.
pub const REMOTE_POLL_INTERVAL_MS: u64 = 100;

/// A job as the shared store last committed it, for a poll on a node that
/// does not hold it; `None` outside cluster mode. With `wait_ms`, the poll
/// is held as on the job's own node, until its status changes or the wait
/// ends, reading the store every [`REMOTE_POLL_INTERVAL_MS`] (no per-job
/// notification yet); at most `held_polls_max` such polls at once, beyond
/// which they are answered at once.
pub async fn shared_record(
    c: &Coordinator,
    id: uuid::Uuid,
    wait_ms: Option<u64>,
) -> Result<Option<protocol::api::JobRecord>, ClusterError> {
    let Some(link) = c.cluster() else {
        return Ok(None);
    };
    let Some(mut job) = link.shared.job(id).await? else {
        return Ok(None);
    };
    let wait = Duration::from_millis(wait_ms.unwrap_or(0));
    let seen = job.status;
    let permit = link.remote_polls.try_acquire();
    if wait.is_zero() || seen.is_terminal() || c.is_stopping() || permit.is_err() {
        return Ok(Some(job.record()));
    }
    let deadline = tokio::time::Instant::now() + wait;
    let every = Duration::from_millis(REMOTE_POLL_INTERVAL_MS);
    while job.status == seen && !c.is_stopping() {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            break;
        }
        tokio::time::sleep(left.min(every)).await;
        match link.shared.job(id).await? {
            Some(latest) => job = latest,
            None => return Ok(None),
        }
    }
    Ok(Some(job.record()))
}

/// The job a payment bought, from the shared store, if it is this
/// submission on this tier, with the `PAYMENT-RESPONSE` it was answered
/// with: a retry on any node gets the same answer. `None` outside cluster
/// mode.
pub async fn shared_paid_job(
    c: &Coordinator,
    nonce: x402::NonceKey,
    submission: &protocol::api::JobSubmission,
    tier: protocol::api::Tier,
) -> Option<(uuid::Uuid, String)> {
    let link = c.cluster()?;
    let job = match link.shared.paid_job(nonce).await {
        Ok(job) => job?,
        Err(e) => {
            tracing::error!(error = %e, "paid job lookup failed");
            return None;
        }
    };
    let paid_with = job.paid_with.as_ref()?;
    (*job.submission == *submission && job.tier == tier)
        .then(|| (job.id, paid_with.response_header.clone()))
}

/// Cluster mode, before a pairing claim: makes the code's stored state the
/// one this node's core judges, and claims it in the shared store first
/// (compare-and-set), so of two nodes claiming one code only one succeeds.
/// Returns the pairing for the core to learn in the same event as its
/// claim (`None`: nothing to learn, outside cluster mode too). A client
/// over its failure budget is left to the core's 429.
pub async fn pairing_for_claim(
    c: &Coordinator,
    code: &str,
    provider_pubkey: Option<&str>,
    client: &str,
) -> Result<Option<crate::trust::Pairing>, ClusterError> {
    let Some(link) = c.cluster() else {
        return Ok(None);
    };
    if !c.with(|core, now_ms| core.claim_allowed(client, now_ms)) {
        return Ok(None);
    }
    let code = code.trim().to_ascii_lowercase();
    let Some(stored) = link.shared.pairing(&code).await? else {
        return Ok(None);
    };
    let now_ms = c.now_ms();
    let (Some(key), None, true) = (
        provider_pubkey,
        &stored.claimed_by,
        now_ms < stored.expires_at_ms,
    ) else {
        return Ok(Some(stored));
    };
    let mut claimed = stored.clone();
    claimed.claimed_by = Some(key.to_owned());
    claimed.claimed_at_ms = Some(now_ms);
    if link
        .shared
        .swap_pairing(&link.node, &stored, &claimed)
        .await?
    {
        // Won: the core claims the unclaimed code in its event.
        return Ok(Some(stored));
    }
    // Another node claimed it first: the core answers `already_claimed`.
    link.shared.pairing(&code).await
}

/// Cluster mode: brings in the user's trust entries as the shared store
/// holds them now, so a pairing claimed on another node a moment ago
/// counts here at once (the notification-driven sync may not have run
/// yet). Does nothing outside cluster mode; a store error leaves the
/// synced state.
pub async fn learn_trust_of(c: &Coordinator, user_id: &str) {
    let Some(link) = c.cluster() else {
        return;
    };
    match link.shared.trust_of(user_id).await {
        Ok(entries) if !entries.is_empty() => c.with(|core, _| core.learn_trust(entries)),
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "trust lookup failed"),
    }
}

/// Retention in cluster mode: every `RETENTION_INTERVAL_MS`, forgets this
/// node's terminal jobs created more than `hours` ago and deletes them, and
/// expired payment nonces, from the shared store (every node does it; the
/// deletes are idempotent).
pub async fn run_retention(c: Coordinator, link: Arc<ClusterLink>, hours: u64) {
    let retention_ms = i64::try_from(hours.saturating_mul(3_600_000)).unwrap_or(i64::MAX);
    let every = Duration::from_millis(crate::server::RETENTION_INTERVAL_MS);
    loop {
        tokio::time::sleep(every).await;
        let now_ms = c.now_ms();
        let before_ms = now_ms.saturating_sub(retention_ms);
        c.with(|core, _| core.forget_terminal_jobs(before_ms));
        let now_s = u64::try_from(now_ms / 1000).unwrap_or(0);
        match link.shared.purge(before_ms, now_s).await {
            Ok(0) => {}
            Ok(deleted) => tracing::info!(deleted, "retention: old terminal jobs deleted"),
            Err(e) => tracing::error!(error = %e, "retention purge failed"),
        }
    }
}
