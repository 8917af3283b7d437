//! A limit on every simulated world: its transcript (lines and bytes,
//! [`TranscriptLimits`]) and its simulated time. A world that reaches one
//! ends at once as `world_limit_exceeded`, naming the limit, instead of
//! growing until the machine runs out of memory (a sabotaged store writer
//! that died left a request waiting forever while workers reconnected:
//! one shrink grew to 24 GB).

use super::Outcome;
use crate::verify::Broken;
use crate::world::transcript::{Transcript, TranscriptLimits};
use std::future::Future;
use std::time::Duration;

/// What one simulated run may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub transcript: TranscriptLimits,
    /// Simulated time from the first step to the end of the checks. The
    /// longest scenario advances 25 hours; swarm worlds take minutes.
    pub sim_ms_max: u64,
}

impl Limits {
    pub const WORLD: Self = Self {
        transcript: TranscriptLimits::WORLD,
        sim_ms_max: 48 * 3600 * 1000,
    };
}

/// Runs `steps` (the steps and the end-of-run checks) until they end, a
/// limit is reached or the world panics, whichever comes first.
pub async fn bounded(
    transcript: &Transcript,
    limits: Limits,
    steps: impl Future<Output = (usize, Outcome)>,
) -> (usize, Outcome) {
    transcript.set_limits(limits.transcript);
    let exceeded = |message: String| Outcome::InvariantBroken {
        message: format!("world_limit_exceeded: {message}"),
        broken: Broken::WorldLimit,
    };
    // Biased: the steps are polled first, so the limits' own futures
    // change no order the transcript shows.
    tokio::select! {
        biased;
        ran = steps => ran,
        full = transcript.full() => (0, exceeded(full)),
        // The recorded panic is the run's outcome (`run_simulated_with`).
        () = super::panics::panicked() => (0, Outcome::Passed),
        () = tokio::time::sleep(Duration::from_millis(limits.sim_ms_max)) => (
            0,
            exceeded(format!(
                "simulated time reached its limit of {} ms",
                limits.sim_ms_max
            )),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Scenario;

    /// A worker heartbeating through ten minutes: a few hundred lines.
    const TEN_MINUTES: &str = r#"
schema_version = 1
name = "limits"
live = false

[instances.chain_a]
network = "eip155:84532"

[[workers]]
name = "w"

[[steps]]
advance = "10m"
"#;

    fn run(limits: Limits) -> crate::run::RunReport {
        let scenario = Scenario::parse(TEN_MINUTES).expect("a valid scenario");
        crate::run::run_simulated_limited(&scenario, 1, 1, limits)
    }

    fn limit_message(report: &crate::run::RunReport) -> String {
        match &report.outcome {
            Outcome::InvariantBroken {
                broken: Broken::WorldLimit,
                message,
            } => message.clone(),
            other => panic!("want world_limit_exceeded, got {other:?}"),
        }
    }

    #[test]
    fn a_world_within_its_limits_passes() {
        let report = run(Limits::WORLD);
        assert_eq!(report.outcome, Outcome::Passed);
        assert!(report.transcript.len() > 40, "{}", report.transcript.len());
    }

    #[test]
    fn a_transcript_past_its_line_limit_ends_the_world() {
        let mut limits = Limits::WORLD;
        limits.transcript.lines_max = 40;
        let report = run(limits);
        let message = limit_message(&report);
        assert!(message.contains("limit of 40 lines"), "{message}");
        assert_eq!(report.transcript.len(), 40);
        // It ended when the limit was reached, not at the step's end.
        assert!(report.sim_ms < 10 * 60 * 1000, "{}", report.sim_ms);
    }

    #[test]
    fn a_transcript_past_its_byte_limit_ends_the_world() {
        let mut limits = Limits::WORLD;
        limits.transcript.bytes_max = 4096;
        let report = run(limits);
        let message = limit_message(&report);
        assert!(message.contains("limit of 4096 bytes"), "{message}");
        let bytes: usize = report.transcript.iter().map(String::len).sum();
        assert!(bytes <= 4096, "{bytes}");
    }

    #[test]
    fn simulated_time_past_its_limit_ends_the_world() {
        let mut limits = Limits::WORLD;
        limits.sim_ms_max = 60_000;
        let report = run(limits);
        let message = limit_message(&report);
        assert!(message.contains("limit of 60000 ms"), "{message}");
        assert!(report.sim_ms <= 61_000, "{}", report.sim_ms);
    }

    /// A world that panicked has failed (its first panic decides the key):
    /// it ends at once, rather than run on to its limits (a core that broke
    /// may never end). The panic is the outcome, not the steps'.
    #[test]
    fn a_panic_ends_the_world_at_once() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("a runtime");
        crate::run::panics::set_quiet(true);
        crate::run::panics::start_recording();
        let (outcome, waited) = runtime.block_on(async {
            let start = tokio::time::Instant::now();
            let transcript =
                Transcript::new(std::sync::Arc::new(coordinator::TokioClock::new(0)), 0);
            tokio::spawn(async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                panic!("a broken core");
            });
            let never = std::future::pending::<(usize, Outcome)>();
            let (_, outcome) = bounded(&transcript, Limits::WORLD, never).await;
            (outcome, start.elapsed())
        });
        let panics = crate::run::panics::take();
        crate::run::panics::set_quiet(false);
        assert_eq!(outcome, Outcome::Passed, "the panic decides, not the steps");
        assert_eq!(waited, Duration::from_secs(5));
        assert!(panics[0].message.contains("a broken core"), "{panics:?}");
    }
}
