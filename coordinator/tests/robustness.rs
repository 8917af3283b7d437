//! Nothing a client sends makes the coordinator panic or answer 500: seeded
//! random mutations of valid requests over every route, and of valid worker
//! frames on an authenticated session, which must stay up.

mod common;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::*;
use coordinator::config::Config;
use coordinator::{app, TokioClock};
use protocol::worker::CoordinatorFrame;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;
use serde_json::{json, Value};
use std::sync::Arc;

const ROUTES: &[(&str, &str)] = &[
    ("GET", "/v1/health"),
    ("GET", "/v1/quote?job_type=TASK&policy=FAST"),
    ("POST", "/v1/jobs/commit/fast"),
    ("POST", "/v1/jobs/commit/cheap"),
    ("GET", "/v1/jobs/00000000-0000-0000-0000-000000000000"),
    ("POST", "/v1/trust/create"),
    ("POST", "/v1/trust/claim"),
    ("GET", "/v1/trust/list?user_id=alice"),
];

fn valid_bodies() -> Vec<Value> {
    vec![
        llm_job("alice"),
        task_job("bob"),
        private(task_job("carol")),
        json!({"user_id": "alice"}),
        json!({"pairing_code": "abcdef", "provider_pubkey": "0x02".to_owned() + &"11".repeat(32)}),
    ]
}

/// A random JSON value of bounded depth.
fn junk(rng: &mut ChaCha20Rng, depth: u32) -> Value {
    match rng.gen_range(0..if depth == 0 { 6 } else { 8 }) {
        0 => Value::Null,
        1 => json!(rng.gen::<bool>()),
        2 => json!(rng.gen::<i64>()),
        3 => json!(rng.gen::<f64>() * 1e300),
        4 => json!(
            [
                "",
                " ",
                "LLM_INFER",
                "TASK",
                "PRIVATE",
                "summarize",
                "\u{0}",
                "é🦀"
            ][rng.gen_range(0..8)]
        ),
        5 => json!("x".repeat(rng.gen_range(0..3000))),
        6 => Value::Array(
            (0..rng.gen_range(0..4))
                .map(|_| junk(rng, depth - 1))
                .collect(),
        ),
        _ => {
            let keys = [
                "job_type",
                "user_id",
                "payload",
                "privacy_class",
                "prompt",
                "max_tokens",
                "task_type",
                "input",
                "pairing_code",
                "provider_pubkey",
                "z",
            ];
            Value::Object(
                (0..rng.gen_range(0..5))
                    .map(|_| {
                        (
                            keys[rng.gen_range(0..keys.len())].to_owned(),
                            junk(rng, depth - 1),
                        )
                    })
                    .collect(),
            )
        }
    }
}

/// Changes one random place of `v`: removes, replaces or nests.
fn mutate(v: &mut Value, rng: &mut ChaCha20Rng) {
    match v {
        Value::Object(map) if !map.is_empty() && rng.gen_bool(0.7) => {
            let keys: Vec<String> = map.keys().cloned().collect();
            let key = &keys[rng.gen_range(0..keys.len())];
            match rng.gen_range(0..3) {
                0 => {
                    map.remove(key);
                }
                1 => mutate(map.get_mut(key).expect("key exists"), rng),
                _ => {
                    map.insert(key.clone(), junk(rng, 2));
                }
            }
        }
        _ => *v = junk(rng, 3),
    }
}

