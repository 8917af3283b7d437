//! Every scenario's transcript is snapshotted into `snapshots/`. Nothing in
//! a transcript is nondeterministic, so no redactions are needed; with
//! `CI=true` a missing or changed snapshot fails.

use harness::run::{run_simulated, run_simulated_with, Outcome};
use harness::Scenario;

#[test]
fn scenario_transcripts() {
    insta::glob!("../../scenarios", "*.toml", |path| {
        let scenario = Scenario::load(path).unwrap();
        let report = run_simulated(&scenario, None);
        assert_eq!(
            report.outcome,
            Outcome::Passed,
            "{}:\n{}",
            scenario.name,
            report.transcript.join("\n")
        );
        let mut settings = insta::Settings::clone_current();
        settings.set_snapshot_path("../../snapshots");
        settings.set_prepend_module_to_snapshot(false);
        settings.set_input_file(path);
        settings.bind(|| {
            insta::assert_snapshot!(scenario.name.clone(), report.transcript.join("\n"));
        });
    });
}

#[test]
fn a_different_seed_changes_the_digest_of_a_scenario_that_draws_randomness() {
    insta::glob!("../../scenarios", "*.toml", |path| {
        let scenario = Scenario::load(path).unwrap();
        let base = run_simulated(&scenario, None);
        // Only scenarios whose transcript shows drawn values (job ids,
        // codes, keys) must change; every scenario with a worker does.
        let draws = base
            .transcript
            .iter()
            .any(|l| l.contains("job_id") || l.contains("pairing_code"))
            || !scenario.workers.is_empty();
        if draws {
            let other = run_simulated(&scenario, Some(scenario.seed.wrapping_add(1)));
            assert_ne!(
                base.digest(),
                other.digest(),
                "{}: the seed is not wired through",
                scenario.name
            );
        }
    });
}

/// Tokio's own RNG (wake order of some primitives, unbiased `select!`)
/// must not reach a transcript: every scenario gives the same bytes under
/// other tokio seeds. Needs `--cfg tokio_unstable` (the workspace default).
#[cfg(tokio_unstable)]
#[test]
fn no_transcript_depends_on_tokios_scheduler_seed() {
    insta::glob!("../../scenarios", "*.toml", |path| {
        let scenario = Scenario::load(path).unwrap();
        let base = run_simulated(&scenario, None);
        for tokio_seed in [1, 0xdead_beef] {
            let other = run_simulated_with(&scenario, scenario.seed, tokio_seed);
            assert_eq!(
                base.digest(),
                other.digest(),
                "{}: the transcript changed under tokio seed {tokio_seed}",
                scenario.name
            );
        }
    });
}
