//! The composition root: the one way a coordinator is started, by the
//! binary, the simulation, the benches and the tests alike.
//!
//! [`start`] turns validated [`Settings`] and the injected [`Parts`] (clock,
//! RNG, how the process runs, outbound payment settlement) into a running
//! coordinator: the store opened and recovered, payments gated, the timer
//! and retention tasks running. [`Server::serve`] then serves the HTTP API
//! and the worker WebSocket on any `axum::serve::Listener` (a TCP socket,
//! or the simulation's in-memory listener) through the same `axum::serve`,
//! upgrade path and `ConnectInfo` extraction.
//!
//! A server ends one of two ways: [`Server::shutdown`] (graceful: stop
//! accepting, close worker sessions in session order and wait until they
//! have ended, commit what is pending) or [`Server::crash`] (as `kill -9`:
//! the store writes nothing more and every task of the server stops; what
//! was not yet committed is lost, as it would be). On shutdown every task
//! the server spawns ends when told to, and a dropped server tells them
//! (mini-redis's shutdown and drop guard); only a crash kills them.

use crate::clock::Clock;
use crate::cluster::postgres::PgShared;
use crate::cluster::{ClusterLink, NodeId, SharedStore};
use crate::config::{is_caip2, Config};
use crate::connections::Bounds;
use crate::node::{self, ClusterSettings, Fence, NodeStore, SharedNonces};
use crate::retention::Retention;
use crate::shell::Coordinator;
use crate::store::sqlite::{SqliteError, SqliteStore, WriterRuntime};
use crate::store::{MemoryStore, Store, StoreError};
use rand_chacha::ChaCha20Rng;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// `db` value for no database (see [`Settings::db`]).
pub const NO_STORE: &str = "none";

/// What a deployment decides: everything that comes from flags.
#[derive(Debug, Clone)]
pub struct Settings {
    pub config: Config,
    /// SQLite database: a file path, `:memory:`, or a SQLite URI
    /// (`file:/name?vfs=memdb` shares an in-memory database across
    /// restarts within one process, as the simulation does). [`NO_STORE`]
    /// keeps records in plain memory with no database at all, for
    /// benchmarks that measure everything but the store.
    pub db: String,
    /// x402 payment gating of the commit endpoints; `None` means off.
    pub payment: Option<x402::PaymentConfig>,
    /// Retention (`retention.rs`): completed and failed jobs older
    /// than this many hours (0: no age limit) or the oldest of them beyond
    /// the kept budget's high-water mark are deleted. `None`: no retention
    /// task (tests, the simulation); the kept budget then refuses commits
    /// at its limit.
    pub retention_hours: Option<u64>,
    /// Where `GET /metrics` is served.
    pub metrics_at: MetricsAt,
    /// Cluster mode: a node of a coordinator on PostgreSQL (then `db` is
    /// not used). See docs/cluster.md.
    pub cluster: Option<ClusterSettings>,
}

/// Where `GET /metrics` is served.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum MetricsAt {
    /// On the API's listener, beside everything else.
    #[default]
    Api,
    /// Only on a listener of its own ([`Server::serve_metrics`]), so an
    /// operator can keep it off the public address; the API answers 404.
    Apart,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            config: Config::default(),
            db: ":memory:".into(),
            payment: None,
            retention_hours: None,
            metrics_at: MetricsAt::Api,
            cluster: None,
        }
    }
}

/// How the process runs, which decides where blocking work goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runtime {
    /// A real process: the store's group-commit writer is an OS thread,
    /// since fsync blocks.
    Os,
    /// The deterministic simulation: one current-thread runtime, the
    /// writer is a task of it, and the core checks its invariants after
    /// every event.
    Simulation,
}

/// What is injected rather than configured.
pub struct Parts {
    pub clock: Arc<dyn Clock>,
    pub rng: ChaCha20Rng,
    pub runtime: Runtime,
    /// Settles payments instead of the facilitator named in the settings
    /// (outbound network: the simulation's facilitator is in-process).
    pub settler: Option<Arc<dyn x402::Settler>>,
}