#[tokio::test(start_paused = true)]
async fn random_requests_never_get_a_500() {
    let c = coordinator(Config::default(), Arc::new(TokioClock::new(EPOCH_MS)), 1).await;
    let app = app(c.clone());
    // A worker, so commits also dispatch.
    let _w = TestWorker::connect(Wire::channel(&c), 1, &["LLM_INFER", "TASK"], 4).await;
    let mut rng = ChaCha20Rng::seed_from_u64(2026);
    let bodies = valid_bodies();
    for i in 0..3_000 {
        let (mut method, mut path) = ROUTES[rng.gen_range(0..ROUTES.len())];
        if rng.gen_bool(0.05) {
            method = ["GET", "POST", "PUT", "DELETE", "PATCH"][rng.gen_range(0..5)];
        }
        let owned;
        if rng.gen_bool(0.1) {
            owned = format!(
                "{path}{}",
                ["/x", "%", "?job_type=%FF", "/..", "?user_id=", "//"][rng.gen_range(0..6)]
            );
            path = &owned;
        }
        let mut body = bodies[rng.gen_range(0..bodies.len())].clone();
        for _ in 0..rng.gen_range(0..3) {
            mutate(&mut body, &mut rng);
        }
        let bytes = match rng.gen_range(0..10) {
            0 => (0..rng.gen_range(0..200))
                .map(|_| rng.gen::<u8>())
                .collect(),
            1 => {
                let mut b = body.to_string().into_bytes();
                b.truncate(rng.gen_range(0..b.len().max(1)));
                b
            }
            _ => body.to_string().into_bytes(),
        };
        let content_type = [
            "application/json",
            "application/json; charset=utf-8",
            "text/plain",
            "application/ld+json",
            "",
        ][rng.gen_range(0..5)];
        let mut req = Request::builder().method(method).uri(path);
        if !content_type.is_empty() {
            req = req.header("content-type", content_type);
        }
        if rng.gen_bool(0.1) {
            req = req
                .header("x-payment", "%%%")
                .header("payment-signature", "e30=");
        }
        let r = send(&app, req.body(Body::from(bytes)).unwrap()).await;
        assert_ne!(
            r.status,
            StatusCode::INTERNAL_SERVER_ERROR,
            "request {i}: {method} {path}"
        );
        if !r.status.is_success() {
            assert!(
                r.body["error"].is_string(),
                "request {i}: {method} {path}: {}",
                r.body
            );
        }
    }
    // Still serving.
    assert_eq!(
        call(&app, "GET", "/v1/health", None).await.status,
        StatusCode::OK
    );
}

#[tokio::test(start_paused = true)]
async fn random_frames_get_error_frames_and_the_session_survives() {
    let c = coordinator(Config::default(), Arc::new(TokioClock::new(EPOCH_MS)), 1).await;
    let app = app(c.clone());
    let mut w = TestWorker::connect(Wire::channel(&c), 1, &["TASK"], 1).await;
    let mut rng = ChaCha20Rng::seed_from_u64(7);
    let valid = [
        json!({"type": "heartbeat"}),
        json!({"type": "accept", "job_id": uuid::Uuid::nil()}),
        json!({"type": "reject", "job_id": uuid::Uuid::nil(), "reason": "r"}),
        json!({"type": "result", "job_id": uuid::Uuid::nil(), "output": "o", "receipt": {}}),
        json!({"type": "hello", "protocol_version": 2, "coordinator": "ws://in-memory", "provider_pubkey": "0x", "capabilities": ["TASK"], "slots": 1}),
    ];
    let mut answered = 0;
    for _ in 0..1_000 {
        let mut frame = valid[rng.gen_range(0..valid.len())].clone();
        mutate(&mut frame, &mut rng);
        let is_heartbeat = frame == json!({"type": "heartbeat"});
        w.send(frame).await;
        if !is_heartbeat {
            // Every other frame is refused with an error frame; the session stays.
            match w.recv().await {
                CoordinatorFrame::Error { .. } => answered += 1,
                other => panic!("expected an error frame, got {other:?}"),
            }
        }
    }
    assert!(answered > 900);
    assert_eq!(
        call(&app, "GET", "/v1/health", None).await.body["workers_online"],
        1
    );
    // And it still works.
    commit(&app, "fast", task_job("u")).await;
    let a = w.expect_assign().await;
    w.complete(&a).await;
}
