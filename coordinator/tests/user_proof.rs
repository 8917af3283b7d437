//! Issue 28, "PRIVATE means private": acting for a user needs that user's
//! proof (`X-User-Proof`, decision 0017) with `--user-auth on`, the default.
//! The attacker of the "Why" knows only the victim's id; the victim
//! holds the key; `off` keeps the spec's literal flows.

mod common;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::*;
use coordinator::config::{Config, UserAuth};
use coordinator::{app, Clock, Coordinator, ManualClock};
use protocol::signing::Keypair;
use protocol::user_proof::{self, ProofRequest};
use rand::SeedableRng;
use serde_json::{json, Value};
use std::sync::Arc;

const NONCE_A: &str = "0123456789abcdef0123456789abcdef";
const NONCE_B: &str = "fedcba9876543210fedcba9876543210";

fn key(seed: u64) -> Keypair {
    Keypair::generate(&mut rand_chacha::ChaCha20Rng::seed_from_u64(seed))
}

async fn setup_with(config: Config) -> (Coordinator, axum::Router, ManualClock) {
    let clock = ManualClock::new(EPOCH_MS);
    let c = coordinator(config, Arc::new(clock.clone()), 7).await;
    (c.clone(), app(c), clock)
}

async fn setup() -> (Coordinator, axum::Router, ManualClock) {
    setup_with(Config::default()).await
}

/// A proof header by `signer` as `user` for this exact request.
fn proof(
    signer: &Keypair,
    user: &str,
    method: &str,
    path: &str,
    body: &[u8],
    at_ms: i64,
    nonce: &str,
) -> String {
    let request = ProofRequest {
        method,
        path_and_query: path,
        body,
    };
    user_proof::sign(signer, user, &request, at_ms, nonce)
}

/// Sends `body` (exact bytes) with an optional proof header.
async fn request(
    app: &axum::Router,
    method: &str,
    path: &str,
    body: &[u8],
    proof: Option<&str>,
) -> Response {
    let mut req = Request::builder().method(method).uri(path);
    if !body.is_empty() {
        req = req.header("content-type", "application/json");
    }
    if let Some(proof) = proof {
        req = req.header(user_proof::HEADER, proof);
    }
    send(app, req.body(Body::from(body.to_vec())).unwrap()).await
}

/// A request signed by `signer` as `user` at the clock's time with `nonce`.
async fn signed(
    app: &axum::Router,
    clock: &ManualClock,
    signer: &Keypair,
    user: &str,
    (method, path): (&str, &str),
    body: &[u8],
    nonce: &str,
) -> Response {
    let header = proof(signer, user, method, path, body, clock.now_ms(), nonce);
    request(app, method, path, body, Some(&header)).await
}

fn create_body(user: &str) -> Vec<u8> {
    json!({"user_id": user}).to_string().into_bytes()
}

fn assert_refused(r: &Response, code: &str) {
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", r.body);
    assert_eq!(r.body["error"], code, "{}", r.body);
    assert!(r.body["message"].as_str().is_some_and(|m| !m.is_empty()));
}

fn list_path(user: &str) -> String {
    format!("/v1/trust/list?user_id={user}")
}

const CREATE: (&str, &str) = ("POST", "/v1/trust/create");

#[tokio::test]
async fn an_attacker_who_knows_a_user_id_cannot_create_for_it() {
    let (_, app, _) = setup().await;
    let victim = key(1);
    let caip10 = format!("eip155:84532:{}", victim.address());
    for user in [victim.address(), caip10.clone()] {
        let r = request(&app, "POST", "/v1/trust/create", &create_body(&user), None).await;
        assert_refused(&r, "user_proof_required");
        let message = r.body["message"].as_str().unwrap();
        assert!(message.contains("X-User-Proof"), "{message}");
        assert!(
            message.contains(&victim.address().to_lowercase()),
            "{message}"
        );
    }
    let r = request(
        &app,
        "POST",
        "/v1/trust/create",
        &create_body("alice"),
        None,
    )
    .await;
    assert_refused(&r, "user_id_not_provable");
    let message = r.body["message"].as_str().unwrap();
    assert!(message.contains("--user-auth off"), "{message}");
    assert!(message.contains("eip155:"), "{message}");
}

