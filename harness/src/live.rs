//! `harness --live`: runs the scenarios that can run live (`live = true`)
//! against real `coordinator` processes over real HTTP and WebSockets,
//! checking every expectation. Transcripts are not compared: real time and
//! real scheduling differ from run to run.

use crate::runner::{run_live, Outcome};
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

pub fn main(scenarios: &[Scenario], bin: Option<&Path>) -> ExitCode {
    let bin = match coordinator_bin(bin) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let (live, skipped): (Vec<&Scenario>, Vec<&Scenario>) = scenarios.iter().partition(|s| s.live);
    println!("live conformance against {}", bin.display());
    let width = live.iter().map(|s| s.name.len()).max().unwrap_or(8).max(8);
    let mut failed = 0;
    for scenario in &live {
        let report = run_live(scenario, &bin);
        let result = match &report.outcome {
            Outcome::Passed => "ok".to_owned(),
            Outcome::Failed { step, message } => {
                failed += 1;
                format!("FAIL at step {step}: {message}")
            }
        };
        println!(
            "{:<width$}  {:>5} steps  {result}",
            report.name, report.steps_run
        );
        if matches!(report.outcome, Outcome::Failed { .. }) {
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
