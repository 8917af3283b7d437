//! Issue 16, findings 3 and 7: a paid commit is one decision and one write.
//! - #3: admission and the refusal record are one decision; a trusted
//!   worker arriving after a refusal must not turn it into an unpaid job.
//! - #7: the nonce spend and the job it bought are one transaction; a crash
//!   right after the spend, a restart on the same database and a retry with
//!   the same payment give the same job.

mod common;

use axum::http::StatusCode;
use common::*;
use coordinator::config::Config;
use coordinator::server::{self, Parts, Runtime, Settings};
use coordinator::store::sqlite::StoreWrite;
use coordinator::{app, ManualClock, TokioClock};
use protocol::api::JobType;
use protocol::signing::Keypair;
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use std::sync::Arc;
use x402::{InMemoryNonceStore, PaymentGate};

/// Finding 3. Before the fix the handler released the nonce and then ran
/// admission a second time without a payment: a trusted worker that
/// connected in between got the job accepted unpaid (201, `payment_ref`
/// null, no `PAYMENT-RESPONSE`). Since issue 29 (finding 6) a refusal keeps
/// the nonce reserved and the handler returns at once, so no store call
/// remains after admission to hook the worker's arrival into: it arrives
/// right after the answer instead.
#[tokio::test]
async fn a_refused_paid_commit_stays_refused_when_a_trusted_worker_arrives() {
    let config = Config {
        network: "eip155:84532".into(),
        settlement: coordinator::config::Settlement::AtCommit,
        ..spec_config()
    };
    let c = coordinator(config, Arc::new(ManualClock::new(EPOCH_MS)), 5).await;
    let gate = PaymentGate::new(
        payment_config(),
        Arc::new(InMemoryNonceStore::new()),
        Arc::new(x402::LocalSettler),
    );
    c.enable_payments(gate).unwrap();
    let app = app(c.clone());
    let worker = Keypair::generate(&mut ChaCha20Rng::seed_from_u64(9));
    pair(&app, "alice", &worker).await;

    let job = private(task_job("alice"));
    let challenge = post(&app, "/v1/jobs/commit/fast", &job, None).await;
    let (name, value) = pay(&challenge, 1);
    let r = post(&app, "/v1/jobs/commit/fast", &job, Some((&name, &value))).await;
    // The trusted worker comes online right after the refusal.
    let (_, rx) = c
        .register_worker(&worker.public_key_hex(), vec![JobType::Task], 1)
        .unwrap();
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.body);
    assert_eq!(r.body["error"], "no_trusted_worker");
    assert!(!r.headers.contains_key("payment-response"));
    let id = r.body["job_id"]
        .as_str()
        .expect("the refusal names its record");
    assert_eq!(job_status(&app, id).await["status"], "failed");
    // Nothing was queued or assigned to the worker that arrived.
    assert_eq!(c.read(|core| core.pending_jobs()), 0);
    assert!(rx.is_empty(), "no assignment reached the worker");
    // The payment was not charged, and its reservation is kept (one
    // authorization, one refusal): a fresh one buys the admitted job.
    let again = post(&app, "/v1/jobs/commit/fast", &job, Some((&name, &value))).await;
    assert_eq!(again.status, StatusCode::PAYMENT_REQUIRED, "{}", again.body);
    let (name, value) = pay(&challenge, 2);
    let r = post(&app, "/v1/jobs/commit/fast", &job, Some((&name, &value))).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    assert!(r.headers.contains_key("payment-response"));
}

/// A coordinator through the composition root on `db`, payments on with
/// local settlement, deterministic (paused time, writer as a task).
async fn start_paid(db: &str, clock: Arc<TokioClock>, seed: u64) -> server::Server {
    let settings = Settings {
        config: Config {
            network: "eip155:84532".into(),
            // These findings are about the spend at commit.
            settlement: coordinator::config::Settlement::AtCommit,
            ..spec_config()
        },
        db: db.to_owned(),
        payment: Some(payment_config()),
        ..Settings::default()
    };
    let parts = Parts {
        runtime: Runtime::Simulation,
        settler: Some(Arc::new(x402::LocalSettler)),
        ..Parts::new(clock, ChaCha20Rng::seed_from_u64(seed))
    };
    server::start(settings, parts).await.expect("starts")
}