impl Parts {
    /// A real process's parts with a chosen clock and RNG.
    pub fn new(clock: Arc<dyn Clock>, rng: ChaCha20Rng) -> Self {
        Self {
            clock,
            rng,
            runtime: Runtime::Os,
            settler: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("invalid settings: {0}")]
    Settings(String),
    #[error("cannot open the database {db}: {source}")]
    OpenStore {
        db: String,
        #[source]
        source: SqliteError,
    },
    #[error("cannot restore from {db}: {source}")]
    Restore {
        db: String,
        #[source]
        source: StoreError,
    },
    #[error("payment facilitator {url}: {message}")]
    Facilitator { url: String, message: String },
    #[error("cannot join the cluster: {0}")]
    Cluster(String),
}

impl Settings {
    /// Checks and clamps the settings in one place: what `start` runs with
    /// is always consistent, whoever built the settings.
    pub fn validate(mut self) -> Result<Self, StartError> {
        let invalid = |m: String| Err(StartError::Settings(m));
        let network = &self.config.network;
        if !is_caip2(network) {
            return invalid(format!(
                "network {network:?} is not a CAIP-2 chain id (namespace:reference, e.g. eip155:84532)"
            ));
        }
        for url in &self.config.public_urls {
            protocol::origin::worker_origin(url)
                .map_err(|e| StartError::Settings(format!("public URL: {e}")))?;
        }
        let t = &mut self.config.timing;
        t.attempts_max = t.attempts_max.max(1);
        if t.pending_timeout_ms <= 0 || t.lease_ms <= 0 {
            return invalid("pending timeout and lease must be positive".into());
        }
        // Workers heartbeat at the interval the welcome gives them; a timeout
        // no longer than it would close every idle, healthy session (found by
        // the swarm: such a world never kept a worker online).
        if t.heartbeat_timeout_ms <= t.heartbeat_interval_ms {
            return invalid(format!(
                "the heartbeat timeout ({} ms) must be longer than the heartbeat interval ({} ms), or every idle worker is disconnected",
                t.heartbeat_timeout_ms, t.heartbeat_interval_ms
            ));
        }
        let l = &mut self.config.limits;
        l.handshakes_max = l.handshakes_max.max(1);
        l.handshakes_per_client_max = l.handshakes_per_client_max.clamp(1, l.handshakes_max);
        l.body_bytes_max = l.body_bytes_max.max(1024);
        // An output must fit in a frame with its receipt (4 KiB of room, or
        // half of a small frame); a share is a share.
        let receipt_room = (l.frame_bytes_max / 2).min(4096);
        l.output_bytes_max = l
            .output_bytes_max
            .min(l.frame_bytes_max.saturating_sub(receipt_room));
        l.kept_share_per_client_percent = l.kept_share_per_client_percent.clamp(1, 100);
        l.kept_min_ms = l.kept_min_ms.max(0);
        if let Some(payment) = &self.payment {
            if payment.network != self.config.network {
                return invalid(format!(
                    "payments are for {} but the coordinator serves {}",
                    payment.network, self.config.network
                ));
            }
            payment
                .validate()
                .map_err(|e| StartError::Settings(format!("payment settings: {e}")))?;
        }
        Ok(self)
    }
}

/// A started coordinator and the tasks it owns.
pub struct Server {
    coordinator: Coordinator,
    /// `None` with [`NO_STORE`] and for a node.
    store: Option<Arc<SqliteStore>>,
    /// Timer, retention and node tasks (and the metrics listener): each
    /// ends once told to, at the latest when the server is dropped.
    tasks: Tasks,
    serving: Option<JoinHandle<()>>,
    metrics_at: MetricsAt,
    /// A node's: notified once when the shared store fences it (in the
    /// simulation; a real process exits instead).
    fenced: Option<Arc<tokio::sync::Notify>>,
    /// A node's store, halted by [`Server::crash`].
    node_store: Option<Arc<NodeStore>>,
}

/// The server's background tasks and the signal that ends them (as
/// mini-redis's `DbDropGuard`: dropping this tells every task to end, so a
/// dropped server leaves no task holding its coordinator).
struct Tasks {
    stop: watch::Sender<bool>,
    handles: Vec<JoinHandle<()>>,
}

impl Tasks {
    fn new() -> Self {
        Self {
            stop: watch::Sender::new(false),
            handles: Vec::new(),
        }
    }

