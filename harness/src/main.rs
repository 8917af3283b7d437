//! `harness [run] scenarios/*.toml`: checks every file (as `harness check`),
//! then runs each scenario twice under the simulation, fails if the two
//! transcripts differ, and prints a summary.
//! `harness check scenarios/*.toml`: resolves every reference of each file
//! (variables, workers, instances, matchers, file name) without running.
//! `harness swarm --seeds A..B` runs random worlds (see `harness::swarm`).
//! `harness [run] --live ...` runs the live-capable scenarios against real
//! coordinator processes over real sockets; `--target NAME=URL` against
//! coordinators already running. `--junit FILE` writes JUnit XML.

/// mimalloc, for the harness binary only (the coordinator keeps the system
/// allocator): a swarm world allocates and frees millions of small values
/// (frames, JSON, futures) and glibc's malloc and free were 13 % of its CPU
/// (`benches/results/swarm-speed-2026-11-28.md`). Nothing in a transcript
/// depends on addresses, so the allocator changes speed only.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay`: milliseconds before freed memory
/// goes back to the OS (1000 by default in the mimalloc 3 sources the
/// locked libmimalloc-sys builds; -1: never). The crate does not name it
/// ("not exposed as constants for stability reasons"): this is its place
/// in that version's option enum, which the test below holds to.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Freed memory stays with the process for reuse. A swarm world frees
/// inputs of up to a few hundred KiB many times over; purged, every reuse
/// faulted fresh zeroed pages back in, about 6 % of the swarm's CPU
/// (`benches/results/swarm-speed-2026-11-28.md`). The process then holds
/// what its largest world needed at once, as it did at that moment.
const PURGE_DELAY_MS: std::ffi::c_long = -1;

fn keep_freed_memory_for_reuse() {
    // SAFETY: a plain option store, valid at any time from any thread.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) }
}
use clap::{Args, Parser, Subcommand};
use harness::report::{self, junit, ScenarioReport};
use harness::run::live::{LiveResult, LiveRow};
use harness::run::{run_simulated_with, Outcome, RunReport};
use harness::swarm::cli::SwarmArgs;
use harness::world::transcript::{first_difference, LineFilter};
use harness::world::LiveTarget;
use harness::Scenario;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use std::process::ExitCode;

/// `run` is the default: `harness FILES` is `harness run FILES` (the run
/// arguments are flattened at the top level, and conflict with a subcommand).
#[derive(Debug, Parser)]
#[command(
    version,
    about = "Deterministic scenario runner for the coordinator",
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Scenario files (TOML).
    #[arg(required = true)]
    scenarios: Vec<PathBuf>,
    #[command(flatten)]
    options: RunOptions,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check, then run each scenario twice and compare the transcripts (the default).
    Run(RunArgs),
    /// Resolve every reference of each file without running it.
    Check(CheckArgs),
    /// Random worlds per seed: safety after every run, liveness after a heal,
    /// failures shrunk to scenarios.
    Swarm(SwarmArgs),
}

/// Under a subcommand no file is required: `harness check` with none
/// checks none, `harness run` with none has no scenario to run (as when the
/// subcommand was a first file name the harness skipped).
#[derive(Debug, Args)]
struct CheckArgs {
    /// Scenario files (TOML).
    scenarios: Vec<PathBuf>,
}

#[derive(Debug, Args)]
struct RunArgs {
    /// Scenario files (TOML).
    scenarios: Vec<PathBuf>,
    #[command(flatten)]
    options: RunOptions,
}

#[derive(Debug, Args)]
struct RunOptions {
    /// Override every scenario's seed.
    #[arg(long)]
    seed: Option<u64>,
    /// Write each transcript, a summary.json and report.html (the transcripts
    /// as swimlane timelines) into this directory.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Run only scenarios whose name contains this text.
    #[arg(long)]
    filter: Option<String>,
    /// Print every transcript (live runs too).
    #[arg(long, short)]
    verbose: bool,
    /// With -v: print only these kinds of lines (http, frames, events, router, harness).
    #[arg(long, value_name = "KINDS")]
    show: Option<String>,
    /// With -v: leave out lines containing any of these words (e.g. heartbeat).
    #[arg(long, value_name = "WORDS")]
    hide: Option<String>,
    /// Also write the results as JUnit XML to this file (for CI systems).
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
    #[command(flatten)]
    live: LiveArgs,
}

