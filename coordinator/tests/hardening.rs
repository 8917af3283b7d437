//! Regression tests of issue 16 (hardening), finding by finding, through
//! the real router in-process. Requests carry a peer address where the
//! finding is about clients, as the binary's `ConnectInfo` would.

mod common;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, StatusCode};
use common::*;
use coordinator::config::Config;
use coordinator::{app, ManualClock};
use protocol::signing::Keypair;
use rand::SeedableRng;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::Arc;

const HOUR_MS: i64 = 3_600_000;
/// Right shape (0x02 + 64 hex), but x = 2^256 - 1 is past the field prime:
/// no curve point.
const NOT_A_POINT: &str = "0x02ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff";

async fn setup(config: Config) -> (axum::Router, ManualClock) {
    let clock = ManualClock::new(EPOCH_MS);
    let c = coordinator(config, Arc::new(clock.clone()), 7).await;
    (app(c), clock)
}

fn key(seed: u64) -> String {
    Keypair::generate(&mut rand_chacha::ChaCha20Rng::seed_from_u64(seed)).public_key_hex()
}

/// A JSON POST from `peer`, with extra headers.
async fn post_from(
    app: &axum::Router,
    peer: &str,
    headers: &[(&str, &str)],
    uri: &str,
    body: Value,
) -> Response {
    let peer: SocketAddr = peer.parse().unwrap();
    let mut req = Request::builder()
        .method("POST")
        .uri(uri)
        .header("content-type", "application/json")
        .extension(ConnectInfo(peer));
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    send(app, req.body(Body::from(body.to_string())).unwrap()).await
}

async fn create(app: &axum::Router, peer: &str, user: &str) -> Response {
    post_from(app, peer, &[], "/v1/trust/create", json!({"user_id": user})).await
}

async fn claim(
    app: &axum::Router,
    peer: &str,
    headers: &[(&str, &str)],
    code: &str,
    key: &str,
) -> Response {
    post_from(
        app,
        peer,
        headers,
        "/v1/trust/claim",
        json!({"pairing_code": code, "provider_pubkey": key}),
    )
    .await
}

// Finding 9: the spec's claim errors come first.

#[tokio::test]
async fn claim_judges_the_code_before_the_curve_point() {
    let (app, clock) = setup(spec_config()).await;
    let r = claim(&app, "192.0.2.1:1", &[], "abcdef", NOT_A_POINT).await;
    assert_eq!(
        (r.status, r.body),
        (StatusCode::BAD_REQUEST, json!({"error": "invalid_code"}))
    );
    let code = create(&app, "192.0.2.1:1", "alice").await.body["pairing_code"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = claim(&app, "192.0.2.1:1", &[], &code, NOT_A_POINT).await;
    assert_eq!(
        (r.status, r.body),
        (
            StatusCode::BAD_REQUEST,
            json!({"error": "provider_pubkey is not a point on secp256k1"})
        )
    );
    // The bad key did not use the code up.
    let r = claim(&app, "192.0.2.1:1", &[], &code, &key(1)).await;
    assert_eq!(r.status, StatusCode::OK);
    let r = claim(&app, "192.0.2.1:1", &[], &code, NOT_A_POINT).await;
    assert_eq!(r.body, json!({"error": "already_claimed"}));
    let expired = create(&app, "192.0.2.1:1", "bob").await.body["pairing_code"]
        .as_str()
        .unwrap()
        .to_owned();
    clock.advance(HOUR_MS);
    let r = claim(&app, "192.0.2.1:1", &[], &expired, NOT_A_POINT).await;
    assert_eq!(r.body, json!({"error": "expired"}));
}

#[tokio::test]
async fn a_malformed_key_gets_a_shape_message_that_is_true() {
    let (app, _) = setup(spec_config()).await;
    for bad in [
        "0x1234",
        "02ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
        "0x04ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
        "0x02zzffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
    ] {
        let r = claim(&app, "192.0.2.1:1", &[], "abcdef", bad).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad}");
        assert_eq!(
            r.body["error"],
            "provider_pubkey must be a compressed secp256k1 public key: 0x followed by 66 hex characters, starting 02 or 03",
            "{bad}"
        );
    }
}

