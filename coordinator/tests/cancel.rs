//! `POST /v1/jobs/{id}/cancel` (issue 30, item 3; decision 0022): 200 with
//! the cancelled job's record, 404 for no such job, 409 with the record of
//! a job that ended, 401 for a PRIVATE job without its user's proof; a held
//! poll answers at once, the holding worker gets the `cancel` frame and its
//! slot takes the next job, and its late result never completes the job.

mod common;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::*;
use coordinator::config::Config;
use coordinator::{app, Coordinator, TokioClock};
use protocol::signing::Keypair;
use protocol::user_proof::{self, ProofRequest};
use protocol::worker::CoordinatorFrame;
use rand::SeedableRng;
use serde_json::json;
use std::sync::Arc;
use tokio::time::{Duration, Instant};

async fn setup() -> (Coordinator, axum::Router) {
    let c = coordinator(Config::default(), Arc::new(TokioClock::new(EPOCH_MS)), 30).await;
    (c.clone(), app(c))
}

fn key(seed: u64) -> Keypair {
    Keypair::generate(&mut rand_chacha::ChaCha20Rng::seed_from_u64(seed))
}

/// A request with `body`, signed as `user` by `signer` when given.
async fn request(
    c: &Coordinator,
    app: &axum::Router,
    (method, path): (&str, &str),
    body: &[u8],
    signed: Option<(&Keypair, &str, &str)>,
) -> Response {
    let mut req = Request::builder().method(method).uri(path);
    if !body.is_empty() {
        req = req.header("content-type", "application/json");
    }
    if let Some((signer, user, nonce)) = signed {
        let request = ProofRequest {
            method,
            path_and_query: path,
            body,
        };
        let header = user_proof::sign(signer, user, &request, c.now_ms(), nonce);
        req = req.header(user_proof::HEADER, header);
    }
    send(app, req.body(Body::from(body.to_vec())).unwrap()).await
}

async fn cancel(app: &axum::Router, id: &str) -> Response {
    call(app, "POST", &format!("/v1/jobs/{id}/cancel"), None).await
}

fn id_of(r: &Response) -> String {
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    r.body["job_id"].as_str().unwrap().to_owned()
}

fn assert_cancelled(r: &Response, id: &str) {
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["id"], id);
    assert_eq!(r.body["status"], "failed");
    assert_eq!(r.body["result"], json!({"error": "cancelled"}));
}

fn assert_not_cancellable(r: &Response, id: &str, status: &str) {
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.body);
    assert_eq!(r.body["error"], "job_not_cancellable");
    assert_eq!(
        (&r.body["id"], &r.body["status"]),
        (&json!(id), &json!(status))
    );
}

#[tokio::test(start_paused = true)]
async fn a_cancel_answers_200_then_409_and_404_for_no_such_job() {
    let (c, app) = setup().await;
    let pending = id_of(&commit(&app, "fast", llm_job("alice")).await);
    let r = cancel(&app, &pending).await;
    assert_cancelled(&r, &pending);
    assert_eq!(
        job_status(&app, &pending).await,
        r.body,
        "a poll shows the same"
    );
    assert_not_cancellable(&cancel(&app, &pending).await, &pending, "failed");

    let mut w = TestWorker::connect(Wire::channel(&c), 1, &["LLM_INFER"], 1).await;
    let done = id_of(&commit(&app, "fast", llm_job("alice")).await);
    let a = w.expect_assign().await;
    w.complete(&a).await;
    let r = cancel(&app, &done).await;
    assert_not_cancellable(&r, &done, "completed");
    assert!(
        r.body["result"]["output"].is_string(),
        "the record's output: {}",
        r.body
    );

    for unknown in [uuid::Uuid::from_u128(7).to_string(), "not-a-uuid".into()] {
        let r = cancel(&app, &unknown).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
        assert_eq!(r.body, json!({"error": "job not found"}));
    }
    let r = call(&app, "GET", &format!("/v1/jobs/{done}/cancel"), None).await;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test(start_paused = true)]
async fn a_held_poll_answers_as_soon_as_its_job_is_cancelled() {
    let (_, app) = setup().await;
    let job = id_of(&commit(&app, "fast", llm_job("alice")).await);
    let poll = {
        let (app, job) = (app.clone(), job.clone());
        tokio::spawn(async move {
            let started = Instant::now();
            let r = call(&app, "GET", &format!("/v1/jobs/{job}?wait_ms=30000"), None).await;
            (r, started.elapsed())
        })
    };
    settle().await;
    tokio::time::sleep(Duration::from_millis(40)).await;
    assert_cancelled(&cancel(&app, &job).await, &job);
    let (r, held) = poll.await.unwrap();
    assert_cancelled(&r, &job);
    assert_eq!(held, Duration::from_millis(40));
}

