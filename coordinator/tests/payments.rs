//! x402 payment gating of the commit endpoints (issue 3): the 402 answer,
//! paid commits with `payment_ref` in the receipt, replay, each refusal
//! reason, settlement failure, and that 400/422 answers are never charged.

mod common;

use axum::http::StatusCode;
use base64::Engine;
use common::*;
use coordinator::config::{Config, Settlement};
use coordinator::{app, Coordinator, ManualClock, TokioClock};
use rand::SeedableRng;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use testkit::{FacilitatorStub, RouterTransport, StubScript};
use x402::{LocalEvmSigner, PaymentGate, PaymentRequired, PaymentSigner};

/// A gated coordinator on Base Sepolia settings; with `stub`, settlement
/// goes through that in-process facilitator, else it is local.
async fn gated(
    clock: Arc<dyn coordinator::Clock>,
    stub: Option<&FacilitatorStub>,
) -> (Coordinator, axum::Router) {
    gated_with(clock, stub, Settlement::OnCompletion).await
}

/// [`gated`], settling at commit (the behaviour before issue 30, now an
/// operator's choice): these tests pin what it promises.
async fn gated_at_commit(
    clock: Arc<dyn coordinator::Clock>,
    stub: Option<&FacilitatorStub>,
) -> (Coordinator, axum::Router) {
    gated_with(clock, stub, Settlement::AtCommit).await
}

async fn gated_with(
    clock: Arc<dyn coordinator::Clock>,
    stub: Option<&FacilitatorStub>,
    settlement: Settlement,
) -> (Coordinator, axum::Router) {
    let config = Config {
        network: "eip155:84532".into(),
        settlement,
        ..spec_config()
    };
    let c = coordinator(config, clock, 5).await;
    let settler: Arc<dyn x402::Settler> = match stub {
        Some(stub) => Arc::new(x402::FacilitatorSettler::new(
            RouterTransport::new(stub.router()),
            Duration::from_secs(5),
        )),
        None => Arc::new(x402::LocalSettler),
    };
    let gate = PaymentGate::new(
        payment_config(),
        Arc::new(x402::InMemoryNonceStore::default()),
        settler,
    );
    c.enable_payments(gate).unwrap();
    (c.clone(), app(c))
}

/// Decodes a base64 JSON payment header, changes it, and encodes it again.
fn tamper(value: &str, change: impl FnOnce(&mut Value)) -> String {
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut payload: Value = serde_json::from_slice(&b64.decode(value).unwrap()).unwrap();
    change(&mut payload);
    b64.encode(payload.to_string())
}

#[tokio::test]
async fn no_payment_header_gives_402_with_the_accepts_list_and_header() {
    let (_, app) = gated(Arc::new(ManualClock::new(EPOCH_MS)), None).await;
    let r = post(&app, "/v1/jobs/commit/fast", &llm_job("alice"), None).await;
    assert_eq!(r.status, StatusCode::PAYMENT_REQUIRED);
    assert!(r.body["error"]
        .as_str()
        .unwrap()
        .contains("X-PAYMENT header is required"));
    let accepts = r.body["accepts"].as_array().unwrap();
    assert_eq!(accepts.len(), 1);
    let a = &accepts[0];
    assert_eq!(a["scheme"], "exact");
    assert_eq!(a["price"], "$0.010");
    assert_eq!(a["payTo"], PAY_TO);
    assert_eq!(a["asset"], x402::config::BASE_SEPOLIA_USDC);
    assert_eq!(a["maxAmountRequired"], "10000");
    assert_eq!(a["amount"], "10000");
    assert_eq!(a["resource"], "http://coordinator.test/v1/jobs/commit/fast");
    assert_eq!(a["maxTimeoutSeconds"], 300);
    assert_eq!(a["extra"], json!({"name": "USDC", "version": "2"}));
    assert!(a["network"].is_string());
    // The v2 header carries the CAIP-2 network and the atomic amount.
    let header = r.headers["payment-required"].to_str().unwrap();
    let v2: Value = serde_json::from_slice(
        &base64::engine::general_purpose::STANDARD
            .decode(header)
            .unwrap(),
    )
    .unwrap();
    assert_eq!(v2["x402Version"], 2);
    assert_eq!(v2["accepts"][0]["network"], "eip155:84532");
    assert_eq!(v2["accepts"][0]["amount"], "10000");
    // The price is this job's: CHEAP TASK is $0.001.
    let r = post(&app, "/v1/jobs/commit/cheap", &task_job("alice"), None).await;
    assert_eq!(r.body["accepts"][0]["price"], "$0.001");
    assert_eq!(r.body["accepts"][0]["amount"], "1000");
}