    /// Spawns `task`, which runs until the server tells its tasks to end:
    /// it is then dropped at the await it is at, as a killed process's
    /// work stops, and its task ends by itself.
    fn spawn(&mut self, task: impl Future<Output = ()> + Send + 'static) {
        let handle = self.spawn_apart(task);
        self.handles.push(handle);
    }

    /// Spawns `task` as [`Tasks::spawn`] does, its handle kept by the caller.
    fn spawn_apart(&self, task: impl Future<Output = ()> + Send + 'static) -> JoinHandle<()> {
        let mut stop = self.stop.subscribe();
        tokio::spawn(async move {
            tokio::select! {
                biased;
                _ = stop.wait_for(|stopped| *stopped) => {}
                () = task => {}
            }
        })
    }

    /// Tells every task to end; they do at their next turn.
    fn stop(&self) {
        self.stop.send_replace(true);
    }

    /// Tells every task to end and waits until they have.
    async fn stopped(mut self) {
        self.stop();
        for task in std::mem::take(&mut self.handles) {
            let _ = task.await;
        }
    }
}

impl Drop for Tasks {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Where a coordinator's records live: a store of its own, or the shared
/// store of a cluster it joins as a node.
enum Backing {
    Own,
    Node {
        cluster: ClusterSettings,
        shared: Arc<dyn SharedStore>,
    },
}

/// A store opened (and, for a node, joined), not yet restored from.
struct Opened {
    records: Arc<dyn Store>,
    /// Where the payment gate keeps used nonces.
    nonces: Arc<dyn x402::NonceStore>,
    /// What `Restore` errors name: the database or the cluster's URL.
    db: String,
    kind: OpenedKind,
}

enum OpenedKind {
    /// A store of the process's own: SQLite, or `None` with [`NO_STORE`].
    Own(Option<Arc<SqliteStore>>),
    Node {
        cluster: ClusterSettings,
        shared: Arc<dyn SharedStore>,
        store: Arc<NodeStore>,
        fenced: Arc<tokio::sync::Notify>,
    },
}

/// Opens the store the settings name (SQLite, memory, or a cluster's
/// PostgreSQL), restores the state it holds, gates payments and starts the
/// timer (and retention, and node) tasks. Serve it with [`Server::serve`].
pub async fn start(settings: Settings, parts: Parts) -> Result<Server, StartError> {
    let settings = settings.validate()?;
    let backing = match settings.cluster.clone() {
        Some(cluster) => {
            let shared = PgShared::connect(&cluster.url, cluster.schema.as_deref())
                .await
                .map_err(|e| StartError::Cluster(e.to_string()))?;
            Backing::Node { cluster, shared }
        }
        None => Backing::Own,
    };
    start_on(settings, parts, backing).await
}

/// Starts a node of a cluster on `shared` (the in-memory store stands in
/// for PostgreSQL in the simulation and tests): [`start`] with the shared
/// store given rather than connected to.
pub async fn start_node(
    settings: Settings,
    parts: Parts,
    cluster: ClusterSettings,
    shared: Arc<dyn SharedStore>,
) -> Result<Server, StartError> {
    let settings = settings.validate()?;
    start_on(settings, parts, Backing::Node { cluster, shared }).await
}

/// The one start: open (or join), restore, gate payments, start the tasks.
async fn start_on(
    settings: Settings,
    parts: Parts,
    backing: Backing,
) -> Result<Server, StartError> {
    let opened = match backing {
        Backing::Own => open_own(&settings, parts.runtime)?,
        Backing::Node { cluster, shared } => {
            join_node(cluster, shared, parts.runtime, parts.clock.now_ms()).await?
        }
    };
    let mut config = settings.config.clone();
    config.check_invariants |= parts.runtime == Runtime::Simulation;
    let rng = match &opened.kind {
        OpenedKind::Own(_) => parts.rng,
        OpenedKind::Node { store, .. } => node_rng(parts.rng, store.restores_state()),
    };
    let coordinator = Coordinator::open(config, parts.clock, rng, opened.records)
        .await
        .map_err(|source| StartError::Restore {
            db: opened.db,
            source,
        })?;
    exit_when_poisoned(&coordinator, parts.runtime);
    let started = match opened.kind {
        OpenedKind::Own(store) => {
            if let Some(store) = &store {
                store.record_metrics(coordinator.metrics().store());
                if parts.runtime == Runtime::Simulation {
                    store.after_commit(coordinator.rows_check());
                }
            }
            Started::Own(store)
        }
        OpenedKind::Node {
            cluster,
            shared,
            store,
            fenced,
        } => Started::Node {
            link: link_node(&coordinator, &cluster, &shared, &store),
            node_id: cluster.node_id,
            store,
            fenced,
        },
    };
    if let Some(payment) = settings.payment.clone() {
        let settler = match parts.settler {
            Some(settler) => settler,
            None => settler_for(&payment)?,
        };
        // Used nonces live in the same database as the jobs, so a restart
        // never lets a payment buy a second job.
        let gate = x402::PaymentGate::new(payment, opened.nonces, settler);
        coordinator
            .enable_payments(gate)
            .expect("a new coordinator has no payment gate yet");
    }
    Ok(with_tasks(coordinator, started, &settings))
}

/// A restored coordinator's backing, as its tasks need it.
enum Started {
    Own(Option<Arc<SqliteStore>>),
    Node {
        node_id: NodeId,
        link: Arc<ClusterLink>,
        store: Arc<NodeStore>,
        fenced: Arc<tokio::sync::Notify>,
    },
}

/// The server around a started coordinator, with its tasks running: the
/// timer task, and retention, or a node's tasks.
fn with_tasks(coordinator: Coordinator, started: Started, settings: &Settings) -> Server {
    let mut tasks = Tasks::new();
    tasks.spawn(crate::shell::run_timers(coordinator.clone()));
    tasks.spawn(crate::shell::run_settlements(coordinator.clone()));
    let (store, fenced, node_store) = match started {
        Started::Own(store) => {
            if let (Some(hours), Some(store)) = (settings.retention_hours, &store) {
                tasks.spawn(apply_retention(coordinator.clone(), store.clone(), hours));
            }
            (store, None, None)
        }
        Started::Node {
            node_id,
            link,
            store,
            fenced,
        } => {
            tracing::info!(node = %node_id, "joined the cluster");
            let hours = settings.retention_hours;
            spawn_node_tasks(&mut tasks, &coordinator, link, &store, hours);
            (None, Some(fenced), Some(store))
        }
    };
    Server {
        coordinator,
        store,
        tasks,
        serving: None,
        metrics_at: settings.metrics_at,
        fenced,
        node_store,
    }
}

/// Opens the process's own store: SQLite at `db`, or plain memory with
/// [`NO_STORE`]; releases the payment reservations a crash left.
fn open_own(settings: &Settings, runtime: Runtime) -> Result<Opened, StartError> {
    let writer = match runtime {
        Runtime::Os => WriterRuntime::Thread,
        Runtime::Simulation => WriterRuntime::Task,
    };
    let open_failed = |source| StartError::OpenStore {
        db: settings.db.clone(),
        source,
    };
    let (store, records, nonces): (_, Arc<dyn Store>, Arc<dyn x402::NonceStore>) =
        if settings.db == NO_STORE {
            let nonces = Arc::new(x402::InMemoryNonceStore::default());
            (None, Arc::new(MemoryStore::default()), nonces)
        } else {
            let store = SqliteStore::open_on(&settings.db, writer)
                .map(Arc::new)
                .map_err(open_failed)?;
            (Some(store.clone()), store.clone(), store)
        };
    if let Some(store) = &store {
        // Recovery of payments: no commit is in flight yet.
        let released = store.release_reserved_nonces().map_err(open_failed)?;
        if released > 0 {
            tracing::warn!(released, "payment reservations left by a crash released");
        }
    }
    Ok(Opened {
        records,
        nonces,
        db: settings.db.clone(),
        kind: OpenedKind::Own(store),
    })
}

/// Joins the cluster on `shared` as `cluster.node_id`; the node's payment
/// nonces are the shared nonce rows.
async fn join_node(
    cluster: ClusterSettings,
    shared: Arc<dyn SharedStore>,
    runtime: Runtime,
    now_ms: i64,
) -> Result<Opened, StartError> {
    let fenced = Arc::new(tokio::sync::Notify::new());
    let fence: Fence = match runtime {
        // Another node may own this node's jobs now: stop at once, as a
        // crash would; a supervisor restarts the process, which joins again.
        Runtime::Os => Arc::new(|why| {
            eprintln!("error: {why}; stopping");
            std::process::exit(75);
        }),
        // The harness crashes the node when this fires (its supervisor).
        Runtime::Simulation => {
            let fenced = fenced.clone();
            Arc::new(move |_| fenced.notify_one())
        }
    };
    let joined = NodeStore::join(shared.clone(), &cluster, now_ms, fence).await;
    let store = joined.map_err(|e| StartError::Cluster(e.to_string()))?;
    let nonces = Arc::new(SharedNonces {
        node: cluster.node_id.clone(),
        shared: shared.clone(),
    });
    Ok(Opened {
        records: store.clone(),
        nonces,
        db: cluster.url.clone(),
        kind: OpenedKind::Node {
            cluster,
            shared,
            store,
            fenced,
        },
    })
}

/// Links a node's coordinator to its cluster and recovers the jobs its
/// node id held before.
fn link_node(
    coordinator: &Coordinator,
    cluster: &ClusterSettings,
    shared: &Arc<dyn SharedStore>,
    store: &NodeStore,
) -> Arc<ClusterLink> {
    let link = Arc::new(ClusterLink {
        node: cluster.node_id.clone(),
        shared: shared.clone(),
        node_lease_ms: cluster.node_lease_ms,
        claim_wake: tokio::sync::Notify::new(),
        presence_wake: tokio::sync::Notify::new(),
    });
    coordinator.join_cluster(link.clone());
    let held = store.take_held();
    if !held.is_empty() {
        tracing::warn!(
            jobs = held.len(),
            "recovering jobs this node id held before"
        );
        coordinator.with(|core, now_ms| core.recover(held, now_ms));
    }
    link
}

/// A node's lease, presence, claim and remote-watch tasks, and its
/// retention when asked for. See `node`.
fn spawn_node_tasks(
    tasks: &mut Tasks,
    c: &Coordinator,
    link: Arc<ClusterLink>,
    store: &Arc<NodeStore>,
    retention_hours: Option<u64>,
) {
    tasks.spawn(node::run_lease(c.clone(), link.clone(), store.clone()));
    tasks.spawn(node::run_presence(c.clone(), link.clone(), store.clone()));
    tasks.spawn(node::run_claims(c.clone(), link.clone(), store.clone()));
    tasks.spawn(node::run_remote_watch(
        c.clone(),
        link.clone(),
        store.clone(),
    ));
    if let Some(hours) = retention_hours {
        tasks.spawn(node::run_retention(c.clone(), link, hours));
    }
}

/// The RNG a node's core starts from. The core moves a seeded RNG to a
/// stream chosen by the state it restores, so that a restarted coordinator
/// does not draw the job ids it drew before (`core/restore.rs`): they are
/// in that state. A node restores only the jobs it still holds, and the
/// cluster's pairings and trust, not the jobs it committed and handed on;
/// so two generations of a seeded node (the simulation restarts one on
/// stream `generation`) could restore the same state and draw the same job
/// ids, and the second's new job would collide with the first's. Folding
/// the caller's stream into the key keeps the generations apart whatever
/// stream the core then picks. Stream 0 (a first start; an entropy-seeded
/// RNG in production) is left as it is.
fn node_rng(rng: ChaCha20Rng, restores_state: bool) -> ChaCha20Rng {
    use rand::SeedableRng;
    let stream = rng.get_stream();
    if !restores_state || stream == 0 {
        return rng;
    }
    let mut seed = rng.get_seed();
    for (byte, s) in seed.iter_mut().zip(stream.to_le_bytes()) {
        *byte ^= s;
    }
    let mut keyed = ChaCha20Rng::from_seed(seed);
    keyed.set_stream(stream);
    keyed
}

fn settler_for(payment: &x402::PaymentConfig) -> Result<Arc<dyn x402::Settler>, StartError> {
    Ok(match &payment.facilitator_url {
        Some(url) => Arc::new(
            x402::FacilitatorSettler::http(url, x402::settle::DEFAULT_FACILITATOR_TIMEOUT)
                .map_err(|e| StartError::Facilitator {
                    url: url.clone(),
                    message: e.to_string(),
                })?,
        ),
        None => {
            tracing::warn!("payments are verified locally and settled nowhere: no money moves (set --facilitator-url)");
            Arc::new(x402::LocalSettler)
        }
    })
}

impl Server {
    pub fn coordinator(&self) -> &Coordinator {
        &self.coordinator
    }

