//! Issue 30, items 1 and 2 (decision 0021): a paid job is settled on
//! completion, with a recording facilitator behind the coordinator. A job
//! that fails is never settled; a completed one is settled exactly once and
//! its output shown only after; a refused settlement fails the job without
//! its output; a lost answer is retried with the same payment and settles
//! once; a restart settles a job that awaited settlement. Before the change
//! every paid commit was settled at commit, so each of these failed there.

mod common;

use axum::http::StatusCode;
use common::*;
use coordinator::config::Config;
use coordinator::server::{self, Parts, Runtime, Settings};
use coordinator::{app, Coordinator, TokioClock};
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use testkit::{FacilitatorStub, StubScript};

fn config() -> Config {
    Config {
        network: "eip155:84532".into(),
        ..spec_config()
    }
}

/// A coordinator settling on completion (the default) through `stub`.
async fn gated(config: Config, stub: &FacilitatorStub) -> (Coordinator, axum::Router) {
    let c = coordinator(config, Arc::new(TokioClock::new(EPOCH_MS)), 5).await;
    enable_stub_payments(&c, stub);
    (c.clone(), app(c))
}

/// A paid LLM job committed with payment `seed`: its id.
async fn commit_paid(app: &axum::Router, seed: u64) -> String {
    let path = "/v1/jobs/commit/fast";
    let challenge = post(app, path, &llm_job("alice"), None).await;
    let (name, value) = pay(&challenge, seed);
    let r = post(app, path, &llm_job("alice"), Some((&name, &value))).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    // Nothing settled yet, so there is no settlement to report.
    assert!(!r.headers.contains_key("payment-response"));
    r.body["job_id"].as_str().unwrap().to_owned()
}

