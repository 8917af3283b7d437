//! Runs a scenario: builds the world in a fresh current-thread runtime with
//! paused time and no I/O driver, executes the steps in order, checks
//! expectations and invariants, and returns the transcript and its digest.

mod attack;
pub mod background;
mod edge;
pub mod frames;
mod http;
pub mod limits;
pub mod live;
mod pair;
pub mod panics;
mod retry_after;
mod steps;
mod stream;

use crate::expr::matcher::Vars;
use crate::spec::Scenario;
use crate::verify::invariants::{self, Failure};
use crate::verify::Broken;
use crate::world::World;
use background::Background;
use router::HttpRequest;
use serde_json::{json, Value};
use std::time::Duration;
use steps::run_step;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Passed,
    /// Step `step` (1-based; 0: before the first step) failed.
    Failed {
        step: usize,
        message: String,
    },
    /// Every step passed and an end-of-run invariant did not hold, or the
    /// world panicked (a core invariant breach panics by design).
    InvariantBroken {
        message: String,
        /// Which one, typed (its stable key: [`Broken::key`]).
        broken: Broken,
    },
}

impl Outcome {
    /// What failed, in the scenario's words; `None` when it passed.
    pub fn failure(&self) -> Option<String> {
        match self {
            Outcome::Passed => None,
            Outcome::Failed { step: 0, message } => {
                Some(format!("before the first step: {message}"))
            }
            Outcome::Failed { step, message } => Some(format!("step {step}: {message}")),
            Outcome::InvariantBroken { message, .. } => Some(format!("invariants: {message}")),
        }
    }
}

#[derive(Debug, Clone)]
pub struct RunReport {
    pub name: String,
    pub seed: u64,
    pub steps_run: usize,
    pub sim_ms: i64,
    pub transcript: Vec<String>,
    pub outcome: Outcome,
    /// Time to first token and total time of each read that was shown a
    /// job's end (`stream` steps; ms of simulated time from its request).
    pub reads: Vec<ReadTiming>,
    /// The coordinator's fault points that fired and the `sometimes`
    /// states it reached (simulated runs; empty live).
    pub fired: coordinator::buggify::Fired,
}

/// One stream read's time to first token against its whole time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadTiming {
    pub job: String,
    pub ttft_ms: i64,
    pub total_ms: i64,
}

impl RunReport {
    /// Hex SHA-256 of the transcript (`transcript::digest_of`).
    pub fn digest(&self) -> String {
        crate::world::transcript::digest_of(&self.transcript)
    }

    /// A run whose world could not be built.
    fn not_started(scenario: &Scenario, seed: u64, message: String) -> Self {
        Self {
            name: scenario.name.clone(),
            seed,
            steps_run: 0,
            sim_ms: 0,
            transcript: vec![],
            outcome: Outcome::Failed { step: 0, message },
            reads: vec![],
            fired: Default::default(),
        }
    }

    fn finished(
        scenario: &Scenario,
        seed: u64,
        world: &World,
        steps_run: usize,
        outcome: Outcome,
    ) -> Self {
        Self {
            name: scenario.name.clone(),
            seed,
            steps_run,
            sim_ms: world.transcript.elapsed_ms(),
            transcript: world.transcript.take_lines(),
            outcome,
            reads: read_timings(world),
            fired: coordinator::buggify::fired(),
        }
    }
}

/// Names the fault points that fired, last in a BUGGIFY run's transcript
/// (so a replay that fires them otherwise differs), e.g.
/// `buggify fired: store.writer.yield 3, timer.late 1`.
fn log_fired(scenario: &Scenario, world: &World) {
    if !scenario.buggify {
        return;
    }
    let fired = coordinator::buggify::fired();
    let sites: Vec<String> = (fired.fired.iter())
        .map(|(site, n)| format!("{} {n}", site.name()))
        .collect();
    let on: Vec<&str> = fired.on.iter().map(|s| s.name()).collect();
    world.transcript.log(
        "harness",
        format!(
            "buggify on: {}; fired: {}",
            on.join(", "),
            if sites.is_empty() {
                "none".into()
            } else {
                sites.join(", ")
            }
        ),
    );
}

