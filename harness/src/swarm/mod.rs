//! `harness swarm`: random worlds per seed, checked after the run for every
//! safety property (the core checks its own invariants after every event
//! and panics on a breach; `crate::verify::safety` checks the outside view), run
//! twice under different tokio seeds (a transcript that depends on wake
//! order fails), with liveness checked after a heal phase. A failing world
//! is shrunk to a small scenario file that the ordinary `harness` command
//! replays.
//!
//! Layout:
//! - [`spec`]: a world as data (its kinds, instances, workers, timeline).
//! - [`draw`]: what a seed draws, kind by kind, each from its own stream;
//!   one module per kind beside it (`attacks`, `stalls`, `code_edges`, ...).
//! - [`render`]: a world rendered as a scenario file.
//! - [`nodes`]: several-node worlds (node crashes, store partitions).
//! - [`shrink`]: reducing a failing world while it fails the same way.
//! - [`steer`]: rounds that draw variations of seeds which reached a new
//!   `sometimes` state first.
//! - [`cli`]: the command line, the progress bar and the coverage table.
//!
//! Seeds run in parallel threads; each world is still one deterministic
//! single-threaded simulation, so a seed's verdict never depends on the
//! thread count.

pub mod attacks;
pub mod buggify;
pub mod cancels;
pub mod cli;
pub mod code_batches;
pub mod code_edges;
pub mod cut_replays;
pub mod deadlines;
pub mod differing_streams;
pub mod draw;
pub mod edges;
pub mod floods;
pub mod foreign_keys;
pub mod front_runs;
pub mod garbage;
pub mod garbage_catalogue;
pub mod held_polls;
pub mod idle_cuts;
pub mod lease_answers;
pub mod lease_stalls;
pub mod lease_thaws;
pub mod long_retention;
pub mod nodes;
pub mod other_payments;
pub mod other_receipts;
pub mod overclaims;
pub mod paid_impostors;
pub mod paid_retries;
pub mod pairing_floods;
pub mod pairings;
pub mod poll_hoards;
pub mod proof_edges;
pub mod range_edges;
pub mod remote_polls;
pub mod render;
pub mod restart_reads;
pub mod result_polls;
pub mod retry_afters;
pub mod reused_payments;
pub mod settlement;
pub mod share_floods;
pub mod shrink;
pub mod slot_caps;
pub mod slow_heads;
pub mod spec;
pub mod stalls;
pub mod steer;
pub mod store_blips;
pub mod stream_retries;
pub mod streams;
pub mod sybils;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_answers;
#[cfg(test)]
mod tests_identity;
#[cfg(test)]
mod tests_paid_retries;
#[cfg(test)]
mod tests_payments;
pub mod trust_restarts;

use crate::run::{self, Outcome, RunReport};
use crate::spec::Scenario;
use spec::{Kind, WorldSpec};
use std::collections::BTreeMap;
use std::ops::Range;
pub use steer::WorldId;

/// Tokio's RNG seed of a world's second run (as the ordinary harness's).
const SECOND_TOKIO_SEED: u64 = 0x5eed_0f70_c10c;

/// One world's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    Fail {
        /// The invariant, as a stable key (e.g. `acknowledged_job_lost`).
        invariant: String,
        /// What broke, with the first violating event where known.
        message: String,
    },
}

/// What one seed did, for the summary and the coverage table.
#[derive(Debug, Clone)]
pub struct SeedResult {
    pub id: WorldId,
    pub verdict: Verdict,
    pub kinds: Vec<Kind>,
    /// Counts of what happened in the run (faults fired, invariants judged).
    pub coverage: BTreeMap<String, u64>,
    pub sim_ms: i64,
    /// Time to first token and total time of its stream reads shown a
    /// job's end (the `streams` kind).
    pub reads: Vec<crate::run::ReadTiming>,
    /// The fault points on and fired and the `sometimes` states reached
    /// in its first run.
    pub fired: coordinator::buggify::Fired,
}

/// The scenario name of a world (and its file's stem): `swarm-seed-7`,
/// `swarm-KEY-seed-7`, `swarm-KEY-seed-7v2` for a variation.
pub fn scenario_name(id: WorldId, invariant: Option<&str>) -> String {
    match invariant {
        Some(i) => format!("swarm-{}-seed-{id}", i.replace('_', "-")),
        None => format!("swarm-seed-{id}"),
    }
}

