//! Every endpoint, status code and error string of spec sections 4 and 7,
//! through the real router in-process.

mod common;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::*;
use coordinator::{app, ManualClock};
use protocol::signing::Keypair;
use rand::SeedableRng;
use serde_json::{json, Value};
use std::sync::Arc;

async fn setup() -> (axum::Router, ManualClock) {
    let clock = ManualClock::new(EPOCH_MS);
    let c = coordinator(spec_config(), Arc::new(clock.clone()), 7).await;
    (app(c), clock)
}

fn key(seed: u64) -> Keypair {
    Keypair::generate(&mut rand_chacha::ChaCha20Rng::seed_from_u64(seed))
}

fn is_uuid(v: &Value) -> bool {
    v.as_str().is_some_and(|s| uuid::Uuid::parse_str(s).is_ok())
}

#[tokio::test]
async fn health_reports_status_workers_network_and_time() {
    let (app, _) = setup().await;
    let r = call(&app, "GET", "/v1/health", None).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        r.body,
        json!({"status": "ok", "workers_online": 0, "network": "eip155:84532",
               "timestamp": "2026-11-21T10:00:00.000Z"})
    );
}

#[tokio::test]
async fn quote_for_every_job_type_and_policy() {
    let (app, _) = setup().await;
    let cases = [
        ("LLM_INFER", None, "$0.010", "FAST"),
        ("LLM_INFER", Some("AUTO"), "$0.010", "FAST"),
        ("LLM_INFER", Some("FAST"), "$0.010", "FAST"),
        ("LLM_INFER", Some("CHEAP"), "$0.005", "CHEAP"),
        ("TASK", None, "$0.001", "CHEAP"),
        ("TASK", Some("AUTO"), "$0.001", "CHEAP"),
        ("TASK", Some("FAST"), "$0.003", "FAST"),
        ("TASK", Some("CHEAP"), "$0.001", "CHEAP"),
    ];
    for (job_type, policy, price, tier) in cases {
        let uri = match policy {
            Some(p) => format!("/v1/quote?job_type={job_type}&policy={p}"),
            None => format!("/v1/quote?job_type={job_type}"),
        };
        let r = call(&app, "GET", &uri, None).await;
        assert_eq!(r.status, StatusCode::OK);
        let endpoint = format!("/v1/jobs/commit/{}", tier.to_lowercase());
        assert_eq!(
            r.body,
            json!({"price": price, "endpoint": endpoint, "policy_resolved": tier,
                   "network": "eip155:84532", "expires_at": null}),
            "{uri}"
        );
    }
}

#[tokio::test]
async fn quote_rejects_missing_or_invalid_parameters() {
    let (app, _) = setup().await;
    for uri in [
        "/v1/quote",
        "/v1/quote?job_type=GPU",
        "/v1/quote?job_type=llm_infer",
    ] {
        let r = call(&app, "GET", uri, None).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{uri}");
        assert_eq!(
            r.body,
            json!({"error": "job_type must be LLM_INFER or TASK"})
        );
    }
    let r = call(&app, "GET", "/v1/quote?job_type=TASK&policy=SLOW", None).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        r.body,
        json!({"error": "policy must be FAST, CHEAP or AUTO"})
    );
}

#[tokio::test]
async fn commit_accepts_on_both_tiers_and_poll_shows_pending() {
    let (app, _) = setup().await;
    for tier in ["fast", "cheap"] {
        let r = commit(&app, tier, task_job("alice")).await;
        assert_eq!(r.status, StatusCode::CREATED);
        assert!(is_uuid(&r.body["job_id"]));
        assert_eq!(r.body.as_object().unwrap().len(), 1);
        let job = job_status(&app, r.body["job_id"].as_str().unwrap()).await;
        assert_eq!(
            job,
            json!({"id": r.body["job_id"], "status": "pending", "result": null, "receipt": null,
                   "created_at": "2026-11-21T10:00:00.000Z", "completed_at": null})
        );
    }
}

#[tokio::test]
async fn commit_names_missing_fields() {
    let (app, _) = setup().await;
    let full = llm_job("alice");
    for field in ["job_type", "payload", "user_id"] {
        let mut body = full.clone();
        body.as_object_mut().unwrap().remove(field);
        let r = commit(&app, "fast", body).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        assert_eq!(
            r.body,
            json!({"error": "Missing required fields: job_type, payload, user_id"})
        );
    }
}

