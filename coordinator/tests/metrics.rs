//! `GET /metrics` (issue 13, item 3): after a short known run, the scrape
//! parses with an independent Prometheus text parser (`prometheus-parse`)
//! and its values match what the run did.

mod common;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::*;
use coordinator::config::Config;
use coordinator::server::{self, Parts, Runtime, Settings};
use coordinator::store::sqlite::CommitMode;
use coordinator::{app, TokioClock};
use http_body_util::BodyExt;
use prometheus_parse::{Scrape, Value as Sample};
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceExt;

/// Scrapes `/metrics` and parses it with `prometheus-parse`; also the text.
async fn scrape(app: &axum::Router) -> (Scrape, String) {
    // Not through `common::send`: the body is text, not JSON.
    let r = app
        .clone()
        .oneshot(Request::get("/metrics").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let content_type = r.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(content_type.starts_with("text/plain"), "{content_type}");
    let raw = r.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8(raw.to_vec()).unwrap();
    let scrape = Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).unwrap();
    (scrape, text)
}

/// The value of the one sample named `name` whose labels include `labels`;
/// `None` when there is none.
fn value(scrape: &Scrape, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut found = scrape
        .samples
        .iter()
        .filter(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)));
    let sample = found.next()?;
    assert!(found.next().is_none(), "more than one {name} {labels:?}");
    match &sample.value {
        Sample::Counter(v) | Sample::Gauge(v) | Sample::Untyped(v) => Some(*v),
        Sample::Histogram(buckets) => buckets.last().map(|b| b.count),
        Sample::Summary(_) => None,
    }
}

