//! Simulated workers against the real coordinator (its HTTP app and session
//! logic) over in-memory channels, under a paused clock: each scripted fault
//! produces the coordinator behaviour `docs/worker-protocol.md` documents.

mod common;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use common::{EPOCH_MS, NETWORK};
use http_body_util::BodyExt;
use protocol::api::Payload;
use protocol::receipt::Receipt;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;
use tower::ServiceExt;
use worker_sim::{
    EventKind, EventLog, FaultPlan, HandshakeFault, HeartbeatFault, JobFault, Latency,
    MalformedKind, TokioClock, Worker, WorkerConfig, WorkerError, WorkerExit,
};

struct Sim {
    app: Router,
    log: EventLog,
    pubkey: String,
    worker: JoinHandle<Result<WorkerExit, WorkerError>>,
}

/// A coordinator plus one simulated worker whose every connection is served
/// by the coordinator's own session code.
async fn start(faults: FaultPlan) -> Sim {
    start_seeded(faults, 11).await
}

async fn start_seeded(faults: FaultPlan, seed: u64) -> Sim {
    start_config(faults, seed, false).await
}

/// `stream`: the worker sends its outputs as deltas (decision 0023).
async fn start_config(faults: FaultPlan, seed: u64, stream: bool) -> Sim {
    let (c, connector) = common::real_coordinator(NETWORK).await;
    let app = coordinator::app(c.clone());
    let log = EventLog::new();
    let mut worker = Worker::new(
        WorkerConfig {
            latency: Latency::Fixed { ms: 200 },
            faults,
            network: NETWORK.into(),
            stream,
            ..WorkerConfig::with_seed(seed)
        },
        TokioClock::shared(EPOCH_MS),
    )
    .unwrap()
    .with_observer(Arc::new(log.clone()));
    let pubkey = worker.public_key_hex();
    let worker = tokio::spawn(async move { worker.run(connector).await });
    Sim {
        app,
        log,
        pubkey,
        worker,
    }
}

