//! `harness --live`: runs the scenarios that can run live (`live = true`)
//! against real `coordinator` processes over real HTTP and WebSockets,
//! checking every expectation. Transcripts are not compared: real time and
//! real scheduling differ from run to run.
//!
//! With `--target`, the coordinators are ones the harness did not start (a
//! staging deployment): scenarios that need to configure or control the
//! process (timing or limit overrides, payments with a scripted
//! facilitator, prices, retention) are skipped with that reason.

use crate::run::{run_live, Outcome};
use crate::spec::scenario::{Instance, LimitOverrides, TimingOverrides};
use crate::world::LiveTarget;
use crate::Scenario;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The coordinator binary: `bin`, else the one next to this executable.
pub fn coordinator_bin(bin: Option<&Path>) -> Result<PathBuf, String> {
    let path = match bin {
        Some(p) => p.to_path_buf(),
        None => std::env::current_exe()
            .map_err(|e| e.to_string())?
            .with_file_name("coordinator"),
    };
    if path.exists() {
        Ok(path)
    } else {
        Err(format!(
            "no coordinator binary at {} (build it: cargo build --release --bin coordinator, or pass --coordinator-bin)",
            path.display()
        ))
    }
}

/// How one scenario fared live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LiveResult {
    Passed,
    Failed(String),
    /// Not run, and why.
    Skipped(String),
}

/// One scenario's live run, for the summary and `--junit`.
#[derive(Debug, Clone)]
pub struct LiveRow {
    pub name: String,
    pub steps_run: usize,
    pub wall_ms: u128,
    pub result: LiveResult,
    /// The transcript's last lines when it failed.
    pub tail: Vec<String>,
}

/// The networks `--target` coordinators report, by instance name (empty
/// for coordinators the harness starts: those take the scenario's).
pub type TargetNetworks = BTreeMap<String, String>;

/// Why `scenario` cannot run against `target`, if it cannot.
pub fn skip_reason(
    scenario: &Scenario,
    target: &LiveTarget,
    networks: &TargetNetworks,
) -> Option<String> {
    if !scenario.live {
        return Some("simulation only (live = false)".into());
    }
    let LiveTarget::Remote(urls) = target else {
        return None;
    };
    scenario.instances.iter().find_map(|(name, spec)| {
        if !urls.contains_key(name) {
            return Some(format!("no --target for instance {name}"));
        }
        let network = networks.get(name).map_or("unknown", String::as_str);
        if network != spec.network {
            return Some(format!(
                "instance {name} is {}, the target reports {network}",
                spec.network
            ));
        }
        process_settings(spec).map(|what| {
            format!("instance {name} sets {what}, which needs a coordinator the harness starts")
        })
    })
}

/// Asks each `--target` instance's first node for its network (`GET
/// /v1/health`); an instance that does not answer is left out, so its
/// scenarios are skipped as `unknown`, and said so on stderr.
pub fn target_networks(target: &LiveTarget) -> TargetNetworks {
    let LiveTarget::Remote(urls) = target else {
        return TargetNetworks::new();
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime");
    let http = router::ReqwestTransport::new(10_000);
    let mut networks = TargetNetworks::new();
    for (name, nodes) in urls {
        let url = format!("{}/v1/health", nodes[0]);
        let answer = runtime.block_on(router::HttpTransport::send(
            &http,
            router::HttpRequest::get(&url),
        ));
        let network = answer.ok().and_then(|a| {
            let health: serde_json::Value = serde_json::from_slice(&a.body).ok()?;
            health["network"].as_str().map(str::to_owned)
        });
        match network {
            Some(network) => {
                networks.insert(name.clone(), network);
            }
            None => eprintln!("warning: {url} gave no health record with a network"),
        }
    }
    networks
}

/// What of `spec` only a coordinator started by the harness can honour.
fn process_settings(spec: &Instance) -> Option<&'static str> {
    let settings = [
        (spec.timing != TimingOverrides::default(), "timing"),
        (spec.limits != LimitOverrides::default(), "limits"),
        (spec.payment.is_some(), "payment"),
        (spec.prices.is_set(), "prices"),
        (spec.retention_hours.is_some(), "retention_hours"),
    ];
    settings
        .into_iter()
        .find(|(set, _)| *set)
        .map(|(_, what)| what)
}

/// Runs each scenario that can run against `target`, printing a line per
/// scenario (and with `verbose`, each transcript through the filter).
pub fn run_all(
    scenarios: &[Scenario],
    target: &LiveTarget,
    verbose: Option<&crate::world::transcript::LineFilter>,
) -> Vec<LiveRow> {
    println!("live conformance against {}", describe(target));
    let networks = target_networks(target);
    let width = scenarios
        .iter()
        .map(|s| s.name.len())
        .max()
        .unwrap_or(8)
        .max(8);
    let (mut rows, mut skipped) = (Vec::new(), Vec::new());
    for scenario in scenarios {
        match skip_reason(scenario, target, &networks) {
            Some(reason) => skipped.push(skipped_row(scenario, reason)),
            None => rows.push(run_one(scenario, target, width, verbose)),
        }
    }
    rows.extend(skipped);
    rows
}

/// Runs one scenario and prints its line (and its transcript: all of it
/// through `verbose`, the tail on failure).
fn run_one(
    scenario: &Scenario,
    target: &LiveTarget,
    width: usize,
    verbose: Option<&crate::world::transcript::LineFilter>,
) -> LiveRow {
    #[allow(clippy::disallowed_methods)] // wall time of the tool itself, for the report
    let started = std::time::Instant::now();
    let report = run_live(scenario, target);
    let wall_ms = started.elapsed().as_millis();
    let (result, tail) = match &report.outcome {
        Outcome::Passed => (LiveResult::Passed, Vec::new()),
        outcome => {
            let from = report.transcript.len().saturating_sub(15);
            let message = outcome.failure().unwrap_or_default();
            (
                LiveResult::Failed(message),
                report.transcript[from..].to_vec(),
            )
        }
    };
    let shown = match &result {
        LiveResult::Failed(message) => format!("FAIL at {message}"),
        _ => "ok".to_owned(),
    };
    println!(
        "{:<width$}  {:>5} steps  {shown}",
        report.name, report.steps_run
    );
    if let Some(filter) = verbose {
        for line in report.transcript.iter().filter(|l| filter.shows(l)) {
            println!("    {line}");
        }
    }
    for line in &tail {
        println!("    {line}");
    }
    LiveRow {
        name: report.name,
        steps_run: report.steps_run,
        wall_ms,
        result,
        tail,
    }
}

fn skipped_row(scenario: &Scenario, reason: String) -> LiveRow {
    LiveRow {
        name: scenario.name.clone(),
        steps_run: 0,
        wall_ms: 0,
        result: LiveResult::Skipped(reason),
        tail: Vec::new(),
    }
}

fn describe(target: &LiveTarget) -> String {
    match target {
        LiveTarget::Spawn { bin, cluster: None } => bin.display().to_string(),
        LiveTarget::Spawn {
            bin,
            cluster: Some(c),
        } => format!("{} nodes of {} on PostgreSQL", c.nodes, bin.display()),
        LiveTarget::Remote(urls) => urls
            .iter()
            .map(|(name, nodes)| format!("{name}={}", nodes.join("+")))
            .collect::<Vec<_>>()
            .join(", "),
    }
}