#[tokio::test(start_paused = true)]
async fn a_scrape_reports_what_the_run_did() {
    let c = coordinator(spec_config(), Arc::new(TokioClock::new(EPOCH_MS)), 11).await;
    let app = app(c.clone());
    let mut w = TestWorker::connect(Wire::channel(&c), 1, &["LLM_INFER", "TASK"], 1).await;

    // Three FAST jobs: the worker's one slot takes the first.
    let mut jobs = Vec::new();
    for user in ["alice", "bob", "carol"] {
        let r = commit(&app, "fast", llm_job(user)).await;
        assert_eq!(r.status, StatusCode::CREATED);
        jobs.push(r.body["job_id"].as_str().unwrap().to_owned());
    }
    let first = w.expect_assign().await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    w.complete(&first).await;
    // The slot takes the second; the third waits.
    let _second = w.expect_assign().await;
    // A CHEAP job waits too: the only slot is busy.
    assert_eq!(
        commit(&app, "cheap", task_job("dave")).await.status,
        StatusCode::CREATED
    );
    // PRIVATE with no trusted worker: refused, and the job fails for that reason.
    let refused = commit(&app, "fast", private(llm_job("erin"))).await;
    assert_eq!(refused.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(job_status(&app, &jobs[0]).await["status"], "completed");
    settle().await;

    let (s, text) = scrape(&app).await;
    let fast_llm = [("tier", "FAST"), ("job_type", "LLM_INFER")];
    assert_eq!(value(&s, "jobs_committed_total", &fast_llm), Some(3.0));
    assert_eq!(
        value(
            &s,
            "jobs_committed_total",
            &[("tier", "CHEAP"), ("job_type", "TASK")]
        ),
        Some(1.0)
    );
    assert_eq!(value(&s, "jobs_completed_total", &fast_llm), Some(1.0));
    assert_eq!(
        value(&s, "jobs_failed_total", &[("reason", "no_trusted_worker")]),
        Some(1.0)
    );
    assert_eq!(
        value(&s, "queue_depth_jobs", &[("tier", "FAST")]),
        Some(1.0)
    );
    assert_eq!(
        value(&s, "queue_depth_jobs", &[("tier", "CHEAP")]),
        Some(1.0)
    );
    assert_eq!(value(&s, "workers_online", &[]), Some(1.0));
    // One completion, 1.5 s after its commit on the coordinator's clock.
    assert_eq!(
        value(&s, "job_commit_to_completed_seconds", &[("tier", "FAST")]),
        Some(1.0)
    );
    let sum = value(
        &s,
        "job_commit_to_completed_seconds_sum",
        &[("tier", "FAST")],
    );
    assert!(sum.is_none_or(|v| (v - 1.5).abs() < 0.01), "{sum:?}");
    assert_eq!(
        value(&s, "job_assign_wait_seconds", &[("tier", "FAST")]),
        Some(2.0)
    );
    // Requests by route template, never the raw path.
    // `prometheus-parse` 0.2 skips a sample whose label value holds a `}`
    // (its label pattern stops there), so the poll's template is read as text.
    assert!(
        text.contains(
            "http_requests_total{method=\"GET\",route=\"/v1/jobs/{id}\",status=\"200\"} 1\n"
        ),
        "{text}"
    );
    assert_eq!(
        value(
            &s,
            "http_requests_total",
            &[("route", "/v1/jobs/commit/fast"), ("status", "201")]
        ),
        Some(3.0)
    );
    assert!(s
        .samples
        .iter()
        .all(|x| !x.labels.get("route").unwrap_or("").contains(&jobs[0])));

    // The worker leaves: the gauge follows at the next scrape.
    drop(w);
    settle().await;
    let (s, _) = scrape(&app).await;
    assert_eq!(value(&s, "workers_online", &[]), Some(0.0));
    // ... and its session is counted closed, with why.
    assert_eq!(
        value(
            &s,
            "worker_sessions_closed_total",
            &[("reason", "connection closed")]
        ),
        Some(1.0)
    );
}

/// The sum of histogram `name` (its `_sum` sample).
fn histogram_sum(scrape: &Scrape, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    value(scrape, &format!("{name}_sum"), labels)
}

/// The cumulative count of histogram `name` at bucket bound `le`.
fn bucket(scrape: &Scrape, name: &str, le: f64) -> Option<f64> {
    scrape
        .samples
        .iter()
        .find(|s| s.metric == name)
        .and_then(|s| match &s.value {
            Sample::Histogram(buckets) => buckets
                .iter()
                .find(|b| (b.less_than - le).abs() < 1e-12)
                .map(|b| b.count),
            _ => None,
        })
}

#[tokio::test(start_paused = true)]
async fn rejected_results_are_counted_by_reason() {
    let c = coordinator(spec_config(), Arc::new(TokioClock::new(EPOCH_MS)), 3).await;
    let app = app(c.clone());
    let mut w = TestWorker::connect(Wire::channel(&c), 1, &["TASK"], 1).await;
    assert_eq!(
        commit(&app, "fast", task_job("u")).await.status,
        StatusCode::CREATED
    );
    // A receipt that does not match the output, then an output of the
    // wrong shape: each spends an attempt and the job comes back.
    let a = w.expect_assign().await;
    let mut forged = w.result_frame(&a, "2026-11-21T10:00:01.000Z");
    forged["output"] = serde_json::json!("a different output");
    w.send(forged).await;
    let _error = w.recv().await;
    let again = w.expect_assign().await;
    let mut wrong_shape = w.result_frame(&again, "2026-11-21T10:00:01.000Z");
    wrong_shape["output"] = serde_json::json!({"not": "a string"});
    w.send(wrong_shape).await;
    let _error = w.recv().await;
    let third = w.expect_assign().await;
    w.complete(&third).await;
    settle().await;

    let (s, _) = scrape(&app).await;
    for reason in ["invalid_receipt", "invalid_output"] {
        assert_eq!(
            value(&s, "results_rejected_total", &[("reason", reason)]),
            Some(1.0),
            "{reason}"
        );
    }
    let fast_task = [("tier", "FAST"), ("job_type", "TASK")];
    assert_eq!(value(&s, "jobs_completed_total", &fast_task), Some(1.0));
    assert_eq!(value(&s, "jobs_failed_total", &fast_task), None);
    // Three assignments of the one job.
    assert_eq!(
        value(&s, "job_assign_wait_seconds", &[("tier", "FAST")]),
        Some(3.0)
    );
}

#[tokio::test]
async fn payments_are_counted_by_reason_and_settlement_outcome() {
    let stub = testkit::FacilitatorStub::new("eip155:84532");
    let c = coordinator(
        Config {
            network: "eip155:84532".into(),
            // The outcomes at commit; on completion: tests/settlement.rs.
            settlement: coordinator::config::Settlement::AtCommit,
            ..spec_config()
        },
        Arc::new(coordinator::ManualClock::new(EPOCH_MS)),
        5,
    )
    .await;
    let gate = x402::PaymentGate::new(
        payment_config(),
        Arc::new(x402::InMemoryNonceStore::default()),
        Arc::new(x402::FacilitatorSettler::new(
            testkit::RouterTransport::new(stub.router()),
            Duration::from_secs(5),
        )),
    );
    c.enable_payments(gate).unwrap();
    let app = app(c);
    let path = "/v1/jobs/commit/fast";
    let job = llm_job("alice");
    // Two without a payment, one that does not decode.
    let mut challenge = None;
    for payment in [None, None, Some(("X-PAYMENT", "%%%"))] {
        let r = post(&app, path, &job, payment).await;
        assert_eq!(r.status, StatusCode::PAYMENT_REQUIRED);
        challenge.get_or_insert(r);
    }
    // A valid payment the facilitator refuses to settle, then settles.
    let (name, value_) = pay(&challenge.unwrap(), 1);
    stub.set_script(testkit::StubScript::insufficient_funds());
    let r = post(&app, path, &job, Some((&name, &value_))).await;
    assert_eq!(r.status, StatusCode::PAYMENT_REQUIRED);
    stub.set_script(testkit::StubScript::success());
    let r = post(&app, path, &job, Some((&name, &value_))).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);

    let (s, _) = scrape(&app).await;
    let refused = |reason| value(&s, "payments_refused_total", &[("reason", reason)]);
    assert_eq!(refused("payment_required"), Some(2.0));
    assert_eq!(refused("invalid_payload"), Some(1.0));
    assert_eq!(refused("insufficient_funds"), Some(1.0));
    assert_eq!(value(&s, "payments_verified_total", &[]), Some(2.0));
    let settlements = |outcome| value(&s, "payments_settlements_total", &[("outcome", outcome)]);
    assert_eq!(settlements("failed"), Some(1.0));
    assert_eq!(settlements("settled"), Some(1.0));
    let requests = |status| {
        value(
            &s,
            "http_requests_total",
            &[("route", path), ("status", status)],
        )
    };
    assert_eq!(requests("402"), Some(4.0));
    assert_eq!(requests("201"), Some(1.0));
    assert_eq!(
        value(
            &s,
            "jobs_committed_total",
            &[("tier", "FAST"), ("job_type", "LLM_INFER")]
        ),
        Some(1.0)
    );
}