// Finding 11: null is not a value of a typed optional field.

#[tokio::test]
async fn null_in_a_typed_optional_field_is_400() {
    let (app, _) = setup(spec_config()).await;
    let llm = |payload: Value| json!({"job_type": "LLM_INFER", "user_id": "u", "payload": payload});
    let cases = [
        (
            json!({"job_type": "LLM_INFER", "user_id": "u", "payload": {"prompt": "p"}, "privacy_class": null}),
            "privacy_class must be PUBLIC or PRIVATE",
        ),
        (
            llm(json!({"prompt": "p", "max_tokens": null})),
            "payload.max_tokens must be an integer from 1 to 32768",
        ),
        (
            llm(json!({"prompt": "p", "job_type": null})),
            "payload.job_type must match job_type",
        ),
    ];
    for (body, error) in cases {
        let r = commit(&app, "fast", body.clone()).await;
        assert_eq!(
            (r.status, r.body),
            (StatusCode::BAD_REQUEST, json!({"error": error})),
            "{body}"
        );
    }
    // Absent stays fine, and so does null in a field we do not know.
    let r = commit(
        &app,
        "fast",
        json!({"job_type": "LLM_INFER", "user_id": "u",
        "payload": {"prompt": "p"}, "extra": null}),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED);
}

// Finding 2: pairing cannot be switched off by a flood of creates.

#[tokio::test]
async fn creates_are_rate_limited_per_client_and_honest_clients_still_pair() {
    let (app, clock) = setup(spec_config()).await;
    for i in 0..10 {
        let r = create(&app, "198.51.100.7:1", &format!("flood-{i}")).await;
        assert_eq!(r.status, StatusCode::CREATED);
    }
    let r = create(&app, "198.51.100.7:2", "flood-10").await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.headers["retry-after"], "60");
    assert!(r.body["error"]
        .as_str()
        .unwrap()
        .contains("from this address"));
    // Another client pairs as usual.
    let r = create(&app, "203.0.113.9:1", "alice").await;
    assert_eq!(r.status, StatusCode::CREATED);
    clock.advance(60_000);
    let r = create(&app, "198.51.100.7:1", "flood-11").await;
    assert_eq!(r.status, StatusCode::CREATED);
}

#[tokio::test]
async fn a_user_holds_a_bounded_number_of_live_codes() {
    let mut config = spec_config();
    config.limits.pairing_creates_per_user_per_minute_max = 100;
    let (app, clock) = setup(config).await;
    for i in 0..5 {
        let r = create(&app, &format!("192.0.2.{i}:1"), "alice").await;
        assert_eq!(r.status, StatusCode::CREATED);
    }
    let r = create(&app, "192.0.2.99:1", "alice").await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.headers["retry-after"], "3600");
    assert!(r.body["error"]
        .as_str()
        .unwrap()
        .contains("live pairing codes"));
    let r = create(&app, "192.0.2.99:1", "bob").await;
    assert_eq!(r.status, StatusCode::CREATED);
    clock.advance(HOUR_MS);
    let r = create(&app, "192.0.2.99:1", "alice").await;
    assert_eq!(r.status, StatusCode::CREATED, "expired codes are not live");
}

#[tokio::test]
async fn only_live_codes_count_against_the_global_cap() {
    let mut config = spec_config();
    config.limits.pairing_codes_max = 3;
    let (app, clock) = setup(config).await;
    for i in 0..3 {
        let r = create(&app, &format!("192.0.2.{i}:1"), &format!("u{i}")).await;
        assert_eq!(r.status, StatusCode::CREATED);
    }
    let r = create(&app, "192.0.2.50:1", "u50").await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    // Before the fix the cap stayed full until 24 h after expiry.
    clock.advance(HOUR_MS);
    let r = create(&app, "192.0.2.50:1", "u50").await;
    assert_eq!(r.status, StatusCode::CREATED);
}

