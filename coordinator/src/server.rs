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
//! accepting, close worker sessions in session order, commit what is
//! pending) or [`Server::crash`] (as `kill -9`: the store writes nothing
//! more and every task of the server stops; what was not yet committed is
//! lost, as it would be).

use crate::clock::Clock;
use crate::config::{is_caip2, Config};
use crate::retention::Retention;
use crate::shell::Coordinator;
use crate::store::sqlite::{SqliteError, SqliteStore, WriterRuntime};
use crate::store::{MemoryStore, Store, StoreError};
use rand_chacha::ChaCha20Rng;
use std::net::SocketAddr;
use std::sync::Arc;
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
    /// not used). See ARCHITECTURE.md, "Several nodes".
    pub cluster: Option<crate::node::ClusterSettings>,
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
    /// `None` with [`NO_STORE`].
    store: Option<Arc<SqliteStore>>,
    /// Timer and retention tasks (and the metrics listener); stopped when
    /// the server ends.
    tasks: Vec<JoinHandle<()>>,
    serving: Option<JoinHandle<()>>,
    metrics_at: MetricsAt,
    /// A node's: notified once when the shared store fences it (in the
    /// simulation; a real process exits instead).
    fenced: Option<Arc<tokio::sync::Notify>>,
    /// A node's store, halted by [`Server::crash`].
    node_store: Option<Arc<crate::node::NodeStore>>,
}