/// The reads shown a job's end in one connection, not resumed (their
/// request is the start the time to first token counts from).
fn read_timings(world: &World) -> Vec<ReadTiming> {
    let ended = |e: &crate::world::streams::SseEvent| {
        e.event == "job" || e.data == Value::String("[DONE]".into())
    };
    world
        .streams
        .all()
        .into_iter()
        .filter(|r| r.connections == 1 && r.from_bytes == 0)
        .filter(|r| r.events.last().is_some_and(ended))
        .filter_map(|r| {
            Some(ReadTiming {
                job: r.job?,
                ttft_ms: r.first_text_ms? - r.opened_ms,
                total_ms: r.ended_ms? - r.opened_ms,
            })
        })
        .collect()
}

/// Runs `scenario` in the simulation with `seed` (the scenario's unless
/// overridden), tokio's own RNG seeded from the same seed.
pub fn run_simulated(scenario: &Scenario, seed: Option<u64>) -> RunReport {
    let seed = seed.unwrap_or(scenario.seed);
    run_simulated_with(scenario, seed, seed)
}

/// Runs `scenario` with `seed`, and tokio's internal RNG (unbiased
/// `select!` branch order, among others) seeded from `tokio_seed`. Nothing
/// observable may depend on that RNG: a transcript is the same under every
/// `tokio_seed`, which the harness checks (the second of its two runs uses
/// another one). Without `--cfg tokio_unstable` the tokio seed is not set.
pub fn run_simulated_with(scenario: &Scenario, seed: u64, tokio_seed: u64) -> RunReport {
    run_simulated_limited(scenario, seed, tokio_seed, limits::Limits::WORLD)
}

/// [`run_simulated_with`] under `limits` (tests lower them).
pub fn run_simulated_limited(
    scenario: &Scenario,
    seed: u64,
    tokio_seed: u64,
    limits: limits::Limits,
) -> RunReport {
    // The world is this thread's alone until the runtime drops: its fault
    // points and `sometimes` states are armed for the run (decision 0024).
    let _armed = coordinator::buggify::arm(seed, scenario.buggify);
    // And its accounted memory and refusals watched (for
    // `resource_bound_exceeded` and `honest_starved`).
    let _watched = coordinator::resources::watch();
    // Time only: an accidental real socket or file wait fails loudly.
    let mut builder = tokio::runtime::Builder::new_current_thread();
    builder.enable_time().start_paused(true);
    #[cfg(tokio_unstable)]
    builder.rng_seed(tokio::runtime::RngSeed::from_bytes(
        &tokio_seed.to_le_bytes(),
    ));
    #[cfg(not(tokio_unstable))]
    let _ = tokio_seed;
    let runtime = builder.build().expect("a current-thread runtime");
    panics::start_recording();
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        runtime.block_on(async {
            let mut world = match World::build(scenario, seed).await {
                Ok(w) => w,
                Err(e) => return RunReport::not_started(scenario, seed, e.into()),
            };
            let mut background = match background::start(scenario, &world, seed) {
                Ok(b) => b,
                Err(message) => return RunReport::not_started(scenario, seed, message),
            };
            world
                .transcript
                .log("harness", format!("scenario {} seed {seed}", scenario.name));
            let transcript = world.transcript.clone();
            let steps = run_steps(scenario, &mut world, &mut background);
            let (steps_run, outcome) = limits::bounded(&transcript, limits, steps).await;
            log_fired(scenario, &world);
            RunReport::finished(scenario, seed, &world, steps_run, outcome)
        })
    }));
    // Dropping the runtime cancels every task still running (workers, sessions, timers).
    drop(runtime);
    let panicked = panics::take();
    let mut report = run.unwrap_or_else(|_| {
        RunReport::not_started(scenario, seed, "the harness itself panicked".into())
    });
    // A panic anywhere in the world (a core invariant breach panics by
    // design) is the run's failure, whatever the steps saw afterwards.
    if let Some(first) = panicked.into_iter().next() {
        report.outcome = Outcome::InvariantBroken {
            message: format!("panic: {}", first.message),
            broken: first.core.map_or(Broken::Panic, Broken::Core),
        };
    }
    report
}