/// Finding 7. Before the fix the nonce was marked spent in its own
/// autocommit statement and the job reached the disk later: a crash in
/// between left a spent nonce and no job, and the retry got
/// `nonce_already_used`.
#[tokio::test(start_paused = true)]
async fn a_crash_right_after_the_spend_keeps_the_job_and_a_retry_gets_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("c.db");
    let db = db.to_str().unwrap();
    let clock = Arc::new(TokioClock::new(EPOCH_MS));
    let first = start_paid(db, clock.clone(), 1).await;
    let app1 = first.app();
    let job = task_job("alice");
    let challenge = post(&app1, "/v1/jobs/commit/cheap", &job, None).await;
    let (name, value) = pay(&challenge, 2);

    // Kill the process right after the write that spends the nonce.
    let store = first.store().unwrap().clone();
    store.crash_after(StoreWrite::NonceSpent, || {});
    // Whatever the dead process answers never reaches the client.
    post(&app1, "/v1/jobs/commit/cheap", &job, Some((&name, &value))).await;
    first.crash();

    let second = start_paid(db, clock.clone(), 2).await;
    let app2 = second.app();
    let retry = post(&app2, "/v1/jobs/commit/cheap", &job, Some((&name, &value))).await;
    assert_eq!(retry.status, StatusCode::CREATED, "{}", retry.body);
    assert!(retry.headers.contains_key("payment-response"));
    let id = retry.body["job_id"].as_str().unwrap().to_owned();
    assert_eq!(job_status(&app2, &id).await["status"], "pending");
    assert_eq!(second.coordinator().read(|core| core.pending_jobs()), 1);
    // Idempotent: the same payment again, the same job; no second job.
    let again = post(&app2, "/v1/jobs/commit/cheap", &job, Some((&name, &value))).await;
    assert_eq!(again.status, StatusCode::CREATED, "{}", again.body);
    assert_eq!(again.body["job_id"], id.as_str());
    assert_eq!(second.coordinator().read(|core| core.pending_jobs()), 1);
    // The same payment for another job buys nothing.
    let other = post(
        &app2,
        "/v1/jobs/commit/cheap",
        &task_job("bob"),
        Some((&name, &value)),
    )
    .await;
    assert_eq!(other.status, StatusCode::PAYMENT_REQUIRED, "{}", other.body);
    second.crash();
}

/// Finding 7, the other crash point: after the reservation, before the
/// spend. The reservation is released at recovery, so the payer can retry
/// instead of getting `nonce_already_used` until `validBefore`.
#[tokio::test(start_paused = true)]
async fn a_reservation_left_by_a_crash_is_released_at_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("c.db");
    let db = db.to_str().unwrap();
    let clock = Arc::new(TokioClock::new(EPOCH_MS));
    let first = start_paid(db, clock.clone(), 1).await;
    let app1 = first.app();
    let job = task_job("alice");
    let challenge = post(&app1, "/v1/jobs/commit/cheap", &job, None).await;
    let (name, value) = pay(&challenge, 3);
    let store = first.store().unwrap().clone();
    store.crash_after(StoreWrite::NonceReserved, || {});
    post(&app1, "/v1/jobs/commit/cheap", &job, Some((&name, &value))).await;
    first.crash();

    let second = start_paid(db, clock.clone(), 2).await;
    let retry = post(
        &second.app(),
        "/v1/jobs/commit/cheap",
        &job,
        Some((&name, &value)),
    )
    .await;
    assert_eq!(retry.status, StatusCode::CREATED, "{}", retry.body);
    second.crash();
}
