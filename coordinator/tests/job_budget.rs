//! Issue 16, finding 1: the 422 path and the queue cannot be made to hold
//! unbounded memory. A refused job keeps no payload, and jobs count against
//! byte budgets (queued, and kept terminal) with 503 beyond them.

mod common;

use axum::http::StatusCode;
use common::*;
use coordinator::{app, ManualClock};
use protocol::api::Payload;
use serde_json::json;
use std::sync::Arc;

fn big_llm_job(user: &str, prompt_bytes: usize) -> serde_json::Value {
    json!({"job_type": "LLM_INFER", "user_id": user,
        "payload": {"prompt": "x".repeat(prompt_bytes), "max_tokens": 8}})
}

/// Before the fix a refused PRIVATE commit was kept whole, its 200 KiB
/// prompt included, in memory and on disk, for ever.
#[tokio::test]
async fn a_job_refused_at_admission_keeps_no_payload() {
    let c = coordinator(spec_config(), Arc::new(ManualClock::new(EPOCH_MS)), 1).await;
    let app = app(c.clone());
    let r = commit(&app, "fast", private(big_llm_job("alice", 200 * 1024))).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.body);
    let id: uuid::Uuid = r.body["job_id"].as_str().unwrap().parse().unwrap();
    // Still pollable as failed / no_trusted_worker.
    let record = job_status(&app, &id.to_string()).await;
    assert_eq!(record["status"], "failed");
    assert_eq!(record["result"]["error"], "no_trusted_worker");
    let payload = c.read(|core| core.job(&id).unwrap().submission.payload.clone());
    assert_eq!(
        payload,
        Payload::Llm {
            prompt: String::new(),
            max_tokens: 8,
            model: None,
        }
    );
    let (queued, kept) = c.read(|core| core.job_bytes());
    assert_eq!(queued, 0);
    assert!(kept < 2 * 1024, "a refusal holds {kept} bytes");
}

/// Before the fix only the number of queued jobs was limited (100 000 at
/// up to 256 KiB each); now their bytes are too.
#[tokio::test]
async fn queued_jobs_have_a_byte_budget() {
    let mut config = spec_config();
    config.limits.queued_bytes_max = 100 * 1024;
    let c = coordinator(config, Arc::new(ManualClock::new(EPOCH_MS)), 1).await;
    let app = app(c.clone());
    for _ in 0..3 {
        let r = commit(&app, "cheap", big_llm_job("alice", 30 * 1024)).await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    }
    let r = commit(&app, "cheap", big_llm_job("alice", 30 * 1024)).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.body);
    assert_eq!(c.read(|core| core.pending_jobs()), 3);
    let (queued, _) = c.read(|core| core.job_bytes());
    assert!(queued <= 100 * 1024, "{queued}");
    // A small job still fits.
    let r = commit(&app, "cheap", llm_job("bob")).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
}

/// Issue 29, finding 1: a flood of refused commits no longer fills the
/// results' budget: refusals are failure records, in a ledger and budget
/// of their own. Before, 200 refusals filled a 64 KiB `kept_bytes_max` and
/// then every commit, honest ones included, got 503.
#[tokio::test]
async fn a_flood_of_refusals_leaves_the_results_budget_alone() {
    let mut config = spec_config();
    config.limits.kept_bytes_max = 64 * 1024;
    let c = coordinator(config, Arc::new(ManualClock::new(EPOCH_MS)), 1).await;
    let app = app(c.clone());
    for _ in 0..200 {
        let r = commit(&app, "fast", private(big_llm_job("mallory", 100 * 1024))).await;
        assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.body);
    }
    let (kept, failed) = c.read(|core| core.kept_bytes_by_ledger());
    assert_eq!(kept, 0);
    assert!(failed > 64 * 1024, "{failed}");
    let r = commit(&app, "fast", big_llm_job("bob", 2 * 1024)).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
}

/// Issue 29: refused commits have a rate budget per client address (429
/// beyond it, with Retry-After, and nothing recorded); another client is
/// still refused (422) as usual.
#[tokio::test]
async fn refusals_are_rate_limited_per_client() {
    let mut config = spec_config();
    config.limits.refusals_per_client_per_minute_max = 5;
    let c = coordinator(config, Arc::new(ManualClock::new(EPOCH_MS)), 1).await;
    let app = app(c.clone());
    for _ in 0..5 {
        let r = commit(&app, "fast", private(llm_job("mallory"))).await;
        assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.body);
    }
    let (_, failed) = c.read(|core| core.kept_bytes_by_ledger());
    let r = commit(&app, "fast", private(llm_job("mallory"))).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "{}", r.body);
    assert!(r.headers.contains_key("retry-after"));
    assert_eq!(c.read(|core| core.kept_bytes_by_ledger()).1, failed);
    // An accepted commit is not a refusal.
    let r = commit(&app, "fast", llm_job("bob")).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
}

