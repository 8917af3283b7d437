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
//! system clock (`Instant::now`, `SystemTime::now`), in [`clock`] only.
//!
//! - [`cli`]: flags and their bounds; [`clock`]: the clock reads.
//! - [`process`]: the coordinator and the bare handler as processes.
//! - [`bare`]: the ceiling; [`endpoints`]: one endpoint hammered.
//! - [`workers`]: the WebSocket workers and idle mode.
//! - [`load`]: the end-to-end load (modes `jobs`, `duration`, `rate`).
//! - [`report`]: the table, the JSON and the SVG.

mod bare;
mod cli;
mod clock;
mod endpoints;
mod load;
mod process;
mod report;
mod workers;

use benches::procfs;
use clap::Parser;
use cli::{check, Args, Mode};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use process::{remove_db, wait_ready, Server};
use report::Measured;
use std::path::Path;
use std::time::Duration;
use tokio::task::JoinHandle;

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    if let Some(addr) = args.serve_bare {
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        rt.block_on(bare::serve_bare(addr));
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

/// The run: the ceiling, then the coordinator under the mode's load, then
/// the report.
async fn run(args: &Args) -> Result<(), String> {
    if let Some(dir) = args.out.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.clients + 8)
        .tcp_nodelay(true)
        .build()
        .map_err(|e| e.to_string())?;
    let progress = progress_bar(args.quiet);
    let this_exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let log_dir = args.out.parent().unwrap_or(Path::new(".")).to_owned();

    // 1. The ceiling: the bare axum handler, same client code.
    let ceiling = if args.ceiling_secs > 0.0 {
        bare::measure(&client, &this_exe, args, &progress).await?
    } else {
        bare::Ceiling::default()
    };

    // 2. The coordinator.
    let fresh_db =
        (args.db == "fresh").then(|| log_dir.join(format!("loadgen-{}.db", std::process::id())));
    let mut server =
        process::coordinator(args, &this_exe, &log_dir, fresh_db.as_deref(), &client).await?;
    let base = server.base.clone();
    wait_ready(&client, &base).await?;
    let coord_start = server.sample();
    let (phases, worker_handles) = measure(args, &client, &server, &progress).await?;
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
    let measured = Measured {
        ceiling,
        endpoints: phases.endpoints,
        loads: phases.loads,
        idle: phases.idle,
        coord_start,
        coord_end,
    };
    report::report(args, &base, &measured)
}

/// What the mode measured against the coordinator.
#[derive(Default)]
struct Phases {
    endpoints: Vec<endpoints::EndpointResult>,
    loads: Vec<load::LoadResult>,
    idle: Option<serde_json::Value>,
}

/// The mode's measurements, and the handles of the workers it connected
/// (still running).
async fn measure(
    args: &Args,
    client: &reqwest::Client,
    server: &Server,
    progress: &ProgressBar,
) -> Result<(Phases, Vec<JoinHandle<()>>), String> {
    let base = &server.base;
    let mut phases = Phases::default();
    let mut worker_handles = Vec::new();
    match args.mode {
        Mode::Endpoints => {
            let secs = args.duration.min(args.max_secs / 6.0);
            phases.endpoints =
                endpoints::measure(client, base, args.clients, secs, server.pid, progress).await?;
        }
        Mode::Idle => {
            let (idle, handles) = workers::hold_idle(client, server, args, progress).await?;
            phases.idle = Some(idle);
            worker_handles = handles;
        }
        Mode::Jobs | Mode::Duration | Mode::Rate => {
            worker_handles =
                workers::connect_workers(client, base, args, args.workers, progress).await?;
            phases.loads = load::run_loads(args, client, base, server.pid, progress).await;
        }
    }
    Ok((phases, worker_handles))
}

/// A progress bar on stderr, hidden under `--quiet`.
fn progress_bar(quiet: bool) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let p = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
    p.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} {msg}")
            .expect("template"),
    );
    p
}
