//! The HTTP paths through the real axum router, in-process with
//! `tower::ServiceExt::oneshot` (no sockets): health, quote, commit (no
//! workers, so the job is queued) and poll, next to a bare axum handler
//! (static JSON for GET, parse-and-answer for POST) as the ceiling.

use axum::body::{Body, Bytes};
use axum::http::{Request, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use benches::fixtures;
use coordinator::server::{self, Parts, Settings};
use coordinator::{app, Config, Coordinator, SystemClock};
use criterion::measurement::WallTime;
use criterion::{
    criterion_group, criterion_main, BenchmarkGroup, BenchmarkId, Criterion, Throughput,
};
use futures_util::FutureExt;
use http_body_util::BodyExt;
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio::runtime::Runtime;
use tower::ServiceExt;
use uuid::Uuid;

/// Needs a tokio runtime entered (the timer task is spawned on it).
fn coordinator() -> Coordinator {
    let mut config = Config::default();
    config.limits.queue_len_max = usize::MAX;
    // One client queues every job here (10 000 for the largest poll): its
    // share may be the whole queued budget.
    config.limits.queued_bytes_per_client_max = config.limits.queued_bytes_max;
    // O(jobs) per event: the bench measures the HTTP path, not the check.
    config.check_invariants = false;
    let settings = Settings {
        config,
        db: server::NO_STORE.into(),
        ..Settings::default()
    };
    let parts = Parts::new(Arc::new(SystemClock), ChaCha20Rng::seed_from_u64(1));
    // Nothing in `start` waits with no database: one poll finishes it.
    server::start(settings, parts)
        .now_or_never()
        .expect("starts without waiting")
        .expect("starts")
        .coordinator()
        .clone()
}

/// The ceiling: what axum itself costs for a GET with a small JSON answer
/// and a POST whose JSON body is parsed and answered with 201.
fn bare() -> Router {
    Router::new()
        .route(
            "/bare",
            get(|| async { Json(json!({"status": "ok", "workers_online": 0})) }),
        )
        .route(
            "/bare",
            post(|Json(v): Json<Value>| async move {
                let _ = v;
                (StatusCode::CREATED, Json(json!({"job_id": Uuid::nil()})))
            }),
        )
}

fn get_req(uri: &str) -> Request<Body> {
    Request::get(uri).body(Body::empty()).expect("request")
}

fn post_req(uri: &str, body: &Bytes) -> Request<Body> {
    Request::post(uri)
        .header("content-type", "application/json")
        .body(Body::from(body.clone()))
        .expect("request")
}

async fn call(router: &Router, req: Request<Body>) -> Bytes {
    let res = router.clone().oneshot(req).await.expect("infallible");
    debug_assert!(res.status().is_success(), "{}", res.status());
    res.into_body().collect().await.expect("body").to_bytes()
}

type Group<'a> = BenchmarkGroup<'a, WallTime>;

fn http(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let _guard = rt.enter();
    let body = Bytes::from(serde_json::to_vec(&fixtures::task_body("bench")).expect("json"));

    let mut group = c.benchmark_group("http");
    group.throughput(Throughput::Elements(1));
    bench_bare(&mut group, &rt, &body);
    bench_reads(&mut group, &rt);
    bench_commit(&mut group, &rt, &body);
    for held in [1_000usize, 100_000] {
        bench_poll(&mut group, &rt, &body, held);
    }
    group.finish();
}

/// The ceiling: the bare handler's GET and POST.
fn bench_bare(group: &mut Group<'_>, rt: &Runtime, body: &Bytes) {
    let bare = bare();
    group.bench_function(BenchmarkId::new("bare_get", "static"), |b| {
        b.to_async(rt).iter(|| call(&bare, get_req("/bare")))
    });
    group.bench_function(BenchmarkId::new("bare_post", "json"), |b| {
        b.to_async(rt).iter(|| call(&bare, post_req("/bare", body)))
    });
}

/// Health and quote of a coordinator with no workers.
fn bench_reads(group: &mut Group<'_>, rt: &Runtime) {
    let router = app(coordinator());
    group.bench_function(BenchmarkId::new("health", "0_workers"), |b| {
        b.to_async(rt).iter(|| call(&router, get_req("/v1/health")))
    });
    group.bench_function(BenchmarkId::new("quote", "auto_task"), |b| {
        b.to_async(rt)
            .iter(|| call(&router, get_req("/v1/quote?job_type=TASK&policy=AUTO")))
    });
}

/// Commits with no worker queue every job; the coordinator is replaced
/// (untimed) now and then so the queue stays realistic.
fn bench_commit(group: &mut Group<'_>, rt: &Runtime, body: &Bytes) {
    group.bench_function(BenchmarkId::new("commit", "queued"), |b| {
        b.to_async(rt).iter_custom(|iters| {
            let body = body.clone();
            async move {
                let mut router = app(coordinator());
                let mut total = Duration::ZERO;
                for i in 0..iters {
                    if i > 0 && i % 100_000 == 0 {
                        router = app(coordinator());
                    }
                    let req = post_req("/v1/jobs/commit/cheap", &body);
                    #[allow(clippy::disallowed_methods)] // benches measure wall time
                    let start = std::time::Instant::now();
                    call(&router, req).await;
                    total += start.elapsed();
                }
                total
            }
        })
    });
}

/// Polls of a coordinator holding `held` queued jobs, spread over them.
fn bench_poll(group: &mut Group<'_>, rt: &Runtime, body: &Bytes, held: usize) {
    let router = app(coordinator());
    let ids: Vec<String> = rt.block_on(async {
        let mut ids = Vec::with_capacity(held);
        for _ in 0..held {
            let bytes = call(&router, post_req("/v1/jobs/commit/cheap", body)).await;
            let v: Value = serde_json::from_slice(&bytes).expect("json");
            ids.push(format!("/v1/jobs/{}", v["job_id"].as_str().expect("id")));
        }
        ids
    });
    let mut next = 0usize;
    group.bench_with_input(BenchmarkId::new("poll", held), &held, |b, _| {
        b.to_async(rt).iter(|| {
            next = (next + 7919) % ids.len();
            call(&router, get_req(&ids[next]))
        })
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = http
}
criterion_main!(benches);
