//! The simulation as the harness runs it: the coordinator started through
//! its composition root on an in-memory SQLite database with its writer
//! task, served on the simulated network (real HTTP, real WebSocket
//! upgrades), simulated workers that sign real receipts (which the sessions
//! verify), all on one paused current-thread tokio runtime, so simulated
//! time runs as fast as the CPU allows.

use crate::fixtures::{self, EPOCH_MS};
use coordinator::server::{self, Parts, Runtime, Settings};
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
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("runtime");
    rt.block_on(scenario(jobs, workers, seed))
}

async fn scenario(jobs: usize, workers: u32, seed: u64) -> SimOutcome {
    static RUN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let run = RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let settings = Settings {
        config: coordinator::config::Config {
            // What its workers dial.
            public_urls: vec!["http://coordinator.sim".into()],
            ..coordinator::config::Config::default()
        },
        db: format!("file:/bench-sim-{run}?vfs=memdb"),
        ..Settings::default()
    };
    let parts = Parts {
        clock: Arc::new(coordinator::TokioClock::new(EPOCH_MS)),
        rng: ChaCha20Rng::seed_from_u64(seed),
        runtime: Runtime::Simulation,
        settler: None,
    };
    let net = simnet::Net::new();
    let mut server = server::start(settings, parts).await.expect("start");
    server.serve(net.listen("coordinator.sim"), |_| {});
    let c = server.coordinator().clone();
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
            &net,
            &format!("w{i}"),
            "ws://coordinator.sim/v1/workers/ws",
        );
        tokio::spawn(async move { worker.run(connector).await });
    }
    while c.read(|core| core.workers_online()) < workers as usize {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }

    let http = simnet::SimHttp::new(&net, "client");
    let body = fixtures::task_body("sim");
    // Wall time of the job phase is what the bench reports.
    #[allow(clippy::disallowed_methods)]
    let wall_start = std::time::Instant::now();
    let start_ms = c.now_ms();
    let mut ids = Vec::with_capacity(jobs);
    for _ in 0..jobs {
        let req = HttpRequest::post_json("http://coordinator.sim/v1/jobs/commit/cheap", &body);
        let res = http.send(req).await.expect("answer");
        assert_eq!(res.status, 201);
        let v: serde_json::Value = res.json().expect("json");
        let id: Uuid = v["job_id"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .expect("id");
        ids.push(id);
    }
    let (completed, failed) = loop {
        let (done, failed) = c.read(|core| {
            ids.iter()
                .fold((0, 0), |(d, f), id| match core.job(id).map(|j| j.status) {
                    Some(JobStatus::Completed) => (d + 1, f),
                    Some(JobStatus::Failed) => (d, f + 1),
                    _ => (d, f),
                })
        });
        if done + failed == jobs {
            break (done, failed);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let last_ms = c.read(|core| {
        ids.iter()
            .filter_map(|id| core.job(id).and_then(|j| j.completed_at_ms))
            .max()
            .unwrap_or(start_ms)
    });
    let wall = wall_start.elapsed();
    server.crash();
    SimOutcome {
        completed,
        failed,
        virtual_ms: last_ms - start_ms,
        wall,
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
}