#[tokio::test]
async fn commit_names_each_invalid_field() {
    let (app, _) = setup().await;
    let cases = [
        (
            json!({"job_type": "GPU", "user_id": "u", "payload": {}}),
            "job_type must be LLM_INFER or TASK",
        ),
        (
            json!({"job_type": "TASK", "user_id": "", "payload": {}}),
            "user_id must be a non-empty string of at most 256 characters",
        ),
        (
            json!({"job_type": "TASK", "user_id": "u", "payload": []}),
            "payload must be an object",
        ),
        (
            json!({"job_type": "TASK", "user_id": "u", "payload": {"task_type": "poem", "input": "x"}}),
            "payload.task_type must be summarize, classify or extract_json",
        ),
        (
            json!({"job_type": "TASK", "user_id": "u", "payload": {"task_type": "classify", "input": 5}}),
            "payload.input must be a string",
        ),
        (
            json!({"job_type": "LLM_INFER", "user_id": "u", "payload": {"prompt": ""}}),
            "payload.prompt must be a non-empty string",
        ),
        (
            json!({"job_type": "LLM_INFER", "user_id": "u", "payload": {"prompt": "p", "max_tokens": -1}}),
            "payload.max_tokens must be an integer from 1 to 32768",
        ),
        (
            json!({"job_type": "LLM_INFER", "user_id": "u", "payload": {"job_type": "TASK", "prompt": "p"}}),
            "payload.job_type must match job_type",
        ),
        (
            json!({"job_type": "LLM_INFER", "user_id": "u", "payload": {"prompt": "p"}, "privacy_class": "public"}),
            "privacy_class must be PUBLIC or PRIVATE",
        ),
    ];
    for (body, message) in cases {
        let r = commit(&app, "cheap", body.clone()).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(r.body, json!({"error": message}), "{body}");
    }
}

#[tokio::test]
async fn private_commit_without_trusted_worker_is_422_and_a_failed_job() {
    let (app, _) = setup().await;
    let r = commit(&app, "fast", private(llm_job("alice"))).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(r.body["error"], "no_trusted_worker");
    assert!(is_uuid(&r.body["job_id"]));
    let job = job_status(&app, r.body["job_id"].as_str().unwrap()).await;
    assert_eq!(job["status"], "failed");
    assert_eq!(job["result"], json!({"error": "no_trusted_worker"}));
    assert_eq!(job["receipt"], Value::Null);
    assert_eq!(job["completed_at"], Value::Null);
}

#[tokio::test]
async fn poll_unknown_or_malformed_id_is_404() {
    let (app, _) = setup().await;
    for id in ["6f1c1c0e-3a4b-4c5d-8e9f-000000000000", "not-a-uuid", "%00"] {
        let r = call(&app, "GET", &format!("/v1/jobs/{id}"), None).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{id}");
        assert_eq!(r.body, json!({"error": "job not found"}));
    }
}

#[tokio::test]
async fn pairing_create_claim_list() {
    let (app, clock) = setup().await;
    let r = call(
        &app,
        "POST",
        "/v1/trust/create",
        Some(json!({"user_id": "alice"})),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED);
    let code = r.body["pairing_code"].as_str().unwrap().to_owned();
    assert_eq!(code.len(), 6);
    assert!(code.chars().all(|c| c.is_ascii_hexdigit()));
    assert_eq!(r.body["expires_at"], "2026-11-21T11:00:00.000Z");

    clock.advance(1_500);
    let k = key(1);
    let claim = |code: String, key: String| {
        let app = app.clone();
        async move {
            call(
                &app,
                "POST",
                "/v1/trust/claim",
                Some(json!({"pairing_code": code, "provider_pubkey": key})),
            )
            .await
        }
    };
    let r = claim(code.clone(), k.public_key_hex()).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        r.body,
        json!({"user_id": "alice", "paired_at": "2026-11-21T10:00:01.500Z"})
    );

    let r = claim(code.clone(), key(2).public_key_hex()).await;
    assert_eq!(
        (r.status, r.body),
        (StatusCode::BAD_REQUEST, json!({"error": "already_claimed"}))
    );

    let r = call(&app, "GET", "/v1/trust/list?user_id=alice", None).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        r.body,
        json!({"providers": [{"provider_pubkey": k.public_key_hex(), "paired_at": "2026-11-21T10:00:01.500Z"}]})
    );
    let r = call(&app, "GET", "/v1/trust/list?user_id=bob", None).await;
    assert_eq!(r.body, json!({"providers": []}));
}

