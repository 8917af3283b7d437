//! Output deltas (issue 31, decision 0023): the worker protocol's `delta`
//! frames, checked by the session, and the job event stream that carries
//! them to clients, with the real session logic over in-memory channels
//! under paused tokio time.

mod common;

use common::*;
use coordinator::config::Config;
use coordinator::{app, TokioClock};
use protocol::worker::{
    challenge_message, Assignment, CoordinatorFrame, ErrorCode, PROTOCOL_VERSION,
};
use serde_json::json;
use std::sync::Arc;

async fn setup(config: Config) -> (coordinator::Coordinator, axum::Router) {
    let c = coordinator(config, Arc::new(TokioClock::new(EPOCH_MS)), 11).await;
    (c.clone(), app(c))
}

fn id(r: &Response) -> String {
    r.body["job_id"].as_str().unwrap().to_owned()
}

/// A worker whose hello names `features`.
async fn worker_with(c: &coordinator::Coordinator, seed: u64, features: &[&str]) -> TestWorker {
    let key = protocol::signing::Keypair::generate(
        &mut <rand_chacha::ChaCha20Rng as rand::SeedableRng>::seed_from_u64(seed),
    );
    let mut w = TestWorker {
        key,
        wire: Wire::channel(c),
        session_id: 0,
    };
    let origin = w.wire.origin();
    w.send(
        json!({"type": "hello", "protocol_version": PROTOCOL_VERSION, "coordinator": origin,
        "provider_pubkey": w.key.public_key_hex(), "capabilities": ["LLM_INFER", "TASK"],
        "slots": 1, "features": features}),
    )
    .await;
    let CoordinatorFrame::Challenge { nonce, network } = w.recv().await else {
        panic!("expected challenge");
    };
    let signature = w
        .key
        .personal_sign(challenge_message(&origin, &network, &nonce).as_bytes());
    w.send(json!({"type": "auth", "signature": signature}))
        .await;
    assert!(matches!(w.recv().await, CoordinatorFrame::Welcome { .. }));
    w
}

async fn delta(w: &mut TestWorker, a: &Assignment, seq: u32, text: &str) {
    w.send(json!({"type": "delta", "job_id": a.job_id, "seq": seq, "text": text}))
        .await;
}

async fn accept(w: &mut TestWorker, a: &Assignment) {
    w.send(json!({"type": "accept", "job_id": a.job_id})).await;
}

async fn expect_error(w: &mut TestWorker, code: ErrorCode) -> String {
    match w.recv().await {
        CoordinatorFrame::Error {
            code: got, message, ..
        } if got == code => message,
        other => panic!("expected a {code:?} error, got {other:?}"),
    }
}

/// Deltas that join to the output: the result is accepted as before.
#[tokio::test(start_paused = true)]
async fn deltas_that_join_to_the_output_are_accepted() {
    let (c, app) = setup(spec_config()).await;
    let mut w = worker_with(&c, 1, &["deltas"]).await;
    let job = id(&commit(&app, "fast", llm_job("alice")).await);
    let a = w.expect_assign().await;
    accept(&mut w, &a).await;
    delta(&mut w, &a, 0, "echo: ").await;
    delta(&mut w, &a, 1, "Say hi").await;
    let frame = w.result_frame(&a, "2026-11-21T10:00:01.000Z");
    w.send(frame).await;
    assert!(matches!(
        w.recv().await,
        CoordinatorFrame::ResultAccepted { .. }
    ));
    assert_eq!(job_status(&app, &job).await["status"], "completed");
}

/// Deltas that do not join to the output refuse the result as an invalid
/// output; the attempt is spent and the job goes back to the queue.
#[tokio::test(start_paused = true)]
async fn deltas_that_do_not_join_refuse_the_result() {
    let (c, app) = setup(spec_config()).await;
    let mut w = worker_with(&c, 1, &["deltas"]).await;
    let job = id(&commit(&app, "fast", llm_job("alice")).await);
    let a = w.expect_assign().await;
    accept(&mut w, &a).await;
    delta(&mut w, &a, 0, "echo: Say bye").await;
    let frame = w.result_frame(&a, "2026-11-21T10:00:01.000Z");
    w.send(frame).await;
    let message = expect_error(&mut w, ErrorCode::InvalidOutput).await;
    assert!(message.contains("deltas"), "{message}");
    settle().await;
    assert_ne!(job_status(&app, &job).await["status"], "completed");
}

/// A worker that did not announce the feature gets `unexpected_frame` for
/// a delta, and its job is untouched.
#[tokio::test(start_paused = true)]
async fn a_delta_without_the_feature_is_unexpected() {
    let (c, app) = setup(spec_config()).await;
    let mut w = worker_with(&c, 1, &[]).await;
    let job = id(&commit(&app, "fast", llm_job("alice")).await);
    let a = w.expect_assign().await;
    accept(&mut w, &a).await;
    delta(&mut w, &a, 0, "echo: ").await;
    expect_error(&mut w, ErrorCode::UnexpectedFrame).await;
    let frame = w.result_frame(&a, "2026-11-21T10:00:01.000Z");
    w.send(frame).await;
    assert!(matches!(
        w.recv().await,
        CoordinatorFrame::ResultAccepted { .. }
    ));
    assert_eq!(job_status(&app, &job).await["status"], "completed");
}

/// Deltas out of order, over the count, before the accept or for a
/// structured output are refused, and each spends the attempt.
#[tokio::test(start_paused = true)]
async fn deltas_breaking_a_rule_spend_the_attempt() {
    // What the refusal says, the deltas sent, and whether the job was accepted first.
    type Case = (&'static str, &'static [(u32, &'static str)], bool);
    let cases: [Case; 4] = [
        ("out of order", &[(1, "a")], true),
        ("more than 2", &[(0, "a"), (1, "b"), (2, "c")], true),
        ("after the job's accept", &[(0, "a")], false),
        ("text outputs only", &[(0, "a")], true),
    ];
    for (i, (expected, deltas, accepted)) in cases.into_iter().enumerate() {
        let mut config = spec_config();
        config.limits.deltas_per_job_max = 2;
        let (c, app) = setup(config).await;
        let mut w = worker_with(&c, 1, &["deltas"]).await;
        let job = match i {
            3 => json!({"job_type": "TASK", "user_id": "u", "payload":
                {"task_type": "extract_json", "input": "x"}}),
            _ => llm_job("alice"),
        };
        let job = id(&commit(&app, "fast", job).await);
        let a = w.expect_assign().await;
        if accepted {
            accept(&mut w, &a).await;
        }
        for (seq, text) in deltas {
            delta(&mut w, &a, *seq, text).await;
        }
        let message = expect_error(&mut w, ErrorCode::InvalidOutput).await;
        assert!(message.contains(expected), "{expected}: {message}");
        settle().await;
        let record = job_status(&app, &job).await;
        assert_ne!(record["status"], "running", "{record}");
    }
}