/// Opens the store, restores the state it holds, gates payments and starts
/// the timer (and retention) task. Serve it with [`Server::serve`].
pub async fn start(settings: Settings, parts: Parts) -> Result<Server, StartError> {
    let settings = settings.validate()?;
    if let Some(cluster) = settings.cluster.clone() {
        let shared =
            crate::cluster::postgres::PgShared::connect(&cluster.url, cluster.schema.as_deref())
                .await
                .map_err(|e| StartError::Cluster(e.to_string()))?;
        return start_node(settings, parts, cluster, shared).await;
    }
    let writer = match parts.runtime {
        Runtime::Os => WriterRuntime::Thread,
        Runtime::Simulation => WriterRuntime::Task,
    };
    let (store, records, nonces): (_, Arc<dyn Store>, Arc<dyn x402::NonceStore>) =
        if settings.db == NO_STORE {
            let nonces = Arc::new(x402::InMemoryNonceStore::default());
            (None, Arc::new(MemoryStore::default()), nonces)
        } else {
            let store = SqliteStore::open_on(&settings.db, writer)
                .map(Arc::new)
                .map_err(|source| StartError::OpenStore {
                    db: settings.db.clone(),
                    source,
                })?;
            (Some(store.clone()), store.clone(), store)
        };
    if let Some(store) = &store {
        // Recovery of payments: no commit is in flight yet.
        let released = store
            .release_reserved_nonces()
            .map_err(|source| StartError::OpenStore {
                db: settings.db.clone(),
                source,
            })?;
        if released > 0 {
            tracing::warn!(released, "payment reservations left by a crash released");
        }
    }
    let mut config = settings.config.clone();
    config.check_invariants |= parts.runtime == Runtime::Simulation;
    let coordinator = Coordinator::open(config, parts.clock, parts.rng, records)
        .await
        .map_err(|source| StartError::Restore {
            db: settings.db.clone(),
            source,
        })?;
    exit_when_poisoned(&coordinator, parts.runtime);
    if let Some(store) = &store {
        store.record_metrics(coordinator.metrics().store());
    }
    if let Some(payment) = settings.payment.clone() {
        let settler = match parts.settler {
            Some(settler) => settler,
            None => settler_for(&payment)?,
        };
        // Used nonces live in the same database as the jobs, so a restart
        // never lets a payment buy a second job.
        let gate = x402::PaymentGate::new(payment, nonces, settler);
        coordinator
            .enable_payments(gate)
            .expect("a new coordinator has no payment gate yet");
    }
    let mut tasks = vec![tokio::spawn(crate::shell::run_timers(coordinator.clone()))];
    if let (Some(hours), Some(store)) = (settings.retention_hours, &store) {
        tasks.push(tokio::spawn(apply_retention(
            coordinator.clone(),
            store.clone(),
            hours,
        )));
    }
    Ok(Server {
        coordinator,
        store,
        tasks,
        serving: None,
        metrics_at: settings.metrics_at,
        fenced: None,
        node_store: None,
    })
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

/// Starts a node of a cluster on `shared` (PostgreSQL in a process; the
/// in-memory store can stand in for it): joins, recovers what the node id
/// still held, gates payments on the shared nonce rows, and starts the
/// timer, lease and claim tasks. See the `node` module.
pub async fn start_node(
    settings: Settings,
    parts: Parts,
    cluster: crate::node::ClusterSettings,
    shared: Arc<dyn crate::cluster::SharedStore>,
) -> Result<Server, StartError> {
    use crate::node::{ClusterLink, NodeStore, SharedNonces};
    let settings = settings.validate()?;
    let fenced = Arc::new(tokio::sync::Notify::new());
    let fence: crate::node::Fence = match parts.runtime {
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
    let joined = NodeStore::join(shared.clone(), &cluster, parts.clock.now_ms(), fence).await;
    let store = joined.map_err(|e| StartError::Cluster(e.to_string()))?;
    let mut config = settings.config.clone();
    config.check_invariants |= parts.runtime == Runtime::Simulation;
    let rng = node_rng(parts.rng, store.restores_state());
    let coordinator = Coordinator::open(config, parts.clock, rng, store.clone())
        .await
        .map_err(|source| StartError::Restore {
            db: cluster.url.clone(),
            source,
        })?;
    exit_when_poisoned(&coordinator, parts.runtime);
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
    if let Some(payment) = settings.payment.clone() {
        let settler = match parts.settler {
            Some(settler) => settler,
            None => settler_for(&payment)?,
        };
        let nonces = Arc::new(SharedNonces {
            node: cluster.node_id.clone(),
            shared,
        });
        let gate = x402::PaymentGate::new(payment, nonces, settler);
        coordinator
            .enable_payments(gate)
            .expect("a new coordinator has no payment gate yet");
    }
    tracing::info!(node = %cluster.node_id, "joined the cluster");
    let mut tasks = vec![
        tokio::spawn(crate::shell::run_timers(coordinator.clone())),
        tokio::spawn(crate::node::run_lease(
            coordinator.clone(),
            link.clone(),
            store.clone(),
        )),
        tokio::spawn(crate::node::run_presence(
            coordinator.clone(),
            link.clone(),
            store.clone(),
        )),
        tokio::spawn(crate::node::run_claims(
            coordinator.clone(),
            link.clone(),
            store.clone(),
        )),
        tokio::spawn(crate::node::run_remote_watch(
            coordinator.clone(),
            link.clone(),
            store.clone(),
        )),
    ];
    let node_store = store;
    if let Some(hours) = settings.retention_hours {
        let retention = crate::node::run_retention(coordinator.clone(), link, hours);
        tasks.push(tokio::spawn(retention));
    }
    Ok(Server {
        coordinator,
        store: None,
        tasks,
        serving: None,
        metrics_at: settings.metrics_at,
        fenced: Some(fenced),
        node_store: Some(node_store),
    })
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
    /// worker's delayed ACK.
    pub fn serve_tcp(&mut self, listener: tokio::net::TcpListener) {
        self.serve(listener, |stream| {
            let _ = stream.set_nodelay(true);
        });
    }

    /// Serves the API on `listener` until [`Server::shutdown`], running
    /// `configure` on each accepted connection; worker sessions are
    /// upgraded from it, and handlers see each client's address.
    pub fn serve<L>(&mut self, listener: L, configure: impl FnMut(&mut L::Io) + Send + 'static)
    where
        L: axum::serve::Listener<Addr = SocketAddr>,
    {
        let configured = !self.coordinator.worker_origins().is_empty();
        if let (false, Ok(addr)) = (configured, listener.local_addr()) {
            let origins = listen_origins(addr);
            tracing::info!(
                ?origins,
                "no public URL set: workers must dial the address served"
            );
            self.coordinator.default_worker_origins(origins);
        }
        let app = match self.metrics_at {
            MetricsAt::Api => self.app(),
            MetricsAt::Apart => crate::api::api(self.coordinator.clone()),
        };
        let service = app.into_make_service_with_connect_info::<SocketAddr>();
        let listener = axum::serve::ListenerExt::tap_io(listener, configure);
        let stopped = self.coordinator.stopped();
        assert!(self.serving.is_none(), "a server serves one listener");
        self.serving = Some(tokio::spawn(async move {
            let served = axum::serve(listener, service)
                .with_graceful_shutdown(stopped)
                .await;
            if let Err(e) = served {
                tracing::error!(error = %e, "server failed");
            }
        }));
    }

    /// Serves `GET /metrics` alone on `listener` (see [`MetricsAt::Apart`]),
    /// until the server ends.
    pub fn serve_metrics(&mut self, listener: tokio::net::TcpListener) {
        assert_eq!(self.metrics_at, MetricsAt::Apart, "metrics are on the API");
        let app = crate::api::metrics_only(self.coordinator.clone());
        let stopped = self.coordinator.stopped();
        self.tasks.push(tokio::spawn(async move {
            let served = axum::serve(listener, app)
                .with_graceful_shutdown(stopped)
                .await;
            if let Err(e) = served {
                tracing::error!(error = %e, "metrics server failed");
            }
        }));
    }

    /// Graceful stop: stop accepting, ask every worker session to close (in
    /// session order), let serving drain, commit what is pending.
    pub async fn shutdown(self) {
        self.coordinator.shutdown();
        if let Some(serving) = self.serving {
            let _ = serving.await;
        }
        if let Err(e) = self.coordinator.durable().await {
            tracing::error!(error = %e, "last commit failed");
        }
        for task in &self.tasks {
            task.abort();
        }
    }

    /// Stops as a killed process does: nothing more reaches the store (what
    /// it had not committed is lost) and the server's own tasks end. Its
    /// connections are the network's to cut.
    pub fn crash(self) {
        if let Some(store) = &self.store {
            store.halt();
        }
        if let Some(store) = &self.node_store {
            store.halt();
        }
        for task in self.tasks.iter().chain(&self.serving) {
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

/// Deletes terminal jobs, from memory and from the database, when
/// [`Retention`] says so: by age every few minutes, by the kept budget's
/// high-water mark within a second.
async fn apply_retention(c: Coordinator, store: Arc<SqliteStore>, hours: u64) {
    let mut retention = Retention::new(hours);
    let mut every = Retention::ticks();
    loop {
        every.tick().await;
        let Some((before_ms, reason)) = retention.due(&c) else {
            continue;
        };
        let forgotten = c.with(|core, _| core.forget_terminal_jobs(before_ms));
        if let Err(e) = store.purge_terminal_jobs(before_ms) {
            tracing::error!(error = %e, "retention purge failed");
        } else if forgotten > 0 {
            c.metrics().jobs_deleted(reason.as_str(), forgotten as u64);
            let (_, kept_bytes) = c.read(|core| core.job_bytes());
            tracing::info!(
                forgotten,
                reason = reason.as_str(),
                kept_bytes,
                "retention: old terminal jobs deleted"
            );
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
