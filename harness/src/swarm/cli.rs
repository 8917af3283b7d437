//! The `harness swarm` command line: seeds in parallel, a progress bar, a
//! summary with the coverage table, and each failure shrunk to a file.

use super::steer::{self, WorldId};
use super::{run_world, shrink_and_write, SeedResult, Verdict};
use crate::expr::duration::parse_duration;
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Duration;

/// `harness swarm`'s arguments (a subcommand of the `harness` binary).
#[derive(Debug, clap::Args)]
pub struct SwarmArgs {
    /// Seeds to run, `A..B` (B excluded).
    #[arg(long, default_value = "0..1000")]
    seeds: String,
    /// Stop starting new seeds after this much wall time (e.g. `60s`, `10m`).
    #[arg(long, value_name = "DURATION")]
    time_budget: Option<String>,
    /// Where shrunk failures are written.
    #[arg(long, default_value = "target/swarm")]
    out: PathBuf,
    /// Threads (default: the machine's cores). Each seed is still one
    /// single-threaded deterministic world.
    #[arg(long)]
    jobs: Option<usize>,
    /// Report failures without shrinking them.
    #[arg(long)]
    no_shrink: bool,
    /// Stop starting new seeds after the first failure.
    #[arg(long)]
    fail_fast: bool,
    /// Print one line per seed.
    #[arg(long, short)]
    verbose: bool,
    /// Variations run of each seed whose world reached a `sometimes` state
    /// no earlier world reached, first in the next round (0: none; at most
    /// 32).
    #[arg(long, default_value_t = 4)]
    steer: u32,
}

pub fn main(args: SwarmArgs) -> ExitCode {
    let seeds = match super::parse_seeds(&args.seeds) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: --seeds {e}");
            return ExitCode::from(2);
        }
    };
    let budget = match args.time_budget.as_deref().map(parse_duration).transpose() {
        Ok(b) => b,
        Err(e) => {
            eprintln!("error: --time-budget {e}");
            return ExitCode::from(2);
        }
    };
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    #[allow(clippy::disallowed_methods)] // wall time of the tool itself, not of a world
    let started = std::time::Instant::now();
    let stop = Stop {
        budget,
        fail_fast: args.fail_fast,
        started,
    };
    let steer = args.steer.min(steer::VARIATIONS_MAX);
    let results = run_all(seeds.clone(), jobs, &stop, args.verbose, steer);
    let wall = started.elapsed();
    print_summary(&results, seeds.end - seeds.start, wall);
    print_reads(&results);
    let failures = first_failure_per_invariant(&results);
    // Shrinking runs worlds on this thread; their panics are failures
    // reported below, not output.
    crate::run::panics::set_quiet(true);
    for (invariant, (id, message)) in &failures {
        println!(
            "\nFAILED seed {id}: {invariant}\n  {}",
            message.replace('\n', "\n  ")
        );
        if args.no_shrink {
            continue;
        }
        match shrink_and_write(*id, invariant, &args.out) {
            Ok(s) => println!(
                "  shrunk in {} runs to {} lines: {}\n  replay: harness {}\n  first violation after shrinking: {}",
                s.runs,
                s.lines,
                s.path.display(),
                s.path.display(),
                s.message.lines().next().unwrap_or("")
            ),
            Err(e) => println!("  could not write the shrunk scenario: {e}"),
        }
    }
    if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// When to stop starting new seeds.
struct Stop {
    budget: Option<Duration>,
    fail_fast: bool,
    started: std::time::Instant,
}

/// Runs the seeds in rounds of [`steer::ROUND_SEEDS`], each round led by
/// `steer` variations of every seed of the round before that reached a
/// new `sometimes` state (see [`steer`]); returns the results sorted by
/// world.
fn run_all(
    seeds: std::ops::Range<u64>,
    jobs: usize,
    stop: &Stop,
    verbose: bool,
    steer: u32,
) -> Vec<SeedResult> {
    let bar = ProgressBar::new(seeds.end - seeds.start);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} worlds {per_sec} {msg} eta {eta}")
            .expect("static template"),
    );
    let out_of_time = AtomicBool::new(false);
    let (mut results, mut seen) = (Vec::new(), BTreeSet::new());
    let (mut queued, mut next) = (Vec::<WorldId>::new(), seeds.start);
    while (next < seeds.end || !queued.is_empty()) && !out_of_time.load(Ordering::Relaxed) {
        let upto = (next + steer::ROUND_SEEDS).min(seeds.end);
        let mut round = std::mem::take(&mut queued);
        round.extend((next..upto).map(WorldId::seed));
        next = upto;
        let mut done = run_round(&round, jobs, stop, &out_of_time, verbose, &bar);
        done.sort_by_key(|r| r.id);
        for seed in steer::first_reachers(&done, &mut seen) {
            queued.extend((1..=steer).map(|variation| WorldId { seed, variation }));
        }
        bar.inc_length(queued.len() as u64);
        results.extend(done);
    }
    bar.finish_and_clear();
    results.sort_by_key(|r| r.id);
    results
}

/// Runs `worlds` on `jobs` threads, each taking the next in turn.
fn run_round(
    worlds: &[WorldId],
    jobs: usize,
    stop: &Stop,
    out_of_time: &AtomicBool,
    verbose: bool,
    bar: &ProgressBar,
) -> Vec<SeedResult> {
    let next = AtomicU64::new(0);
    let (tx, rx) = mpsc::channel::<SeedResult>();
    let mut results = Vec::new();
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            let (tx, next) = (tx.clone(), &next);
            scope.spawn(move || {
                crate::run::panics::set_quiet(true);
                loop {
                    if out_of_time.load(Ordering::Relaxed) {
                        return;
                    }
                    let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                    let Some(id) = worlds.get(i) else { return };
                    if tx.send(run_world(*id)).is_err() {
                        return;
                    }
                }
            });
        }
        drop(tx);
        for result in rx {
            if matches!(result.verdict, Verdict::Fail { .. }) {
                bar.set_message("failed");
                if stop.fail_fast {
                    out_of_time.store(true, Ordering::Relaxed);
                }
            }
            if verbose {
                bar.suspend(|| println!("seed {}: {:?}", result.id, result.verdict));
            }
            bar.inc(1);
            results.push(result);
            if stop.budget.is_some_and(|b| stop.started.elapsed() >= b) {
                out_of_time.store(true, Ordering::Relaxed);
            }
        }
    });
    results
}