    /// A node's fence signal: notified once when the shared store fenced
    /// it (simulation only); `None` for a single coordinator.
    pub fn fenced(&self) -> Option<Arc<tokio::sync::Notify>> {
        self.fenced.clone()
    }

    /// The database, unless started with [`NO_STORE`].
    pub fn store(&self) -> Option<&Arc<SqliteStore>> {
        self.store.as_ref()
    }

    /// The whole API as an axum router, for tests that call it directly.
    pub fn app(&self) -> axum::Router {
        crate::api::app(self.coordinator.clone())
    }

    /// Serves the API on a TCP socket, with `TCP_NODELAY` on every
    /// connection: frames are small and latency matters, and without it an
    /// assign written right after a `result_accepted` waits for the
    /// worker's delayed ACK. Connections have a head deadline, a bounded
    /// head buffer and budgets in all and per address (`connections/mod.rs`).
    pub fn serve_tcp(&mut self, listener: tokio::net::TcpListener) {
        self.set_default_origins(listener.local_addr());
        let app = self.api_app();
        let bounds = self.enforced();
        let stopped = self.coordinator.stopped();
        // Small requests and answers: no waiting for a full segment.
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        assert!(self.serving.is_none(), "a server serves one listener");
        self.serving = Some(
            self.tasks
                .spawn_apart(crate::connections::serve(listener, app, bounds, stopped)),
        );
    }

