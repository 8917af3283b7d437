//! The simulation, built directly from the coordinator and worker-sim: the
//! real router, the real worker sessions over in-memory channels, simulated
//! workers that sign real receipts (which the sessions verify), all on one
//! paused current-thread tokio runtime, so simulated time runs as fast as
//! the CPU allows.

use crate::fixtures::{self, EPOCH_MS};
use axum::body::Body;
use axum::http::{Request, StatusCode};
use coordinator::session::ChannelConnection;
use coordinator::store::MemoryStore;
use coordinator::{Config, Coordinator};
use http_body_util::BodyExt;
use protocol::api::JobStatus;
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceExt;
use uuid::Uuid;
use worker_sim::{channel_connector, worker_seed, Latency, ReconnectPolicy, Worker, WorkerConfig};

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
    let c = Coordinator::new(
        Config::default(),
        Arc::new(coordinator::TokioClock::new(EPOCH_MS)),
        ChaCha20Rng::seed_from_u64(seed),
        Arc::new(MemoryStore::default()),
    );
    let (connector, mut acceptor) = channel_connector();
    let sessions = c.clone();
    tokio::spawn(async move {
        while let Some(peer) = acceptor.accept().await {
            tokio::spawn(coordinator::session::run(
                sessions.clone(),
                ChannelConnection {
                    from_worker: peer.from_worker,
                    to_worker: peer.to_worker,
                },
            ));
        }
    });
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
        let connector = connector.clone();
        tokio::spawn(async move { worker.run(connector).await });
    }
    while c.read(|core| core.workers_online()) < workers as usize {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }

    let app = coordinator::app(c.clone());
    let body = serde_json::to_vec(&fixtures::task_body("sim")).expect("json");
    // Wall time of the job phase is what the bench reports.
    #[allow(clippy::disallowed_methods)]
    let wall_start = std::time::Instant::now();
    let start_ms = c.now_ms();
    let mut ids = Vec::with_capacity(jobs);
    for _ in 0..jobs {
        let req = Request::post("/v1/jobs/commit/cheap")
            .header("content-type", "application/json")
            .body(Body::from(body.clone()))
            .expect("request");
        let res = app.clone().oneshot(req).await.expect("infallible");
        assert_eq!(res.status(), StatusCode::CREATED);
        let bytes = res.into_body().collect().await.expect("body").to_bytes();
        let v: serde_json::Value = serde_json::from_slice(&bytes).expect("json");
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
    c.shutdown();
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
