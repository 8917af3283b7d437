//! The simulation as the harness runs it: the coordinator started through
//! its composition root on an in-memory SQLite database with its writer
//! task, served on the simulated network (real HTTP, real WebSocket
//! upgrades), simulated workers that sign real receipts (which the sessions
//! verify), all on one paused current-thread tokio runtime, so simulated
//! time runs as fast as the CPU allows.

use crate::fixtures::{self, EPOCH_MS};
use coordinator::server::{self, Parts, Runtime, Settings};
use coordinator::Coordinator;
use protocol::api::JobStatus;
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use router::{HttpRequest, HttpTransport};
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;
use worker_sim::{worker_seed, Latency, ReconnectPolicy, Worker, WorkerConfig};

/// What a run did.
#[derive(Debug, Clone)]
pub struct SimOutcome {
    pub completed: usize,
    pub failed: usize,
    /// Simulated time from the first commit to the last job ending.
    pub virtual_ms: i64,
    /// Wall time of the same span (workers connect before it starts).
    pub wall: Duration,
}

/// `jobs` TASK jobs committed through the router at simulated time zero to
/// `workers` workers with 4 slots and 20–80 ms simulated latency.
pub fn run(jobs: usize, workers: u32, seed: u64) -> SimOutcome {
    run_with(jobs, workers, seed, coordinator::config::Config::default())
}

/// [`run`] with another configuration (its `public_urls` are the
/// simulation's).
pub fn run_with(
    jobs: usize,
    workers: u32,
    seed: u64,
    config: coordinator::config::Config,
) -> SimOutcome {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("runtime");
    rt.block_on(scenario(jobs, workers, seed, config))
}

async fn scenario(
    jobs: usize,
    workers: u32,
    seed: u64,
    config: coordinator::config::Config,
) -> SimOutcome {
    let settings = sim_settings(config);
    let parts = Parts {
        clock: Arc::new(coordinator::TokioClock::new(EPOCH_MS)),
        rng: ChaCha20Rng::seed_from_u64(seed),
        runtime: Runtime::Simulation,
        settler: None,
    };
    let net = simnet::Net::new();
    let mut server = server::start(settings, parts).await.expect("start");
    server.serve(net.listen("coordinator.sim"), false, |_| {});
    let c = server.coordinator().clone();
    spawn_workers(&net, workers, seed);
    while c.read(|core| core.workers_online()) < workers as usize {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }

    let http = simnet::SimHttp::new(&net, "client");
    let body = fixtures::task_body("sim");
    // Wall time of the job phase is what the bench reports.
    #[allow(clippy::disallowed_methods)]
    let wall_start = std::time::Instant::now();
    let start_ms = c.now_ms();
    let ids = commit_jobs(&http, &body, jobs).await;
    let outcome = follow(&c, ids, start_ms).await;
    let wall = wall_start.elapsed();
    server.crash();
    SimOutcome { wall, ..outcome }
}

/// `config` served as `http://coordinator.sim` on a fresh in-memory
/// database (one per run: runs in one process must not share it).
fn sim_settings(config: coordinator::config::Config) -> Settings {
    static RUN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let run = RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Settings {
        config: coordinator::config::Config {
            // What its workers dial.
            public_urls: vec!["http://coordinator.sim".into()],
            ..config
        },
        db: format!("file:/bench-sim-{run}?vfs=memdb"),
        ..Settings::default()
    }
}

/// `workers` simulated workers with 4 slots and 20–80 ms latency, each
/// dialling the coordinator once (no reconnects).
fn spawn_workers(net: &simnet::Net, workers: u32, seed: u64) {
    for i in 0..workers {
        let config = WorkerConfig {
            name: format!("w{i}"),
            seed: worker_seed(seed, i),
            slots: 4,
            latency: Latency::Uniform {
                min_ms: 20,
                max_ms: 80,
            },
            reconnect: ReconnectPolicy {
                enabled: false,
                ..ReconnectPolicy::default()
            },
            ..WorkerConfig::default()
        };
        let mut worker =
            Worker::new(config, worker_sim::TokioClock::shared(EPOCH_MS)).expect("worker");
        let connector = simnet::SimWsConnector::new(
            net,
            &format!("w{i}"),
            "ws://coordinator.sim/v1/workers/ws",
        );
        tokio::spawn(async move { worker.run(connector).await });
    }
}