    /// The worker origins of the address served, unless configured.
    fn set_default_origins(&self, local: std::io::Result<SocketAddr>) {
        let configured = !self.coordinator.worker_origins().is_empty();
        if let (false, Ok(addr)) = (configured, local) {
            let origins = listen_origins(addr);
            tracing::info!(
                ?origins,
                "no public URL set: workers must dial the address served"
            );
            self.coordinator.default_worker_origins(origins);
        }
    }

    /// The API as served: with `/metrics` unless it has a listener apart.
    fn api_app(&self) -> axum::Router {
        match self.metrics_at {
            MetricsAt::Api => self.app(),
            MetricsAt::Apart => crate::api::api(self.coordinator.clone()),
        }
    }

    /// The binary's connection bounds: this coordinator's limits, timed by
    /// its clock.
    fn enforced(&self) -> Bounds {
        Bounds::Enforced(
            Box::new(self.coordinator.config().clone()),
            self.coordinator.clock(),
        )
    }

    /// Serves the API on `listener` until [`Server::shutdown`], running
    /// `configure` on each accepted connection; worker sessions are
    /// upgraded from it, and handlers see each client's address. With
    /// `bounded`, the binary's head deadline, head size and connection
    /// budgets hold (a scenario's `http_bounds = true`); without, none
    /// (see [`Bounds::Off`]).
    pub fn serve<L>(
        &mut self,
        listener: L,
        bounded: bool,
        configure: impl FnMut(&mut L::Io) + Send + 'static,
    ) where
        L: axum::serve::Listener<Addr = SocketAddr>,
    {
        self.set_default_origins(listener.local_addr());
        let app = self.api_app();
        let listener = axum::serve::ListenerExt::tap_io(listener, configure);
        let stopped = self.coordinator.stopped();
        assert!(self.serving.is_none(), "a server serves one listener");
        let bounds = if bounded {
            self.enforced()
        } else {
            Bounds::Off
        };
        let serving = crate::connections::serve(listener, app, bounds, stopped);
        self.serving = Some(self.tasks.spawn_apart(serving));
    }