#[derive(Debug, Args)]
struct LiveArgs {
    /// Run against live coordinator processes instead of the simulation.
    #[arg(long)]
    live: bool,
    /// With --live: the coordinator binary to start (default: next to this one).
    #[arg(long)]
    coordinator_bin: Option<PathBuf>,
    /// With --live: run each instance as several coordinator nodes on this
    /// PostgreSQL database (cluster mode), a schema of its own per instance.
    #[arg(long, value_name = "postgres://…")]
    live_db: Option<String>,
    /// With --live-db: nodes per instance; workers are spread over them.
    #[arg(long, default_value_t = 3)]
    live_nodes: usize,
    /// With --live: run against coordinators already running instead of
    /// starting them: `NAME=URL[,NAME=URL]` (e.g. chain_a=https://a.example);
    /// a name given again is another node of that instance. Scenarios that
    /// configure the process are skipped with the reason.
    #[arg(long, value_name = "NAME=URL", conflicts_with_all = ["coordinator_bin", "live_db"])]
    target: Vec<String>,
}

struct Row {
    report: RunReport,
    wall_ms: u128,
    failure: Option<String>,
}

fn main() -> ExitCode {
    keep_freed_memory_for_reuse();
    let cli = Cli::parse();
    match cli.command {
        None => run(&cli.scenarios, cli.options),
        Some(Command::Run(args)) => run(&args.scenarios, args.options),
        Some(Command::Check(args)) => check(&args.scenarios),
        Some(Command::Swarm(args)) => harness::swarm::cli::main(args),
    }
}

/// `harness check`: every file checked, nothing run.
fn check(paths: &[PathBuf]) -> ExitCode {
    if let Err(code) = check_all(paths) {
        return code;
    }
    println!("{} scenario(s) checked: no problem", paths.len());
    ExitCode::SUCCESS
}

/// Checks every file; on a problem, says nothing was run.
fn check_all(paths: &[PathBuf]) -> Result<(), ExitCode> {
    let problems = check_files(paths);
    if problems > 0 {
        eprintln!("{problems} problem(s) found; nothing was run");
        return Err(ExitCode::from(2));
    }
    Ok(())
}

