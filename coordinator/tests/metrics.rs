//! `GET /metrics` (issue 13, item 3): after a short known run, the scrape
//! parses with an independent Prometheus text parser (`prometheus-parse`)
//! and its values match what the run did.

mod common;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::*;
use coordinator::config::Config;
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
    let c = coordinator(Config::default(), Arc::new(TokioClock::new(EPOCH_MS)), 11).await;
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

#[tokio::test]
async fn refused_payments_are_counted_by_reason() {
    let c = coordinator(
        Config {
            network: "eip155:84532".into(),
            ..Config::default()
        },
        Arc::new(TokioClock::new(EPOCH_MS)),
        5,
    )
    .await;
    let gate = x402::PaymentGate::new(
        x402::PaymentConfig::base_sepolia_usdc(
            "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"
                .parse()
                .unwrap(),
        ),
        Arc::new(x402::InMemoryNonceStore::default()),
        Arc::new(x402::LocalSettler),
    );
    c.enable_payments(gate).unwrap();
    let app = app(c);
    let post = |payment: Option<&'static str>| {
        let mut req = Request::post("/v1/jobs/commit/fast")
            .header("content-type", "application/json")
            .header("host", "coordinator.test");
        if let Some(value) = payment {
            req = req.header("X-PAYMENT", value);
        }
        req.body(Body::from(llm_job("alice").to_string())).unwrap()
    };
    for payment in [None, None, Some("%%%")] {
        assert_eq!(
            send(&app, post(payment)).await.status,
            StatusCode::PAYMENT_REQUIRED
        );
    }

    let (s, _) = scrape(&app).await;
    assert_eq!(
        value(
            &s,
            "payments_refused_total",
            &[("reason", "payment_required")]
        ),
        Some(2.0)
    );
    assert_eq!(
        value(
            &s,
            "payments_refused_total",
            &[("reason", "invalid_payload")]
        ),
        Some(1.0)
    );
    assert_eq!(value(&s, "payments_verified_total", &[]), Some(0.0));
    assert_eq!(
        value(
            &s,
            "http_requests_total",
            &[("route", "/v1/jobs/commit/fast"), ("status", "402")]
        ),
        Some(3.0)
    );
}