    /// Serves `GET /metrics` alone on `listener` (see [`MetricsAt::Apart`]),
    /// until the server ends.
    pub fn serve_metrics(&mut self, listener: tokio::net::TcpListener) {
        assert_eq!(self.metrics_at, MetricsAt::Apart, "metrics are on the API");
        let app = crate::api::metrics_only(self.coordinator.clone());
        let stopped = self.coordinator.stopped();
        self.tasks.spawn(async move {
            let served = axum::serve(listener, app)
                .with_graceful_shutdown(stopped)
                .await;
            if let Err(e) = served {
                tracing::error!(error = %e, "metrics server failed");
            }
        });
    }

    /// Graceful stop: stop accepting, ask every worker session to close (in
    /// session order), let serving drain, wait until every session has
    /// ended (a session gives its worker's jobs back as it ends), commit
    /// what is pending, then end the server's tasks and wait for them.
    pub async fn shutdown(self) {
        self.coordinator.shutdown();
        if let Some(serving) = self.serving {
            let _ = serving.await;
        }
        self.coordinator.sessions_ended().await;
        if let Err(e) = self.coordinator.durable().await {
            tracing::error!(error = %e, "last commit failed");
        }
        self.tasks.stopped().await;
    }

    /// Stops as a killed process does: nothing more reaches the store (what
    /// it had not committed is lost) and the server's own tasks are killed
    /// where they are. Its connections are the network's to cut.
    pub fn crash(self) {
        if let Some(store) = &self.store {
            store.halt();
        }
        if let Some(store) = &self.node_store {
            store.halt();
        }
        // As `kill -9`: every task and serving stop at once, aborted in
        // spawn order. (Not by the stop signal: a watch channel wakes its
        // tasks in another order than this, and the simulation's worlds
        // depend on the order a crash stops them; swarm seed 1288 changes.)
        for task in self.tasks.handles.iter().chain(&self.serving) {
            task.abort();
        }
    }
}

/// The worker origins of a coordinator with no public URL: the one of the
/// address it listens on, exactly (`localhost` is not added: it may resolve
/// to another socket, such as `[::1]` for a listener on `127.0.0.1`). A
/// listener on every interface (`0.0.0.0`, `::`) takes its family's
/// loopback: remote workers need `--public-url`.
pub fn listen_origins(addr: SocketAddr) -> Vec<String> {
    let mut addr = addr;
    if addr.ip().is_unspecified() {
        tracing::warn!(%addr, "listening on every interface with no --public-url: only workers dialling loopback can log in");
        let loopback = match addr {
            SocketAddr::V4(_) => std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
            SocketAddr::V6(_) => std::net::IpAddr::V6(std::net::Ipv6Addr::LOCALHOST),
        };
        addr.set_ip(loopback);
    }
    let origin = protocol::origin::worker_origin(&format!("ws://{addr}"))
        .expect("a socket address makes a URL");
    vec![origin]
}

/// Deletes finished jobs, from memory and from the database, when
/// [`Retention`] says so: by age every few minutes, by a ledger's
/// high-water mark within a second; the database deletes exactly the ids
/// the core forgot.
async fn apply_retention(c: Coordinator, store: Arc<SqliteStore>, hours: u64) {
    let mut retention = Retention::new(hours);
    let mut every = Retention::ticks();
    loop {
        every.tick().await;
        crate::buggify::stall(crate::buggify::Site::RetentionPurgeLate, 1_000).await;
        let forgotten = retention.pass(&c);
        if forgotten.ids.is_empty() {
            continue;
        }
        match store.purge_jobs(forgotten.ids.clone()) {
            Ok(()) => crate::retention::report(&c, &forgotten),
            Err(e) => tracing::error!(error = %e, "retention purge failed"),
        }
    }
}

/// A real process whose state lock a panic poisoned exits with status 70
/// (EX_SOFTWARE), as a crash would: a supervisor restarts it on its store
/// (in cluster mode its lease lapses and the others take its jobs), where
/// staying up would answer 500 to everything. Found live: a broken
/// invariant on take-over left a node up and serving 500s until its lease
/// task, the one that had panicked, let the lease lapse. The simulation
/// keeps the panic, which the harness reports.
fn exit_when_poisoned(coordinator: &Coordinator, runtime: Runtime) {
    if runtime == Runtime::Os {
        coordinator.on_poisoned(|| {
            tracing::error!("a panic left the coordinator's state half-changed: exiting");
            std::process::exit(70);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tasks running one task that holds the returned value until it ends.
    fn one_waiting_task() -> (Tasks, Arc<()>) {
        let held = Arc::new(());
        let mut tasks = Tasks::new();
        let kept = held.clone();
        tasks.spawn(async move {
            let _kept = kept;
            std::future::pending::<()>().await;
        });
        (tasks, held)
    }

    #[tokio::test]
    async fn dropped_tasks_end_and_let_go_of_what_they_hold() {
        let (tasks, held) = one_waiting_task();
        tokio::task::yield_now().await;
        assert_eq!(Arc::strong_count(&held), 2, "the task runs");
        drop(tasks);
        for _ in 0..3 {
            tokio::task::yield_now().await;
        }
        assert_eq!(Arc::strong_count(&held), 1, "the task ended");
    }

    #[tokio::test]
    async fn stopped_tasks_have_ended_when_stopped_returns() {
        let (tasks, held) = one_waiting_task();
        tasks.stopped().await;
        assert_eq!(Arc::strong_count(&held), 1);
    }

    #[test]
    fn the_default_origin_is_the_listen_address_itself() {
        let origin = |addr: &str| listen_origins(addr.parse().unwrap());
        assert_eq!(origin("127.0.0.1:8080"), ["ws://127.0.0.1:8080"]);
        assert_eq!(origin("127.0.0.1:80"), ["ws://127.0.0.1"]);
        assert_eq!(origin("[::1]:8080"), ["ws://[::1]:8080"]);
        assert_eq!(origin("10.1.2.3:9000"), ["ws://10.1.2.3:9000"]);
        // Every interface: only loopback, remote workers need --public-url.
        assert_eq!(origin("0.0.0.0:8080"), ["ws://127.0.0.1:8080"]);
        assert_eq!(origin("[::]:8080"), ["ws://[::1]:8080"]);
    }
}
