//! `loadgen`: drives a live coordinator over loopback and reports what it did.
//!
//! It starts the release `coordinator` binary on 127.0.0.1 (or uses
//! `--target`), connects N real WebSocket workers (worker-sim, signing real
//! receipts that the coordinator verifies), and runs C concurrent HTTP
//! clients that commit jobs and poll them to completion. In the same run it
//! measures a bare axum handler (this binary re-run as a tiny server) with
//! the same client code, and reports every figure also as a ratio to it.
//!
//! Modes: `jobs` (fixed count), `duration` (fixed time), `rate` (fixed
//! arrival rate, by default 50 % of a peak measured first), `idle` (N
//! workers connected and held: memory and heartbeat CPU) and `endpoints`
//! (health, quote, commit without workers and poll, each against the bare
//! handler). Output: a table on stdout, a JSON file and an SVG next to it.
//!
//! This tool measures wall time, so unlike the library crates it reads the
//! system clock (`Instant::now`, `SystemTime::now`); each read is marked.

use benches::plot::{write_svg, LatencySeries};
use benches::procfs::{self, ProcSample};
use benches::stats::{fmt_us, summarize, Summary};
use clap::{Parser, ValueEnum};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::process::{Child, Command};
use tokio::time::Instant;
use worker_sim::{Latency, ReconnectPolicy, Worker, WorkerConfig, WsConnector};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
enum Mode {
    /// Commit a fixed number of jobs (`--jobs`) as fast as the clients can.
    Jobs,
    /// Commit as fast as the clients can for `--duration` seconds.
    Duration,
    /// Commit at a fixed arrival rate (`--rate`, or `--rate-of-peak` of a
    /// peak measured first for `--peak-secs`) for `--duration` seconds.
    Rate,
    /// Connect `--workers` workers, hold them `--hold` seconds: RSS and heartbeat CPU.
    Idle,
    /// Health, quote, commit (no workers) and poll req/s against the bare handler.
    Endpoints,
}

/// How a client follows its job to the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
enum PollStyle {
    /// Plain polls after 1, 2, 4, 8, then every 16 ms.
    Backoff,
    /// A plain poll at once, then every `--poll-interval-ms` (the spec
    /// router's 500 ms).
    Every,
    /// Long polls: `?wait_ms=--wait-ms`, asked again at once until the job ends.
    Wait,
}

#[derive(Debug, Parser)]
#[command(about = "Load generator for the coordinator (loopback only)")]
struct Args {
    #[arg(long, value_enum, default_value = "jobs")]
    mode: Mode,
    /// Use a running coordinator at this http://127.0.0.1:PORT URL instead of starting one.
    #[arg(long)]
    target: Option<String>,
    /// With --target: the coordinator's pid, for CPU and RSS figures.
    #[arg(long)]
    pid: Option<u32>,
    /// With --target: connect worker i to the i-th of these nodes (round
    /// robin, repeatable), other nodes of the same cluster (`--db
    /// postgres://…`); clients still use --target.
    #[arg(long = "worker-node")]
    worker_nodes: Vec<String>,
    /// The coordinator binary (default: `coordinator` next to this binary).
    #[arg(long)]
    coordinator_bin: Option<PathBuf>,
    /// Extra argument for the started coordinator (repeatable), e.g. `--coordinator-arg=--db=:memory:`.
    #[arg(long = "coordinator-arg", allow_hyphen_values = true)]
    coordinator_args: Vec<String>,
    /// Store of the started coordinator: `fresh` (a new SQLite file next to
    /// the report, removed afterwards), `:memory:`, a path, or `none` (no
    /// `--db` flag, for coordinators without one).
    #[arg(long, default_value = "fresh")]
    db: String,
    /// WebSocket workers to connect.
    #[arg(long, default_value_t = 64)]
    workers: u32,
    /// Slots per worker.
    #[arg(long, default_value_t = 8)]
    slots: u32,
    /// Simulated job latency of the workers: MS, MIN..MAX or MEAN~STDDEV.
    #[arg(long, default_value = "0")]
    worker_latency: Latency,
    /// Concurrent HTTP clients (each commits a job, then polls it until it ends).
    #[arg(long, default_value_t = 64)]
    clients: usize,
    /// How clients follow their jobs; several (comma-separated) run the
    /// load once per style, e.g. `--poll every,wait`.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "backoff")]
    poll: Vec<PollStyle>,
    /// Interval of `--poll every`.
    #[arg(long, default_value_t = 500)]
    poll_interval_ms: u64,
    /// `wait_ms` of `--poll wait` (at most the coordinator's --poll-wait-ms-max).
    #[arg(long, default_value_t = 30_000)]
    wait_ms: u64,
    /// Jobs to commit in `jobs` mode.
    #[arg(long, default_value_t = 20_000)]
    jobs: u64,
    /// Seconds of load in `duration` and `rate` modes (and per endpoint in `endpoints`).
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Arrivals per second in `rate` mode.
    #[arg(long)]
    rate: Option<f64>,
    /// Without --rate: this fraction of the peak measured first.
    #[arg(long, default_value_t = 0.5)]
    rate_of_peak: f64,
    /// Seconds of the peak measurement in `rate` mode.
    #[arg(long, default_value_t = 5.0)]
    peak_secs: f64,
    /// Seconds to hold the workers in `idle` mode.
    #[arg(long, default_value_t = 30.0)]
    hold: f64,
    /// Seconds of the bare-handler measurement (0 skips it).
    #[arg(long, default_value_t = 3.0)]
    ceiling_secs: f64,
    /// Hard bound on the whole run, seconds.
    #[arg(long, default_value_t = 300.0)]
    max_secs: f64,
    /// JSON report path; the SVG goes next to it with the extension `.svg`.
    #[arg(long, default_value = "target/loadgen/report.json")]
    out: PathBuf,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
    /// Leave Nagle's algorithm on for worker sockets (no TCP_NODELAY), so a
    /// worker's back-to-back `accept` and `result` wait on delayed ACKs.
    #[arg(long)]
    nagle_workers: bool,
    /// Internal: serve the bare axum handler on this address and nothing else.
    #[arg(long, hide = true)]
    serve_bare: Option<SocketAddr>,
}

const MAX_WORKERS: u32 = 20_000;
const MAX_CLIENTS: usize = 4_096;
const MAX_JOBS: u64 = 10_000_000;
/// A job not ended this long after its commit counts as a failure.
const JOB_TIMEOUT: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------- clock reads

