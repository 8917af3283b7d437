//! The job lifecycle and dispatch rules (ARCHITECTURE.md, "Job lifecycle"),
//! with the real session logic over in-memory channels, under paused tokio
//! time so every timeout fires exactly and at once.

mod common;

use axum::http::StatusCode;
use common::*;
use coordinator::config::Config;
use coordinator::{app, TokioClock};
use protocol::api::JobType;
use protocol::receipt::ReceiptBody;
use protocol::worker::{Assignment, CoordinatorFrame, ErrorCode};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

async fn setup(config: Config) -> (coordinator::Coordinator, axum::Router) {
    let c = coordinator(config, Arc::new(TokioClock::new(EPOCH_MS)), 11).await;
    (c.clone(), app(c))
}

fn id(r: &Response) -> String {
    r.body["job_id"].as_str().unwrap().to_owned()
}

async fn wait_status(app: &axum::Router, job: &str, status: &str) -> Value {
    for _ in 0..10_000 {
        let record = job_status(app, job).await;
        if record["status"] == status {
            return record;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "job {job} never reached {status}: {}",
        job_status(app, job).await
    );
}

#[tokio::test(start_paused = true)]
async fn a_job_runs_to_completion_with_a_verified_receipt() {
    let (c, app) = setup(spec_config()).await;
    let mut w = TestWorker::connect(Wire::channel(&c), 1, &["LLM_INFER", "TASK"], 2).await;
    assert_eq!(
        call(&app, "GET", "/v1/health", None).await.body["workers_online"],
        1
    );

    let job = id(&commit(&app, "fast", llm_job("alice")).await);
    let a = w.expect_assign().await;
    assert_eq!(a.job_id.to_string(), job);
    assert_eq!(a.job_type, JobType::LlmInfer);
    assert_eq!(a.payment_ref, None);
    assert_eq!(job_status(&app, &job).await["status"], "assigned");

    w.send(json!({"type": "accept", "job_id": a.job_id})).await;
    settle().await;
    assert_eq!(job_status(&app, &job).await["status"], "running");

    tokio::time::sleep(Duration::from_millis(1_234)).await;
    let frame = w.result_frame(&a, "2026-11-21T10:00:01.234Z");
    w.send(frame).await;
    assert_eq!(
        w.recv().await,
        CoordinatorFrame::ResultAccepted { job_id: a.job_id }
    );

    let record = wait_status(&app, &job, "completed").await;
    assert_eq!(record["result"], json!({"output": "echo: Say hi"}));
    assert_eq!(record["completed_at"], "2026-11-21T10:00:01.234Z");
    let receipt: protocol::receipt::Receipt =
        serde_json::from_value(record["receipt"].clone()).unwrap();
    assert_eq!(receipt.provider_pubkey, w.key.public_key_hex());
    assert_eq!(receipt.payment_ref, None);
    receipt
        .verify(&record["result"]["output"])
        .expect("receipt verifies");
}

#[tokio::test(start_paused = true)]
async fn fast_jobs_are_served_before_cheap_ones() {
    let (c, app) = setup(spec_config()).await;
    let cheap1 = id(&commit(&app, "cheap", task_job("u")).await);
    let cheap2 = id(&commit(&app, "cheap", task_job("u")).await);
    let fast = id(&commit(&app, "fast", task_job("u")).await);
    let mut w = TestWorker::connect(Wire::channel(&c), 1, &["TASK"], 1).await;
    let mut order = Vec::new();
    for _ in 0..3 {
        let a = w.expect_assign().await;
        order.push(a.job_id.to_string());
        w.complete(&a).await;
    }
    assert_eq!(order, [fast, cheap1, cheap2]);
}

#[tokio::test(start_paused = true)]
async fn slots_bound_concurrent_jobs_and_capabilities_are_respected() {
    let (c, app) = setup(spec_config()).await;
    let mut w = TestWorker::connect(Wire::channel(&c), 1, &["TASK"], 2).await;
    let llm = id(&commit(&app, "fast", llm_job("u")).await);
    let t1 = commit(&app, "cheap", task_job("u")).await;
    let t2 = commit(&app, "cheap", task_job("u")).await;
    let t3 = id(&commit(&app, "cheap", task_job("u")).await);
    let a1 = w.expect_assign().await;
    let a2 = w.expect_assign().await;
    assert_eq!(
        [a1.job_id.to_string(), a2.job_id.to_string()],
        [id(&t1), id(&t2)]
    );
    settle().await;
    assert_eq!(job_status(&app, &t3).await["status"], "pending");
    assert_eq!(job_status(&app, &llm).await["status"], "pending");
    w.complete(&a1).await;
    assert_eq!(w.expect_assign().await.job_id.to_string(), t3);
}

#[tokio::test(start_paused = true)]
async fn a_job_nobody_can_take_fails_with_no_eligible_worker() {
    let (_c, app) = setup(spec_config()).await;
    let job = id(&commit(&app, "fast", llm_job("u")).await);
    tokio::time::sleep(Duration::from_millis(29_999)).await;
    assert_eq!(job_status(&app, &job).await["status"], "pending");
    tokio::time::sleep(Duration::from_millis(2)).await;
    let record = job_status(&app, &job).await;
    assert_eq!(record["status"], "failed");
    assert_eq!(record["result"], json!({"error": "no_eligible_worker"}));
    assert_eq!(record["completed_at"], Value::Null);
}

#[tokio::test(start_paused = true)]
async fn a_disconnected_workers_job_is_completed_elsewhere() {
    let (c, app) = setup(spec_config()).await;
    let mut w1 = TestWorker::connect(Wire::channel(&c), 1, &["TASK"], 1).await;
    let job = id(&commit(&app, "fast", task_job("u")).await);
    let a = w1.expect_assign().await;
    w1.send(json!({"type": "accept", "job_id": a.job_id})).await;
    wait_status(&app, &job, "running").await;
    drop(w1);
    wait_status(&app, &job, "pending").await;
    let mut w2 = TestWorker::connect(Wire::channel(&c), 2, &["TASK"], 1).await;
    let again = w2.expect_assign().await;
    assert_eq!(again.job_id, a.job_id);
    w2.complete(&again).await;
    let record = wait_status(&app, &job, "completed").await;
    assert_eq!(
        record["receipt"]["provider_pubkey"],
        w2.key.public_key_hex()
    );
}

#[tokio::test(start_paused = true)]
async fn a_rejected_job_goes_to_another_worker() {
    let (c, app) = setup(spec_config()).await;
    let mut w1 = TestWorker::connect(Wire::channel(&c), 1, &["TASK"], 1).await;
    let mut w2 = TestWorker::connect(Wire::channel(&c), 2, &["TASK"], 1).await;
    let job = id(&commit(&app, "fast", task_job("u")).await);
    // The least-loaded, lowest session gets it first.
    let a = w1.expect_assign().await;
    w1.send(json!({"type": "reject", "job_id": a.job_id, "reason": "busy"}))
        .await;
    let again = w2.expect_assign().await;
    assert_eq!(again.job_id, a.job_id);
    w2.complete(&again).await;
    wait_status(&app, &job, "completed").await;
}

#[tokio::test(start_paused = true)]
async fn rejects_until_attempts_run_out_fail_the_job() {
    let (c, app) = setup(spec_config()).await;
    let mut w = TestWorker::connect(Wire::channel(&c), 1, &["TASK"], 1).await;
    let job = id(&commit(&app, "fast", task_job("u")).await);
    for _ in 0..3 {
        let a = w.expect_assign().await;
        w.send(json!({"type": "reject", "job_id": a.job_id, "reason": "no"}))
            .await;
    }
    let record = wait_status(&app, &job, "failed").await;
    assert_eq!(record["result"], json!({"error": "worker_rejected"}));
}

#[tokio::test(start_paused = true)]
async fn a_silent_worker_loses_the_job_at_the_lease_end() {
    let mut config = spec_config();
    config.timing.lease_ms = 5_000;
    config.timing.attempts_max = 2;
    let (c, app) = setup(config).await;
    let mut w = TestWorker::connect(Wire::channel(&c), 1, &["TASK"], 1).await;
    let job = id(&commit(&app, "fast", task_job("u")).await);
    let a = w.expect_assign().await;
    w.send(json!({"type": "accept", "job_id": a.job_id})).await;
    // Heartbeats keep the session alive, but the job's lease runs out.
    w.send(json!({"type": "heartbeat"})).await;
    assert_eq!(
        w.recv().await,
        CoordinatorFrame::Cancel {
            job_id: a.job_id,
            reason: "lease_expired".into()
        }
    );
    // Requeued and handed out again (the only worker), then the last attempt times out too.
    let again = w.expect_assign().await;
    assert_eq!(again.job_id, a.job_id);
    assert!(matches!(w.recv().await, CoordinatorFrame::Cancel { .. }));
    let record = wait_status(&app, &job, "failed").await;
    assert_eq!(record["result"], json!({"error": "worker_timeout"}));
    // A late result for a cancelled job is refused.
    let late = w.result_frame(&a, "2026-11-21T10:00:20.000Z");
    w.send(late).await;
    assert!(matches!(
        w.recv().await,
        CoordinatorFrame::Error {
            code: ErrorCode::NotAssigned,
            ..
        }
    ));
}

#[tokio::test(start_paused = true)]
async fn a_bad_receipt_never_completes_a_job() {
    let (c, app) = setup(spec_config()).await;
    let mut w = TestWorker::connect(Wire::channel(&c), 1, &["TASK"], 1).await;
    let job = id(&commit(&app, "fast", task_job("u")).await);
    let a = w.expect_assign().await;
    let mut forged = w.result_frame(&a, "2026-11-21T10:00:01.000Z");
    forged["output"] = json!("a different output");
    w.send(forged).await;
    assert!(matches!(
        w.recv().await,
        CoordinatorFrame::Error {
            code: ErrorCode::InvalidReceipt,
            ..
        }
    ));
    // The attempt is spent and the job requeued; with one worker it comes back.
    let again = w.expect_assign().await;
    let mut bad_sig = w.result_frame(&again, "2026-11-21T10:00:01.000Z");
    bad_sig["receipt"]["signature"] = json!(format!("0x{}", "11".repeat(65)));
    w.send(bad_sig).await;
    assert!(matches!(
        w.recv().await,
        CoordinatorFrame::Error {
            code: ErrorCode::InvalidReceipt,
            ..
        }
    ));
    let third = w.expect_assign().await;
    let mut wrong_shape = w.result_frame(&third, "2026-11-21T10:00:01.000Z");
    wrong_shape["output"] = json!({"not": "a string"});
    w.send(wrong_shape).await;
    assert!(matches!(
        w.recv().await,
        CoordinatorFrame::Error {
            code: ErrorCode::InvalidOutput,
            ..
        }
    ));
    let record = wait_status(&app, &job, "failed").await;
    assert_eq!(record["result"], json!({"error": "invalid_output"}));
    assert_eq!(record["receipt"], Value::Null);
}

/// A receipt signed by the worker but naming another payment or another
/// job is refused: the session checks it against what the job was
/// assigned with, which it keeps without the payload (`session::Held`).
#[tokio::test(start_paused = true)]
async fn a_receipt_for_another_payment_or_job_is_refused() {
    let (c, app) = setup(spec_config()).await;
    let mut w = TestWorker::connect(Wire::channel(&c), 1, &["TASK"], 1).await;
    let job = id(&commit(&app, "fast", task_job("u")).await);
    let signed = |w: &TestWorker, a: &Assignment, job_id, payment_ref| {
        let output = TestWorker::output_for(a);
        let receipt = ReceiptBody::new(
            job_id,
            w.key.public_key_hex(),
            &output,
            "2026-11-21T10:00:01.000Z".into(),
            payment_ref,
        )
        .sign(&w.key);
        json!({"type": "result", "job_id": a.job_id, "output": output, "receipt": receipt})
    };
    let a = w.expect_assign().await;
    assert_eq!(a.payment_ref, None);
    w.send(signed(&w, &a, a.job_id, Some("x402:0xother".into())))
        .await;
    assert!(matches!(
        w.recv().await,
        CoordinatorFrame::Error { code: ErrorCode::InvalidReceipt, message, .. }
            if message == "receipt.payment_ref is not the job's payment_ref"
    ));
    let again = w.expect_assign().await;
    w.send(signed(&w, &again, Uuid::from_u128(7), None)).await;
    assert!(matches!(
        w.recv().await,
        CoordinatorFrame::Error { code: ErrorCode::InvalidReceipt, message, .. }
            if message == "receipt.job_id is not this job"
    ));
    // The right receipt on the last attempt completes the job.
    let third = w.expect_assign().await;
    w.complete(&third).await;
    wait_status(&app, &job, "completed").await;
}

#[tokio::test(start_paused = true)]
async fn a_silent_session_is_dropped_at_the_heartbeat_timeout() {
    let (c, app) = setup(spec_config()).await;
    let mut w = TestWorker::connect(Wire::channel(&c), 1, &["TASK"], 1).await;
    let job = id(&commit(&app, "fast", task_job("u")).await);
    let _ = w.expect_assign().await;
    assert!(matches!(
        w.recv().await,
        CoordinatorFrame::Error {
            code: ErrorCode::HeartbeatTimeout,
            ..
        }
    ));
    assert!(w.recv_closed().await);
    assert_eq!(
        call(&app, "GET", "/v1/health", None).await.body["workers_online"],
        0
    );
    assert_eq!(job_status(&app, &job).await["status"], "pending");
}

#[tokio::test(start_paused = true)]
async fn private_jobs_go_only_to_trusted_workers() {
    let (c, app) = setup(spec_config()).await;
    let mut stranger = TestWorker::connect(Wire::channel(&c), 1, &["TASK"], 4).await;
    let mut trusted = TestWorker::connect(Wire::channel(&c), 2, &["TASK"], 1).await;
    pair(&app, "alice", &trusted.key).await;

    let p1 = id(&commit(&app, "fast", private(task_job("alice"))).await);
    let a = trusted.expect_assign().await;
    assert_eq!(a.job_id.to_string(), p1);
    // The trusted worker is busy: the next PRIVATE job waits rather than
    // going to the idle stranger, who only gets PUBLIC work.
    let p2 = id(&commit(&app, "fast", private(task_job("alice"))).await);
    let public = id(&commit(&app, "cheap", task_job("alice")).await);
    assert_eq!(stranger.expect_assign().await.job_id.to_string(), public);
    settle().await;
    assert_eq!(job_status(&app, &p2).await["status"], "pending");
    trusted.complete(&a).await;
    assert_eq!(trusted.expect_assign().await.job_id.to_string(), p2);
    // Another user's PRIVATE job is refused: alice's worker is not theirs.
    let r = commit(&app, "fast", private(task_job("bob"))).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
}

#[tokio::test(start_paused = true)]
async fn a_private_job_waits_for_its_trusted_worker_to_come_back() {
    let (c, app) = setup(spec_config()).await;
    let mut trusted = TestWorker::connect(Wire::channel(&c), 2, &["TASK"], 1).await;
    pair(&app, "alice", &trusted.key).await;
    let p = id(&commit(&app, "fast", private(task_job("alice"))).await);
    let a = trusted.expect_assign().await;
    drop(trusted);
    wait_status(&app, &p, "pending").await;
    let _stranger = TestWorker::connect(Wire::channel(&c), 1, &["TASK"], 4).await;
    settle().await;
    assert_eq!(job_status(&app, &p).await["status"], "pending");
    let mut back = TestWorker::connect(Wire::channel(&c), 2, &["TASK"], 1).await;
    let again = back.expect_assign().await;
    assert_eq!(again.job_id, a.job_id);
}

#[tokio::test(start_paused = true)]
async fn a_second_session_with_the_same_key_replaces_the_first() {
    let (c, app) = setup(spec_config()).await;
    let mut first = TestWorker::connect(Wire::channel(&c), 5, &["TASK"], 1).await;
    let job = id(&commit(&app, "fast", task_job("u")).await);
    let a = first.expect_assign().await;
    let mut second = TestWorker::connect(Wire::channel(&c), 5, &["TASK"], 1).await;
    assert!(matches!(
        first.recv().await,
        CoordinatorFrame::Error {
            code: ErrorCode::Replaced,
            ..
        }
    ));
    let again = second.expect_assign().await;
    assert_eq!(again.job_id, a.job_id);
    second.complete(&again).await;
    wait_status(&app, &job, "completed").await;
    assert_eq!(
        call(&app, "GET", "/v1/health", None).await.body["workers_online"],
        1
    );
}

#[tokio::test(start_paused = true)]
async fn a_rejected_job_waits_for_a_busy_worker_rather_than_returning_to_the_rejecter() {
    let (c, app) = setup(spec_config()).await;
    let mut rejecter = TestWorker::connect(Wire::channel(&c), 1, &["TASK"], 1).await;
    let mut busy = TestWorker::connect(Wire::channel(&c), 2, &["TASK"], 1).await;
    let first = id(&commit(&app, "fast", task_job("u")).await);
    let second = id(&commit(&app, "fast", task_job("u")).await);
    let a = rejecter.expect_assign().await;
    let b = busy.expect_assign().await;
    assert_eq!(
        [a.job_id.to_string(), b.job_id.to_string()],
        [first.clone(), second]
    );
    rejecter
        .send(json!({"type": "reject", "job_id": a.job_id, "reason": "no"}))
        .await;
    settle().await;
    // Not handed straight back: it waits for the busy worker.
    assert_eq!(job_status(&app, &first).await["status"], "pending");
    tokio::time::sleep(Duration::from_millis(300)).await;
    busy.complete(&b).await;
    let again = busy.expect_assign().await;
    assert_eq!(again.job_id, a.job_id);
    busy.complete(&again).await;
    assert_eq!(job_status(&app, &first).await["status"], "completed");
}

#[tokio::test(start_paused = true)]
async fn a_rejected_job_returns_to_the_rejecter_once_the_other_worker_leaves() {
    let (c, app) = setup(spec_config()).await;
    let mut rejecter = TestWorker::connect(Wire::channel(&c), 1, &["TASK"], 1).await;
    let mut busy = TestWorker::connect(Wire::channel(&c), 2, &["TASK"], 1).await;
    let first = id(&commit(&app, "fast", task_job("u")).await);
    commit(&app, "fast", task_job("u")).await;
    let a = rejecter.expect_assign().await;
    let _b = busy.expect_assign().await;
    rejecter
        .send(json!({"type": "reject", "job_id": a.job_id, "reason": "no"}))
        .await;
    settle().await;
    assert_eq!(job_status(&app, &first).await["status"], "pending");
    drop(busy);
    // The only worker left gets the rejected job (older, so first) and then
    // the one the leaving worker held.
    let again = rejecter.expect_assign().await;
    assert_eq!(again.job_id, a.job_id);
    rejecter.complete(&again).await;
    let orphan = rejecter.expect_assign().await;
    rejecter.complete(&orphan).await;
    assert_eq!(job_status(&app, &first).await["status"], "completed");
}