#[tokio::test(start_paused = true)]
async fn the_worker_gets_the_cancel_its_slot_takes_the_next_job_and_its_late_result_is_refused() {
    let (c, app) = setup().await;
    let mut w = TestWorker::connect(Wire::channel(&c), 1, &["LLM_INFER"], 1).await;
    let first = id_of(&commit(&app, "fast", llm_job("alice")).await);
    let a = w.expect_assign().await;
    w.send(json!({"type": "accept", "job_id": a.job_id})).await;
    let next = id_of(&commit(&app, "fast", llm_job("bob")).await);
    settle().await;
    assert_eq!(job_status(&app, &first).await["status"], "running");
    assert_eq!(job_status(&app, &next).await["status"], "pending");

    assert_cancelled(&cancel(&app, &first).await, &first);
    let frame = w.recv().await;
    let expected = CoordinatorFrame::Cancel {
        job_id: a.job_id,
        reason: "cancelled".into(),
    };
    assert_eq!(frame, expected);
    let b = w.expect_assign().await;
    assert_eq!(b.job_id.to_string(), next, "the freed slot is reused");

    // The work done meanwhile is refused, and the job stays cancelled.
    w.send_result(&a).await;
    match w.recv().await {
        CoordinatorFrame::Error { code, job_id, .. } => {
            assert_eq!(code, protocol::worker::ErrorCode::NotAssigned);
            assert_eq!(job_id, Some(a.job_id));
        }
        other => panic!("expected not_assigned, got {other:?}"),
    }
    assert_eq!(
        job_status(&app, &first).await["result"]["error"],
        "cancelled"
    );
    w.complete(&b).await;
    assert_eq!(job_status(&app, &next).await["status"], "completed");
}

#[tokio::test(start_paused = true)]
async fn a_private_job_is_cancelled_only_with_its_users_proof() {
    let (c, app) = setup().await;
    let (user, other) = (key(41), key(42));
    let worker_key = key(43);
    let user_id = user.address();
    // The user pairs a worker, which connects.
    let body = json!({"user_id": user_id}).to_string().into_bytes();
    let nonce_a = "0123456789abcdef0123456789abcdef";
    let signed = Some((&user, user_id.as_str(), nonce_a));
    let code = request(&c, &app, ("POST", "/v1/trust/create"), &body, signed).await;
    assert_eq!(code.status, StatusCode::CREATED, "{}", code.body);
    let claim = json!({"pairing_code": code.body["pairing_code"], "provider_pubkey": worker_key.public_key_hex()});
    let claim = call(&app, "POST", "/v1/trust/claim", Some(claim)).await;
    assert_eq!(claim.status, StatusCode::OK, "{}", claim.body);
    let mut w = TestWorker::connect(Wire::channel(&c), 43, &["LLM_INFER"], 1).await;
    let job = private(llm_job(&user_id)).to_string().into_bytes();
    let nonce_b = "fedcba9876543210fedcba9876543210";
    let signed = Some((&user, user_id.as_str(), nonce_b));
    let r = request(&c, &app, ("POST", "/v1/jobs/commit/fast"), &job, signed).await;
    let id = id_of(&r);
    let a = w.expect_assign().await;

    let path = format!("/v1/jobs/{id}/cancel");
    let r = request(&c, &app, ("POST", &path), b"", None).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", r.body);
    assert_eq!(r.body["error"], "user_proof_required");
    let nonce_c = "00112233445566778899aabbccddeeff";
    let by_other = Some((&other, user_id.as_str(), nonce_c));
    let r = request(&c, &app, ("POST", &path), b"", by_other).await;
    assert_eq!(r.body["error"], "user_proof_invalid", "{}", r.body);
    assert_eq!(
        job_status(&app, &id).await["status"],
        "assigned",
        "nothing changed"
    );

    let by_user = Some((&user, user_id.as_str(), nonce_c));
    let r = request(&c, &app, ("POST", &path), b"", by_user).await;
    assert_cancelled(&r, &id);
    assert!(
        matches!(w.recv().await, CoordinatorFrame::Cancel { job_id, .. } if job_id == a.job_id)
    );
    // Ended: with the proof, its record and 409; without, still 401.
    let nonce_d = "ffeeddccbbaa99887766554433221100";
    let by_user = Some((&user, user_id.as_str(), nonce_d));
    let r = request(&c, &app, ("POST", &path), b"", by_user).await;
    assert_not_cancellable(&r, &id, "failed");
    let r = request(&c, &app, ("POST", &path), b"", None).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", r.body);
}