/// A flood of refused commits fills the failure records' budget and no
/// further: then refusals get 503 (until retention frees room) and
/// nothing grows.
#[tokio::test]
async fn a_flood_of_refusals_stops_at_the_failure_budget() {
    let mut config = spec_config();
    config.limits.failed_kept_bytes_max = 64 * 1024;
    config.limits.refusals_per_client_per_minute_max = u32::MAX;
    let c = coordinator(config, Arc::new(ManualClock::new(EPOCH_MS)), 1).await;
    let app = app(c.clone());
    let mut refused = 0;
    for _ in 0..200 {
        let r = commit(&app, "fast", private(big_llm_job("mallory", 100 * 1024))).await;
        match r.status {
            StatusCode::UNPROCESSABLE_ENTITY => refused += 1,
            StatusCode::SERVICE_UNAVAILABLE => {}
            other => panic!("unexpected {other}: {}", r.body),
        }
    }
    assert!(refused > 0 && refused < 200, "{refused} recorded");
    let (_, kept) = c.read(|core| core.job_bytes());
    assert!(kept <= 64 * 1024, "{kept}");
    let r = commit(&app, "fast", private(big_llm_job("bob", 2 * 1024))).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.body);
}

/// Ordinary finished jobs fill the kept budget too, not only a flood:
/// 1 GiB is about 950,000 small jobs, three minutes at 5,000 jobs/s.
/// Before the fix the budget then refused every commit (503) until the
/// oldest jobs were `--retention-hours` old; now retention deletes the
/// oldest finished jobs past the high-water mark, and commits go on.
/// Through the composition root, as the binary runs it (SQLite, its
/// retention task), on paused time.
#[tokio::test(start_paused = true)]
async fn a_full_kept_budget_deletes_the_oldest_finished_jobs_not_new_commits() {
    use coordinator::core::{KEPT_HIGH_WATER_PERCENT, KEPT_LOW_WATER_PERCENT};
    use coordinator::server::{self, Parts, Runtime, Settings};
    use coordinator::TokioClock;
    use rand::SeedableRng;
    use std::time::Duration;

    const KEPT_BYTES_MAX: usize = 64 * 1024;
    let mut config = spec_config();
    config.limits.kept_bytes_max = KEPT_BYTES_MAX;
    // These jobs fail: failure records, with a budget of their own.
    config.limits.failed_kept_bytes_max = KEPT_BYTES_MAX;
    config.limits.finished_jobs_cached_max = 4;
    // No worker: each job fails `pending_timeout` a second after its commit.
    config.timing.pending_timeout_ms = 1_000;
    let settings = Settings {
        config,
        db: "file:/kept-budget-retention?vfs=memdb".into(),
        retention_hours: Some(24),
        ..Settings::default()
    };
    let parts = Parts {
        runtime: Runtime::Simulation,
        ..Parts::new(
            Arc::new(TokioClock::new(EPOCH_MS)),
            rand_chacha::ChaCha20Rng::seed_from_u64(1),
        )
    };
    let server = server::start(settings, parts).await.unwrap();
    let c = server.coordinator().clone();
    let app = app(c.clone());

    // 100 jobs of about 2 KiB, 1 KiB once ended (the prompt is dropped):
    // over one and a half times the budget, in 150 s; a job ends every
    // 1.5 s, and its bytes are a sixtieth of the budget, so a check a
    // second keeps up.
    let mut ids = Vec::new();
    for i in 0..100 {
        let r = commit(&app, "fast", big_llm_job("alice", 1024)).await;
        assert_eq!(r.status, StatusCode::CREATED, "commit {i}: {}", r.body);
        ids.push(r.body["job_id"].as_str().unwrap().to_owned());
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        let (_, kept) = c.read(|core| core.job_bytes());
        assert!(
            kept <= KEPT_BYTES_MAX,
            "after commit {i}: {kept} bytes kept"
        );
    }
    let (_, kept) = c.read(|core| core.job_bytes());
    assert!(
        kept <= KEPT_BYTES_MAX * KEPT_HIGH_WATER_PERCENT / 100,
        "{kept} bytes kept"
    );
    // The newest finished jobs are kept, the oldest are gone, from memory
    // and from the database.
    let newest = job_status(&app, &ids[99]).await;
    assert_eq!(newest["status"], "failed", "{newest}");
    let kept_jobs = ids
        .iter()
        .filter(|id| c.job(&id.parse().unwrap()).unwrap().is_some());
    let kept_jobs = kept_jobs.count();
    let expected = KEPT_BYTES_MAX * KEPT_LOW_WATER_PERCENT / 100 / 1024;
    assert!(
        (expected / 2..=expected * 2).contains(&kept_jobs),
        "{kept_jobs} of 100 jobs kept, about {expected} expected"
    );
    let oldest = call(&app, "GET", &format!("/v1/jobs/{}", ids[0]), None).await;
    assert_eq!(oldest.status, StatusCode::NOT_FOUND, "{}", oldest.body);

    // Operators see it: deletions by reason, and the budgets' fill.
    let metrics = metrics_text(&app).await;
    let sample = |prefix: &str| {
        let line = metrics.lines().find(|l| l.starts_with(prefix));
        line.and_then(|l| l.rsplit(' ').next()?.parse::<usize>().ok())
    };
    assert_eq!(
        sample(r#"retention_deleted_jobs_total{reason="size"} "#),
        Some(100 - kept_jobs),
        "{metrics}"
    );
    assert_eq!(
        sample(r#"retention_deleted_jobs_total{reason="age"} "#),
        None
    );
    let (kept, failed) = c.read(|core| core.kept_bytes_by_ledger());
    assert_eq!(sample(r#"job_bytes{state="kept"} "#), Some(kept));
    assert_eq!(sample(r#"job_bytes{state="failed"} "#), Some(failed));
    // The oldest job kept was created after the cut, the newest deleted one
    // before it (seconds: each job is 1.5 s after the one before).
    let cut_ms = c.read(|core| core.retention_cut_ms()).expect("a cut");
    let created_ms = |id: &str| {
        c.job(&id.parse().unwrap())
            .unwrap()
            .map(|j| j.created_at_ms)
    };
    let oldest_kept = ids.iter().find_map(|id| created_ms(id)).unwrap();
    assert!(oldest_kept >= cut_ms, "{oldest_kept} kept, cut {cut_ms}");
    assert_eq!(
        sample("retention_cut_timestamp_seconds "),
        Some((cut_ms / 1000) as usize)
    );
}

async fn metrics_text(app: &axum::Router) -> String {
    use http_body_util::BodyExt;
    use tower::ServiceExt;
    let request = axum::http::Request::get("/metrics")
        .body(axum::body::Body::empty())
        .unwrap();
    let r = app.clone().oneshot(request).await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let body = r.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(body.to_vec()).unwrap()
}

/// A commit from the client at `peer`, as the binary's `ConnectInfo` gives it.
async fn commit_from(app: &axum::Router, peer: &str, job: serde_json::Value) -> Response {
    let peer: std::net::SocketAddr = peer.parse().unwrap();
    let req = axum::http::Request::builder()
        .method("POST")
        .uri("/v1/jobs/commit/cheap")
        .header("content-type", "application/json")
        .extension(axum::extract::ConnectInfo(peer))
        .body(axum::body::Body::from(job.to_string()))
        .unwrap();
    send(app, req).await
}

/// Issue 29, finding 1: a flood of big results from one address deletes
/// that address's own results, never an older honest result of another
/// (before: past 90 % of the budget the oldest by creation went, whoever
/// owned them, and the honest result answered 404). Through the
/// composition root with its retention task, as the binary runs it.
#[tokio::test(start_paused = true)]
async fn a_flood_of_results_from_one_address_keeps_another_addresses_result() {
    use coordinator::server::{self, Parts, Runtime, Settings};
    use coordinator::TokioClock;
    use rand::SeedableRng;
    use std::time::Duration;

    let mut config = spec_config();
    config.limits.kept_bytes_max = 256 * 1024;
    config.limits.finished_jobs_cached_max = 4;
    let settings = Settings {
        config,
        db: "file:/kept-for-their-owners?vfs=memdb".into(),
        retention_hours: Some(24),
        ..Settings::default()
    };
    let parts = Parts {
        runtime: Runtime::Simulation,
        ..Parts::new(
            Arc::new(TokioClock::new(EPOCH_MS)),
            rand_chacha::ChaCha20Rng::seed_from_u64(1),
        )
    };
    let server = server::start(settings, parts).await.unwrap();
    let c = server.coordinator().clone();
    let app = app(c.clone());
    let mut worker = TestWorker::connect(Wire::channel(&c), 1, &["LLM_INFER"], 4).await;

    let honest = commit_from(&app, "10.0.0.1:1000", llm_job("honest")).await;
    assert_eq!(honest.status, StatusCode::CREATED, "{}", honest.body);
    let honest_id = honest.body["job_id"].as_str().unwrap().to_owned();
    let a = worker.expect_assign().await;
    worker.complete(&a).await;
    tokio::time::sleep(Duration::from_secs(10)).await;

    // 200 results of about 5 KiB (the worker echoes the prompt): four
    // times the budget, from another address.
    let mut accepted = 0;
    for i in 0..200 {
        let r = commit_from(&app, "10.6.6.6:1000", big_llm_job("mallory", 4 * 1024)).await;
        match r.status {
            StatusCode::CREATED => {
                accepted += 1;
                let a = worker.expect_assign().await;
                worker.complete(&a).await;
            }
            // A 503 when the budget filled within a second, before the
            // size check deleted the flood's own results.
            StatusCode::SERVICE_UNAVAILABLE => {}
            other => panic!("flood commit {i}: {other} {}", r.body),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(accepted > 100, "{accepted} flood jobs accepted");
    let record = job_status(&app, &honest_id).await;
    assert_eq!(record["status"], "completed", "{record}");
    // The honest client still commits.
    let r = commit_from(&app, "10.0.0.1:1000", llm_job("honest")).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let (kept, _) = c.read(|core| core.kept_bytes_by_ledger());
    assert!(kept <= 256 * 1024, "{kept}");
}