// Finding 5: guessing codes at scale.

#[tokio::test]
async fn successful_claims_do_not_use_up_the_budget() {
    let mut config = spec_config();
    config.limits.pairing_creates_per_client_per_minute_max = 100;
    let (app, _) = setup(config).await;
    for i in 0..12 {
        let code = create(&app, "192.0.2.1:1", &format!("u{i}")).await.body["pairing_code"]
            .as_str()
            .unwrap()
            .to_owned();
        let r = claim(&app, "192.0.2.1:1", &[], &code, &key(i)).await;
        assert_eq!(r.status, StatusCode::OK, "claim {i}");
    }
}

#[tokio::test]
async fn ipv6_clients_are_grouped_by_64() {
    let (app, _) = setup(spec_config()).await;
    for i in 0..10 {
        let peer = format!("[2001:db8:1:2::{i:x}]:1");
        let r = claim(&app, &peer, &[], "000000", &key(1)).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
    }
    let r = claim(&app, "[2001:db8:1:2:ffff::1]:1", &[], "000000", &key(1)).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    // Another /64 has its own budget.
    let r = claim(&app, "[2001:db8:1:3::1]:1", &[], "000000", &key(1)).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn failed_claims_have_a_global_budget() {
    let (app, clock) = setup(spec_config()).await;
    for i in 0..60 {
        let peer = format!("10.0.{}.{}:1", i / 200, i % 200);
        let r = claim(&app, &peer, &[], "000000", &key(1)).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "guess {i}");
    }
    let r = claim(&app, "10.9.9.9:1", &[], "000000", &key(1)).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(r.body["error"]
        .as_str()
        .unwrap()
        .contains("on this coordinator"));
    clock.advance(60_000);
    let r = claim(&app, "10.9.9.9:1", &[], "000000", &key(1)).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn forwarded_for_counts_only_from_a_trusted_proxy() {
    let config = Config {
        trusted_proxies: vec!["10.0.0.1".parse().unwrap()],
        ..spec_config()
    };
    let (app, _) = setup(config).await;
    // Behind the proxy, each client has its own budget.
    for i in 0..10 {
        let r = claim(
            &app,
            "10.0.0.1:1",
            &[("x-forwarded-for", "198.51.100.1")],
            "000000",
            &key(1),
        )
        .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{i}");
    }
    let limited = claim(
        &app,
        "10.0.0.1:1",
        &[("x-forwarded-for", "198.51.100.1")],
        "000000",
        &key(1),
    )
    .await;
    assert_eq!(limited.status, StatusCode::TOO_MANY_REQUESTS);
    // A client-written entry further left proves nothing.
    let spoofed = claim(
        &app,
        "10.0.0.1:1",
        &[("x-forwarded-for", "203.0.113.5, 198.51.100.1")],
        "000000",
        &key(1),
    )
    .await;
    assert_eq!(spoofed.status, StatusCode::TOO_MANY_REQUESTS);
    let other = claim(
        &app,
        "10.0.0.1:1",
        &[("x-forwarded-for", "198.51.100.2")],
        "000000",
        &key(1),
    )
    .await;
    assert_eq!(other.status, StatusCode::BAD_REQUEST);
    // From an untrusted peer the header is ignored: the peer is the client.
    for _ in 0..10 {
        let r = claim(
            &app,
            "192.0.2.8:1",
            &[("x-forwarded-for", "198.51.100.3")],
            "000000",
            &key(1),
        )
        .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
    }
    let r = claim(
        &app,
        "192.0.2.8:1",
        &[("x-forwarded-for", "198.51.100.4")],
        "000000",
        &key(1),
    )
    .await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
}
