//! `harness --live`: runs the scenarios that can run live (`live = true`)
//! against real `coordinator` processes over real HTTP and WebSockets,
//! checking every expectation. Transcripts are not compared: real time and
//! real scheduling differ from run to run.

use crate::run::{run_live, Outcome};
use crate::Scenario;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

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

/// Runs the live-capable scenarios; with `verbose`, prints each transcript
/// through the filter.
pub fn main(
    scenarios: &[Scenario],
    bin: Option<&Path>,
    verbose: Option<&crate::world::transcript::LineFilter>,
    cluster: Option<&crate::world::LiveCluster>,
) -> ExitCode {
    let bin = match coordinator_bin(bin) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let (live, skipped): (Vec<&Scenario>, Vec<&Scenario>) = scenarios.iter().partition(|s| s.live);
    match cluster {
        Some(c) => println!(
            "live conformance against {} nodes of {} on PostgreSQL",
            c.nodes,
            bin.display()
        ),
        None => println!("live conformance against {}", bin.display()),
    }
    let width = live.iter().map(|s| s.name.len()).max().unwrap_or(8).max(8);
    let mut failed = 0;
    for scenario in &live {
        let report = run_live(scenario, &bin, cluster);
        let result = match &report.outcome {
            Outcome::Passed => "ok".to_owned(),
            outcome => {
                failed += 1;
                format!("FAIL at {}", outcome.failure().unwrap_or_default())
            }
        };
        println!(
            "{:<width$}  {:>5} steps  {result}",
            report.name, report.steps_run
        );
        if let Some(filter) = verbose {
            for line in report.transcript.iter().filter(|l| filter.shows(l)) {
                println!("    {line}");
            }
        }
        if report.outcome != Outcome::Passed {
            let tail = report.transcript.len().saturating_sub(15);
            for line in &report.transcript[tail..] {
                println!("    {line}");
            }
        }
    }
    println!(
        "\n{} passed, {} failed ({} simulation-only scenarios skipped)",
        live.len() - failed,
        failed,
        skipped.len()
    );
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