#[tokio::test]
async fn a_proof_signed_by_another_key_is_refused() {
    let (_, app, clock) = setup().await;
    let (victim, attacker) = (key(1), key(2));
    let body = create_body(&victim.address());
    // The attacker signs as the victim: the signature recovers to the attacker.
    let r = signed(
        &app,
        &clock,
        &attacker,
        &victim.address(),
        CREATE,
        &body,
        NONCE_A,
    )
    .await;
    assert_refused(&r, "user_proof_invalid");
    // The attacker proves itself, for a request that acts for the victim.
    let r = signed(
        &app,
        &clock,
        &attacker,
        &attacker.address(),
        CREATE,
        &body,
        NONCE_B,
    )
    .await;
    assert_refused(&r, "user_proof_invalid");
    assert!(r.body["message"].as_str().unwrap().contains("acts for"));
    // The victim's proof, with the body changed on the way.
    let header = proof(
        &victim,
        &victim.address(),
        "POST",
        "/v1/trust/create",
        &body,
        clock.now_ms(),
        NONCE_A,
    );
    let changed =
        json!({"user_id": victim.address(), "provider_pubkey": attacker.public_key_hex()})
            .to_string();
    let r = request(
        &app,
        "POST",
        "/v1/trust/create",
        changed.as_bytes(),
        Some(&header),
    )
    .await;
    assert_refused(&r, "user_proof_invalid");
    // Garbage in the header.
    let r = request(&app, "POST", "/v1/trust/create", &body, Some("%%%")).await;
    assert_refused(&r, "user_proof_invalid");
}

#[tokio::test]
async fn a_replayed_proof_is_refused() {
    let (_, app, clock) = setup().await;
    let victim = key(1);
    let body = create_body(&victim.address());
    let header = proof(
        &victim,
        &victim.address(),
        "POST",
        "/v1/trust/create",
        &body,
        clock.now_ms(),
        NONCE_A,
    );
    let first = request(&app, "POST", "/v1/trust/create", &body, Some(&header)).await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.body);
    let again = request(&app, "POST", "/v1/trust/create", &body, Some(&header)).await;
    assert_refused(&again, "user_proof_replayed");
    // Still refused until the proof has expired, then as expired.
    clock.advance(user_proof::WINDOW_MS);
    let later = request(&app, "POST", "/v1/trust/create", &body, Some(&header)).await;
    assert_refused(&later, "user_proof_replayed");
    clock.advance(1);
    let expired = request(&app, "POST", "/v1/trust/create", &body, Some(&header)).await;
    assert_refused(&expired, "user_proof_expired");
}

#[tokio::test]
async fn an_expired_or_future_proof_is_refused() {
    let (_, app, clock) = setup().await;
    let victim = key(1);
    let user = victim.address();
    let body = create_body(&user);
    let now = clock.now_ms();
    for (at, nonce) in [
        (now - user_proof::WINDOW_MS - 1, NONCE_A),
        (now + user_proof::WINDOW_MS + 1, NONCE_B),
    ] {
        let header = proof(&victim, &user, "POST", "/v1/trust/create", &body, at, nonce);
        let r = request(&app, "POST", "/v1/trust/create", &body, Some(&header)).await;
        assert_refused(&r, "user_proof_expired");
    }
    // Within the window either way is accepted.
    let header = proof(
        &victim,
        &user,
        "POST",
        "/v1/trust/create",
        &body,
        now - 299_000,
        NONCE_A,
    );
    let r = request(&app, "POST", "/v1/trust/create", &body, Some(&header)).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
}

#[tokio::test]
async fn listing_a_users_workers_needs_the_proof() {
    let (_, app, clock) = setup().await;
    let (victim, attacker) = (key(1), key(2));
    let path = list_path(&victim.address());
    let r = request(&app, "GET", &path, b"", None).await;
    assert_refused(&r, "user_proof_required");
    let r = signed(
        &app,
        &clock,
        &attacker,
        &victim.address(),
        ("GET", &path),
        b"",
        NONCE_A,
    )
    .await;
    assert_refused(&r, "user_proof_invalid");
    let r = request(&app, "GET", &list_path("alice"), b"", None).await;
    assert_refused(&r, "user_id_not_provable");
    // A proof for another query is not a proof for this one.
    let other = list_path(&victim.address().to_lowercase());
    let header = proof(
        &victim,
        &victim.address(),
        "GET",
        &other,
        b"",
        clock.now_ms(),
        NONCE_B,
    );
    let r = request(&app, "GET", &path, b"", Some(&header)).await;
    assert_refused(&r, "user_proof_invalid");
    let r = signed(
        &app,
        &clock,
        &victim,
        &victim.address(),
        ("GET", &path),
        b"",
        NONCE_A,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body, json!({"providers": []}));
}