/// Monotonic now (the tool measures wall time; see the module note).
fn now() -> Instant {
    Instant::now()
}

/// Unix time in microseconds, to compare with the coordinator's `completed_at`.
#[allow(clippy::disallowed_methods)] // the load tool compares against the coordinator's wall clock
fn unix_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

// ---------------------------------------------------------------- bare server

async fn serve_bare(addr: SocketAddr) {
    use axum::http::StatusCode;
    use axum::routing::{get, post};
    use axum::{Json, Router};
    let app = Router::new()
        .route(
            "/v1/health",
            get(|| async {
                Json(
                    json!({"status": "ok", "workers_online": 0, "network": "eip155:84532",
                            "timestamp": "2026-11-21T10:00:00.000Z"}),
                )
            }),
        )
        .route(
            "/v1/jobs/commit/cheap",
            post(|Json(v): Json<Value>| async move {
                let _ = v;
                (
                    StatusCode::CREATED,
                    Json(json!({"job_id": "00000000-0000-0000-0000-000000000000"})),
                )
            }),
        );
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .expect("bind bare server");
    axum::serve(listener, app).await.expect("serve");
}

// ---------------------------------------------------------------- processes

/// A server process this run started; killed on drop.
struct Server {
    child: Option<Child>,
    pid: Option<u32>,
    base: String,
}

impl Server {
    fn sample(&self) -> Option<ProcSample> {
        self.pid.and_then(procfs::sample)
    }

    async fn stop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
        self.child = None;
    }
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("local addr").port()
}