/// Polls job `id` (paused time: each wait costs nothing) until it ends.
async fn until_ended(app: &axum::Router, id: &str) -> Value {
    for _ in 0..5_000 {
        let record = job_status(app, id).await;
        if record["status"] == "completed" || record["status"] == "failed" {
            return record;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("job {id} never ended");
}

#[tokio::test(start_paused = true)]
async fn a_paid_job_that_fails_is_never_settled() {
    let stub = FacilitatorStub::new("eip155:84532");
    let (_, app) = gated(config(), &stub).await;
    let id = commit_paid(&app, 1).await;
    // No worker ever comes: the job fails no_eligible_worker.
    let record = until_ended(&app, &id).await;
    assert_eq!(record["status"], "failed");
    assert_eq!(record["result"]["error"], "no_eligible_worker");
    settle().await;
    assert_eq!(stub.settle_calls().len(), 0, "a failed job was settled");
    assert_eq!(
        stub.calls().iter().filter(|c| c.path == "/verify").count(),
        1
    );
}

#[tokio::test(start_paused = true)]
async fn a_completed_job_is_settled_once_and_shown_only_after() {
    let stub = FacilitatorStub::new("eip155:84532");
    let (c, app) = gated(config(), &stub).await;
    let mut w = TestWorker::connect(Wire::channel(&c), 1, &["LLM_INFER"], 1).await;
    stub.set_script(StubScript::settle_delay(Duration::from_secs(2)));
    let id = commit_paid(&app, 2).await;
    let a = w.expect_assign().await;
    let payment_ref = a.payment_ref.clone().expect("a paid job has a payment_ref");
    assert!(payment_ref.starts_with("x402:0x"), "{payment_ref}");
    w.complete(&a).await;
    settle().await;
    // Checked, not settled: running to pollers, nothing shown.
    let waiting = job_status(&app, &id).await;
    assert_eq!(waiting["status"], "running", "{waiting}");
    assert!(waiting["result"].is_null() && waiting["receipt"].is_null());
    assert_eq!(c.read(|core| core.awaiting_settlement()), 1);
    let record = until_ended(&app, &id).await;
    assert_eq!(record["status"], "completed", "{record}");
    assert_eq!(record["receipt"]["payment_ref"], payment_ref.as_str());
    let receipt: protocol::receipt::Receipt =
        serde_json::from_value(record["receipt"].clone()).unwrap();
    receipt.verify(&record["result"]["output"]).unwrap();
    assert!(record["payment_transaction"]
        .as_str()
        .unwrap()
        .starts_with("0x"));
    assert_eq!(stub.settled(), 1);
    assert_eq!(stub.settle_calls().len(), 1);
    assert_eq!(c.read(|core| core.awaiting_settlement()), 0);
}

#[tokio::test(start_paused = true)]
async fn a_refused_settlement_fails_the_job_without_its_output() {
    let stub = FacilitatorStub::new("eip155:84532");
    let (c, app) = gated(config(), &stub).await;
    let mut w = TestWorker::connect(Wire::channel(&c), 3, &["LLM_INFER"], 1).await;
    let id = commit_paid(&app, 3).await;
    // The payer's balance vanishes between verify and settle.
    stub.set_script(StubScript::settle_failure("insufficient_funds"));
    let a = w.expect_assign().await;
    w.complete(&a).await;
    let record = until_ended(&app, &id).await;
    assert_eq!(record["status"], "failed", "{record}");
    assert_eq!(record["result"]["error"], "payment_failed");
    assert!(record["result"].get("output").is_none());
    assert!(record["receipt"].is_null());
    assert!(record.get("payment_transaction").is_none());
    assert_eq!(stub.settled(), 0);
}

/// Held-out set 3, patch 12: a *first* settlement refused as already used
/// means the payer spent the authorization elsewhere (a front-run), not
/// that we did: the job fails `payment_failed` without its output
/// (decision 0021). The front-run is one-shot: the next job settles.
#[tokio::test(start_paused = true)]
async fn a_first_settlement_spent_elsewhere_fails_the_job_without_its_output() {
    let stub = FacilitatorStub::new("eip155:84532");
    let (c, app) = gated(config(), &stub).await;
    let mut w = TestWorker::connect(Wire::channel(&c), 9, &["LLM_INFER"], 1).await;
    let id = commit_paid(&app, 9).await;
    stub.set_script(StubScript::settle_spent_elsewhere_once());
    let a = w.expect_assign().await;
    w.complete(&a).await;
    let record = until_ended(&app, &id).await;
    assert_eq!(record["status"], "failed", "{record}");
    assert_eq!(record["result"]["error"], "payment_failed");
    assert!(record["result"].get("output").is_none());
    assert!(record.get("payment_transaction").is_none());
    assert_eq!(stub.settled(), 0);
    let next = commit_paid(&app, 10).await;
    let a = w.expect_assign().await;
    w.complete(&a).await;
    assert_eq!(until_ended(&app, &next).await["status"], "completed");
    assert_eq!(stub.settled(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_lost_answer_is_retried_with_the_same_payment_and_settles_once() {
    let stub = FacilitatorStub::new("eip155:84532");
    let (c, app) = gated(config(), &stub).await;
    let mut w = TestWorker::connect(Wire::channel(&c), 4, &["LLM_INFER"], 1).await;
    let id = commit_paid(&app, 4).await;
    stub.lose_settles(1);
    let a = w.expect_assign().await;
    w.complete(&a).await;
    let record = until_ended(&app, &id).await;
    assert_eq!(record["status"], "completed", "{record}");
    let calls = stub.settle_calls();
    assert_eq!(calls.len(), 2, "one lost answer, one retry");
    assert_eq!(
        calls[0].body, calls[1].body,
        "the retry sends the same payment"
    );
    assert_eq!(stub.settled(), 1);
}

/// The answer is lost after the money moved: the retry is refused as
/// already used, which after our own lost attempt means our settlement
/// landed. Before, the job failed `payment_failed` with the payer charged.
#[tokio::test(start_paused = true)]
async fn an_answer_lost_after_the_money_moved_completes_the_job() {
    let stub = FacilitatorStub::new("eip155:84532");
    let (c, app) = gated(config(), &stub).await;
    let mut w = TestWorker::connect(Wire::channel(&c), 8, &["LLM_INFER"], 1).await;
    let id = commit_paid(&app, 8).await;
    stub.lose_settled(1);
    let a = w.expect_assign().await;
    w.complete(&a).await;
    let record = until_ended(&app, &id).await;
    assert_eq!(record["status"], "completed", "{record}");
    assert_eq!(stub.settle_calls().len(), 2);
    assert_eq!(stub.settled(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_paid_job_past_its_authorization_fails_unpaid() {
    let stub = FacilitatorStub::new("eip155:84532");
    let mut config = config();
    // Longer than the authorization (300 s): only the payment bounds it.
    config.timing.pending_timeout_ms = 3_600_000;
    let (_, app) = gated(config, &stub).await;
    let id = commit_paid(&app, 5).await;
    let record = until_ended(&app, &id).await;
    assert_eq!(record["result"]["error"], "payment_expired", "{record}");
    assert_eq!(stub.settle_calls().len(), 0);
}

/// The money moved but its answer was lost, and every retry's answer was
/// lost too until past the settlement deadline (`validBefore` less the
/// 60 s margin: 240 s after the commit). Retries go on to the retry
/// deadline, and the first answered one finds the authorization spent: the
/// job completes. Before, the job failed `payment_expired` at the
/// settlement deadline with its payer charged (swarm seeds 3551, 3559).
#[tokio::test(start_paused = true)]
async fn a_settlement_lost_past_the_settle_deadline_is_retried_until_it_is_found_landed() {
    let stub = FacilitatorStub::new("eip155:84532");
    let (c, app) = gated(config(), &stub).await;
    let mut w = TestWorker::connect(Wire::channel(&c), 9, &["LLM_INFER"], 1).await;
    let id = commit_paid(&app, 9).await;
    let committed_ms = c.now_ms();
    stub.lose_settled(1);
    // Answers lost at 0.5, 1.5, 3.5, 7.5, 15.5 s, then every 15 s: the
    // 20th lost retry is sent at 240.5 s, past the settlement deadline.
    stub.lose_settles(20);
    let a = w.expect_assign().await;
    w.complete(&a).await;
    let record = until_ended(&app, &id).await;
    assert_eq!(record["status"], "completed", "{record}");
    assert_eq!(stub.settled(), 1);
    assert_eq!(
        stub.settle_calls().len(),
        22,
        "one landed, 20 lost, one found it spent"
    );
    let ended_ms = c.now_ms() - committed_ms;
    assert!(
        ended_ms > 240_000 && ended_ms < 270_000,
        "ended {ended_ms} ms after the commit"
    );
}

/// No answer ever comes: the job fails `payment_expired` once the retry
/// deadline (`validBefore` less the facilitator's 30 s timeout) has
/// passed, before its authorization runs out, and nothing was charged.
#[tokio::test(start_paused = true)]
async fn a_settlement_never_answered_fails_the_job_at_its_retry_deadline() {
    let stub = FacilitatorStub::new("eip155:84532");
    let (c, app) = gated(config(), &stub).await;
    let mut w = TestWorker::connect(Wire::channel(&c), 10, &["LLM_INFER"], 1).await;
    let id = commit_paid(&app, 10).await;
    let committed_ms = c.now_ms();
    stub.lose_settles(u32::MAX);
    let a = w.expect_assign().await;
    w.complete(&a).await;
    let record = until_ended(&app, &id).await;
    assert_eq!(record["result"]["error"], "payment_expired", "{record}");
    assert_eq!(stub.settled(), 0);
    let ended_ms = c.now_ms() - committed_ms;
    assert!(
        (270_000..300_000).contains(&ended_ms),
        "ended {ended_ms} ms after the commit"
    );
}

/// A coordinator on `db` settling through `stub`, deterministic.
async fn start_on(db: &str, clock: Arc<TokioClock>, stub: &FacilitatorStub) -> server::Server {
    let settings = Settings {
        config: config(),
        db: db.to_owned(),
        payment: Some(payment_config()),
        ..Settings::default()
    };
    let parts = Parts {
        runtime: Runtime::Simulation,
        settler: Some(stub_settler(stub)),
        ..Parts::new(clock, ChaCha20Rng::seed_from_u64(7))
    };
    server::start(settings, parts).await.expect("starts")
}

#[tokio::test(start_paused = true)]
async fn a_restart_settles_a_job_that_awaited_settlement() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("c.db");
    let db = db.to_str().unwrap();
    let clock = Arc::new(TokioClock::new(EPOCH_MS));
    let stub = FacilitatorStub::new("eip155:84532");
    let first = start_on(db, clock.clone(), &stub).await;
    let app1 = first.app();
    let mut w = TestWorker::connect(Wire::channel(first.coordinator()), 6, &["LLM_INFER"], 1).await;
    let id = commit_paid(&app1, 6).await;
    // Every answer is lost until the process dies.
    stub.lose_settles(u32::MAX);
    let a = w.expect_assign().await;
    w.complete(&a).await;
    while stub.settle_calls().is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    first.crash();
    assert_eq!(stub.settled(), 0);

    stub.lose_settles(0);
    let second = start_on(db, clock, &stub).await;
    let record = until_ended(&second.app(), &id).await;
    assert_eq!(record["status"], "completed", "{record}");
    assert_eq!(stub.settled(), 1);
    let calls = stub.settle_calls();
    assert!(calls.windows(2).all(|w| w[0].body == w[1].body));
    second.crash();
}
