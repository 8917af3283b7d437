//! Issue 16, finding 1: the 422 path and the queue cannot be made to hold
//! unbounded memory. A refused job keeps no payload, and jobs count against
//! byte budgets (queued, and kept terminal) with 503 beyond them.

mod common;

use axum::http::StatusCode;
use common::*;
use coordinator::config::Config;
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
    let c = coordinator(Config::default(), Arc::new(ManualClock::new(EPOCH_MS)), 1).await;
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
            max_tokens: 8
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
    let mut config = Config::default();
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

/// A flood of refused commits fills the kept budget and no further: then
/// every commit gets 503 (until retention frees room) and nothing grows.
#[tokio::test]
async fn a_flood_of_refusals_stops_at_the_kept_budget() {
    let mut config = Config::default();
    config.limits.kept_bytes_max = 64 * 1024;
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
    let r = commit(&app, "fast", big_llm_job("bob", 2 * 1024)).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.body);
}