/// Runs `scenario` against live coordinator processes started from `bin`.
/// Expectations are checked; transcripts are not compared (real time and
/// real scheduling make them differ from run to run).
/// With `cluster`, each instance is several nodes on one PostgreSQL.
pub fn run_live(scenario: &Scenario, target: &crate::world::LiveTarget) -> RunReport {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime");
    let report = runtime.block_on(async {
        let failed = |message| RunReport::not_started(scenario, scenario.seed, message);
        let mut world = match World::build_live(scenario, scenario.seed, target).await {
            Ok(w) => w,
            Err(e) => return failed(e.into()),
        };
        // Let workers connect and authenticate over real sockets.
        if let Err(message) = wait_for_workers(&world).await {
            return failed(message);
        }
        let mut background = Background::default();
        let (steps_run, outcome) = run_steps(scenario, &mut world, &mut background).await;
        RunReport::finished(scenario, scenario.seed, &world, steps_run, outcome)
    });
    drop(runtime);
    report
}

/// Waits until every instance reports the workers the scenario starts on it.
async fn wait_for_workers(world: &World) -> Result<(), String> {
    for (name, instance) in &world.instances {
        let want = world
            .workers
            .values()
            .filter(|w| w.instance == *name && w.starts())
            .count();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let r = world
                .http
                .send(HttpRequest::get(format!("{}/v1/health", instance.base_url)))
                .await
                .map_err(|e| format!("{name}: {e}"))?;
            let health: Value = serde_json::from_slice(&r.body).map_err(|e| e.to_string())?;
            if health["workers_online"].as_u64() >= Some(want as u64) {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(format!(
                    "{name}: {want} workers did not connect within 10 s: {health}"
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    Ok(())
}

async fn run_steps(
    scenario: &Scenario,
    world: &mut World,
    background: &mut Background,
) -> (usize, Outcome) {
    // Let workers connect and authenticate before the first step.
    tokio::time::sleep(Duration::from_millis(1)).await;
    let mut vars = Vars::new();
    // Worker keys derive from the seed; scenarios name them as {{pubkey.NAME}}.
    for (name, worker) in &world.workers {
        vars.insert(format!("pubkey.{name}"), json!(worker.public_key));
    }
    // User keys too; {{user.NAME}} is the id the user's key proves.
    for (name, id) in world.users.ids() {
        vars.insert(format!("user.{name}"), json!(id));
    }
    for (i, step) in scenario.steps.iter().enumerate() {
        let number = i + 1;
        // A supervisor restarts an instance whose armed crash fired.
        if let Err(e) = world.restart_crashed().await {
            return (
                number,
                Outcome::Failed {
                    step: number,
                    message: e.to_string(),
                },
            );
        }
        if let Some(name) = &step.name {
            world
                .transcript
                .log("harness", format!("step {number}: {name}"));
        }
        if let Err(message) = run_step(step, world, background, &mut vars).await {
            world
                .transcript
                .log("harness", format!("FAILED step {number}: {message}"));
            return (
                number,
                Outcome::Failed {
                    step: number,
                    message,
                },
            );
        }
    }
    // Injectors repair what they broke; workloads still running stop.
    background::stop(std::mem::take(background)).await;
    // Let in-flight frames land and stores commit before the end-of-run checks.
    tokio::time::sleep(Duration::from_millis(1)).await;
    world.settle().await;
    (scenario.steps.len(), judge(scenario, world, &vars))
}

/// The end-of-run checks: invariants (safety, the cores, liveness), then
/// the temporal properties.
fn judge(scenario: &Scenario, world: &World, vars: &Vars) -> Outcome {
    let checked = invariants::check(scenario, world).and_then(|()| {
        crate::verify::temporal::check(&scenario.temporal, world, vars).map_err(Failure::other)
    });
    let Err(Failure { broken, message }) = checked else {
        world.transcript.log("harness", "invariants hold");
        return Outcome::Passed;
    };
    world
        .transcript
        .log("harness", format!("FAILED invariant: {message}"));
    let history = (world.transcript).with_lines(|lines| invariants::job_history(&message, lines));
    let message = if history.is_empty() {
        message
    } else {
        format!(
            "{message}\n  the job's history:\n    {}",
            history.join("\n    ")
        )
    };
    Outcome::InvariantBroken { message, broken }
}