#[tokio::test(start_paused = true)]
async fn a_valid_payment_buys_exactly_one_job_and_lands_in_the_receipt() {
    let (c, app) = gated_at_commit(Arc::new(TokioClock::new(EPOCH_MS)), None).await;
    let mut w = TestWorker::connect(Wire::channel(&c), 1, &["LLM_INFER"], 1).await;
    let challenge = post(&app, "/v1/jobs/commit/fast", &llm_job("alice"), None).await;
    let (name, value) = pay(&challenge, 1);
    let r = post(
        &app,
        "/v1/jobs/commit/fast",
        &llm_job("alice"),
        Some((&name, &value)),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    assert!(r.headers.contains_key("payment-response"));
    assert!(r.headers.contains_key("x-payment-response"));
    let job = r.body["job_id"].as_str().unwrap().to_owned();

    let a = w.expect_assign().await;
    let payment_ref = a
        .payment_ref
        .clone()
        .expect("the assignment carries the payment_ref");
    assert!(payment_ref.starts_with("x402:0x"), "{payment_ref}");
    w.complete(&a).await;
    let record = job_status(&app, &job).await;
    assert_eq!(record["receipt"]["payment_ref"], payment_ref.as_str());
    let receipt: protocol::receipt::Receipt =
        serde_json::from_value(record["receipt"].clone()).unwrap();
    receipt.verify(&record["result"]["output"]).unwrap();

    // The same payment again buys nothing more: a retry gets the same
    // job (idempotent, issue 16 #7), another job gets nonce_already_used.
    let again = post(
        &app,
        "/v1/jobs/commit/fast",
        &llm_job("alice"),
        Some((&name, &value)),
    )
    .await;
    assert_eq!(again.status, StatusCode::CREATED, "{}", again.body);
    assert_eq!(again.body["job_id"], job.as_str());
    assert_eq!(
        again.headers["payment-response"],
        r.headers["payment-response"]
    );
    let other = post(
        &app,
        "/v1/jobs/commit/fast",
        &llm_job("bob"),
        Some((&name, &value)),
    )
    .await;
    assert_eq!(other.status, StatusCode::PAYMENT_REQUIRED);
    assert!(
        other.body["error"].as_str().unwrap().contains("nonce"),
        "{}",
        other.body
    );
    assert_eq!(c.read(|core| core.pending_jobs()), 0);
}

/// Signs a payment for terms changed from those of the 402 answer, as a
/// careless or hostile client would: the signature is valid, the terms are not.
fn pay_altered(
    r: &Response,
    seed: u64,
    now_s: u64,
    change: impl FnOnce(&mut Value),
) -> (String, String) {
    let header = r.headers.get("payment-required").map(|h| h.as_bytes());
    let mut required = PaymentRequired::from_response(header, Some(&r.raw)).unwrap();
    change(&mut required.accepts[0]);
    let signer = LocalEvmSigner::from_secret_hex(PAYER).unwrap();
    let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(seed);
    let h = signer.pay(&required, now_s, &mut rng).unwrap();
    (h.name.to_owned(), h.value)
}

#[tokio::test]
async fn each_bad_payment_is_refused_with_its_reason() {
    let clock = ManualClock::new(EPOCH_MS);
    let (c, app) = gated(Arc::new(clock.clone()), None).await;
    let challenge = post(&app, "/v1/jobs/commit/fast", &llm_job("alice"), None).await;
    type Change = Box<dyn Fn(&mut Value)>;
    let cases: Vec<(&str, u64, Change)> = vec![
        (
            "invalid_exact_evm_payload_recipient_mismatch",
            NOW_S,
            Box::new(|a: &mut Value| {
                a["payTo"] = json!("0x0000000000000000000000000000000000000001");
            }),
        ),
        (
            "invalid_exact_evm_payload_authorization_value",
            NOW_S,
            Box::new(|a: &mut Value| {
                a["amount"] = json!("9999");
            }),
        ),
        // A window that closes within the 6 s the coordinator needs.
        (
            "invalid_exact_evm_payload_authorization_valid_before",
            NOW_S,
            Box::new(|a: &mut Value| {
                a["maxTimeoutSeconds"] = json!(3);
            }),
        ),
        // Signed by a client whose clock is 20 minutes ahead: not valid yet.
        (
            "invalid_exact_evm_payload_authorization_valid_after",
            NOW_S + 1_200,
            Box::new(|_: &mut Value| {}),
        ),
        (
            "invalid_network",
            NOW_S,
            Box::new(|a: &mut Value| {
                a["network"] = json!("eip155:8453");
            }),
        ),
    ];
    for (i, (reason, now_s, change)) in cases.into_iter().enumerate() {
        let (name, value) = pay_altered(&challenge, 10 + i as u64, now_s, change);
        let r = post(
            &app,
            "/v1/jobs/commit/fast",
            &llm_job("alice"),
            Some((&name, &value)),
        )
        .await;
        assert_eq!(r.status, StatusCode::PAYMENT_REQUIRED, "{reason}");
        assert_eq!(r.body["error"], reason, "{}", r.body);
        assert!(r.body["accepts"].is_array());
    }
    // A tampered signature.
    let (name, value) = pay(&challenge, 20);
    let forged = tamper(&value, |p| {
        let sig = p["payload"]["signature"].as_str().unwrap().to_owned();
        let last = if sig.ends_with('b') { "1b" } else { "1c" };
        p["payload"]["signature"] = json!(format!("{}11{last}", &sig[..sig.len() - 4]));
    });
    let r = post(
        &app,
        "/v1/jobs/commit/fast",
        &llm_job("alice"),
        Some((&name, &forged)),
    )
    .await;
    assert_eq!(
        r.body["error"], "invalid_exact_evm_payload_signature",
        "{}",
        r.body
    );
    // A well-formed payment that has expired by the time it arrives.
    let (name, value) = pay(&challenge, 21);
    clock.advance(400_000);
    let r = post(
        &app,
        "/v1/jobs/commit/fast",
        &llm_job("alice"),
        Some((&name, &value)),
    )
    .await;
    assert_eq!(
        r.body["error"],
        "invalid_exact_evm_payload_authorization_valid_before"
    );
    // Underpaying: a CHEAP TASK payment offered for a FAST LLM job.
    clock.set(EPOCH_MS);
    let cheap = post(&app, "/v1/jobs/commit/cheap", &task_job("alice"), None).await;
    let (name, value) = pay(&cheap, 22);
    let r = post(
        &app,
        "/v1/jobs/commit/fast",
        &llm_job("alice"),
        Some((&name, &value)),
    )
    .await;
    assert_eq!(r.status, StatusCode::PAYMENT_REQUIRED);
    assert_eq!(
        r.body["error"], "invalid_exact_evm_payload_authorization_value",
        "{}",
        r.body
    );
    // Junk in the header.
    let r = post(
        &app,
        "/v1/jobs/commit/fast",
        &llm_job("alice"),
        Some(("X-PAYMENT", "%%%")),
    )
    .await;
    assert_eq!(
        (r.status, r.body["error"].clone()),
        (StatusCode::PAYMENT_REQUIRED, json!("invalid_payload"))
    );
    // None of it created a job.
    assert_eq!(c.read(|core| core.pending_jobs()), 0);
}

#[tokio::test]
async fn a_failed_settlement_creates_no_job_and_frees_the_payment() {
    let stub = FacilitatorStub::new("eip155:84532");
    let (c, app) = gated_at_commit(Arc::new(ManualClock::new(EPOCH_MS)), Some(&stub)).await;
    stub.set_script(StubScript::insufficient_funds());
    let challenge = post(&app, "/v1/jobs/commit/fast", &task_job("alice"), None).await;
    let (name, value) = pay(&challenge, 3);
    let r = post(
        &app,
        "/v1/jobs/commit/fast",
        &task_job("alice"),
        Some((&name, &value)),
    )
    .await;
    assert_eq!(r.status, StatusCode::PAYMENT_REQUIRED);
    assert_eq!(r.body["error"], "insufficient_funds");
    assert_eq!(c.read(|core| core.pending_jobs()), 0);
    // Funds arrive: the same authorization now settles once.
    stub.set_script(StubScript::success());
    let r = post(
        &app,
        "/v1/jobs/commit/fast",
        &task_job("alice"),
        Some((&name, &value)),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    assert_eq!(stub.settled(), 1);
    let job = job_status(&app, r.body["job_id"].as_str().unwrap()).await;
    assert_eq!(job["status"], "pending");
}

#[tokio::test]
async fn bad_requests_and_422s_are_never_charged() {
    let stub = FacilitatorStub::new("eip155:84532");
    let (_, app) = gated_at_commit(Arc::new(ManualClock::new(EPOCH_MS)), Some(&stub)).await;
    let challenge = post(&app, "/v1/jobs/commit/fast", &task_job("alice"), None).await;
    let (name, value) = pay(&challenge, 4);
    // A 400 is answered before payment is even looked at.
    let bad = json!({"job_type": "TASK", "user_id": "alice"});
    let r = post(&app, "/v1/jobs/commit/fast", &bad, Some((&name, &value))).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    // A PRIVATE job without a trusted worker: 422, recorded failed, not settled.
    let r = post(
        &app,
        "/v1/jobs/commit/fast",
        &private(task_job("alice")),
        Some((&name, &value)),
    )
    .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(r.body["error"], "no_trusted_worker");
    assert_eq!(stub.settled(), 0);
    // The refused authorization is not charged, but it cannot be presented
    // again (issue 29, finding 6: one unfunded authorization bought 300
    // refusals, each a record, and then still a job). A fresh one buys a job.
    for job in [private(task_job("alice")), task_job("alice")] {
        let r = post(&app, "/v1/jobs/commit/fast", &job, Some((&name, &value))).await;
        assert_eq!(r.status, StatusCode::PAYMENT_REQUIRED, "{}", r.body);
        assert_eq!(r.body["error"], "invalid_exact_evm_nonce_already_used");
    }
    let (name, value) = pay(&challenge, 5);
    let r = post(
        &app,
        "/v1/jobs/commit/fast",
        &task_job("alice"),
        Some((&name, &value)),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    assert_eq!(stub.settled(), 1);
    let job = job_status(&app, r.body["job_id"].as_str().unwrap()).await;
    assert_eq!(job["status"], "pending");
}

#[tokio::test]
async fn with_gating_off_no_header_is_needed_and_payment_ref_is_null() {
    let c = coordinator(spec_config(), Arc::new(ManualClock::new(EPOCH_MS)), 5).await;
    assert!(c.payments().is_none());
    let app = app(c);
    let r = commit(&app, "fast", llm_job("alice")).await;
    assert_eq!(r.status, StatusCode::CREATED);
    assert!(!r.headers.contains_key("payment-response"));
}

/// Issue 31: the OpenAI door pays as a commit does: the same 402 (x402's
/// answer, not OpenAI's error shape), and a paid request makes the job,
/// named by `x-job-id`, with the settlement headers.
#[tokio::test]
async fn a_chat_completion_is_paid_as_a_commit() {
    let mut config = Config {
        network: "eip155:84532".into(),
        ..spec_config()
    };
    // No worker: the door stops waiting soon, and says so.
    config.limits.stream_ms_max = 50;
    let c = coordinator(config, Arc::new(ManualClock::new(EPOCH_MS)), 5).await;
    let gate = PaymentGate::new(
        payment_config(),
        Arc::new(x402::InMemoryNonceStore::default()),
        Arc::new(x402::LocalSettler),
    );
    c.enable_payments(gate).unwrap();
    let app = app(c);
    let chat = json!({"messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 8});
    let r = post(&app, "/v1/chat/completions", &chat, None).await;
    assert_eq!(r.status, StatusCode::PAYMENT_REQUIRED);
    let accepts = r.body["accepts"].as_array().unwrap();
    assert_eq!(accepts[0]["price"], "$0.010", "FAST, as a commit");
    let (name, value) = pay(&r, 1);
    let r = post(&app, "/v1/chat/completions", &chat, Some((&name, &value))).await;
    assert_eq!(r.status, StatusCode::GATEWAY_TIMEOUT, "{}", r.body);
    assert_eq!(r.body["error"]["code"], "job_pending");
    // Settled on completion (the default): nothing is settled yet, so no
    // settlement is reported.
    assert!(!r.headers.contains_key("payment-response"));
    let job = r.headers["x-job-id"].to_str().unwrap();
    assert_eq!(job_status(&app, job).await["status"], "pending");
}