#[tokio::test]
async fn a_private_commit_needs_the_proof_and_a_public_one_does_not() {
    let (_, app, clock) = setup().await;
    let (victim, attacker) = (key(1), key(2));
    let job = private(llm_job(&victim.address())).to_string();
    let path = "/v1/jobs/commit/fast";
    let r = request(&app, "POST", path, job.as_bytes(), None).await;
    assert_refused(&r, "user_proof_required");
    let r = signed(
        &app,
        &clock,
        &attacker,
        &victim.address(),
        ("POST", path),
        job.as_bytes(),
        NONCE_A,
    )
    .await;
    assert_refused(&r, "user_proof_invalid");
    let r = request(
        &app,
        "POST",
        path,
        private(llm_job("alice")).to_string().as_bytes(),
        None,
    )
    .await;
    assert_refused(&r, "user_id_not_provable");
    // PUBLIC commits stay exactly as the spec shows them, plain names too.
    for user in ["alice", &victim.address()] {
        let r = commit(&app, "fast", llm_job(user)).await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    }
    // The victim's own PRIVATE commit is admitted (422: no trusted worker yet).
    let r = signed(
        &app,
        &clock,
        &victim,
        &victim.address(),
        ("POST", path),
        job.as_bytes(),
        NONCE_B,
    )
    .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.body);
}