#[tokio::test]
async fn claim_errors_invalid_and_expired() {
    let (app, clock) = setup().await;
    let k = key(1).public_key_hex();
    let r = call(
        &app,
        "POST",
        "/v1/trust/claim",
        Some(json!({"pairing_code": "abcdef", "provider_pubkey": k})),
    )
    .await;
    assert_eq!(
        (r.status, r.body),
        (StatusCode::BAD_REQUEST, json!({"error": "invalid_code"}))
    );
    let r = call(
        &app,
        "POST",
        "/v1/trust/claim",
        Some(json!({"pairing_code": 12, "provider_pubkey": k})),
    )
    .await;
    assert_eq!(
        (r.status, r.body),
        (StatusCode::BAD_REQUEST, json!({"error": "invalid_code"}))
    );

    let code = call(
        &app,
        "POST",
        "/v1/trust/create",
        Some(json!({"user_id": "alice"})),
    )
    .await
    .body["pairing_code"]
        .clone();
    clock.advance(3_600_000);
    let r = call(
        &app,
        "POST",
        "/v1/trust/claim",
        Some(json!({"pairing_code": code, "provider_pubkey": k})),
    )
    .await;
    assert_eq!(
        (r.status, r.body),
        (StatusCode::BAD_REQUEST, json!({"error": "expired"}))
    );
}