/// Renders and parses a world as a scenario.
pub fn scenario_of(world: &WorldSpec, name: &str, description: &str) -> Result<Scenario, String> {
    let text = render::render(world, name, description);
    let scenario = Scenario::parse(&text)
        .map_err(|e| format!("the generator wrote an invalid scenario: {e}"))?;
    // What `harness FILE` would refuse is refused here too, so a shrunk
    // world always replays (a world that fails this fails as `generator`,
    // which the shrinker never trades for the invariant it shrinks).
    let path = std::path::PathBuf::from(format!("{name}.toml"));
    match crate::check::check(&path, &text, &scenario).first() {
        None => Ok(scenario),
        Some(p) => Err(format!(
            "the generator wrote a scenario harness refuses: line {}: {}",
            p.line, p.message
        )),
    }
}

/// Runs one world once (or twice, comparing transcripts) and judges it.
pub fn judge(world: &WorldSpec, twice: bool) -> (Verdict, Option<RunReport>) {
    let name = scenario_name(WorldId::seed(world.seed), None);
    let scenario = match scenario_of(world, &name, "") {
        Ok(s) => s,
        Err(message) => {
            let invariant = "generator".to_owned();
            return (Verdict::Fail { invariant, message }, None);
        }
    };
    // Both runs sign and recover the same pairs: the second reuses the
    // first's exact results (protocol::crypto_memo), on this thread only.
    let _memo = protocol::crypto_memo::enable();
    let first = run::run_simulated_with(&scenario, world.seed, world.seed);
    if let Some((invariant, message)) = classify(&scenario, &first.outcome) {
        return (Verdict::Fail { invariant, message }, Some(first));
    }
    if twice {
        let second = run::run_simulated_with(&scenario, world.seed, world.seed ^ SECOND_TOKIO_SEED);
        if second.transcript != first.transcript {
            let (line, a, b) =
                crate::world::transcript::first_difference(&first.transcript, &second.transcript)
                    .unwrap_or_default();
            let message = format!(
                "the two runs differ first at transcript line {line}:\n  run 1: {a}\n  run 2: {b}"
            );
            let invariant = "deterministic_replay".to_owned();
            return (Verdict::Fail { invariant, message }, Some(first));
        }
    }
    (Verdict::Pass, Some(first))
}

/// The invariant a failed run broke, as a stable key (typed where it
/// broke: [`crate::verify::Broken`]), and its message.
pub fn classify(scenario: &Scenario, outcome: &Outcome) -> Option<(String, String)> {
    let key = match outcome {
        Outcome::Passed => return None,
        Outcome::InvariantBroken { broken, .. } => broken.key(),
        Outcome::Failed { step, .. } => {
            let name = scenario
                .steps
                .get(step.saturating_sub(1))
                .and_then(|s| s.name.as_deref())
                .unwrap_or("");
            // Heal steps are named `heal: KEY: what they check`.
            match name.strip_prefix("heal: ").and_then(|r| r.split_once(':')) {
                Some((key, _)) => key.to_owned(),
                None => "step_failed".to_owned(),
            }
        }
    };
    Some((key, outcome.failure().unwrap_or_default()))
}

/// Transcript text that marks a coverage key.
const MARKERS: &[(&str, &str)] = &[
    (
        "crashed at its armed store write",
        "fault crash_after_write",
    ),
    ("pays with", "payment signed"),
    ("(stream #", "stream read"),
    ("cut after", "stream cut"),
    (" < restart ", "stream restart shown"),
    ("replay the last payment", "fault payment_replay"),
    ("retry a paid commit", "fault paid_retry"),
    (
        "the last payment with another prompt",
        "fault payment_reuse",
    ),
    ("\"type\":\"assign\"", "check assignments"),
    (
        "\"privacy_class\":\"PRIVATE\",\"payment_ref",
        "check private_assignments",
    ),
    ("\"type\":\"result_accepted\"", "check results_accepted"),
    ("< 201 {\"job_id\"", "check jobs_acknowledged"),
    ("\"status\":\"completed\"}", "check completed_polls"),
    ("router >", "router call"),
    (": crash", "fault reboot"),
    ("slow heads (", "fault slow_heads"),
];