async fn call(app: &Router, method: &str, uri: &str, body: Option<Value>) -> (StatusCode, Value) {
    let mut req = Request::builder().method(method).uri(uri);
    let body = match body {
        Some(v) => {
            req = req.header("content-type", "application/json");
            Body::from(v.to_string())
        }
        None => Body::empty(),
    };
    let res = app.clone().oneshot(req.body(body).unwrap()).await.unwrap();
    let status = res.status();
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

async fn wait_online(app: &Router, n: u64) {
    for _ in 0..1_000 {
        if call(app, "GET", "/v1/health", None).await.1["workers_online"] == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never {n} workers online");
}

async fn commit_llm(app: &Router, prompt: &str) -> String {
    let (status, body) = call(
        app,
        "POST",
        "/v1/jobs/commit/fast",
        Some(json!({"job_type": "LLM_INFER", "user_id": "alice",
            "payload": {"prompt": prompt, "max_tokens": 16}})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body["job_id"].as_str().unwrap().to_owned()
}

/// Polls the job until it is terminal; returns the record.
async fn wait_done(app: &Router, id: &str) -> Value {
    for _ in 0..2_000 {
        let (_, record) = call(app, "GET", &format!("/v1/jobs/{id}"), None).await;
        if record["status"] == "completed" || record["status"] == "failed" {
            return record;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("job {id} never finished");
}

fn assert_completed_by(record: &Value, pubkey: &str, prompt: &str) {
    assert_eq!(record["status"], "completed", "{record}");
    let output = &record["result"]["output"];
    let receipt: Receipt = serde_json::from_value(record["receipt"].clone()).unwrap();
    receipt.verify(output).unwrap();
    assert_eq!(receipt.provider_pubkey, pubkey);
    assert_eq!(
        *output,
        testkit::outputs::output_for(&Payload::Llm {
            prompt: prompt.into(),
            max_tokens: 16,
            model: None,
        })
    );
}

fn frames_in(log: &EventLog) -> Vec<String> {
    log.events()
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::FrameIn { frame } => Some(frame),
            _ => None,
        })
        .collect()
}

fn got_error(log: &EventLog, code: &str) -> bool {
    frames_in(log)
        .iter()
        .any(|f| f.contains(r#""type":"error""#) && f.contains(&format!(r#""code":"{code}""#)))
}

#[tokio::test(start_paused = true)]
async fn a_simulated_worker_completes_a_job_with_a_verified_receipt() {
    let s = start(FaultPlan::none()).await;
    wait_online(&s.app, 1).await;
    let id = commit_llm(&s.app, "Hello coordinator").await;
    let record = wait_done(&s.app, &id).await;
    assert_completed_by(&record, &s.pubkey, "Hello coordinator");
    assert!(frames_in(&s.log)
        .iter()
        .any(|f| f.contains("result_accepted")));
}

/// Faults after which the coordinator requeues the job; the worker's next
/// assignment (job index 1) is clean, so the job still completes.
async fn requeued_then_completed(fault: JobFault, expected_error: Option<&str>) -> Sim {
    let s = start(FaultPlan::none().on_job(0, fault.clone())).await;
    wait_online(&s.app, 1).await;
    let id = commit_llm(&s.app, "retry me").await;
    let record = wait_done(&s.app, &id).await;
    assert_completed_by(&record, &s.pubkey, "retry me");
    if let Some(code) = expected_error {
        assert!(got_error(&s.log, code), "{fault:?}: no {code} error frame");
    }
    s
}

#[tokio::test(start_paused = true)]
async fn bad_signature_gets_invalid_receipt_and_the_job_is_requeued() {
    requeued_then_completed(JobFault::BadSignature, Some("invalid_receipt")).await;
}

#[tokio::test(start_paused = true)]
async fn wrong_output_hash_gets_invalid_receipt() {
    requeued_then_completed(JobFault::WrongOutputHash, Some("invalid_receipt")).await;
}

/// Held-out proposal 2: job 1 answered with job 0's output and its
/// correctly signed receipt is refused (`receipt.job_id` is not this job),
/// requeued and completed with its own output.
#[tokio::test(start_paused = true)]
async fn another_jobs_receipt_gets_invalid_receipt() {
    let s = start(FaultPlan::none().on_job(1, JobFault::OtherJobReceipt)).await;
    wait_online(&s.app, 1).await;
    let first = commit_llm(&s.app, "first").await;
    assert_completed_by(&wait_done(&s.app, &first).await, &s.pubkey, "first");
    let second = commit_llm(&s.app, "second").await;
    let record = wait_done(&s.app, &second).await;
    assert_completed_by(&record, &s.pubkey, "second");
    assert!(
        got_error(&s.log, "invalid_receipt"),
        "no invalid_receipt error frame"
    );
}

/// The held-out patch `receipt-payment-ref-unchecked`: an unpaid job
/// answered with a correctly signed receipt of its own, bound to a payment
/// (one the worker made up, having seen none), is refused (`receipt.
/// payment_ref` is not the job's), requeued and completed honestly.
#[tokio::test(start_paused = true)]
async fn another_payments_receipt_gets_invalid_receipt() {
    requeued_then_completed(JobFault::OtherPaymentRef, Some("invalid_receipt")).await;
}

/// Held-out set 3, patch 4: a receipt that names another key and is
/// signed by it (valid on its own) is refused (`receipt.provider_pubkey`
/// is not the session's key), requeued and completed with the worker's own.
#[tokio::test(start_paused = true)]
async fn a_receipt_of_another_key_gets_invalid_receipt() {
    requeued_then_completed(JobFault::ForeignKeyReceipt, Some("invalid_receipt")).await;
}

/// Held-out set 3, patch 5: a streaming worker that streams a text of the
/// output's length that is not the output, then answers with the true
/// output, is refused (the deltas do not join to it), and the job is
/// requeued and completed by its next, honest attempt.
#[tokio::test(start_paused = true)]
async fn deltas_that_differ_from_the_output_get_invalid_output() {
    let s = start_config(
        FaultPlan::none().on_job(0, JobFault::DeltasDiffer),
        11,
        true,
    )
    .await;
    wait_online(&s.app, 1).await;
    let id = commit_llm(&s.app, "retry me").await;
    assert_completed_by(&wait_done(&s.app, &id).await, &s.pubkey, "retry me");
    assert!(
        got_error(&s.log, "invalid_output"),
        "no invalid_output error frame"
    );
    let sent_deltas = s.log.events().iter().any(
        |e| matches!(&e.kind, EventKind::FrameOut { frame } if frame.contains(r#""type":"delta""#)),
    );
    assert!(sent_deltas, "the worker streamed no deltas");
}

/// `give_up`: the worker accepts, rejects after its latency, and the job
/// is requeued and completed.
#[tokio::test(start_paused = true)]
async fn a_job_given_up_is_requeued() {
    let s = requeued_then_completed(JobFault::GiveUp, None).await;
    let gave_up = s.log.events().iter().any(|e| {
        matches!(&e.kind, EventKind::FrameOut { frame }
            if frame.contains(r#""type":"reject""#) && frame.contains("gave up"))
    });
    assert!(gave_up, "no reject sent after the latency");
}

#[tokio::test(start_paused = true)]
async fn invalid_output_gets_invalid_output() {
    requeued_then_completed(JobFault::InvalidOutput, Some("invalid_output")).await;
}

#[tokio::test(start_paused = true)]
async fn reject_is_requeued() {
    requeued_then_completed(
        JobFault::Reject {
            reason: "busy".into(),
            accept_first: false,
        },
        None,
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn silent_worker_gets_cancel_after_the_lease() {
    let s = requeued_then_completed(JobFault::Silent, None).await;
    assert!(frames_in(&s.log)
        .iter()
        .any(|f| f.contains(r#""type":"cancel""#)));
}

#[tokio::test(start_paused = true)]
async fn malformed_frames_get_error_frames_and_the_session_survives() {
    for (kind, codes) in [
        (MalformedKind::NotJson, &["malformed_frame"][..]),
        (MalformedKind::UnknownType, &["malformed_frame"][..]),
        // Over the coordinator's 1 MiB frame limit, under the hard 4 MiB one.
        (
            MalformedKind::Oversized { bytes: 2_000_000 },
            &["frame_too_large"][..],
        ),
        (MalformedKind::Unexpected, &["unexpected_frame"][..]),
        (
            MalformedKind::ForeignResult,
            &["unknown_job", "not_assigned"][..],
        ),
    ] {
        let s = start(FaultPlan::none().on_job(
            0,
            JobFault::Malformed {
                frame: kind.clone(),
            },
        ))
        .await;
        wait_online(&s.app, 1).await;
        let id = commit_llm(&s.app, "still fine").await;
        let record = wait_done(&s.app, &id).await;
        assert_completed_by(&record, &s.pubkey, "still fine");
        let errors: Vec<String> = frames_in(&s.log)
            .into_iter()
            .filter(|f| f.contains(r#""type":"error""#))
            .collect();
        assert_eq!(errors.len(), 1, "{kind:?}: {errors:?}");
        assert!(
            codes.iter().any(|code| got_error(&s.log, code)),
            "{kind:?}: {errors:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn crash_requeues_and_the_worker_comes_back() {
    let s = requeued_then_completed(
        JobFault::Crash {
            restart_after_ms: 3_000,
        },
        None,
    )
    .await;
    let welcomes = s
        .log
        .events()
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Welcomed { .. }))
        .count();
    assert_eq!(welcomes, 2);
}

#[tokio::test(start_paused = true)]
async fn disconnect_requeues_and_the_worker_comes_back() {
    requeued_then_completed(JobFault::Disconnect, None).await;
}

#[tokio::test(start_paused = true)]
async fn no_heartbeat_gets_the_worker_dropped() {
    let s = start(FaultPlan::none().with_heartbeat(HeartbeatFault::Stop { after_ms: 0 })).await;
    wait_online(&s.app, 1).await;
    tokio::time::sleep(Duration::from_millis(16_000)).await;
    assert!(
        got_error(&s.log, "heartbeat_timeout"),
        "{:?}",
        frames_in(&s.log)
    );
    assert!(s
        .log
        .events()
        .iter()
        .any(|e| matches!(e.kind, EventKind::Disconnected { .. })));
}

#[tokio::test(start_paused = true)]
async fn handshake_faults_are_refused() {
    for (fault, code) in [
        (HandshakeFault::BadAuthSignature, "AuthFailed"),
        (HandshakeFault::WrongProtocolVersion, "UnsupportedVersion"),
        (HandshakeFault::InvalidHello, "InvalidHello"),
    ] {
        let s = start(FaultPlan::none().with_handshake(fault.clone())).await;
        let result = s.worker.await.unwrap();
        match result {
            Err(WorkerError::Refused { code: got, .. }) => assert_eq!(format!("{got:?}"), code),
            other => panic!("{fault:?}: {other:?}"),
        }
    }
}

/// The same scenario twice gives the same worker transcript (coordinator
/// ids, nonces and times included); another worker seed changes it.
#[tokio::test(start_paused = true)]
async fn same_seed_same_transcript_with_the_real_coordinator() {
    async fn transcript(seed: u64) -> Vec<String> {
        let s = start_seeded(
            FaultPlan::none()
                .on_job(0, JobFault::BadSignature)
                .on_job(2, JobFault::Silent),
            seed,
        )
        .await;
        wait_online(&s.app, 1).await;
        let a = commit_llm(&s.app, "first").await;
        let b = commit_llm(&s.app, "second").await;
        wait_done(&s.app, &a).await;
        wait_done(&s.app, &b).await;
        s.worker.abort();
        s.log.json_lines()
    }
    let first = transcript(7).await;
    assert_eq!(first, transcript(7).await);
    assert!(first.len() > 10);
    assert_ne!(first, transcript(8).await);
}