/// `harness run`: checks every file, then runs the scenarios, simulated
/// (twice each) or live.
fn run(paths: &[PathBuf], args: RunOptions) -> ExitCode {
    if let Err(code) = check_all(paths) {
        return code;
    }
    let scenarios = match load(paths, args.filter.as_deref()) {
        Ok(s) => s,
        Err(message) => {
            eprintln!("error: {message}");
            return ExitCode::from(2);
        }
    };
    let filter = match LineFilter::parse(args.show.as_deref(), args.hide.as_deref()) {
        Ok(f) => args.verbose.then_some(f),
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if args.live.live || !args.live.target.is_empty() {
        return run_live(
            &scenarios,
            args.live,
            filter.as_ref(),
            args.junit.as_deref(),
        );
    }
    let rows = run_all(&scenarios, args.seed);
    if let Some(filter) = &filter {
        print_transcripts(&rows, filter);
    }
    print_table(&rows);
    print_reads(&rows);
    if let Some(dir) = &args.out {
        if let Err(e) = write_out(dir, &scenarios, &rows) {
            eprintln!("error: writing {}: {e}", dir.display());
            return ExitCode::FAILURE;
        }
    }
    if let Some(path) = &args.junit {
        if let Err(e) = junit::write(path, "simulation", &simulated_cases(&rows)) {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    }
    print_failures(&rows)
}

/// The simulated runs as JUnit test cases.
fn simulated_cases(rows: &[Row]) -> Vec<junit::Case> {
    let case = |row: &Row| junit::Case {
        name: row.report.name.clone(),
        wall_ms: row.wall_ms,
        result: match &row.failure {
            None => junit::CaseResult::Passed,
            Some(message) => junit::CaseResult::Failed {
                message: message.clone(),
                tail: tail(&row.report.transcript).to_vec(),
            },
        },
    };
    rows.iter().map(case).collect()
}

/// The last lines of a transcript, shown with a failure.
fn tail(transcript: &[String]) -> &[String] {
    &transcript[transcript.len().saturating_sub(15)..]
}

/// The scenarios to run: every file loaded, those `--filter` leaves out dropped.
fn load(paths: &[PathBuf], filter: Option<&str>) -> Result<Vec<Scenario>, String> {
    let mut scenarios = Vec::new();
    for path in paths {
        let s = Scenario::load(path).map_err(|e| e.to_string())?;
        if filter.is_none_or(|f| s.name.contains(f)) {
            scenarios.push(s);
        }
    }
    if scenarios.is_empty() {
        return Err("no scenario to run".into());
    }
    Ok(scenarios)
}

fn run_live(
    scenarios: &[Scenario],
    live: LiveArgs,
    filter: Option<&LineFilter>,
    junit_path: Option<&std::path::Path>,
) -> ExitCode {
    let target = match live_target(live) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let rows = harness::run::live::run_all(scenarios, &target, filter);
    if let Some(path) = junit_path {
        if let Err(e) = junit::write(path, "live", &live_cases(&rows)) {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    }
    let count = |f: fn(&LiveResult) -> bool| rows.iter().filter(|r| f(&r.result)).count();
    let failed = count(|r| matches!(r, LiveResult::Failed(_)));
    println!(
        "\n{} passed, {failed} failed, {} skipped",
        count(|r| *r == LiveResult::Passed),
        count(|r| matches!(r, LiveResult::Skipped(_)))
    );
    match failed {
        0 => ExitCode::SUCCESS,
        _ => ExitCode::FAILURE,
    }
}

/// `--target` values, else the coordinator binary (and `--live-db`).
fn live_target(live: LiveArgs) -> Result<LiveTarget, String> {
    if !live.target.is_empty() {
        return LiveTarget::remote(&live.target);
    }
    let bin = harness::run::live::coordinator_bin(live.coordinator_bin.as_deref())?;
    let cluster = live.live_db.map(|db| harness::world::LiveCluster {
        db,
        nodes: live.live_nodes,
    });
    Ok(LiveTarget::Spawn { bin, cluster })
}

/// The live runs as JUnit test cases.
fn live_cases(rows: &[LiveRow]) -> Vec<junit::Case> {
    let case = |row: &LiveRow| junit::Case {
        name: row.name.clone(),
        wall_ms: row.wall_ms,
        result: match &row.result {
            LiveResult::Passed => junit::CaseResult::Passed,
            LiveResult::Failed(message) => junit::CaseResult::Failed {
                message: message.clone(),
                tail: row.tail.clone(),
            },
            LiveResult::Skipped(reason) => junit::CaseResult::Skipped(reason.clone()),
        },
    };
    rows.iter().map(case).collect()
}

/// Runs every scenario twice, with a progress bar.
fn run_all(scenarios: &[Scenario], seed: Option<u64>) -> Vec<Row> {
    let bar = ProgressBar::new(scenarios.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}").expect("static template"),
    );
    let mut rows = Vec::new();
    for scenario in scenarios {
        bar.set_message(scenario.name.clone());
        rows.push(run_twice(scenario, seed));
        bar.inc(1);
    }
    bar.finish_and_clear();
    rows
}

fn print_transcripts(rows: &[Row], filter: &LineFilter) {
    for row in rows {
        println!("--- {}", row.report.name);
        for line in row.report.transcript.iter().filter(|l| filter.shows(l)) {
            println!("{line}");
        }
    }
}

/// Each failure with its transcript's tail, then the counts.
fn print_failures(rows: &[Row]) -> ExitCode {
    let failed: Vec<&Row> = rows.iter().filter(|r| r.failure.is_some()).collect();
    for row in &failed {
        println!(
            "\nFAILED {}: {}",
            row.report.name,
            row.failure.as_deref().unwrap_or("")
        );
        println!("transcript tail:");
        for line in tail(&row.report.transcript) {
            println!("  {line}");
        }
    }
    println!(
        "\n{} passed, {} failed",
        rows.len() - failed.len(),
        failed.len()
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Loads and checks every file, printing `FILE:LINE: problem` lines;
/// returns how many problems there were.
fn check_files(paths: &[PathBuf]) -> usize {
    let mut count = 0;
    for path in paths {
        let shown = path.display();
        let loaded = std::fs::read_to_string(path)
            .map_err(|e| e.to_string())
            .and_then(|text| Scenario::parse(&text).map(|s| (text, s)));
        match loaded {
            Err(message) => {
                eprintln!("{shown}: {message}");
                count += 1;
            }
            Ok((text, scenario)) => {
                for p in harness::check::check(path, &text, &scenario) {
                    eprintln!("{shown}:{}: {}", p.line, p.message);
                    count += 1;
                }
            }
        }
    }
    count
}

/// Tokio's RNG seed of the second run: another scheduler, the same world.
const SECOND_TOKIO_SEED: u64 = 0x5eed_0f70_c10c;

/// Runs a scenario twice and compares the transcripts. The second run seeds
/// tokio's own RNG differently, so a transcript that depended on it (wake
/// order of a watch, an unbiased `select!`) would differ.
fn run_twice(scenario: &Scenario, seed: Option<u64>) -> Row {
    let seed = seed.unwrap_or(scenario.seed);
    #[allow(clippy::disallowed_methods)] // wall time of the tool itself, for the report
    let started = std::time::Instant::now();
    // The second run draws, signs and checks what the first did: it reuses
    // the first's exact curve results (protocol::crypto_memo), this thread only.
    let _memo = protocol::crypto_memo::enable();
    let first = run_simulated_with(scenario, seed, seed);
    let wall_ms = started.elapsed().as_millis();
    let second = run_simulated_with(scenario, seed, seed ^ SECOND_TOKIO_SEED);
    let failure = match &first.outcome {
        failed @ (Outcome::Failed { .. } | Outcome::InvariantBroken { .. }) => failed.failure(),
        Outcome::Passed if first.transcript != second.transcript => {
            let (line, a, b) = first_difference(&first.transcript, &second.transcript).unwrap_or((
                0,
                String::new(),
                String::new(),
            ));
            Some(format!(
                "not deterministic: the two runs differ first at line {line}:\n  run 1: {a}\n  run 2: {b}"
            ))
        }
        Outcome::Passed => None,
    };
    Row {
        report: first,
        wall_ms,
        failure,
    }
}

/// Time to first token against total time of the reads shown a job's end
/// (`stream` steps), per scenario that has any: p50 and p99 in simulated ms.
fn print_reads(rows: &[Row]) {
    let pct = |sorted: &[i64], p: usize| sorted[(sorted.len() * p).div_ceil(100).max(1) - 1];
    for row in rows.iter().filter(|r| !r.report.reads.is_empty()) {
        let reads = &row.report.reads;
        let mut ttft: Vec<i64> = reads.iter().map(|t| t.ttft_ms).collect();
        let mut total: Vec<i64> = reads.iter().map(|t| t.total_ms).collect();
        ttft.sort_unstable();
        total.sort_unstable();
        println!(
            "{}: {} streamed reads, time to first token p50 {} ms p99 {} ms; total p50 {} ms p99 {} ms",
            row.report.name,
            reads.len(),
            pct(&ttft, 50),
            pct(&ttft, 99),
            pct(&total, 50),
            pct(&total, 99)
        );
    }
}

fn print_table(rows: &[Row]) {
    let width = rows
        .iter()
        .map(|r| r.report.name.len())
        .max()
        .unwrap_or(8)
        .max(8);
    println!(
        "{:<width$}  {:>5}  {:>10}  {:>8}  {:<16}  result",
        "scenario", "steps", "sim time", "wall", "digest"
    );
    for row in rows {
        let r = &row.report;
        println!(
            "{:<width$}  {:>5}  {:>9.3}s  {:>6}ms  {:<16}  {}",
            r.name,
            r.steps_run,
            r.sim_ms as f64 / 1000.0,
            row.wall_ms,
            r.digest().get(..16).unwrap_or(""),
            if row.failure.is_some() { "FAIL" } else { "ok" }
        );
    }
}

fn write_out(dir: &std::path::Path, scenarios: &[Scenario], rows: &[Row]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut summary = Vec::new();
    let mut reports = Vec::new();
    assert_eq!(scenarios.len(), rows.len(), "one row per scenario");
    for (scenario, row) in scenarios.iter().zip(rows) {
        let r = &row.report;
        std::fs::write(
            dir.join(format!("{}.transcript", r.name)),
            r.transcript.join("\n") + "\n",
        )?;
        summary.push(serde_json::json!({
            "scenario": r.name, "seed": r.seed, "steps": r.steps_run, "sim_ms": r.sim_ms,
            "wall_ms": row.wall_ms as u64, "digest": r.digest(),
            "reads": r.reads.iter().map(|t| serde_json::json!({
                "job": t.job, "ttft_ms": t.ttft_ms, "total_ms": t.total_ms,
            })).collect::<Vec<_>>(),
            "result": if row.failure.is_some() { "fail" } else { "pass" },
            "failure": row.failure,
        }));
        reports.push(ScenarioReport::new(scenario, r, row.failure.as_deref()));
    }
    std::fs::write(
        dir.join("summary.json"),
        serde_json::to_string_pretty(&summary).unwrap_or_default(),
    )?;
    std::fs::write(dir.join("report.html"), report::render(&reports))
}

#[cfg(test)]
mod tests {
    /// Option 15 is `purge_delay`: unset (`main` sets it), it reads that
    /// option's default in the built sources (1000 ms), and the next one is
    /// the named `use_numa_nodes`.
    #[test]
    fn purge_delay_is_option_15() {
        // SAFETY: plain option reads.
        let read = |option| unsafe { libmimalloc_sys::mi_option_get(option) };
        assert_eq!(read(super::MI_OPTION_PURGE_DELAY), 1000);
        assert_eq!(
            super::MI_OPTION_PURGE_DELAY + 1,
            libmimalloc_sys::mi_option_use_numa_nodes
        );
    }
}
