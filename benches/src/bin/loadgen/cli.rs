//! The command line: modes, poll styles, flags and their bounds.

use clap::{Parser, ValueEnum};
use serde::Serialize;
use std::net::SocketAddr;
use std::path::PathBuf;
use worker_sim::Latency;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
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
pub enum PollStyle {
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
pub struct Args {
    #[arg(long, value_enum, default_value = "jobs")]
    pub mode: Mode,
    /// Use a running coordinator at this http://127.0.0.1:PORT URL instead of starting one.
    #[arg(long)]
    pub target: Option<String>,
    /// With --target: the coordinator's pid, for CPU and RSS figures.
    #[arg(long)]
    pub pid: Option<u32>,
    /// With --target: connect worker i to the i-th of these nodes (round
    /// robin, repeatable), other nodes of the same cluster (`--db
    /// postgres://…`); clients still use --target.
    #[arg(long = "worker-node")]
    pub worker_nodes: Vec<String>,
    /// The coordinator binary (default: `coordinator` next to this binary).
    #[arg(long)]
    pub coordinator_bin: Option<PathBuf>,
    /// Extra argument for the started coordinator (repeatable), e.g. `--coordinator-arg=--db=:memory:`.
    #[arg(long = "coordinator-arg", allow_hyphen_values = true)]
    pub coordinator_args: Vec<String>,
    /// Store of the started coordinator: `fresh` (a new SQLite file next to
    /// the report, removed afterwards), `:memory:`, a path, or `none` (no
    /// `--db` flag, for coordinators without one).
    #[arg(long, default_value = "fresh")]
    pub db: String,
    /// WebSocket workers to connect.
    #[arg(long, default_value_t = 64)]
    pub workers: u32,
    /// Slots per worker.
    #[arg(long, default_value_t = 8)]
    pub slots: u32,
    /// Simulated job latency of the workers: MS, MIN..MAX or MEAN~STDDEV.
    #[arg(long, default_value = "0")]
    pub worker_latency: Latency,
    /// Concurrent HTTP clients (each commits a job, then polls it until it ends).
    #[arg(long, default_value_t = 64)]
    pub clients: usize,
    /// How clients follow their jobs; several (comma-separated) run the
    /// load once per style, e.g. `--poll every,wait`.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "backoff")]
    pub poll: Vec<PollStyle>,
    /// Interval of `--poll every`.
    #[arg(long, default_value_t = 500)]
    pub poll_interval_ms: u64,
    /// `wait_ms` of `--poll wait` (at most the coordinator's --poll-wait-ms-max).
    #[arg(long, default_value_t = 30_000)]
    pub wait_ms: u64,
    /// Jobs to commit in `jobs` mode.
    #[arg(long, default_value_t = 20_000)]
    pub jobs: u64,
    /// Seconds of load in `duration` and `rate` modes (and per endpoint in `endpoints`).
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Arrivals per second in `rate` mode.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Without --rate: this fraction of the peak measured first.
    #[arg(long, default_value_t = 0.5)]
    pub rate_of_peak: f64,
    /// Seconds of the peak measurement in `rate` mode.
    #[arg(long, default_value_t = 5.0)]
    pub peak_secs: f64,
    /// Seconds to hold the workers in `idle` mode.
    #[arg(long, default_value_t = 30.0)]
    pub hold: f64,
    /// Seconds of the bare-handler measurement (0 skips it).
    #[arg(long, default_value_t = 3.0)]
    pub ceiling_secs: f64,
    /// Hard bound on the whole run, seconds.
    #[arg(long, default_value_t = 300.0)]
    pub max_secs: f64,
    /// JSON report path; the SVG goes next to it with the extension `.svg`.
    #[arg(long, default_value = "target/loadgen/report.json")]
    pub out: PathBuf,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Leave Nagle's algorithm on for worker sockets (no TCP_NODELAY), so a
    /// worker's back-to-back `accept` and `result` wait on delayed ACKs.
    #[arg(long)]
    pub nagle_workers: bool,
    /// Internal: serve the bare axum handler on this address and nothing else.
    #[arg(long, hide = true)]
    pub serve_bare: Option<SocketAddr>,
}

const MAX_WORKERS: u32 = 20_000;
const MAX_CLIENTS: usize = 4_096;
const MAX_JOBS: u64 = 10_000_000;

/// Refuses a `--target` off loopback and flags out of bounds, before
/// anything starts.
pub fn check(args: &Args) -> Result<(), String> {
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

/// A poll style as the report labels it.
pub fn poll_name(style: PollStyle, args: &Args) -> String {
    match style {
        PollStyle::Backoff => "backoff 1..16 ms".into(),
        PollStyle::Every => format!("every {} ms", args.poll_interval_ms),
        PollStyle::Wait => format!("wait_ms={}", args.wait_ms),
    }
}
