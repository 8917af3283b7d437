//! `coordinator`: serves the API for real use.
//!
//! Every flag has an environment variable of the same name in upper case
//! with a `COORDINATOR_` prefix (`--network` is `COORDINATOR_NETWORK`).
//! Logs go to stderr, as text or JSON (`--log-format`); `RUST_LOG` filters
//! them (default `info`).

use clap::Parser;
use coordinator::config::{Config, Limits, Settlement, UserAuth};
use coordinator::node::{self, ClusterSettings};
use coordinator::server::{self, MetricsAt, Parts, Runtime, Server, Settings, StartError};
use coordinator::SystemClock;
use protocol::money::Price;
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

#[derive(Debug, Parser)]
#[command(
    version,
    about = "Compute-job coordinator: HTTP API and worker WebSocket"
)]
struct Args {
    /// Address to listen on.
    #[arg(long, env = "COORDINATOR_LISTEN", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Serve `GET /metrics` on this address (e.g. 127.0.0.1:9464). Without
    /// it or --metrics-on-api, metrics are not served: on the public port
    /// they show anyone how full the kept budget is (decision 0018).
    #[arg(long, env = "COORDINATOR_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,
    /// Serve `GET /metrics` on --listen too, beside the API (opt-in: only
    /// where --listen is not reachable by strangers).
    #[arg(
        long,
        env = "COORDINATOR_METRICS_ON_API",
        conflicts_with = "metrics_listen"
    )]
    metrics_on_api: bool,
    /// CAIP-2 chain id this instance reports (namespace:reference).
    #[arg(long, env = "COORDINATOR_NETWORK", default_value = "eip155:84532")]
    network: String,
    /// Seed the RNG for reproducible ids and codes. For tests only: pairing
    /// codes and auth challenges become predictable.
    #[arg(long, env = "COORDINATOR_SEED")]
    seed: Option<u64>,
    #[arg(long, env = "COORDINATOR_PRICE_FAST_LLM", default_value = "$0.010")]
    price_fast_llm: Price,
    #[arg(long, env = "COORDINATOR_PRICE_FAST_TASK", default_value = "$0.003")]
    price_fast_task: Price,
    #[arg(long, env = "COORDINATOR_PRICE_CHEAP_LLM", default_value = "$0.005")]
    price_cheap_llm: Price,
    #[arg(long, env = "COORDINATOR_PRICE_CHEAP_TASK", default_value = "$0.001")]
    price_cheap_task: Price,
    /// A job waiting this long for an eligible worker fails with no_eligible_worker.
    #[arg(long, env = "COORDINATOR_PENDING_TIMEOUT_MS", default_value_t = 30_000)]
    pending_timeout_ms: i64,
    /// Time a worker has to return a result before the job is requeued.
    #[arg(long, env = "COORDINATOR_LEASE_MS", default_value_t = 60_000)]
    lease_ms: i64,
    /// Assignments a job may get before it fails.
    #[arg(long, env = "COORDINATOR_ATTEMPTS_MAX", default_value_t = 3)]
    attempts_max: u32,
    #[arg(
        long,
        env = "COORDINATOR_HEARTBEAT_INTERVAL_MS",
        default_value_t = 5_000
    )]
    heartbeat_interval_ms: u64,
    /// A worker silent this long is dropped and its jobs requeued.
    #[arg(
        long,
        env = "COORDINATOR_HEARTBEAT_TIMEOUT_MS",
        default_value_t = 15_000
    )]
    heartbeat_timeout_ms: u64,
    /// Largest request body in bytes.
    #[arg(long, env = "COORDINATOR_BODY_BYTES_MAX", default_value_t = 256 * 1024)]
    body_bytes_max: usize,
    /// Most pending jobs held at once.
    #[arg(long, env = "COORDINATOR_QUEUE_LEN_MAX", default_value_t = 100_000)]
    queue_len_max: usize,
    /// Most bytes held by jobs not yet finished (overhead, user id,
    /// payload text); a commit beyond it gets 503.
    #[arg(long, env = "COORDINATOR_QUEUED_BYTES_MAX", default_value_t = 256 * 1024 * 1024)]
    queued_bytes_max: usize,
    /// Most bytes held by completed jobs kept for polling (with outputs).
    /// Past 90 % of it the heaviest client's oldest are deleted, down to
    /// 80 % (decision 0018); a commit that would not fit gets 503.
    #[arg(long, env = "COORDINATOR_KEPT_BYTES_MAX", default_value_t = 1024 * 1024 * 1024)]
    kept_bytes_max: usize,
    /// Share of --kept-bytes-max (per cent) one client address may hold
    /// before its own results go first, at any age.
    #[arg(
        long,
        env = "COORDINATOR_KEPT_SHARE_PER_CLIENT_PERCENT",
        default_value_t = 12
    )]
    kept_share_per_client_percent: usize,
    /// A result younger than this is deleted for room only from a client
    /// over its share; otherwise commits get 503.
    #[arg(long, env = "COORDINATOR_KEPT_MIN_MS", default_value_t = 120_000)]
    kept_min_ms: i64,
    /// Most bytes held by failed and refused jobs (no output), a budget
    /// apart from --kept-bytes-max.
    #[arg(long, env = "COORDINATOR_FAILED_KEPT_BYTES_MAX", default_value_t = 64 * 1024 * 1024)]
    failed_kept_bytes_max: usize,
    /// Most bytes of unfinished jobs one client address may have queued.
    #[arg(long, env = "COORDINATOR_QUEUED_BYTES_PER_CLIENT_MAX", default_value_t = 32 * 1024 * 1024)]
    queued_bytes_per_client_max: usize,
    /// Refused commits (422) one client address may make per minute; 429 beyond.
    #[arg(
        long,
        env = "COORDINATOR_REFUSALS_PER_CLIENT_PER_MINUTE_MAX",
        default_value_t = 600
    )]
    refusals_per_client_per_minute_max: u32,
    /// Largest job output a result may carry (compact JSON bytes); larger
    /// is refused invalid_output. Below --frame-bytes-max.
    #[arg(long, env = "COORDINATOR_OUTPUT_BYTES_MAX", default_value_t = 256 * 1024)]
    output_bytes_max: usize,
    /// Finished jobs kept in memory, the most recent; a poll of an older
    /// one reads it from the database.
    #[arg(
        long,
        env = "COORDINATOR_FINISHED_JOBS_CACHED_MAX",
        default_value_t = 256
    )]
    finished_jobs_cached_max: usize,
    /// WebSocket connections allowed to be mid-handshake at once; more get 503.
    #[arg(long, env = "COORDINATOR_HANDSHAKES_MAX", default_value_t = 1_024)]
    handshakes_max: usize,
    /// Of those, from one client address (IPv6 grouped by /64); more get 503.
    #[arg(
        long,
        env = "COORDINATOR_HANDSHAKES_PER_CLIENT_MAX",
        default_value_t = 16
    )]
    handshakes_per_client_max: usize,
    /// Plain HTTP connections at once; a new one beyond it is closed at accept.
    #[arg(
        long,
        env = "COORDINATOR_HTTP_CONNECTIONS_MAX",
        default_value_t = 12_288
    )]
    http_connections_max: usize,
    /// Of those, from one peer address (IPv6 grouped by /64). Behind a reverse
    /// proxy every connection is the proxy's: raise it there.
    #[arg(
        long,
        env = "COORDINATOR_HTTP_CONNECTIONS_PER_CLIENT_MAX",
        default_value_t = 1_100
    )]
    http_connections_per_client_max: usize,
    /// Most bytes of a request head (request line and headers); beyond: 431.
    #[arg(
        long,
        env = "COORDINATOR_HTTP_HEAD_BYTES_MAX",
        default_value_t = 16_384
    )]
    http_head_bytes_max: usize,
    /// Time a connection has to send a whole request head; then it is closed.
    #[arg(
        long,
        env = "COORDINATOR_HTTP_HEAD_TIMEOUT_MS",
        default_value_t = 10_000
    )]
    http_head_timeout_ms: u64,
    /// Time a request has to send its whole body once its head is read; then 408.
    #[arg(
        long,
        env = "COORDINATOR_HTTP_BODY_TIMEOUT_MS",
        default_value_t = 30_000
    )]
    http_body_timeout_ms: u64,
    /// Established worker sessions from one peer address (IPv6 by /64).
    #[arg(
        long,
        env = "COORDINATOR_WORKER_SESSIONS_PER_CLIENT_MAX",
        default_value_t = 64
    )]
    worker_sessions_per_client_max: usize,
    /// Slots of all worker sessions from one peer address together.
    #[arg(
        long,
        env = "COORDINATOR_WORKER_SLOTS_PER_CLIENT_MAX",
        default_value_t = 1_024
    )]
    worker_slots_per_client_max: u32,
    /// Time a new worker connection has to send hello (auth may take until
    /// the 10 s auth timeout).
    #[arg(long, env = "COORDINATOR_HELLO_TIMEOUT_MS", default_value_t = 2_000)]
    hello_timeout_ms: u64,
    /// Failed pairing claims allowed per client address (IPv6: per /64) per minute.
    #[arg(
        long,
        alias = "claims-per-minute-max",
        env = "COORDINATOR_CLAIM_FAILURES_PER_CLIENT_PER_MINUTE_MAX",
        default_value_t = 10
    )]
    claim_failures_per_client_per_minute_max: u32,
    /// Failed pairing claims allowed from all clients together per minute.
    #[arg(
        long,
        env = "COORDINATOR_CLAIM_FAILURES_PER_MINUTE_MAX",
        default_value_t = 60
    )]
    claim_failures_per_minute_max: u32,
    /// Pairing codes one client address (IPv6: per /64) may create per minute.
    #[arg(
        long,
        env = "COORDINATOR_PAIRING_CREATES_PER_CLIENT_PER_MINUTE_MAX",
        default_value_t = 10
    )]
    pairing_creates_per_client_per_minute_max: u32,
    /// Largest `wait_ms` a job poll may ask for (larger gets 400).
    #[arg(long, env = "COORDINATOR_POLL_WAIT_MS_MAX", default_value_t = 30_000)]
    poll_wait_ms_max: u64,
    /// Job polls held open at once; beyond it polls are answered at once.
    #[arg(long, env = "COORDINATOR_HELD_POLLS_MAX", default_value_t = 10_000)]
    held_polls_max: usize,
    /// Job polls one client address (IPv6: per /64) may hold open at once.
    #[arg(
        long,
        env = "COORDINATOR_HELD_POLLS_PER_CLIENT_MAX",
        default_value_t = 1_000
    )]
    held_polls_per_client_max: usize,
    /// Job event streams and streamed chat completions held open at once;
    /// beyond it a stream gets 503. A reader holds a cursor, not a buffer.
    #[arg(long, env = "COORDINATOR_HELD_STREAMS_MAX", default_value_t = 1_000)]
    held_streams_max: usize,
    /// Job event streams one client address (IPv6: per /64) may hold open.
    #[arg(
        long,
        env = "COORDINATOR_HELD_STREAMS_PER_CLIENT_MAX",
        default_value_t = 32
    )]
    held_streams_per_client_max: usize,
    /// Longest a job event stream stays open; it then ends with an `end`
    /// event (reason `stream_time_limit`) and the client may resume.
    #[arg(long, env = "COORDINATOR_STREAM_MS_MAX", default_value_t = 600_000)]
    stream_ms_max: u64,
    /// Reverse proxies (comma-separated IPs) whose X-Forwarded-For names the
    /// client for rate limits. Default: none; the header is ignored.
    #[arg(long, env = "COORDINATOR_TRUSTED_PROXIES", value_delimiter = ',')]
    trusted_proxies: Vec<std::net::IpAddr>,
    /// Whether trust/create, trust/list and PRIVATE commits need the user's
    /// proof (the X-User-Proof header; a user id must then be an account).
    /// `off` is the spec's literal behaviour: anyone who knows a user id
    /// acts for that user (closed deployments, conformance runs).
    #[arg(long, env = "COORDINATOR_USER_AUTH", value_enum, default_value_t = UserAuthArg::On)]
    user_auth: UserAuthArg,
    /// When a paid job's payment is settled: `on-completion` (verified at
    /// commit, settled once the result is checked, output shown only after;
    /// a job that fails is never charged) or `at-commit` (settled before the
    /// job exists: every accepted job is paid for, failed ones included).
    /// See docs/decisions/0021-settle-on-completion.md.
    #[arg(long, env = "COORDINATOR_SETTLEMENT", value_enum, default_value_t = SettlementArg::OnCompletion)]
    settlement: SettlementArg,
    /// Settling on completion: a paid job must be settled this long before
    /// its authorization's validBefore, else it fails unpaid
    /// (`payment_expired`). At least the facilitator's timeout (30 s).
    #[arg(long, env = "COORDINATOR_SETTLE_MARGIN_MS", default_value_t = 60_000,
        value_parser = clap::value_parser!(i64).range(30_000..=3_600_000))]
    settle_margin_ms: i64,
    /// Require an x402 payment on the commit endpoints.
    #[arg(long, env = "COORDINATOR_PAYMENT_REQUIRED")]
    payment_required: bool,
    /// Address payments go to (required with --payment-required).
    #[arg(long, env = "COORDINATOR_PAY_TO")]
    pay_to: Option<String>,
    /// The payment token contract. Default: the network's USDC where known
    /// (Base, Base Sepolia, Monad, Polygon, Arbitrum One and Sepolia); other
    /// networks must set it.
    #[arg(long, env = "COORDINATOR_ASSET")]
    asset: Option<String>,
    /// EIP-712 domain name of the asset. Default: the known asset's (`USDC`
    /// on Base Sepolia, `USD Coin` on Base); required for another asset.
    #[arg(long, env = "COORDINATOR_ASSET_NAME")]
    asset_name: Option<String>,
    /// EIP-712 domain version of the asset. Default: the known asset's;
    /// required for another asset.
    #[arg(long, env = "COORDINATOR_ASSET_VERSION")]
    asset_version: Option<String>,
    /// Validity window a payer is offered, in seconds.
    #[arg(long, env = "COORDINATOR_MAX_TIMEOUT_SECONDS", default_value_t = 300)]
    max_timeout_seconds: u64,
    /// x402 facilitator that verifies and settles payments. Without one,
    /// payments are verified locally and no money moves.
    #[arg(long, env = "COORDINATOR_FACILITATOR_URL")]
    facilitator_url: Option<String>,
    /// URL clients and workers reach this instance at; repeat it (or
    /// comma-separate) for several. A worker's login must name one of their
    /// origins (http = ws, https = wss; default port and path ignored).
    /// Default: the --listen address itself, for local use only. The first
    /// is the base of payment requirements (else the Host header).
    #[arg(
        long = "public-url",
        env = "COORDINATOR_PUBLIC_URL",
        value_delimiter = ','
    )]
    public_urls: Vec<String>,
    /// SQLite database file, created if missing; `:memory:` keeps nothing
    /// across restarts. A `postgres://…` URL makes this process one node of
    /// a cluster: every node with the same URL and --network is one
    /// coordinator (docs/cluster.md).
    #[arg(long, env = "COORDINATOR_DB", default_value = "coordinator.db")]
    db: String,
    /// With a `postgres://` --db: this node's id, in its logs and metrics.
    /// Default: `node-` and 8 hex digits from the RNG (unique per process).
    #[arg(long, env = "COORDINATOR_NODE_ID")]
    node_id: Option<String>,
    /// With a `postgres://` --db: the PostgreSQL schema to keep the tables
    /// in (created if missing), so several clusters can share a database.
    #[arg(long, env = "COORDINATOR_DB_SCHEMA")]
    db_schema: Option<String>,
    /// Completed and failed jobs older than this are deleted (checked every
    /// 5 minutes). 0: no age limit; `--kept-bytes-max` still deletes the
    /// oldest when finished jobs fill it.
    #[arg(long, env = "COORDINATOR_RETENTION_HOURS", default_value_t = 24)]
    retention_hours: u64,
    /// Log lines as text for people or JSON (one object a line) for log
    /// shippers.
    #[arg(long, env = "COORDINATOR_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum UserAuthArg {
    On,
    Off,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum SettlementArg {
    OnCompletion,
    AtCommit,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

impl Args {
    /// The payment settings, or `None` when payments are off.
    fn payment_config(&self) -> Result<Option<x402::PaymentConfig>, String> {
        if !self.payment_required {
            return Ok(None);
        }
        let pay_to = self
            .pay_to
            .as_deref()
            .ok_or("--payment-required needs --pay-to ADDRESS")?
            .parse()
            .map_err(|e| format!("--pay-to: {e}"))?;
        let asset = match &self.asset {
            Some(a) => Some(a.parse().map_err(|e| format!("--asset: {e}"))?),
            None => None,
        };
        let terms = x402::config::resolve_asset(
            &self.network,
            asset,
            self.asset_name.clone(),
            self.asset_version.clone(),
        )
        .map_err(|e| format!("payment settings: {e} (--asset, --asset-name, --asset-version)"))?;
        Ok(Some(x402::PaymentConfig {
            network: self.network.clone(),
            pay_to,
            asset: terms.asset,
            asset_name: terms.name,
            asset_version: terms.version,
            max_timeout_seconds: self.max_timeout_seconds,
            facilitator_url: self.facilitator_url.clone(),
        }))
    }

    fn settings(&self) -> Result<Settings, String> {
        let mut config = Config {
            network: self.network.clone(),
            public_urls: self.public_urls.clone(),
            trusted_proxies: self.trusted_proxies.clone(),
            user_auth: match self.user_auth {
                UserAuthArg::On => UserAuth::On,
                UserAuthArg::Off => UserAuth::Off,
            },
            settlement: match self.settlement {
                SettlementArg::OnCompletion => Settlement::OnCompletion,
                SettlementArg::AtCommit => Settlement::AtCommit,
            },
            ..Config::default()
        };
        config.prices.fast_llm = self.price_fast_llm;
        config.prices.fast_task = self.price_fast_task;
        config.prices.cheap_llm = self.price_cheap_llm;
        config.prices.cheap_task = self.price_cheap_task;
        let t = &mut config.timing;
        t.pending_timeout_ms = self.pending_timeout_ms;
        t.lease_ms = self.lease_ms;
        t.settle_margin_ms = self.settle_margin_ms;
        t.attempts_max = self.attempts_max;
        t.heartbeat_interval_ms = self.heartbeat_interval_ms;
        t.heartbeat_timeout_ms = self.heartbeat_timeout_ms;
        self.set_limits(&mut config.limits);
        config.timing.http_head_timeout_ms = self.http_head_timeout_ms;
        config.timing.http_body_timeout_ms = self.http_body_timeout_ms;
        config.timing.hello_timeout_ms = self.hello_timeout_ms;
        Ok(Settings {
            config,
            db: self.db.clone(),
            payment: self.payment_config()?,
            retention_hours: Some(self.retention_hours),
            // Off the API unless asked for; `Apart` with no listener of its
            // own serves it nowhere.
            metrics_at: match self.metrics_on_api {
                true => MetricsAt::Api,
                false => MetricsAt::Apart,
            },
            cluster: self.cluster_settings()?,
        })
    }

    /// The `limits` flags onto the library's limits.
    fn set_limits(&self, l: &mut Limits) {
        l.body_bytes_max = self.body_bytes_max;
        l.queue_len_max = self.queue_len_max;
        l.queued_bytes_max = self.queued_bytes_max;
        l.kept_bytes_max = self.kept_bytes_max;
        l.kept_share_per_client_percent = self.kept_share_per_client_percent;
        l.kept_min_ms = self.kept_min_ms;
        l.failed_kept_bytes_max = self.failed_kept_bytes_max;
        l.queued_bytes_per_client_max = self.queued_bytes_per_client_max;
        l.output_bytes_max = self.output_bytes_max;
        l.refusals_per_client_per_minute_max = self.refusals_per_client_per_minute_max;
        l.finished_jobs_cached_max = self.finished_jobs_cached_max;
        l.claim_failures_per_client_per_minute_max = self.claim_failures_per_client_per_minute_max;
        l.claim_failures_per_minute_max = self.claim_failures_per_minute_max;
        l.pairing_creates_per_client_per_minute_max =
            self.pairing_creates_per_client_per_minute_max;
        l.handshakes_max = self.handshakes_max;
        l.handshakes_per_client_max = self.handshakes_per_client_max;
        l.http_connections_max = self.http_connections_max;
        l.http_connections_per_client_max = self.http_connections_per_client_max;
        l.http_head_bytes_max = self.http_head_bytes_max;
        l.worker_sessions_per_client_max = self.worker_sessions_per_client_max;
        l.worker_slots_per_client_max = self.worker_slots_per_client_max;
        l.poll_wait_ms_max = self.poll_wait_ms_max;
        l.held_polls_max = self.held_polls_max;
        l.held_polls_per_client_max = self.held_polls_per_client_max;
        l.held_streams_max = self.held_streams_max;
        l.held_streams_per_client_max = self.held_streams_per_client_max;
        l.stream_ms_max = self.stream_ms_max;
    }

    /// Cluster mode, when --db is a PostgreSQL URL; the node id is filled
    /// in from the RNG in `main` when not given.
    fn cluster_settings(&self) -> Result<Option<ClusterSettings>, String> {
        if !node::is_postgres_url(&self.db) {
            if self.node_id.is_some() || self.db_schema.is_some() {
                return Err("--node-id and --db-schema need a postgres:// --db".into());
            }
            return Ok(None);
        }
        Ok(Some(ClusterSettings {
            url: self.db.clone(),
            schema: self.db_schema.clone(),
            node_id: self.node_id.clone().unwrap_or_default(),
            node_lease_ms: node::NODE_LEASE_MS,
        }))
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let mut settings = match args.settings() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let rng = match args.seed {
        Some(seed) => ChaCha20Rng::seed_from_u64(seed),
        None => ChaCha20Rng::from_entropy(),
    };
    if let Some(cluster) = &mut settings.cluster {
        if cluster.node_id.is_empty() {
            cluster.node_id = node::default_node_id(&rng);
        }
    }
    let node_id = settings.cluster.as_ref().map(|c| c.node_id.clone());
    init_logs(args.log_format, node_id.clone());
    let parts = Parts {
        clock: Arc::new(SystemClock),
        rng,
        runtime: Runtime::Os,
        settler: None,
    };
    let mut server = match server::start(settings, parts).await {
        Ok(s) => s,
        Err(e @ StartError::Settings(_)) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    // The URL may hold a password: name only the kind of store.
    let db = if node_id.is_some() {
        "postgres"
    } else {
        args.db.as_str()
    };
    if let Err(code) = listen(&mut server, &args, db).await {
        return code;
    }
    shutdown_signal().await;
    tracing::info!("shutting down");
    server.shutdown().await;
    tracing::info!("coordinator stopped");
    ExitCode::SUCCESS
}

/// Binds the API's listener (and the metrics one, if asked for) and serves
/// on them; `db` names the store in the log line.
async fn listen(server: &mut Server, args: &Args, db: &str) -> Result<(), ExitCode> {
    let listener = match tokio::net::TcpListener::bind(args.listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: cannot listen on {}: {e}", args.listen);
            return Err(ExitCode::FAILURE);
        }
    };
    let addr = listener.local_addr().map_or(args.listen, |a| a);
    tracing::info!(%addr, network = %args.network, db, "coordinator listening on http://{addr}");
    if args.seed.is_some() {
        tracing::warn!("seeded RNG: ids, pairing codes and challenges are predictable; tests only");
    }
    if args.user_auth == UserAuthArg::Off {
        tracing::warn!(
            "--user-auth off: anyone who knows a user id can pair workers for it, list them and commit PRIVATE jobs as it"
        );
    }
    if args.payment_required && args.settlement == SettlementArg::AtCommit {
        tracing::warn!(
            "--settlement at-commit: payments are settled before the job runs; a job that then fails keeps the payer's money"
        );
    }
    if let Some(metrics_addr) = args.metrics_listen {
        let metrics = match tokio::net::TcpListener::bind(metrics_addr).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("error: cannot listen on {metrics_addr} for metrics: {e}");
                return Err(ExitCode::FAILURE);
            }
        };
        let addr = metrics.local_addr().map_or(metrics_addr, |a| a);
        tracing::info!(%addr, "metrics at http://{addr}/metrics");
        server.serve_metrics(metrics);
    }
    server.serve_tcp(listener);
    Ok(())
}

fn init_logs(format: LogFormat, node_id: Option<String>) {
    let logs = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr);
    match (format, node_id) {
        (LogFormat::Text, None) => logs
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        // The request span's fields (request_id) sit in `span` and `spans`.
        (LogFormat::Json, None) => logs.json().init(),
        (LogFormat::Text, Some(node)) => {
            let inner = tracing_subscriber::fmt::format().with_ansi(false);
            logs.event_format(node::NodeLogs { node, inner }).init()
        }
        (LogFormat::Json, Some(node)) => {
            let inner = tracing_subscriber::fmt::format().json();
            logs.json()
                .event_format(node::NodeLogs { node, inner })
                .init()
        }
    }
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = terminate => {}
    }
}
