//! End-to-end jobs per second with each store: the real router served on
//! loopback HTTP, 64 concurrent clients committing jobs, 8 in-process
//! workers (16 slots each, real session code, signed receipts) completing
//! them. One iteration is `JOBS` jobs from the first commit to the last
//! `result_accepted`.
//!
//! Stores compared, both started through the composition root:
//! - `sqlite_memory`: `--db :memory:`, one in-memory transaction per event;
//! - `sqlite_group`: a file in the target directory (a real disk), group
//!   commit on the writer thread (the binary's default).
//!
//! Run: `cargo bench -p coordinator --bench store`

#[path = "../tests/common/mod.rs"]
mod common;

use common::{TestWorker, Wire};
use coordinator::server::{self, Parts, Settings};
use coordinator::SystemClock;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use protocol::worker::CoordinatorFrame;
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use serde_json::json;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

const JOBS: u64 = 1_000;
const CLIENTS: u64 = 64;
const WORKERS: u64 = 8;

/// The n-th fresh database of a variant.
type MakeDb<'a> = Box<dyn Fn(u64) -> String + 'a>;

/// Runs `JOBS` jobs end to end against a fresh coordinator on `db`.
async fn run(db: String) -> Duration {
    let settings = Settings {
        db,
        ..Settings::default()
    };
    let parts = Parts::new(Arc::new(SystemClock), ChaCha20Rng::seed_from_u64(1));
    let mut server = server::start(settings, parts).await.unwrap();
    let c = server.coordinator().clone();
    // Workers use in-memory channels: their origin is the one the
    // coordinator accepts, so it must be set before serving would set the
    // listener's.
    c.default_worker_origins(vec![protocol::origin::worker_origin(
        protocol::connection::CHANNEL_URL,
    )
    .unwrap()]);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    server.serve_tcp(listener);
    let done = Arc::new(AtomicU64::new(0));
    let all_done = Arc::new(Notify::new());
    for w in 0..WORKERS {
        let mut worker =
            TestWorker::connect(Wire::channel(&c), 100 + w, &["LLM_INFER", "TASK"], 16).await;
        let (done, all_done) = (done.clone(), all_done.clone());
        tokio::spawn(async move {
            while let Some(text) = worker.wire.recv_text().await {
                match serde_json::from_str(&text) {
                    Ok(CoordinatorFrame::Assign(a)) => {
                        worker
                            .send(json!({"type": "accept", "job_id": a.job_id}))
                            .await;
                        let frame = worker.result_frame(&a, "2026-11-21T10:00:01.000Z");
                        worker.send(frame).await;
                    }
                    Ok(CoordinatorFrame::ResultAccepted { .. })
                        if done.fetch_add(1, Ordering::SeqCst) + 1 == JOBS =>
                    {
                        all_done.notify_one();
                    }
                    _ => {}
                }
            }
        });
    }
    let http = reqwest::Client::new();
    let start = tokio::time::Instant::now();
    let mut clients = Vec::new();
    for client in 0..CLIENTS {
        let (http, base) = (http.clone(), base.clone());
        clients.push(tokio::spawn(async move {
            for i in (client..JOBS).step_by(CLIENTS as usize) {
                let job = common::task_job(&format!("user-{i}"));
                let res = http
                    .post(format!("{base}/v1/jobs/commit/cheap"))
                    .json(&job)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(res.status(), 201);
            }
        }));
    }
    for client in clients {
        client.await.unwrap();
    }
    all_done.notified().await;
    let elapsed = start.elapsed();
    server.shutdown().await;
    elapsed
}

fn bench(crit: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let mut group = crit.benchmark_group("end_to_end");
    group.throughput(Throughput::Elements(JOBS));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(10));
    let file = |name: &str| dir.path().join(format!("{name}.db")).display().to_string();
    let variants: [(&str, MakeDb<'_>); 2] = [
        ("sqlite_memory", Box::new(|_| ":memory:".to_owned())),
        ("sqlite_group", Box::new(|n| file(&format!("g{n}")))),
    ];
    let runs = AtomicU64::new(0);
    for (name, make) in &variants {
        group.bench_function(*name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let db = make(runs.fetch_add(1, Ordering::Relaxed));
                    total += rt.block_on(run(db));
                }
                let per_s = (iters * JOBS) as f64 / total.as_secs_f64();
                eprintln!("{name}: {per_s:.0} jobs/s over {iters} x {JOBS} jobs");
                total
            });
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