/// Commits `jobs` TASK jobs one after another; their ids.
async fn commit_jobs(http: &simnet::SimHttp, body: &serde_json::Value, jobs: usize) -> Vec<Uuid> {
    let mut ids = Vec::with_capacity(jobs);
    for _ in 0..jobs {
        let req = HttpRequest::post_json("http://coordinator.sim/v1/jobs/commit/cheap", body);
        let res = http.send(req).await.expect("answer");
        assert_eq!(res.status, 201);
        let v: serde_json::Value = res.json().expect("json");
        let id: Uuid = v["job_id"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .expect("id");
        ids.push(id);
    }
    ids
}

/// Simulated time the jobs get to end before the run is a failure: a
/// thousand times what 1,000 jobs on 50 workers take.
const FOLLOW_MS_MAX: i64 = 600_000;

/// Waits until every job has ended, reading each through
/// [`Coordinator::job`] as a poll does: a finished job leaves the core's
/// memory after `finished_jobs_cached_max` others and is then read from the
/// store. (Reading the core's map alone never saw evicted jobs end, so a run
/// of more jobs than the cache waited forever.)
async fn follow(c: &Coordinator, mut waiting: Vec<Uuid>, start_ms: i64) -> SimOutcome {
    let (mut completed, mut failed, mut last_ms) = (0, 0, start_ms);
    while !waiting.is_empty() {
        assert!(
            c.now_ms() - start_ms <= FOLLOW_MS_MAX,
            "{} jobs had not ended after {FOLLOW_MS_MAX} simulated ms",
            waiting.len()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
        // One read of the core for all; the store only for the jobs it no
        // longer holds (rare: a job is usually seen ended before eviction).
        let held: Vec<Option<(JobStatus, Option<i64>)>> = c.read(|core| {
            let status = |id| core.job(id).map(|j| (j.status, j.completed_at_ms));
            waiting.iter().map(status).collect()
        });
        let mut held = held.into_iter();
        waiting.retain(|id| {
            let (status, completed_at_ms) = held.next().flatten().unwrap_or_else(|| {
                let job = c.job(id).expect("store reads").expect("committed job");
                (job.status, job.completed_at_ms)
            });
            match status {
                JobStatus::Completed => completed += 1,
                JobStatus::Failed => failed += 1,
                _ => return true,
            }
            last_ms = last_ms.max(completed_at_ms.unwrap_or(start_ms));
            false
        });
    }
    SimOutcome {
        completed,
        failed,
        virtual_ms: last_ms - start_ms,
        wall: Duration::ZERO,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn small_simulation_completes_every_job() {
        let out = super::run(40, 5, 3);
        assert_eq!(out.completed, 40);
        assert_eq!(out.failed, 0);
        // 40 jobs on 20 slots at 20–80 ms: two rounds.
        assert!(out.virtual_ms >= 40 && out.virtual_ms < 1_000, "{out:?}");
    }

    /// More jobs than the core keeps once finished: the run follows the
    /// evicted ones through the store (it waited forever on the core's map
    /// when the default cache fell below the bench's 1,000 jobs).
    #[test]
    fn jobs_evicted_from_memory_are_followed_to_their_end() {
        let mut config = coordinator::config::Config::default();
        config.limits.finished_jobs_cached_max = 4;
        let out = super::run_with(40, 5, 3, config);
        assert_eq!((out.completed, out.failed), (40, 0), "{out:?}");
    }
}