/// The victim, with its key: a code bound to its worker's key, which
/// another key cannot claim (and does not use up), then the PRIVATE job
/// reaches that worker and never the attacker's.
#[tokio::test]
async fn the_victim_pairs_its_worker_and_its_private_job_reaches_only_that_worker() {
    let (c, app, clock) = setup().await;
    let victim = key(1);
    let mut attackers_worker = TestWorker::connect(Wire::channel(&c), 20, &["LLM_INFER"], 1).await;
    let mut own_worker = TestWorker::connect(Wire::channel(&c), 21, &["LLM_INFER"], 1).await;
    // The checksummed address in the create, lowercase in the commit: one user.
    let user = victim.address();
    let body =
        json!({"user_id": user, "provider_pubkey": own_worker.key.public_key_hex()}).to_string();
    let r = signed(
        &app,
        &clock,
        &victim,
        &user,
        CREATE,
        body.as_bytes(),
        NONCE_A,
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let code = r.body["pairing_code"].as_str().unwrap().to_owned();
    // Whoever read the code claims it for another key: refused, not used up.
    let claim = |k: &Keypair| json!({"pairing_code": code, "provider_pubkey": k.public_key_hex()});
    let r = call(
        &app,
        "POST",
        "/v1/trust/claim",
        Some(claim(&attackers_worker.key)),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.body, json!({"error": "invalid_code"}));
    let r = call(
        &app,
        "POST",
        "/v1/trust/claim",
        Some(claim(&own_worker.key)),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["user_id"], user.to_lowercase());

    let path = "/v1/jobs/commit/fast";
    let job = private(llm_job(&user.to_lowercase())).to_string();
    let r = signed(
        &app,
        &clock,
        &victim,
        &user.to_lowercase(),
        ("POST", path),
        job.as_bytes(),
        NONCE_B,
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let job_id = r.body["job_id"].as_str().unwrap().to_owned();
    let a = own_worker.expect_assign().await;
    assert_eq!(a.job_id.to_string(), job_id);
    own_worker.complete(&a).await;
    let record = job_status(&app, &job_id).await;
    assert_eq!(record["status"], "completed");
    assert_eq!(
        record["receipt"]["provider_pubkey"],
        own_worker.key.public_key_hex()
    );
    // The attacker's worker got nothing.
    settle().await;
    let nothing = tokio::time::timeout(
        std::time::Duration::from_millis(50),
        attackers_worker.recv(),
    )
    .await;
    assert!(
        !matches!(nothing, Ok(protocol::worker::CoordinatorFrame::Assign(_))),
        "{nothing:?}"
    );
    // The list, with the proof, shows the one worker.
    let path = list_path(&user);
    let r = signed(
        &app,
        &clock,
        &victim,
        &user,
        ("GET", &path),
        b"",
        "aa".repeat(16).as_str(),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["providers"].as_array().unwrap().len(), 1);
    assert_eq!(
        r.body["providers"][0]["provider_pubkey"],
        own_worker.key.public_key_hex()
    );
}

#[tokio::test]
async fn a_bound_key_must_be_a_key() {
    let (_, app, clock) = setup().await;
    let victim = key(1);
    let user = victim.address();
    for (bad, nonce) in [(json!("0x1234"), NONCE_A), (json!(7), NONCE_B)] {
        let body = json!({"user_id": user, "provider_pubkey": bad}).to_string();
        let r = signed(&app, &clock, &victim, &user, CREATE, body.as_bytes(), nonce).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    }
}

#[tokio::test]
async fn proofs_beyond_the_nonce_bound_get_503_not_a_forgotten_nonce() {
    let mut config = Config::default();
    config.limits.user_proof_nonces_max = 1;
    let (_, app, clock) = setup_with(config).await;
    let victim = key(1);
    let path = list_path(&victim.address());
    let r = signed(
        &app,
        &clock,
        &victim,
        &victim.address(),
        ("GET", &path),
        b"",
        NONCE_A,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let r = signed(
        &app,
        &clock,
        &victim,
        &victim.address(),
        ("GET", &path),
        b"",
        NONCE_B,
    )
    .await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.body);
    // The first nonce is still remembered.
    let header = proof(
        &victim,
        &victim.address(),
        "GET",
        &path,
        b"",
        clock.now_ms(),
        NONCE_A,
    );
    let r = request(&app, "GET", &path, b"", Some(&header)).await;
    assert_refused(&r, "user_proof_replayed");
    // Once the window has passed there is room again.
    clock.advance(user_proof::WINDOW_MS + 1);
    let r = signed(
        &app,
        &clock,
        &victim,
        &victim.address(),
        ("GET", &path),
        b"",
        NONCE_B,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
}

/// A paid PRIVATE commit whose verified payer is the user proves the user;
/// a payer who is not the user does not, and is not charged.
#[tokio::test]
async fn a_payment_by_the_users_address_proves_the_user() {
    let clock = ManualClock::new(EPOCH_MS);
    let c = coordinator(Config::default(), Arc::new(clock.clone()), 5).await;
    let gate = x402::PaymentGate::new(
        payment_config(),
        Arc::new(x402::InMemoryNonceStore::default()),
        Arc::new(x402::LocalSettler),
    );
    c.enable_payments(gate).unwrap();
    let app = app(c.clone());
    let payer = Keypair::from_secret_hex(PAYER).unwrap();
    let mut w = TestWorker::connect(Wire::channel(&c), 21, &["LLM_INFER"], 1).await;
    let user = payer.address();
    let body = json!({"user_id": user, "provider_pubkey": w.key.public_key_hex()}).to_string();
    let r = signed(
        &app,
        &clock,
        &payer,
        &user,
        CREATE,
        body.as_bytes(),
        NONCE_A,
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let claim =
        json!({"pairing_code": r.body["pairing_code"], "provider_pubkey": w.key.public_key_hex()});
    assert_eq!(
        call(&app, "POST", "/v1/trust/claim", Some(claim))
            .await
            .status,
        StatusCode::OK
    );

    // Someone else's PRIVATE commit for a user who is not the payer: 401,
    // and the payment is released (it still buys a job).
    let other = key(9).address();
    let theirs = private(llm_job(&other));
    let challenge = post(&app, "/v1/jobs/commit/fast", &theirs, None).await;
    assert_eq!(challenge.status, StatusCode::PAYMENT_REQUIRED);
    let (name, value) = pay(&challenge, 1);
    let r = post(&app, "/v1/jobs/commit/fast", &theirs, Some((&name, &value))).await;
    assert_refused(&r, "user_proof_required");
    // The payer's own PRIVATE commit with the same payment, no header: 201.
    let mine = private(llm_job(&user));
    let r = post(&app, "/v1/jobs/commit/fast", &mine, Some((&name, &value))).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let a = w.expect_assign().await;
    assert_eq!(a.job_id.to_string(), r.body["job_id"].as_str().unwrap());
}

/// `--user-auth off`: the spec's literal flows, plain names on every
/// trust endpoint and PRIVATE commits, no proof anywhere.
#[tokio::test]
async fn with_user_auth_off_the_spec_flows_are_unchanged() {
    let config = Config {
        user_auth: UserAuth::Off,
        ..Config::default()
    };
    let (c, app, _) = setup_with(config).await;
    let mut w = TestWorker::connect(Wire::channel(&c), 21, &["LLM_INFER"], 1).await;
    pair(&app, "alice", &w.key).await;
    let r = call(&app, "GET", "/v1/trust/list?user_id=alice", None).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        r.body["providers"][0]["provider_pubkey"],
        w.key.public_key_hex()
    );
    let r = commit(&app, "fast", private(llm_job("alice"))).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let a = w.expect_assign().await;
    w.complete(&a).await;
    // An address is a plain string too: not normalized, no proof needed.
    let r = call(
        &app,
        "POST",
        "/v1/trust/create",
        Some(json!({"user_id": key(1).address()})),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED);
    let _: Value = r.body;
}