/// A coordinator on a group-commit SQLite store, started as `runtime`.
async fn on_sqlite(db: String, runtime: Runtime) -> (coordinator::server::Server, axum::Router) {
    let settings = Settings {
        db,
        ..Settings::default()
    };
    let parts = Parts {
        runtime,
        ..Parts::new(
            Arc::new(TokioClock::new(EPOCH_MS)),
            rand::SeedableRng::seed_from_u64(8),
        )
    };
    let server = server::start(settings, parts).await.expect("starts");
    assert_eq!(
        server.store().expect("a database").mode(),
        CommitMode::Group
    );
    let app = server.app();
    (server, app)
}

/// Commits `sequential` jobs one after another (each its own group commit),
/// then `together` at once (sharing commits).
async fn commit_jobs(app: &axum::Router, sequential: usize, together: usize) {
    for i in 0..sequential {
        let r = commit(app, "cheap", task_job(&format!("s{i}"))).await;
        assert_eq!(r.status, StatusCode::CREATED);
    }
    let batch = (0..together).map(|i| commit(app, "cheap", task_job(&format!("t{i}"))));
    for r in futures_util::future::join_all(batch).await {
        assert_eq!(r.status, StatusCode::CREATED);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writer_thread_records_each_group_commit() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("metrics.db").to_str().unwrap().to_owned();
    let (server, app) = on_sqlite(db, Runtime::Os).await;
    commit_jobs(&app, 5, 40).await;

    let (s, _) = scrape(&app).await;
    // One event per commit, every one in some batch.
    assert_eq!(
        histogram_sum(&s, "store_flush_batch_events", &[]),
        Some(45.0)
    );
    let batches = value(&s, "store_flush_batch_events", &[]).unwrap();
    assert!((6.0..=45.0).contains(&batches), "{batches}");
    // The five sequential commits were batches of one.
    assert!(bucket(&s, "store_flush_batch_events", 1.0).unwrap() >= 5.0);
    // One duration per batch, each real (an fsync takes time).
    assert_eq!(value(&s, "store_flush_seconds", &[]), Some(batches));
    let seconds = histogram_sum(&s, "store_flush_seconds", &[]).unwrap();
    assert!(seconds > 0.0 && seconds < 60.0, "{seconds}");
    server.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn in_the_simulation_the_writer_task_records_commits_that_take_no_time() {
    let db = "file:/metrics-writer-task?vfs=memdb".to_owned();
    let (server, app) = on_sqlite(db, Runtime::Simulation).await;
    commit_jobs(&app, 3, 10).await;

    let (s, _) = scrape(&app).await;
    assert_eq!(
        histogram_sum(&s, "store_flush_batch_events", &[]),
        Some(13.0)
    );
    let batches = value(&s, "store_flush_seconds", &[]).unwrap();
    assert!(batches >= 4.0, "{batches}");
    // Virtual time stands still within a commit: every one reads 0 s,
    // so the scrape is the same on every run.
    assert_eq!(histogram_sum(&s, "store_flush_seconds", &[]), Some(0.0));
    assert_eq!(bucket(&s, "store_flush_seconds", 0.000_1), Some(batches));
    server.shutdown().await;
}

/// The binary's address lines: the API's, then the metrics listener's when
/// there is one. The child is killed when dropped.
async fn run_binary(args: &[&str]) -> (tokio::process::Child, String, Option<String>) {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_coordinator"))
        .args(["--listen", "127.0.0.1:0", "--db", ":memory:"])
        .args(args)
        .env("RUST_LOG", "info")
        .env_remove("COORDINATOR_LISTEN")
        .env_remove("COORDINATOR_METRICS_LISTEN")
        .env_remove("COORDINATOR_METRICS_ON_API")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("coordinator binary starts");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let wants_metrics = args.contains(&"--metrics-listen");
    let (api, metrics) = tokio::time::timeout(Duration::from_secs(20), async {
        let (mut api, mut metrics) = (None, None);
        while let Some(line) = lines.next_line().await.unwrap() {
            let url_after = |marker: &str| {
                line.find(marker).map(|at| {
                    let rest = &line[at + marker.len() - "http://".len()..];
                    rest.split_whitespace().next().unwrap().to_owned()
                })
            };
            metrics = metrics.or(url_after("metrics at http://"));
            api = api.or(url_after("listening on http://"));
            if let Some(api) = &api {
                if metrics.is_some() || !wants_metrics {
                    return (api.clone(), metrics);
                }
            }
        }
        panic!("coordinator exited before listening");
    })
    .await
    .expect("listens within 20 s");
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, api, metrics)
}

/// GET `url` once the server answers: (status, body).
async fn get(url: &str) -> (u16, String) {
    let http = reqwest::Client::new();
    for _ in 0..200 {
        if let Ok(r) = http.get(url).send().await {
            return (r.status().as_u16(), r.text().await.unwrap());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{url} never answered");
}

/// Issue 29, finding 9: by default `/metrics` is not on the public port,
/// where it showed anyone how full the kept budget is (decision 0018).
#[tokio::test]
async fn metrics_are_off_the_api_listener_by_default() {
    let (_child, api, metrics) = run_binary(&[]).await;
    assert_eq!(metrics, None);
    assert_eq!(get(&format!("{api}/v1/health")).await.0, 200);
    assert_eq!(get(&format!("{api}/metrics")).await.0, 404);
}

#[tokio::test]
async fn metrics_on_api_serves_them_beside_the_api() {
    let (_child, api, metrics) = run_binary(&["--metrics-on-api"]).await;
    assert_eq!(metrics, None);
    let (status, text) = get(&format!("{api}/metrics")).await;
    assert_eq!(status, 200);
    assert!(text.contains("# TYPE workers_online gauge"), "{text}");
}

#[tokio::test]
async fn metrics_listen_moves_metrics_off_the_api_listener() {
    let (_child, api, metrics) = run_binary(&["--metrics-listen", "127.0.0.1:0"]).await;
    let metrics = metrics.expect("the metrics address is logged");
    assert_ne!(metrics, format!("{api}/metrics"));
    // The API serves everything but metrics...
    assert_eq!(get(&format!("{api}/v1/health")).await.0, 200);
    assert_eq!(get(&format!("{api}/metrics")).await.0, 404);
    assert_eq!(get(&format!("{api}/metrics")).await.0, 404);
    // ... and the metrics listener serves metrics alone, counting the API's
    // requests (the 404s on the API included).
    let base = metrics.trim_end_matches("/metrics");
    assert_eq!(get(&format!("{base}/v1/health")).await.0, 404);
    let (status, text) = get(&metrics).await;
    assert_eq!(status, 200);
    let scrape = Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).unwrap();
    assert_eq!(
        value(
            &scrape,
            "http_requests_total",
            &[("route", "/v1/health"), ("status", "200")]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &scrape,
            "http_requests_total",
            &[("route", "unmatched"), ("status", "404")]
        ),
        Some(3.0)
    );
}