#[tokio::test]
async fn trust_endpoints_name_missing_fields_and_bad_keys() {
    let (app, _) = setup().await;
    let r = call(&app, "POST", "/v1/trust/create", Some(json!({}))).await;
    assert_eq!(
        (r.status, r.body),
        (
            StatusCode::BAD_REQUEST,
            json!({"error": "Missing required fields: user_id"})
        )
    );
    let r = call(
        &app,
        "POST",
        "/v1/trust/claim",
        Some(json!({"pairing_code": "abcdef"})),
    )
    .await;
    assert_eq!(
        (r.status, r.body),
        (
            StatusCode::BAD_REQUEST,
            json!({"error": "Missing required fields: provider_pubkey"})
        )
    );
    let r = call(&app, "POST", "/v1/trust/claim", Some(json!({}))).await;
    assert_eq!(
        r.body,
        json!({"error": "Missing required fields: pairing_code, provider_pubkey"})
    );
    let r = call(
        &app,
        "POST",
        "/v1/trust/claim",
        Some(json!({"pairing_code": "abcdef", "provider_pubkey": "0x1234"})),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(r.body["error"]
        .as_str()
        .unwrap()
        .starts_with("provider_pubkey must be"));
    let r = call(&app, "GET", "/v1/trust/list", None).await;
    assert_eq!(
        (r.status, r.body),
        (
            StatusCode::BAD_REQUEST,
            json!({"error": "Missing required query parameter: user_id"})
        )
    );
}

#[tokio::test]
async fn claims_are_rate_limited_per_client() {
    let (app, _) = setup().await;
    let k = key(1).public_key_hex();
    for _ in 0..10 {
        let r = call(
            &app,
            "POST",
            "/v1/trust/claim",
            Some(json!({"pairing_code": "000000", "provider_pubkey": k})),
        )
        .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
    }
    let r = call(
        &app,
        "POST",
        "/v1/trust/claim",
        Some(json!({"pairing_code": "000000", "provider_pubkey": k})),
    )
    .await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(r.body["error"]
        .as_str()
        .unwrap()
        .contains("too many pairing claims"));
    assert_eq!(r.headers["retry-after"], "60");
}

#[tokio::test]
async fn malformed_requests_get_json_errors() {
    let (app, _) = setup().await;
    let raw = |method: &str, uri: &str, ct: Option<&str>, body: Vec<u8>| {
        let mut b = Request::builder().method(method).uri(uri);
        if let Some(ct) = ct {
            b = b.header("content-type", ct);
        }
        b.body(Body::from(body)).unwrap()
    };
    let r = send(
        &app,
        raw(
            "POST",
            "/v1/jobs/commit/fast",
            Some("application/json"),
            b"{nope".to_vec(),
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(r.body["error"]
        .as_str()
        .unwrap()
        .starts_with("request body is not valid JSON"));
    let r = send(
        &app,
        raw(
            "POST",
            "/v1/jobs/commit/fast",
            Some("text/plain"),
            b"{}".to_vec(),
        ),
    )
    .await;
    assert_eq!(
        (r.status, r.body),
        (
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            json!({"error": "Content-Type must be application/json"})
        )
    );
    let r = send(&app, raw("POST", "/v1/trust/create", None, b"{}".to_vec())).await;
    assert_eq!(r.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let big = vec![b' '; 300 * 1024];
    let r = send(
        &app,
        raw(
            "POST",
            "/v1/jobs/commit/fast",
            Some("application/json"),
            big,
        ),
    )
    .await;
    assert_eq!(
        (r.status, r.body),
        (
            StatusCode::PAYLOAD_TOO_LARGE,
            json!({"error": "request body is larger than 262144 bytes"})
        )
    );
    let r = call(&app, "GET", "/v2/health", None).await;
    assert_eq!(
        (r.status, r.body),
        (
            StatusCode::NOT_FOUND,
            json!({"error": "no route for GET /v2/health"})
        )
    );
    let r = call(&app, "DELETE", "/v1/health", None).await;
    assert_eq!(
        (r.status, r.body),
        (
            StatusCode::METHOD_NOT_ALLOWED,
            json!({"error": "method not allowed"})
        )
    );
    let r = call(&app, "GET", "/v1/jobs/commit/fast", None).await;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
    let r = send(&app, raw("GET", "/v1/quote?job_type=%ZZ", None, vec![])).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    // Non-UTF-8 and deeply nested bodies are refused, not crashed on.
    let r = send(
        &app,
        raw(
            "POST",
            "/v1/jobs/commit/fast",
            Some("application/json"),
            vec![0xff, 0xfe, 0x00],
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let deep = "[".repeat(100_000);
    let r = send(
        &app,
        raw(
            "POST",
            "/v1/jobs/commit/fast",
            Some("application/json"),
            deep.into_bytes(),
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn the_same_seed_gives_the_same_bytes() {
    async fn transcript(seed: u64) -> Vec<u8> {
        let clock = ManualClock::new(EPOCH_MS);
        let app = app(coordinator(spec_config(), Arc::new(clock.clone()), seed).await);
        let mut out = Vec::new();
        let k = key(9).public_key_hex();
        for step in 0..6 {
            clock.advance(250);
            let r = match step {
                0 => commit(&app, "fast", llm_job("alice")).await,
                1 => commit(&app, "cheap", private(task_job("bob"))).await,
                2 => {
                    call(
                        &app,
                        "POST",
                        "/v1/trust/create",
                        Some(json!({"user_id": "bob"})),
                    )
                    .await
                }
                3 => call(&app, "GET", "/v1/health", None).await,
                4 => commit(&app, "cheap", task_job("carol")).await,
                _ => call(&app, "GET", "/v1/trust/list?user_id=bob", None).await,
            };
            out.extend_from_slice(&r.raw);
            out.push(b'\n');
        }
        let code = String::from_utf8_lossy(&out)
            .lines()
            .nth(2)
            .unwrap()
            .to_owned();
        let code: Value = serde_json::from_str(&code).unwrap();
        let r = call(
            &app,
            "POST",
            "/v1/trust/claim",
            Some(json!({"pairing_code": code["pairing_code"], "provider_pubkey": k})),
        )
        .await;
        out.extend_from_slice(&r.raw);
        out
    }
    let a = transcript(42).await;
    assert_eq!(a, transcript(42).await);
    // The seed is wired through: another seed gives other ids and codes.
    assert_ne!(a, transcript(43).await);
}