/// What the run exercised, counted from its transcript: each fault kind
/// that fired and each safety property's observations.
pub fn coverage(lines: &[String]) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    let mut add = |key: String| *counts.entry(key).or_insert(0) += 1;
    for line in lines {
        let text = line.split_once("] ").map_or(line.as_str(), |(_, t)| t);
        if let Some(at) = text.find("\"fault\":\"") {
            let kind = &text[at + 9..];
            add(format!("fault {}", kind.split('"').next().unwrap_or("")));
        }
        for (needle, key) in MARKERS {
            if text.contains(needle) {
                add((*key).to_owned());
            }
        }
        if text.starts_with("harness worker ") && text.ends_with(" stop") {
            add("fault worker_stop".into());
        }
        if text.starts_with("harness instance ") && text.ends_with(" restart") {
            add("fault coordinator_restart".into());
        }
        if text.starts_with("harness instance ") && text.ends_with(" graceful_restart") {
            add("fault graceful_restart".into());
        }
        if let Some(rest) = text.strip_prefix("harness fault ") {
            // `harness fault NAME: partition|hold|delay Nms between ...`
            let what = rest.split_once(": ").map_or("", |(_, w)| w);
            let kind = what.split(' ').next().unwrap_or("");
            if matches!(kind, "partition" | "hold" | "delay") {
                add(format!("fault link_{kind}"));
            }
        }
        if text.starts_with("load") && text.contains(" 201 ") {
            add("check workload_acknowledged".into());
        }
        if text.contains("\"code\":\"replaced\"") {
            add("fault session_replaced".into());
        }
        if text.starts_with("harness facilitator") {
            add("fault facilitator_script".into());
        }
        if text.starts_with("harness instance ") {
            // `harness instance NAME crash|partition node N for MS ms`
            if text.contains(" crash node ") {
                add("fault node_crash".into());
            } else if text.contains(" partition node ") {
                add("fault store_partition".into());
            } else if text.contains(" lose_answer node ") {
                add("fault lost_answer".into());
            }
        }
        // A node's supervisor, under the node's id.
        if text.ends_with(" fenced by the shared store; crashed") {
            add("fault node_fenced".into());
        }
        if text.ends_with(" rejoined the shared store") || text.ends_with(" started again") {
            add("check node_rejoined".into());
        }
    }
    counts
}

/// Runs one world: generate, run twice, judge, count coverage.
pub fn run_world(id: WorldId) -> SeedResult {
    let world = id.world();
    let (verdict, report) = judge(&world, true);
    SeedResult {
        id,
        verdict,
        kinds: world.kinds.0.clone(),
        coverage: report
            .as_ref()
            .map(|r| coverage(&r.transcript))
            .unwrap_or_default(),
        reads: report.as_ref().map(|r| r.reads.clone()).unwrap_or_default(),
        fired: report.as_ref().map(|r| r.fired.clone()).unwrap_or_default(),
        sim_ms: report.map_or(0, |r| r.sim_ms),
    }
}

/// A failure shrunk and written out.
#[derive(Debug, Clone)]
pub struct Shrunk {
    pub id: WorldId,
    pub invariant: String,
    pub message: String,
    pub path: std::path::PathBuf,
    pub lines: usize,
    pub runs: usize,
}

/// Shrinks world `id` while it fails `invariant`, and writes it to `dir`
/// as `swarm-<invariant>-seed-<id>.toml`.
pub fn shrink_and_write(
    id: WorldId,
    invariant: &str,
    dir: &std::path::Path,
) -> std::io::Result<Shrunk> {
    let original = id.world();
    let twice = invariant == "deterministic_replay";
    let fails = |w: &WorldSpec| matches!(judge(w, twice).0, Verdict::Fail { invariant: ref i, .. } if i == invariant);
    let (small, runs) = shrink::shrink(original.clone(), fails);
    let message = match judge(&small, twice).0 {
        Verdict::Fail { message, .. } => message,
        Verdict::Pass => "(the shrunk world passed when run again)".into(),
    };
    let name = scenario_name(id, Some(invariant));
    let first_line = message.lines().next().unwrap_or("");
    let description = format!(
        "Found by `harness swarm` at seed {id} ({} events, {} workers; shrunk to {} and {} in {runs} runs): {first_line}",
        original.events.len(),
        original.workers.len(),
        small.events.len(),
        small.workers.len()
    );
    let text = render::render(&small, &name, &description);
    std::fs::create_dir_all(dir)?;
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, &text)?;
    Ok(Shrunk {
        id,
        invariant: invariant.to_owned(),
        message,
        path,
        lines: text.lines().filter(|l| !l.trim().is_empty()).count(),
        runs,
    })
}

/// Parses `A..B` (B excluded).
pub fn parse_seeds(text: &str) -> Result<Range<u64>, String> {
    let (a, b) = text
        .split_once("..")
        .ok_or_else(|| format!("{text:?}: want A..B, e.g. 0..10000"))?;
    let parse = |s: &str| {
        s.trim()
            .parse::<u64>()
            .map_err(|_| format!("{text:?}: {s:?} is not a whole number"))
    };
    let (a, b) = (parse(a)?, parse(b)?);
    if b <= a {
        return Err(format!("{text:?}: the range is empty"));
    }
    Ok(a..b)
}