fn first_failure_per_invariant(results: &[SeedResult]) -> BTreeMap<String, (WorldId, String)> {
    let mut first = BTreeMap::new();
    for r in results {
        if let Verdict::Fail { invariant, message } = &r.verdict {
            first
                .entry(invariant.clone())
                .or_insert((r.id, message.clone()));
        }
    }
    first
}

/// Time to first token against total time over every stream read shown
/// a job's end (simulated ms): p50 and p99.
fn print_reads(results: &[SeedResult]) {
    let mut ttft: Vec<i64> = results
        .iter()
        .flat_map(|r| r.reads.iter().map(|t| t.ttft_ms))
        .collect();
    let mut total: Vec<i64> = results
        .iter()
        .flat_map(|r| r.reads.iter().map(|t| t.total_ms))
        .collect();
    if ttft.is_empty() {
        return;
    }
    ttft.sort_unstable();
    total.sort_unstable();
    let pct = |v: &[i64], p: usize| v[(v.len() * p).div_ceil(100).max(1) - 1];
    println!(
        "
streams: {} reads shown a job's end; time to first token p50 {} ms p99 {} ms; total p50 {} ms p99 {} ms",
        ttft.len(),
        pct(&ttft, 50),
        pct(&ttft, 99),
        pct(&total, 50),
        pct(&total, 99)
    );
}

/// The BUGGIFY table (seeds with each site on, seeds where it fired, fires
/// in all) and the `sometimes` states reached; the sites that never fired
/// and the states never reached are named (decision 0024).
fn print_fault_points(results: &[SeedResult]) {
    use coordinator::buggify::{Site, STATES};
    println!("\ncoverage: BUGGIFY fault points (seeds on, seeds fired, fires)");
    let mut never = Vec::new();
    for site in Site::ALL {
        let on = results
            .iter()
            .filter(|r| r.fired.on.contains(&site))
            .count();
        let fires = results.iter().filter_map(|r| r.fired.fired.get(&site));
        let (seeds, total) = fires.fold((0, 0), |(s, t), n| (s + 1, t + n));
        println!("  {:<24} {on:>7} {seeds:>7} {total:>10}", site.name());
        if seeds == 0 {
            never.push(site.name());
        }
    }
    if !never.is_empty() {
        println!("  never fired: {}", never.join(", "));
    }
    let mut reached = BTreeMap::<&str, (u64, u64)>::new();
    for (state, n) in results.iter().flat_map(|r| &r.fired.reached) {
        let e = reached.entry(state).or_default();
        (e.0, e.1) = (e.0 + 1, e.1 + n);
    }
    println!("\ncoverage: sometimes states reached (seeds, times)");
    for (state, (seeds, total)) in &reached {
        println!("  {state:<56} {seeds:>7} {total:>10}");
    }
    let unreached: Vec<&str> = (STATES.iter().copied())
        .filter(|s| !reached.contains_key(s))
        .collect();
    if !unreached.is_empty() {
        println!("  never reached: {}", unreached.join("; "));
    }
}

fn print_summary(results: &[SeedResult], asked: u64, wall: Duration) {
    let failed = results
        .iter()
        .filter(|r| matches!(r.verdict, Verdict::Fail { .. }))
        .count();
    let sim_s: i64 = results.iter().map(|r| r.sim_ms).sum::<i64>() / 1000;
    let varied = results.iter().filter(|r| r.id.variation > 0).count();
    println!(
        "{} of {asked} seeds and {varied} variations run in {:.1}s ({:.1} worlds/s, {sim_s} simulated seconds): {} passed, {failed} failed",
        results.len() - varied,
        wall.as_secs_f64(),
        results.len() as f64 / wall.as_secs_f64().max(1e-9),
        results.len() - failed,
    );
    let mut kinds = BTreeMap::<&str, u64>::new();
    for r in results {
        for k in &r.kinds {
            *kinds.entry(k.as_str()).or_default() += 1;
        }
    }
    let mut seen = BTreeMap::<&str, (u64, u64)>::new();
    for r in results {
        for (key, n) in &r.coverage {
            let e = seen.entry(key.as_str()).or_default();
            e.0 += 1;
            e.1 += n;
        }
    }
    println!("\ncoverage: fault kinds switched on (seeds)");
    for k in super::spec::Kind::ALL {
        println!(
            "  {:<24} {:>7}",
            k.as_str(),
            kinds.get(k.as_str()).unwrap_or(&0)
        );
    }
    println!("\ncoverage: what happened (seeds where seen, total count)");
    for (key, (seeds, total)) in &seen {
        println!("  {key:<32} {seeds:>7} {total:>10}");
    }
    print_fault_points(results);
    let mut broken = BTreeMap::<&str, u64>::new();
    for r in results {
        if let Verdict::Fail { invariant, .. } = &r.verdict {
            *broken.entry(invariant.as_str()).or_default() += 1;
        }
    }
    if !broken.is_empty() {
        println!("\ninvariants broken (seeds)");
        for (k, n) in &broken {
            println!("  {k:<32} {n:>7}");
        }
    }
}