async fn wait_ready(client: &reqwest::Client, base: &str) -> Result<(), String> {
    let deadline = now() + Duration::from_secs(15);
    loop {
        if let Ok(r) = client.get(format!("{base}/v1/health")).send().await {
            if r.status().is_success() {
                return Ok(());
            }
        }
        if now() > deadline {
            return Err(format!("{base} did not answer /v1/health within 15 s"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn spawn_server(
    program: &Path,
    args: &[String],
    log: &Path,
    client: &reqwest::Client,
) -> Result<Server, String> {
    let port = free_port();
    let log_file = std::fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env("RUST_LOG", "warn")
        .env("COORDINATOR_LISTEN", format!("127.0.0.1:{port}"))
        // Every load-tool worker dials from 127.0.0.1, one client as the
        // coordinator counts them: let them all handshake at once.
        .env("COORDINATOR_HANDSHAKES_PER_CLIENT_MAX", "1024")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(log_file))
        .kill_on_drop(true);
    let child = cmd
        .spawn()
        .map_err(|e| format!("starting {}: {e}", program.display()))?;
    let server = Server {
        pid: child.id(),
        child: Some(child),
        base: format!("http://127.0.0.1:{port}"),
    };
    wait_ready(client, &server.base).await?;
    Ok(server)
}

/// Removes a SQLite database and its WAL and shared-memory files.
fn remove_db(path: &Path) {
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(p));
    }
}

// ---------------------------------------------------------------- hammering one endpoint

#[derive(Debug, Clone, Serialize)]
struct EndpointResult {
    name: String,
    requests: u64,
    failures: u64,
    seconds: f64,
    req_per_s: f64,
    latency: Summary,
    server_cpu_us_per_req: Option<f64>,
    #[serde(skip)]
    samples: Vec<u64>,
}

#[derive(Clone)]
enum Req {
    Get(String),
    Post(String, bytes::Bytes),
    /// GET of one of these URLs, round robin.
    GetMany(Arc<Vec<String>>),
}

async fn hammer(
    client: &reqwest::Client,
    name: &str,
    req: Req,
    clients: usize,
    secs: f64,
    server: Option<u32>,
) -> EndpointResult {
    let before = server.and_then(procfs::sample);
    let start = now();
    let deadline = start + Duration::from_secs_f64(secs);
    let counter = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let client = client.clone();
        let req = req.clone();
        let counter = counter.clone();
        tasks.push(tokio::spawn(async move {
            let mut samples = Vec::new();
            let mut failures = 0u64;
            while now() < deadline {
                let i = counter.fetch_add(1, Ordering::Relaxed) as usize;
                let builder = match &req {
                    Req::Get(url) => client.get(url),
                    Req::Post(url, body) => client
                        .post(url)
                        .header("content-type", "application/json")
                        .body(body.clone()),
                    Req::GetMany(urls) => client.get(&urls[i % urls.len()]),
                };
                let t0 = now();
                let ok = match builder.send().await {
                    Ok(r) => {
                        let status = r.status();
                        r.bytes().await.is_ok() && status.is_success()
                    }
                    Err(_) => false,
                };
                if ok {
                    samples.push(t0.elapsed().as_micros() as u64);
                } else {
                    failures += 1;
                }
            }
            (samples, failures)
        }));
    }
    let mut samples = Vec::new();
    let mut failures = 0;
    for t in tasks {
        if let Ok((s, f)) = t.await {
            samples.extend(s);
            failures += f;
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    let after = server.and_then(procfs::sample);
    let requests = samples.len() as u64;
    let cpu = match (before, after) {
        (Some(b), Some(a)) if requests > 0 => {
            Some((a.cpu_seconds - b.cpu_seconds) * 1e6 / requests as f64)
        }
        _ => None,
    };
    EndpointResult {
        name: name.to_owned(),
        requests,
        failures,
        seconds,
        req_per_s: requests as f64 / seconds,
        latency: summarize(&samples),
        server_cpu_us_per_req: cpu,
        samples,
    }
}

// ---------------------------------------------------------------- workers

async fn connect_workers(
    client: &reqwest::Client,
    base: &str,
    args: &Args,
    count: u32,
    progress: &ProgressBar,
) -> Result<Vec<tokio::task::JoinHandle<()>>, String> {
    let ws_of = |base: &str| format!("{}/v1/workers/ws", base.replacen("http://", "ws://", 1));
    let ws_urls: Vec<String> = match args.worker_nodes.is_empty() {
        true => vec![ws_of(base)],
        false => args.worker_nodes.iter().map(|b| ws_of(b)).collect(),
    };
    let epoch_ms = unix_us() / 1000;
    let online_before = workers_online(client, base).await.unwrap_or(0);
    // Workers sign only for the network they serve: the target's.
    let network = health(client, base)
        .await
        .and_then(|v| v["network"].as_str().map(str::to_owned))
        .ok_or("the target's /v1/health names no network")?;
    let mut handles = Vec::with_capacity(count as usize);
    progress.set_length(count as u64);
    progress.set_position(0);
    progress.set_message("connecting workers");
    // Connect in batches so the listen backlog is never overrun.
    let batch = 250u32;
    let mut spawned = 0u32;
    while spawned < count {
        let n = batch.min(count - spawned);
        for i in spawned..spawned + n {
            let config = WorkerConfig {
                name: format!("lg-{i}"),
                seed: worker_sim::worker_seed(0x10AD, i),
                capabilities: vec![
                    protocol::api::JobType::Task,
                    protocol::api::JobType::LlmInfer,
                ],
                slots: args.slots,
                latency: args.worker_latency.clone(),
                reconnect: ReconnectPolicy {
                    enabled: false,
                    ..ReconnectPolicy::default()
                },
                network: network.clone(),
                ..WorkerConfig::default()
            };
            let mut worker = Worker::new(config, worker_sim::TokioClock::shared(epoch_ms))
                .map_err(|e| e.to_string())?;
            let ws_url = ws_urls[i as usize % ws_urls.len()].clone();
            let connector = worker_connector(ws_url, args.nagle_workers);
            handles.push(tokio::spawn(async move {
                let _ = worker.run(connector).await;
            }));
        }
        spawned += n;
        let deadline = now() + Duration::from_secs(60);
        loop {
            let online = workers_online(client, base).await.unwrap_or(0);
            progress.set_position(online.saturating_sub(online_before));
            if online >= online_before + spawned as u64 {
                break;
            }
            if now() > deadline {
                return Err(format!(
                    "only {} of {spawned} workers online after 60 s",
                    online.saturating_sub(online_before)
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    Ok(handles)
}

/// TCP_NODELAY is on unless `nagle_workers`: with Nagle's algorithm a worker's
/// back-to-back `accept` and `result` wait for the coordinator's delayed ACK
/// (~40 ms on Linux), a stall of the workers that would count against the
/// coordinator.
fn worker_connector(ws_url: String, nagle_workers: bool) -> WsConnector {
    WsConnector::new(ws_url).with_nodelay(!nagle_workers)
}

async fn workers_online(client: &reqwest::Client, base: &str) -> Option<u64> {
    health(client, base).await?["workers_online"].as_u64()
}

async fn health(client: &reqwest::Client, base: &str) -> Option<Value> {
    client
        .get(format!("{base}/v1/health"))
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()
}

// ---------------------------------------------------------------- end-to-end load

fn poll_name(style: PollStyle, args: &Args) -> String {
    match style {
        PollStyle::Backoff => "backoff 1..16 ms".into(),
        PollStyle::Every => format!("every {} ms", args.poll_interval_ms),
        PollStyle::Wait => format!("wait_ms={}", args.wait_ms),
    }
}

#[derive(Debug, Clone, Copy)]
struct JobSample {
    /// Seconds since the phase started, when the job was seen to end.
    done_at_s: f64,
    commit_us: u64,
    /// Commit sent (or, in `rate` mode, scheduled) → poll saw `completed`.
    observed_us: u64,
    /// Commit sent → the coordinator's `completed_at` (ms resolution).
    server_us: u64,
    /// Scheduled → sent (`rate` mode only).
    start_lag_us: u64,
    polls: u32,
}

#[derive(Default)]
struct Failures {
    commit: AtomicU64,
    job_failed: AtomicU64,
    timeout: AtomicU64,
    poll: AtomicU64,
}

enum Tickets {
    Count { left: AtomicU64 },
    Until { deadline: Instant },
    Scheduled(tokio::sync::Mutex<tokio::sync::mpsc::UnboundedReceiver<Instant>>),
}

impl Tickets {
    /// `Some(scheduled time)` while there is work, `None` when the phase is over.
    async fn next(&self) -> Option<Option<Instant>> {
        match self {
            Tickets::Count { left } => left
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .ok()
                .map(|_| None),
            Tickets::Until { deadline } => (now() < *deadline).then_some(None),
            Tickets::Scheduled(rx) => rx.lock().await.recv().await.map(Some),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
struct LoadResult {
    label: String,
    seconds: f64,
    committed: u64,
    completed: u64,
    failures: Value,
    jobs_per_s: f64,
    offered_rate: Option<f64>,
    commit_latency: Summary,
    commit_to_completed_observed: Summary,
    commit_to_completed_server: Summary,
    start_lag: Option<Summary>,
    polls_per_job: f64,
    coordinator_cpu_us_per_job: Option<f64>,
    coordinator_cpu_cores: Option<f64>,
    loadgen_cpu_us_per_job: Option<f64>,
    #[serde(skip)]
    samples: Vec<JobSample>,
}

struct Load<'a> {
    client: &'a reqwest::Client,
    base: &'a str,
    clients: usize,
    poll: PollStyle,
    poll_interval: Duration,
    wait_ms: u64,
    pid: Option<u32>,
    progress: &'a ProgressBar,
}

async fn run_load(load: &Load<'_>, label: &str, mode: LoadMode) -> LoadResult {
    let commit_url = format!("{}/v1/jobs/commit/cheap", load.base);
    let body = bytes::Bytes::from(
        serde_json::to_vec(&benches::fixtures::task_body("loadgen")).expect("json"),
    );
    let failures = Arc::new(Failures::default());
    let committed = Arc::new(AtomicU64::new(0));
    let before = load.pid.and_then(procfs::sample);
    let self_before = procfs::sample(0);
    let start = now();
    let (tickets, offered_rate, generator) = match mode {
        LoadMode::Count(n) => {
            load.progress.set_length(n);
            (Tickets::Count { left: n.into() }, None, None)
        }
        LoadMode::Duration(secs) => {
            load.progress.set_length((secs * 10.0) as u64);
            (
                Tickets::Until {
                    deadline: start + Duration::from_secs_f64(secs),
                },
                None,
                None,
            )
        }
        LoadMode::Rate { per_s, secs } => {
            load.progress.set_length((secs * 10.0) as u64);
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            let total = (per_s * secs).round() as u64;
            let generator = tokio::spawn(async move {
                for k in 0..total {
                    let at = start + Duration::from_secs_f64(k as f64 / per_s);
                    tokio::time::sleep_until(at).await;
                    if tx.send(at).is_err() {
                        return;
                    }
                }
            });
            (
                Tickets::Scheduled(tokio::sync::Mutex::new(rx)),
                Some(per_s),
                Some(generator),
            )
        }
    };
    let counted = matches!(mode, LoadMode::Count(_));
    load.progress.set_position(0);
    load.progress.set_message(label.to_owned());
    let ticker = {
        let progress = load.progress.clone();
        let committed = committed.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let handle = tokio::spawn(async move {
            while !stop2.load(Ordering::Relaxed) {
                if !counted {
                    progress.set_position((start.elapsed().as_secs_f64() * 10.0) as u64);
                }
                progress.set_message(format!("committed {}", committed.load(Ordering::Relaxed)));
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        (stop, handle)
    };
    let tickets = Arc::new(tickets);
    let poll_style = load.poll;
    let (poll_query, first_delay, next_delay) = match poll_style {
        PollStyle::Backoff => (String::new(), Duration::from_millis(1), None),
        PollStyle::Every => (String::new(), Duration::ZERO, Some(load.poll_interval)),
        PollStyle::Wait => (
            format!("?wait_ms={}", load.wait_ms),
            Duration::ZERO,
            Some(Duration::ZERO),
        ),
    };
    let mut tasks = Vec::new();
    for _ in 0..load.clients {
        let client = load.client.clone();
        let tickets = tickets.clone();
        let failures = failures.clone();
        let committed = committed.clone();
        let commit_url = commit_url.clone();
        let body = body.clone();
        let base = load.base.to_owned();
        let progress = load.progress.clone();
        let poll_query = poll_query.clone();
        tasks.push(tokio::spawn(async move {
            let mut samples = Vec::new();
            while let Some(scheduled) = tickets.next().await {
                let sent = now();
                let sent_unix_us = unix_us();
                let res = client
                    .post(&commit_url)
                    .header("content-type", "application/json")
                    .body(body.clone())
                    .send()
                    .await;
                let job_id = match res {
                    Ok(r) if r.status().as_u16() == 201 => r
                        .json::<Value>()
                        .await
                        .ok()
                        .and_then(|v| v["job_id"].as_str().map(str::to_owned)),
                    _ => None,
                };
                let Some(job_id) = job_id else {
                    failures.commit.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                let commit_us = sent.elapsed().as_micros() as u64;
                committed.fetch_add(1, Ordering::Relaxed);
                let poll_url = format!("{base}/v1/jobs/{job_id}{poll_query}");
                let mut delay = first_delay;
                let mut polls = 0u32;
                let ended = loop {
                    if !delay.is_zero() {
                        tokio::time::sleep(delay).await;
                    }
                    polls += 1;
                    let record = match client.get(&poll_url).send().await {
                        Ok(r) if r.status().is_success() => r.json::<Value>().await.ok(),
                        _ => None,
                    };
                    let Some(record) = record else {
                        failures.poll.fetch_add(1, Ordering::Relaxed);
                        if sent.elapsed() > JOB_TIMEOUT {
                            break None;
                        }
                        continue;
                    };
                    match record["status"].as_str() {
                        Some("completed") => break Some(record),
                        Some("failed") => {
                            failures.job_failed.fetch_add(1, Ordering::Relaxed);
                            break None;
                        }
                        _ => {}
                    }
                    if sent.elapsed() > JOB_TIMEOUT {
                        failures.timeout.fetch_add(1, Ordering::Relaxed);
                        break None;
                    }
                    delay = next_delay.unwrap_or((delay * 2).min(Duration::from_millis(16)));
                };
                let Some(record) = ended else { continue };
                let origin = scheduled.unwrap_or(sent);
                let completed_ms = record["completed_at"]
                    .as_str()
                    .and_then(protocol::time::parse_ms)
                    .unwrap_or(0);
                let server_us = (completed_ms * 1000 - sent_unix_us).max(0) as u64;
                samples.push(JobSample {
                    done_at_s: start.elapsed().as_secs_f64(),
                    commit_us,
                    observed_us: origin.elapsed().as_micros() as u64,
                    server_us,
                    start_lag_us: sent.saturating_duration_since(origin).as_micros() as u64,
                    polls,
                });
                if counted {
                    progress.inc(1);
                }
            }
            samples
        }));
    }
    let mut samples = Vec::new();
    for t in tasks {
        if let Ok(s) = t.await {
            samples.extend(s);
        }
    }
    if let Some(g) = generator {
        g.abort();
    }
    ticker.0.store(true, Ordering::Relaxed);
    let _ = ticker.1.await;
    let seconds = start.elapsed().as_secs_f64();
    let after = load.pid.and_then(procfs::sample);
    let self_after = procfs::sample(0);
    let completed = samples.len() as u64;
    let per_job = |b: Option<ProcSample>, a: Option<ProcSample>| match (b, a) {
        (Some(b), Some(a)) if completed > 0 => {
            Some((a.cpu_seconds - b.cpu_seconds) * 1e6 / completed as f64)
        }
        _ => None,
    };
    let pick = |f: fn(&JobSample) -> u64| samples.iter().map(f).collect::<Vec<u64>>();
    LoadResult {
        label: label.to_owned(),
        seconds,
        committed: committed.load(Ordering::Relaxed),
        completed,
        failures: json!({
            "commit": failures.commit.load(Ordering::Relaxed),
            "job_failed": failures.job_failed.load(Ordering::Relaxed),
            "timeout": failures.timeout.load(Ordering::Relaxed),
            "poll_errors": failures.poll.load(Ordering::Relaxed),
        }),
        jobs_per_s: completed as f64 / seconds,
        offered_rate,
        commit_latency: summarize(&pick(|s| s.commit_us)),
        commit_to_completed_observed: summarize(&pick(|s| s.observed_us)),
        commit_to_completed_server: summarize(&pick(|s| s.server_us)),
        start_lag: offered_rate.map(|_| summarize(&pick(|s| s.start_lag_us))),
        polls_per_job: samples.iter().map(|s| s.polls as f64).sum::<f64>()
            / completed.max(1) as f64,
        coordinator_cpu_us_per_job: per_job(before, after),
        coordinator_cpu_cores: match (before, after) {
            (Some(b), Some(a)) => Some((a.cpu_seconds - b.cpu_seconds) / seconds),
            _ => None,
        },
        loadgen_cpu_us_per_job: per_job(self_before, self_after),
        samples,
    }
}

#[derive(Debug, Clone, Copy)]
enum LoadMode {
    Count(u64),
    Duration(f64),
    Rate { per_s: f64, secs: f64 },
}

fn failures_total(r: &LoadResult) -> u64 {
    ["commit", "job_failed", "timeout"]
        .iter()
        .map(|k| r.failures[k].as_u64().unwrap_or(0))
        .sum()
}

/// Completions per second in 250 ms buckets.
fn throughput_series(samples: &[JobSample], seconds: f64) -> Vec<(f64, f64)> {
    let bucket = 0.25;
    let n = (seconds / bucket).ceil().max(1.0) as usize;
    let mut counts = vec![0u64; n];
    for s in samples {
        let i = ((s.done_at_s / bucket) as usize).min(n - 1);
        counts[i] += 1;
    }
    counts
        .iter()
        .enumerate()
        .map(|(i, &c)| ((i as f64 + 0.5) * bucket, c as f64 / bucket))
        .collect()
}

// ---------------------------------------------------------------- report

#[derive(Debug, Serialize)]
struct Report {
    mode: Mode,
    machine: Value,
    settings: Value,
    ceiling_get: Option<EndpointResult>,
    ceiling_post: Option<EndpointResult>,
    endpoints: Vec<EndpointResult>,
    load: Vec<LoadResult>,
    idle: Option<Value>,
    coordinator: Option<ProcSample>,
    ratios: Value,
}

struct Table(Vec<[String; 4]>);

impl Table {
    fn row(&mut self, metric: &str, value: String, ceiling: String, ratio: String) {
        self.0.push([metric.to_owned(), value, ceiling, ratio]);
    }

    fn print(&self) {
        let header = [
            "metric".to_owned(),
            "value".to_owned(),
            "bare axum".to_owned(),
            "ratio".to_owned(),
        ];
        let rows: Vec<&[String; 4]> = std::iter::once(&header).chain(self.0.iter()).collect();
        let widths: Vec<usize> = (0..4)
            .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
            .collect();
        for (k, r) in rows.iter().enumerate() {
            let line: Vec<String> = (0..4)
                .map(|i| format!("{:<w$}", r[i], w = widths[i]))
                .collect();
            println!("| {} |", line.join(" | "));
            if k == 0 {
                let sep: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
                println!("|-{}-|", sep.join("-|-"));
            }
        }
    }
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.2}", a / b)
    } else {
        "-".to_owned()
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

fn machine() -> Value {
    let loadavg = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_owned())
        })
        .unwrap_or_default();
    json!({"cpus": cpus, "cpu_model": model, "loadavg_at_start": loadavg.trim(),
           "started_unix_ms": unix_us() / 1000})
}

// ---------------------------------------------------------------- main

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    if let Some(addr) = args.serve_bare {
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        rt.block_on(serve_bare(addr));
        return std::process::ExitCode::SUCCESS;
    }
    if let Err(e) = check(&args) {
        eprintln!("error: {e}");
        return std::process::ExitCode::from(2);
    }
    procfs::raise_fd_limit();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let max = Duration::from_secs_f64(args.max_secs);
    let outcome = rt.block_on(async { tokio::time::timeout(max, run(&args)).await });
    // Workers and clients still running are dropped with the runtime.
    rt.shutdown_timeout(Duration::from_secs(1));
    match outcome {
        Ok(Ok(())) => std::process::ExitCode::SUCCESS,
        Ok(Err(e)) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
        Err(_) => {
            eprintln!("error: run exceeded --max-secs {}", args.max_secs);
            std::process::ExitCode::FAILURE
        }
    }
}

fn check(args: &Args) -> Result<(), String> {
    if let Some(t) = &args.target {
        let rest = t
            .strip_prefix("http://")
            .ok_or("--target must be http://127.0.0.1:PORT")?;
        if !(rest.starts_with("127.0.0.1:") || rest.starts_with("localhost:")) {
            return Err("--target must be on loopback (127.0.0.1)".into());
        }
    }
    if args.workers > MAX_WORKERS {
        return Err(format!("--workers is at most {MAX_WORKERS}"));
    }
    if args.clients == 0 || args.clients > MAX_CLIENTS {
        return Err(format!("--clients is 1 to {MAX_CLIENTS}"));
    }
    if args.jobs == 0 || args.jobs > MAX_JOBS {
        return Err(format!("--jobs is 1 to {MAX_JOBS}"));
    }
    if !(args.max_secs > 0.0 && args.max_secs <= 3_600.0) {
        return Err("--max-secs is at most 3600".into());
    }
    for (name, v) in [
        ("--duration", args.duration),
        ("--hold", args.hold),
        ("--peak-secs", args.peak_secs),
    ] {
        if !(v > 0.0 && v <= args.max_secs) {
            return Err(format!("{name} must be > 0 and at most --max-secs"));
        }
    }
    if args.slots == 0 || args.slots > 64 {
        return Err("--slots is 1 to 64".into());
    }
    if args.poll.is_empty() || args.poll.len() > 3 {
        return Err("--poll names 1 to 3 styles".into());
    }
    if args.poll_interval_ms == 0 || args.poll_interval_ms > 60_000 {
        return Err("--poll-interval-ms is 1 to 60000".into());
    }
    if args.wait_ms == 0 || args.wait_ms > 60_000 {
        return Err("--wait-ms is 1 to 60000".into());
    }
    Ok(())
}

async fn run(args: &Args) -> Result<(), String> {
    if let Some(dir) = args.out.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.clients + 8)
        .tcp_nodelay(true)
        .build()
        .map_err(|e| e.to_string())?;
    let progress = if args.quiet {
        ProgressBar::hidden()
    } else {
        let p = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
        p.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} {msg}",
            )
            .expect("template"),
        );
        p
    };
    let this_exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let log_dir = args.out.parent().unwrap_or(Path::new(".")).to_owned();

    // 1. The ceiling: the bare axum handler, same client code.
    let (mut ceiling_get, mut ceiling_post) = (None, None);
    if args.ceiling_secs > 0.0 {
        progress.set_message("bare axum handler");
        let bare_port = free_port();
        let mut bare = {
            let mut cmd = Command::new(&this_exe);
            cmd.arg("--serve-bare")
                .arg(format!("127.0.0.1:{bare_port}"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .kill_on_drop(true);
            let child = cmd.spawn().map_err(|e| e.to_string())?;
            Server {
                pid: child.id(),
                child: Some(child),
                base: format!("http://127.0.0.1:{bare_port}"),
            }
        };
        wait_ready(&client, &bare.base).await?;
        let body = bytes::Bytes::from(
            serde_json::to_vec(&benches::fixtures::task_body("loadgen")).expect("json"),
        );
        // Warm the connection pool.
        hammer(
            &client,
            "warm-up",
            Req::Get(format!("{}/v1/health", bare.base)),
            args.clients,
            0.3,
            None,
        )
        .await;
        ceiling_get = Some(
            hammer(
                &client,
                "bare GET",
                Req::Get(format!("{}/v1/health", bare.base)),
                args.clients,
                args.ceiling_secs,
                bare.pid,
            )
            .await,
        );
        if args.mode == Mode::Endpoints {
            ceiling_post = Some(
                hammer(
                    &client,
                    "bare POST",
                    Req::Post(format!("{}/v1/jobs/commit/cheap", bare.base), body),
                    args.clients,
                    args.ceiling_secs,
                    bare.pid,
                )
                .await,
            );
        }
        bare.stop().await;
    }

    // 2. The coordinator.
    let fresh_db =
        (args.db == "fresh").then(|| log_dir.join(format!("loadgen-{}.db", std::process::id())));
    let mut server = match &args.target {
        Some(url) => Server {
            child: None,
            pid: args.pid,
            base: url.trim_end_matches('/').to_owned(),
        },
        None => {
            let bin = match &args.coordinator_bin {
                Some(b) => b.clone(),
                None => this_exe
                    .parent()
                    .map(|d| d.join("coordinator"))
                    .ok_or("cannot locate the coordinator binary")?,
            };
            if !bin.exists() {
                return Err(format!(
                    "{} not found: build it with `cargo build --release -p coordinator` or pass --coordinator-bin",
                    bin.display()
                ));
            }
            let mut coord_args = args.coordinator_args.clone();
            // Endpoints mode measures what a commit costs the handler: since
            // round 5 a 3-second run commits more than the default 100,000
            // pending jobs, and admission control's 503s would be measured
            // instead. An explicit --queue-len-max still wins.
            if matches!(args.mode, Mode::Endpoints)
                && !coord_args.iter().any(|a| a.starts_with("--queue-len-max"))
            {
                coord_args.push(format!("--queue-len-max={ENDPOINTS_QUEUE_LEN_MAX}"));
            }
            match args.db.as_str() {
                "none" => {}
                "fresh" => {
                    let path = fresh_db.clone().expect("fresh db path");
                    remove_db(&path);
                    coord_args.push(format!("--db={}", path.display()));
                }
                other => coord_args.push(format!("--db={other}")),
            }
            spawn_server(&bin, &coord_args, &log_dir.join("coordinator.log"), &client).await?
        }
    };
    let base = server.base.clone();
    wait_ready(&client, &base).await?;
    let pid = server.pid;
    let coord_start = server.sample();

    let mut endpoints = Vec::new();
    let mut loads = Vec::new();
    let mut idle = None;
    let mut worker_handles = Vec::new();
    match args.mode {
        Mode::Endpoints => {
            let secs = args.duration.min(args.max_secs / 6.0);
            let body = bytes::Bytes::from(
                serde_json::to_vec(&benches::fixtures::task_body("loadgen")).expect("json"),
            );
            // The jobs the poll phase reads, committed first so that a full
            // queue after the commit phase cannot leave it nothing to poll.
            let poll_urls = commit_poll_jobs(&client, &base, &body).await?;
            for (name, req) in [
                ("health", Req::Get(format!("{base}/v1/health"))),
                (
                    "quote",
                    Req::Get(format!("{base}/v1/quote?job_type=TASK&policy=AUTO")),
                ),
                (
                    "commit (no workers)",
                    Req::Post(format!("{base}/v1/jobs/commit/cheap"), body.clone()),
                ),
            ] {
                progress.set_message(name);
                endpoints.push(hammer(&client, name, req, args.clients, secs, pid).await);
            }
            progress.set_message("poll");
            endpoints.push(
                hammer(
                    &client,
                    "poll",
                    Req::GetMany(Arc::new(poll_urls)),
                    args.clients,
                    secs,
                    pid,
                )
                .await,
            );
        }
        Mode::Idle => {
            let before = server.sample();
            worker_handles = connect_workers(&client, &base, args, args.workers, &progress).await?;
            progress.set_message(format!("holding {} workers", args.workers));
            tokio::time::sleep(Duration::from_secs(1)).await;
            let held_from = server.sample();
            let t0 = now();
            tokio::time::sleep(Duration::from_secs_f64(args.hold)).await;
            let held_secs = t0.elapsed().as_secs_f64();
            let held_to = server.sample();
            let online = workers_online(&client, &base).await.unwrap_or(0);
            idle = Some(json!({
                "workers": args.workers,
                "online_at_end": online,
                "hold_seconds": held_secs,
                "rss_before_workers_bytes": before.map(|s| s.rss_bytes),
                "rss_held_bytes": held_to.map(|s| s.rss_bytes),
                "peak_rss_bytes": held_to.map(|s| s.peak_rss_bytes),
                "rss_per_worker_bytes": match (before, held_to) {
                    (Some(b), Some(a)) => Some((a.rss_bytes.saturating_sub(b.rss_bytes)) as f64 / args.workers.max(1) as f64),
                    _ => None,
                },
                "heartbeat_cpu_fraction_of_core": match (held_from, held_to) {
                    (Some(b), Some(a)) => Some((a.cpu_seconds - b.cpu_seconds) / held_secs),
                    _ => None,
                },
                "connect_cpu_seconds": match (before, held_from) {
                    (Some(b), Some(a)) => Some(a.cpu_seconds - b.cpu_seconds),
                    _ => None,
                },
            }));
        }
        Mode::Jobs | Mode::Duration | Mode::Rate => {
            worker_handles = connect_workers(&client, &base, args, args.workers, &progress).await?;
            for (i, &style) in args.poll.iter().enumerate() {
                let load = Load {
                    client: &client,
                    base: &base,
                    clients: args.clients,
                    poll: style,
                    poll_interval: Duration::from_millis(args.poll_interval_ms),
                    wait_ms: args.wait_ms,
                    pid,
                    progress: &progress,
                };
                // The default style keeps the labels reports had before `--poll`.
                let label = |name: &str| match style {
                    PollStyle::Backoff => name.to_owned(),
                    other => format!("{name}, poll {}", poll_name(other, args)),
                };
                if i == 0 {
                    // A short warm-up so connection pools and allocators are in their steady state.
                    run_load(&load, "warm-up", LoadMode::Count((args.clients as u64) * 4)).await;
                }
                match args.mode {
                    Mode::Jobs => loads
                        .push(run_load(&load, &label("jobs"), LoadMode::Count(args.jobs)).await),
                    Mode::Duration => loads.push(
                        run_load(&load, &label("duration"), LoadMode::Duration(args.duration))
                            .await,
                    ),
                    _ => {
                        let per_s = match args.rate {
                            Some(r) => r,
                            None => {
                                let peak = run_load(
                                    &load,
                                    &label("peak"),
                                    LoadMode::Duration(args.peak_secs),
                                )
                                .await;
                                let r = peak.jobs_per_s * args.rate_of_peak;
                                loads.push(peak);
                                r
                            }
                        };
                        loads.push(
                            run_load(
                                &load,
                                &label(&format!("rate {per_s:.0}/s")),
                                LoadMode::Rate {
                                    per_s: per_s.max(1.0),
                                    secs: args.duration,
                                },
                            )
                            .await,
                        );
                    }
                }
            }
        }
    }
    progress.finish_and_clear();
    let coord_end = server.sample();
    server.stop().await;
    for h in worker_handles {
        h.abort();
    }
    if let Some(path) = &fresh_db {
        remove_db(path);
    }

    // 3. Report.
    let mut table = Table(Vec::new());
    let cg = ceiling_get.as_ref();
    let (c_rps, c_p50, c_p99, c_cpu) = cg.map_or((0.0, 0, 0, None), |c| {
        (
            c.req_per_s,
            c.latency.p50_us,
            c.latency.p99_us,
            c.server_cpu_us_per_req,
        )
    });
    if let Some(c) = cg {
        table.row(
            "bare axum GET req/s",
            format!("{:.0}", c.req_per_s),
            format!("{:.0}", c.req_per_s),
            "1.00".into(),
        );
    }
    let mut ratios = serde_json::Map::new();
    for e in &endpoints {
        let ceiling = if e.name.starts_with("commit") {
            ceiling_post.as_ref()
        } else {
            cg
        };
        let c = ceiling.map_or(0.0, |c| c.req_per_s);
        table.row(
            &format!("{} req/s", e.name),
            format!("{:.0}", e.req_per_s),
            format!("{c:.0}"),
            ratio(e.req_per_s, c),
        );
        table.row(
            &format!("{} latency p50 / p99", e.name),
            format!(
                "{} / {}",
                fmt_us(e.latency.p50_us),
                fmt_us(e.latency.p99_us)
            ),
            ceiling.map_or("-".into(), |c| {
                format!(
                    "{} / {}",
                    fmt_us(c.latency.p50_us),
                    fmt_us(c.latency.p99_us)
                )
            }),
            ceiling.map_or("-".into(), |c| {
                ratio(e.latency.p99_us as f64, c.latency.p99_us as f64)
            }),
        );
        if let Some(cpu) = e.server_cpu_us_per_req {
            let cc = ceiling.and_then(|c| c.server_cpu_us_per_req);
            table.row(
                &format!("{} server CPU / req", e.name),
                format!("{cpu:.1} µs"),
                cc.map_or("-".into(), |v| format!("{v:.1} µs")),
                cc.map_or("-".into(), |v| ratio(cpu, v)),
            );
        }
        if e.failures > 0 {
            table.row(
                &format!("{} failures", e.name),
                e.failures.to_string(),
                "-".into(),
                "-".into(),
            );
        }
        ratios.insert(
            format!("{}_req_per_s", e.name),
            json!(e.req_per_s / c.max(1e-9)),
        );
    }
    for l in &loads {
        if l.label == "warm-up" {
            continue;
        }
        let p = &l.label;
        table.row(
            &format!("[{p}] jobs/s"),
            format!("{:.0}", l.jobs_per_s),
            format!("{c_rps:.0} req/s"),
            ratio(l.jobs_per_s, c_rps),
        );
        if let Some(r) = l.offered_rate {
            table.row(
                &format!("[{p}] offered rate"),
                format!("{r:.0}/s"),
                "-".into(),
                "-".into(),
            );
        }
        table.row(
            &format!("[{p}] completed / committed"),
            format!("{} / {}", l.completed, l.committed),
            "-".into(),
            "-".into(),
        );
        table.row(
            &format!("[{p}] commit latency p50 / p99"),
            format!(
                "{} / {}",
                fmt_us(l.commit_latency.p50_us),
                fmt_us(l.commit_latency.p99_us)
            ),
            format!("{} / {}", fmt_us(c_p50), fmt_us(c_p99)),
            format!(
                "{} / {}",
                ratio(l.commit_latency.p50_us as f64, c_p50 as f64),
                ratio(l.commit_latency.p99_us as f64, c_p99 as f64)
            ),
        );
        let s = &l.commit_to_completed_server;
        table.row(
            &format!("[{p}] commit→completed p50 / p99 / max (completed_at)"),
            format!(
                "{} / {} / {}",
                fmt_us(s.p50_us),
                fmt_us(s.p99_us),
                fmt_us(s.max_us)
            ),
            format!("{} / {}", fmt_us(c_p50), fmt_us(c_p99)),
            format!(
                "{} / {}",
                ratio(s.p50_us as f64, c_p50 as f64),
                ratio(s.p99_us as f64, c_p99 as f64)
            ),
        );
        let o = &l.commit_to_completed_observed;
        table.row(
            &format!("[{p}] commit→completed p50 / p99 / max (seen by poll)"),
            format!(
                "{} / {} / {}",
                fmt_us(o.p50_us),
                fmt_us(o.p99_us),
                fmt_us(o.max_us)
            ),
            "-".into(),
            "-".into(),
        );
        if let Some(lag) = &l.start_lag {
            table.row(
                &format!("[{p}] arrival → sent p99"),
                fmt_us(lag.p99_us),
                "-".into(),
                "-".into(),
            );
        }
        table.row(
            &format!("[{p}] failures"),
            failures_total(l).to_string(),
            "-".into(),
            "-".into(),
        );
        table.row(
            &format!("[{p}] polls per job"),
            format!("{:.2}", l.polls_per_job),
            "-".into(),
            "-".into(),
        );
        table.row(
            &format!("[{p}] HTTP requests per job (commit + polls)"),
            format!("{:.2}", l.polls_per_job + 1.0),
            "-".into(),
            "-".into(),
        );
        if let Some(cpu) = l.coordinator_cpu_us_per_job {
            table.row(
                &format!("[{p}] coordinator CPU / job"),
                format!("{cpu:.0} µs"),
                c_cpu.map_or("-".into(), |v| format!("{v:.1} µs / req")),
                c_cpu.map_or("-".into(), |v| ratio(cpu, v)),
            );
        }
        if let Some(cores) = l.coordinator_cpu_cores {
            table.row(
                &format!("[{p}] coordinator CPU cores busy"),
                format!("{cores:.2}"),
                "-".into(),
                "-".into(),
            );
        }
        if let Some(cpu) = l.loadgen_cpu_us_per_job {
            table.row(
                &format!("[{p}] loadgen (clients + workers) CPU / job"),
                format!("{cpu:.0} µs"),
                "-".into(),
                "-".into(),
            );
        }
        ratios.insert(
            format!("{p}_jobs_per_s"),
            json!(l.jobs_per_s / c_rps.max(1e-9)),
        );
    }
    if let Some(i) = &idle {
        table.row(
            "idle workers online",
            i["online_at_end"].to_string(),
            "-".into(),
            "-".into(),
        );
        if let Some(b) = i["rss_held_bytes"].as_u64() {
            table.row(
                "coordinator RSS with workers held",
                mib(b),
                "-".into(),
                "-".into(),
            );
        }
        if let Some(b) = i["rss_before_workers_bytes"].as_u64() {
            table.row(
                "coordinator RSS before workers",
                mib(b),
                "-".into(),
                "-".into(),
            );
        }
        if let Some(b) = i["rss_per_worker_bytes"].as_f64() {
            table.row(
                "RSS per idle worker",
                format!("{:.1} KiB", b / 1024.0),
                "-".into(),
                "-".into(),
            );
        }
        if let Some(f) = i["heartbeat_cpu_fraction_of_core"].as_f64() {
            table.row(
                "heartbeat CPU (share of one core)",
                format!("{:.2} %", f * 100.0),
                "-".into(),
                "-".into(),
            );
        }
    }
    if let Some(s) = coord_end {
        table.row(
            "coordinator peak RSS (VmHWM)",
            mib(s.peak_rss_bytes),
            "-".into(),
            "-".into(),
        );
    }
    println!();
    println!(
        "loadgen {:?}: {} workers x {} slots, {} clients, coordinator {}",
        args.mode, args.workers, args.slots, args.clients, base
    );
    table.print();

    let report = Report {
        mode: args.mode,
        machine: machine(),
        settings: json!({
            "workers": args.workers, "slots": args.slots, "clients": args.clients,
            "jobs": args.jobs, "duration": args.duration, "rate": args.rate,
            "rate_of_peak": args.rate_of_peak, "worker_latency": format!("{:?}", args.worker_latency),
            "target": args.target, "coordinator_args": args.coordinator_args,
            "worker_tcp_nodelay": !args.nagle_workers, "db": args.db,
            "coordinator_cpu_seconds_at_start": coord_start.map(|s| s.cpu_seconds),
        }),
        ceiling_get: ceiling_get.clone(),
        ceiling_post: ceiling_post.clone(),
        endpoints: endpoints.clone(),
        load: loads
            .iter()
            .filter(|l| l.label != "warm-up")
            .cloned()
            .collect(),
        idle,
        coordinator: coord_end,
        ratios: Value::Object(ratios),
    };
    let text = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
    std::fs::write(&args.out, text).map_err(|e| format!("{}: {e}", args.out.display()))?;
    let svg = args.out.with_extension("svg");
    let main_load = loads.iter().rev().find(|l| l.label != "warm-up");
    let (series, secs, title) = match main_load {
        Some(l) => (
            throughput_series(&l.samples, l.seconds),
            l.seconds,
            l.label.clone(),
        ),
        None => (Vec::new(), 1.0, format!("{:?}", args.mode).to_lowercase()),
    };
    let _ = secs;
    let mut lat: Vec<(String, Vec<u64>)> = Vec::new();
    if let Some(l) = main_load {
        lat.push((
            "commit".into(),
            l.samples.iter().map(|s| s.commit_us).collect(),
        ));
        lat.push((
            "commit→completed (completed_at)".into(),
            l.samples.iter().map(|s| s.server_us).collect(),
        ));
        lat.push((
            "commit→completed (seen by poll)".into(),
            l.samples.iter().map(|s| s.observed_us).collect(),
        ));
    }
    for e in &endpoints {
        lat.push((e.name.clone(), e.samples.clone()));
    }
    if let Some(c) = &ceiling_get {
        lat.push(("bare axum GET".into(), c.samples.clone()));
    }
    let series_refs: Vec<LatencySeries<'_>> = lat
        .iter()
        .map(|(n, s)| LatencySeries {
            name: n,
            samples_us: s,
        })
        .collect();
    write_svg(&svg, &title, &series, &series_refs).map_err(|e| e.to_string())?;
    println!("\nwrote {} and {}", args.out.display(), svg.display());
    Ok(())
}

/// Pending jobs endpoints mode creates for its poll phase.
const POLL_JOBS: usize = 1_000;

/// The queue bound endpoints mode gives a coordinator it starts: above what
/// any run of `--duration` seconds commits on this hardware.
const ENDPOINTS_QUEUE_LEN_MAX: usize = 10_000_000;

/// Commits [`POLL_JOBS`] jobs and returns their status URLs; an error if
/// any commit is refused (the poll figure would then measure fewer jobs, or
/// none, without saying so).
async fn commit_poll_jobs(
    client: &reqwest::Client,
    base: &str,
    body: &bytes::Bytes,
) -> Result<Vec<String>, String> {
    let mut urls = Vec::with_capacity(POLL_JOBS);
    for _ in 0..POLL_JOBS {
        let r = client
            .post(format!("{base}/v1/jobs/commit/cheap"))
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = r.status();
        let v: Value = r.json().await.map_err(|e| e.to_string())?;
        match v["job_id"].as_str() {
            Some(id) => urls.push(format!("{base}/v1/jobs/{id}")),
            None => {
                return Err(format!(
                    "a commit for the poll phase answered {status}: {v}"
                ))
            }
        }
    }
    Ok(urls)
}

#[cfg(test)]
mod tests {
    use super::worker_connector;

    #[test]
    fn nagle_workers_keeps_nagle_on() {
        assert!(!worker_connector("ws://x.test".into(), true).nodelay());
        assert!(worker_connector("ws://x.test".into(), false).nodelay());
    }
}
