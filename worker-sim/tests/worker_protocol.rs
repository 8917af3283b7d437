//! The worker against a scripted fake coordinator over in-memory channels,
//! under a paused clock.

mod common;

use common::*;
use protocol::api::{JobType, TaskType};
use protocol::receipt::ReceiptError;
use protocol::signing::SignatureError;
use protocol::worker::{CoordinatorFrame, ErrorCode, WorkerFrame, PROTOCOL_VERSION};
use serde_json::{json, Value};
use std::time::Duration;
use tokio::time::Instant;
use worker_sim::{
    EventKind, FaultPlan, HandshakeFault, HeartbeatFault, JobFault, MalformedKind, ReconnectPolicy,
    WorkerConfig, WorkerError, WorkerExit,
};

/// Receives the result of `job` and checks its receipt; returns the output.
async fn expect_result(
    c: &mut FakeCoordinator,
    job: &protocol::worker::Assignment,
    pubkey: &str,
) -> Value {
    match c.recv_skip_heartbeats().await.expect("result") {
        WorkerFrame::Result {
            job_id,
            output,
            receipt,
        } => {
            assert_eq!(job_id, job.job_id);
            assert_eq!(receipt.job_id, job.job_id);
            assert_eq!(receipt.provider_pubkey, pubkey);
            assert_eq!(receipt.payment_ref, job.payment_ref);
            receipt.verify(&output).expect("receipt verifies");
            output
        }
        other => panic!("expected result, got {other:?}"),
    }
}

async fn expect_accept(c: &mut FakeCoordinator, n: u128) {
    assert_eq!(
        c.recv_skip_heartbeats().await,
        Some(WorkerFrame::Accept { job_id: job_id(n) })
    );
}

#[tokio::test(start_paused = true)]
async fn hello_and_auth_signature_verify() {
    let mut s = start(WorkerConfig {
        slots: 3,
        capabilities: vec![JobType::Task],
        ..config(1)
    });
    let mut c = FakeCoordinator::accept(&mut s.acceptor).await;
    let pubkey = c.handshake(1_000).await;
    assert_eq!(pubkey, s.pubkey);
    let Some(WorkerFrame::Hello {
        protocol_version,
        coordinator,
        provider_pubkey,
        capabilities,
        slots,
        agent,
        features,
    }) = c.hello.clone()
    else {
        panic!()
    };
    assert_eq!(protocol_version, PROTOCOL_VERSION);
    assert_eq!(coordinator, Some("ws://in-memory".to_owned()));
    assert_eq!(provider_pubkey.len(), 68);
    assert!(provider_pubkey.starts_with("0x02") || provider_pubkey.starts_with("0x03"));
    assert_eq!(capabilities, vec![JobType::Task]);
    assert_eq!(slots, 3);
    assert!(agent.unwrap().starts_with("worker-sim/"));
    assert!(
        features.is_empty(),
        "a worker that does not stream names no feature"
    );
    let hello_text = &s.log.frame_lines()[0];
    assert!(hello_text
        .starts_with(r#"-> {"type":"hello","protocol_version":2,"coordinator":"ws://in-memory","#));
}

#[tokio::test(start_paused = true)]
async fn heartbeats_follow_the_welcome_interval() {
    let mut s = start(config(2));
    let mut c = FakeCoordinator::accept(&mut s.acceptor).await;
    c.handshake(1_500).await;
    let welcomed = Instant::now();
    for n in 1..=4u64 {
        assert_eq!(c.recv().await, Some(WorkerFrame::Heartbeat));
        assert_eq!(welcomed.elapsed(), Duration::from_millis(1_500 * n));
    }
}

#[tokio::test(start_paused = true)]
async fn results_carry_verified_receipts_and_right_shapes() {
    let mut s = start(config(3));
    let mut c = FakeCoordinator::accept(&mut s.acceptor).await;
    let pubkey = c.handshake(10_000).await;
    let welcomed = Instant::now();

    let jobs = [
        llm(1, "Write a haiku about the sea"),
        task(2, TaskType::Summarize, "The sea is wide. It is also deep."),
        task(3, TaskType::Classify, "I love this product"),
        task(4, TaskType::ExtractJson, "name: Ada, age: 36"),
    ];
    for job in &jobs {
        c.assign(job.clone());
        expect_accept(&mut c, job.job_id.as_u128()).await;
        let output = expect_result(&mut c, job, &pubkey).await;
        match job.job_id.as_u128() {
            1 => {
                let text = output.as_str().unwrap();
                assert!(text.starts_with("Simulated answer: Write a haiku"));
                assert!(text.split_whitespace().count() <= 32);
            }
            2 => assert_eq!(output, json!("The sea is wide.")),
            3 => assert!(testkit::outputs::LABELS.contains(&output.as_str().unwrap())),
            4 => assert_eq!(output, json!({"name": "Ada", "age": 36})),
            _ => unreachable!(),
        }
        c.send(&CoordinatorFrame::ResultAccepted { job_id: job.job_id });
    }
    // Fixed latency 100 ms per job, one after another.
    assert_eq!(welcomed.elapsed(), Duration::from_millis(400));
    let events = s.log.events();
    let last_result = events
        .iter()
        .rev()
        .find_map(|e| match &e.kind {
            EventKind::FrameOut { frame } if frame.contains(r#""type":"result""#) => Some(frame),
            _ => None,
        })
        .unwrap();
    let expected = protocol::time::format_ms(EPOCH_MS + 400);
    assert!(last_result.contains(&format!(r#""completed_at":"{expected}""#)));
}

#[tokio::test(start_paused = true)]
async fn slots_are_respected_and_jobs_run_concurrently() {
    let mut s = start(WorkerConfig {
        slots: 2,
        ..config(4)
    });
    let mut c = FakeCoordinator::accept(&mut s.acceptor).await;
    let pubkey = c.handshake(10_000).await;
    let t0 = Instant::now();
    c.assign(llm(1, "one"));
    c.assign(llm(2, "two"));
    c.assign(llm(3, "three"));
    expect_accept(&mut c, 1).await;
    expect_accept(&mut c, 2).await;
    assert_eq!(
        c.recv().await,
        Some(WorkerFrame::Reject {
            job_id: job_id(3),
            reason: "no free slot".into()
        })
    );
    expect_result(&mut c, &llm(1, "one"), &pubkey).await;
    expect_result(&mut c, &llm(2, "two"), &pubkey).await;
    // Both ran in parallel: one latency, not two.
    assert_eq!(t0.elapsed(), Duration::from_millis(100));
    c.assign(llm(4, "four"));
    expect_accept(&mut c, 4).await;
}

#[tokio::test(start_paused = true)]
async fn unsupported_job_type_is_rejected() {
    let mut s = start(WorkerConfig {
        capabilities: vec![JobType::Task],
        ..config(5)
    });
    let mut c = FakeCoordinator::accept(&mut s.acceptor).await;
    c.handshake(10_000).await;
    c.assign(llm(1, "x"));
    assert!(matches!(
        c.recv().await,
        Some(WorkerFrame::Reject { reason, .. }) if reason.contains("not offered")
    ));
}

#[tokio::test(start_paused = true)]
async fn reject_fault_rejects_without_accepting() {
    let mut s = start(WorkerConfig {
        faults: FaultPlan::none().on_job(
            1,
            JobFault::Reject {
                reason: "busy".into(),
                accept_first: false,
            },
        ),
        ..config(6)
    });
    let mut c = FakeCoordinator::accept(&mut s.acceptor).await;
    let pubkey = c.handshake(10_000).await;
    c.assign(llm(1, "fine"));
    expect_accept(&mut c, 1).await;
    expect_result(&mut c, &llm(1, "fine"), &pubkey).await;
    c.assign(llm(2, "rejected"));
    assert_eq!(
        c.recv().await,
        Some(WorkerFrame::Reject {
            job_id: job_id(2),
            reason: "busy".into()
        })
    );
    assert!(s.log.events().iter().any(|e| matches!(
        &e.kind,
        EventKind::FaultFired { job_index: 1, fault, .. } if fault == "reject"
    )));
}

#[tokio::test(start_paused = true)]
async fn silent_fault_holds_the_slot_until_cancel() {
    let mut s = start(WorkerConfig {
        slots: 1,
        faults: FaultPlan::none().on_job(0, JobFault::Silent),
        ..config(7)
    });
    let mut c = FakeCoordinator::accept(&mut s.acceptor).await;
    let pubkey = c.handshake(1_000).await;
    c.assign(llm(1, "silent"));
    expect_accept(&mut c, 1).await;
    // Only heartbeats for a long time.
    for _ in 0..20 {
        assert_eq!(c.recv().await, Some(WorkerFrame::Heartbeat));
    }
    c.assign(llm(2, "no room"));
    assert!(
        matches!(c.recv().await, Some(WorkerFrame::Reject { job_id, .. }) if job_id == job_id_of(2))
    );
    c.send(&CoordinatorFrame::Cancel {
        job_id: job_id(1),
        reason: "lease expired".into(),
    });
    c.assign(llm(3, "room again"));
    expect_accept(&mut c, 3).await;
    expect_result(&mut c, &llm(3, "room again"), &pubkey).await;
    assert!(s.log.events().iter().any(|e| matches!(
        &e.kind,
        EventKind::JobDropped { reason, .. } if reason == "lease expired"
    )));
}

fn job_id_of(n: u128) -> uuid::Uuid {
    job_id(n)
}

#[tokio::test(start_paused = true)]
async fn cancelled_job_result_is_never_sent() {
    let mut s = start(config(8));
    let mut c = FakeCoordinator::accept(&mut s.acceptor).await;
    let pubkey = c.handshake(10_000).await;
    c.assign(llm(1, "cancel me"));
    expect_accept(&mut c, 1).await;
    c.send(&CoordinatorFrame::Cancel {
        job_id: job_id(1),
        reason: "lease expired".into(),
    });
    c.assign(llm(2, "keep me"));
    expect_accept(&mut c, 2).await;
    // The next non-heartbeat frame is job 2's result, never job 1's.
    expect_result(&mut c, &llm(2, "keep me"), &pubkey).await;
}

#[tokio::test(start_paused = true)]
async fn disconnect_fault_closes_and_reconnects_with_backoff() {
    let mut s = start(WorkerConfig {
        faults: FaultPlan::none().on_job(0, JobFault::Disconnect),
        reconnect: ReconnectPolicy {
            initial_ms: 250,
            ..ReconnectPolicy::default()
        },
        ..config(9)
    });
    let mut c = FakeCoordinator::accept(&mut s.acceptor).await;
    let pubkey = c.handshake(10_000).await;
    c.assign(llm(1, "bye"));
    expect_accept(&mut c, 1).await;
    let t0 = Instant::now();
    assert_eq!(c.recv().await, None, "connection closed after the latency");
    assert_eq!(t0.elapsed(), Duration::from_millis(100));
    let mut c2 = FakeCoordinator::accept(&mut s.acceptor).await;
    assert_eq!(t0.elapsed(), Duration::from_millis(350));
    assert_eq!(c2.handshake(10_000).await, pubkey);
    // Job indexes continue across sessions: job index 1 is normal.
    c2.assign(llm(2, "back"));
    expect_accept(&mut c2, 2).await;
    expect_result(&mut c2, &llm(2, "back"), &pubkey).await;
}

#[tokio::test(start_paused = true)]
async fn crash_fault_drops_and_restarts_after_delay() {
    let mut s = start(WorkerConfig {
        faults: FaultPlan::none().on_job(
            0,
            JobFault::Crash {
                restart_after_ms: 5_000,
            },
        ),
        ..config(10)
    });
    let mut c = FakeCoordinator::accept(&mut s.acceptor).await;
    c.handshake(10_000).await;
    c.assign(llm(1, "crash"));
    expect_accept(&mut c, 1).await;
    let t0 = Instant::now();
    assert_eq!(c.recv().await, None);
    let mut c2 = FakeCoordinator::accept(&mut s.acceptor).await;
    assert_eq!(t0.elapsed(), Duration::from_millis(5_100));
    c2.handshake(10_000).await;
    assert!(s.log.events().iter().any(|e| matches!(
        &e.kind,
        EventKind::Sleeping { ms: 5_000, reason } if reason == "crash restart"
    )));
}

#[tokio::test(start_paused = true)]
async fn stopped_heartbeat_sends_none() {
    let mut s = start(WorkerConfig {
        faults: FaultPlan::none().with_heartbeat(HeartbeatFault::Stop { after_ms: 2_500 }),
        ..config(11)
    });
    let mut c = FakeCoordinator::accept(&mut s.acceptor).await;
    c.handshake(1_000).await;
    assert_eq!(c.recv().await, Some(WorkerFrame::Heartbeat));
    assert_eq!(c.recv().await, Some(WorkerFrame::Heartbeat));
    let silent = tokio::time::timeout(Duration::from_secs(60), c.recv()).await;
    assert!(silent.is_err(), "no heartbeat after 2.5 s");
}

#[tokio::test(start_paused = true)]
async fn slow_heartbeat_uses_its_own_interval() {
    let mut s = start(WorkerConfig {
        faults: FaultPlan::none().with_heartbeat(HeartbeatFault::Slow { interval_ms: 7_000 }),
        ..config(12)
    });
    let mut c = FakeCoordinator::accept(&mut s.acceptor).await;
    c.handshake(1_000).await;
    let t0 = Instant::now();
    assert_eq!(c.recv().await, Some(WorkerFrame::Heartbeat));
    assert_eq!(t0.elapsed(), Duration::from_millis(7_000));
}

#[tokio::test(start_paused = true)]
async fn bad_signature_fault_fails_verification() {
    let mut s = start(WorkerConfig {
        faults: FaultPlan::none().on_job(0, JobFault::BadSignature),
        ..config(13)
    });
    let mut c = FakeCoordinator::accept(&mut s.acceptor).await;
    let pubkey = c.handshake(10_000).await;
    c.assign(llm(1, "x"));
    expect_accept(&mut c, 1).await;
    let Some(WorkerFrame::Result {
        output, receipt, ..
    }) = c.recv_skip_heartbeats().await
    else {
        panic!()
    };
    assert_eq!(receipt.provider_pubkey, pubkey);
    assert_eq!(
        receipt.verify(&output),
        Err(ReceiptError::Signature(SignatureError::WrongSigner))
    );
    // The coordinator answers invalid_receipt; the worker stays connected.
    c.error(ErrorCode::InvalidReceipt, Some(job_id(1)));
    c.assign(llm(2, "y"));
    expect_accept(&mut c, 2).await;
    expect_result(&mut c, &llm(2, "y"), &pubkey).await;
}

#[tokio::test(start_paused = true)]
async fn wrong_output_hash_fault_fails_verification() {
    let mut s = start(WorkerConfig {
        faults: FaultPlan::none().on_job(0, JobFault::WrongOutputHash),
        ..config(14)
    });
    let mut c = FakeCoordinator::accept(&mut s.acceptor).await;
    c.handshake(10_000).await;
    c.assign(task(1, TaskType::Classify, "x"));
    expect_accept(&mut c, 1).await;
    let Some(WorkerFrame::Result {
        output, receipt, ..
    }) = c.recv_skip_heartbeats().await
    else {
        panic!()
    };
    assert_eq!(
        receipt.verify(&output),
        Err(ReceiptError::OutputHashMismatch)
    );
}

#[tokio::test(start_paused = true)]
async fn invalid_output_fault_sends_wrong_shape_with_valid_receipt() {
    let mut s = start(WorkerConfig {
        faults: FaultPlan::none().on_job(0, JobFault::InvalidOutput),
        ..config(15)
    });
    let mut c = FakeCoordinator::accept(&mut s.acceptor).await;
    let pubkey = c.handshake(10_000).await;
    let job = task(1, TaskType::ExtractJson, "a: 1");
    c.assign(job.clone());
    expect_accept(&mut c, 1).await;
    let output = expect_result(&mut c, &job, &pubkey).await;
    assert!(!output.is_object());
}

#[tokio::test(start_paused = true)]
async fn slow_fault_adds_latency() {
    let mut s = start(WorkerConfig {
        faults: FaultPlan::none().on_job(0, JobFault::Slow { extra_ms: 40_000 }),
        ..config(16)
    });
    let mut c = FakeCoordinator::accept(&mut s.acceptor).await;
    let pubkey = c.handshake(100_000).await;
    let t0 = Instant::now();
    c.assign(llm(1, "slow"));
    expect_accept(&mut c, 1).await;
    expect_result(&mut c, &llm(1, "slow"), &pubkey).await;
    assert_eq!(t0.elapsed(), Duration::from_millis(40_100));
}

#[tokio::test(start_paused = true)]
async fn malformed_frames_are_sent_and_the_job_still_completes() {
    let kinds = [
        (MalformedKind::NotJson, None),
        (MalformedKind::UnknownType, Some("gossip")),
        (
            MalformedKind::Oversized { bytes: 2_000_000 },
            Some("padding"),
        ),
        (MalformedKind::Unexpected, Some(r#""type":"hello""#)),
        (MalformedKind::ForeignResult, Some(r#""type":"result""#)),
    ];
    let mut plan = FaultPlan::none();
    for (i, (kind, _)) in kinds.iter().enumerate() {
        plan = plan.on_job(
            i as u64,
            JobFault::Malformed {
                frame: kind.clone(),
            },
        );
    }
    let mut s = start(WorkerConfig {
        faults: plan,
        ..config(17)
    });
    let mut c = FakeCoordinator::accept(&mut s.acceptor).await;
    let pubkey = c.handshake(10_000).await;
    for (i, (kind, needle)) in kinds.iter().enumerate() {
        let n = i as u128 + 1;
        c.assign(llm(n, "m"));
        let bad = c.recv_text_skip_heartbeats().await.unwrap();
        match needle {
            None => assert!(serde_json::from_str::<Value>(&bad).is_err()),
            Some(needle) => assert!(
                bad.contains(needle),
                "{kind:?}: {}",
                &bad[..80.min(bad.len())]
            ),
        }
        if let MalformedKind::Oversized { bytes } = kind {
            assert_eq!(bad.len(), *bytes);
        }
        // What a coordinator answers; the connection survives.
        c.error(ErrorCode::MalformedFrame, None);
        expect_accept(&mut c, n).await;
        expect_result(&mut c, &llm(n, "m"), &pubkey).await;
    }
}

#[tokio::test(start_paused = true)]
async fn bad_auth_signature_is_refused_and_the_worker_stops() {
    let mut s = start(WorkerConfig {
        faults: FaultPlan::none().with_handshake(HandshakeFault::BadAuthSignature),
        ..config(18)
    });
    let mut c = FakeCoordinator::accept(&mut s.acceptor).await;
    let Some(WorkerFrame::Hello {
        provider_pubkey, ..
    }) = c.recv().await
    else {
        panic!()
    };
    c.send(&CoordinatorFrame::Challenge {
        nonce: NONCE.into(),
        network: NETWORK.into(),
    });
    let Some(WorkerFrame::Auth { signature }) = c.recv().await else {
        panic!()
    };
    let key = protocol::signing::parse_public_key(&provider_pubkey).unwrap();
    assert_eq!(
        protocol::signing::verify_personal_sign(
            &key,
            protocol::worker::challenge_message(&channel_origin(), NETWORK, NONCE).as_bytes(),
            &signature
        ),
        Err(SignatureError::WrongSigner)
    );
    c.error(ErrorCode::AuthFailed, None);
    drop(c);
    let result = s.handle.await.unwrap();
    assert!(matches!(
        result,
        Err(WorkerError::Refused {
            code: ErrorCode::AuthFailed,
            ..
        })
    ));
}

/// Found by the swarm (seed 1288 on the code before the shutdown rework): a
/// worker that dials in while the coordinator is shutting down is refused
/// with `shutting_down` during its handshake. That refusal is for now, not
/// for good: the worker reconnects with backoff (docs/worker-protocol.md)
/// instead of stopping, so a rolling restart keeps its workers.
#[tokio::test(start_paused = true)]
async fn shutting_down_in_the_handshake_reconnects_with_backoff() {
    let mut s = start(WorkerConfig {
        reconnect: ReconnectPolicy {
            initial_ms: 250,
            ..ReconnectPolicy::default()
        },
        ..config(24)
    });
    let mut c = FakeCoordinator::accept(&mut s.acceptor).await;
    assert!(matches!(c.recv().await, Some(WorkerFrame::Hello { .. })));
    c.error(ErrorCode::ShuttingDown, None);
    drop(c);
    let t0 = Instant::now();
    let mut c2 = FakeCoordinator::accept(&mut s.acceptor).await;
    assert_eq!(
        t0.elapsed(),
        Duration::from_millis(250),
        "after one backoff"
    );
    let pubkey = c2.handshake(10_000).await;
    c2.assign(llm(1, "after the restart"));
    expect_accept(&mut c2, 1).await;
    expect_result(&mut c2, &llm(1, "after the restart"), &pubkey).await;
}

#[tokio::test(start_paused = true)]
async fn wrong_version_and_invalid_hello() {
    let mut s = start(WorkerConfig {
        faults: FaultPlan::none().with_handshake(HandshakeFault::WrongProtocolVersion),
        ..config(19)
    });
    let mut c = FakeCoordinator::accept(&mut s.acceptor).await;
    assert!(matches!(
        c.recv().await,
        Some(WorkerFrame::Hello {
            protocol_version: 999,
            ..
        })
    ));
    c.error(ErrorCode::UnsupportedVersion, None);
    assert!(matches!(
        s.handle.await.unwrap(),
        Err(WorkerError::Refused {
            code: ErrorCode::UnsupportedVersion,
            ..
        })
    ));

    let mut s = start(WorkerConfig {
        faults: FaultPlan::none().with_handshake(HandshakeFault::InvalidHello),
        ..config(20)
    });
    let mut c = FakeCoordinator::accept(&mut s.acceptor).await;
    let Some(WorkerFrame::Hello {
        provider_pubkey, ..
    }) = c.recv().await
    else {
        panic!()
    };
    assert!(protocol::signing::parse_public_key(&provider_pubkey).is_err());
}

/// Issue 16 #4: a worker signs only for the network it serves. A
/// challenge for another network gets no auth; the worker closes and stops
/// with an error naming both networks.
#[tokio::test(start_paused = true)]
async fn a_challenge_for_another_network_is_not_signed() {
    let mut s = start(config(23));
    let mut c = FakeCoordinator::accept(&mut s.acceptor).await;
    assert!(matches!(c.recv().await, Some(WorkerFrame::Hello { .. })));
    c.send(&CoordinatorFrame::Challenge {
        nonce: NONCE.into(),
        network: "eip155:8453".into(),
    });
    assert_eq!(c.recv().await, None, "closed, nothing signed");
    let result = s.handle.await.unwrap();
    let Err(error @ WorkerError::WrongNetwork { .. }) = result else {
        panic!("{result:?}")
    };
    let message = error.to_string();
    assert!(
        message.contains("eip155:8453") && message.contains(NETWORK),
        "{message}"
    );
    assert!(s.log.events().iter().any(|e| matches!(
        &e.kind,
        worker_sim::EventKind::Stopped { reason } if reason.contains("eip155:8453")
    )));
}

/// The origin signed comes from the connector's URL, the worker's own
/// configuration; a URL with no origin stops the worker before it dials.
#[tokio::test(start_paused = true)]
async fn a_coordinator_url_without_an_origin_stops_the_worker() {
    struct Nowhere;
    impl protocol::connection::Connector for Nowhere {
        type Connection = protocol::connection::ChannelConnection;
        async fn connect(
            &mut self,
        ) -> Result<Self::Connection, protocol::connection::ConnectError> {
            panic!("dialled a URL with no origin")
        }
        fn url(&self) -> &str {
            "coordinator.example.com:8080"
        }
    }
    let mut worker =
        worker_sim::Worker::new(config(24), worker_sim::TokioClock::shared(EPOCH_MS)).unwrap();
    assert!(matches!(
        worker.run(Nowhere).await,
        Err(WorkerError::Url(_))
    ));
}

#[tokio::test(start_paused = true)]
async fn reconnect_backoff_is_capped_and_gives_up() {
    let mut s = start(WorkerConfig {
        reconnect: ReconnectPolicy {
            initial_ms: 100,
            max_ms: 400,
            max_attempts: Some(5),
            ..ReconnectPolicy::default()
        },
        ..config(21)
    });
    let t0 = Instant::now();
    let mut arrivals = Vec::new();
    // Each connection is dropped before `welcome`.
    while let Some(peer) = s.acceptor.accept().await {
        arrivals.push(t0.elapsed().as_millis() as u64);
        drop(peer);
        if arrivals.len() == 5 {
            break;
        }
    }
    assert_eq!(arrivals, vec![0, 100, 300, 700, 1_100]);
    assert_eq!(
        s.handle.await.unwrap().unwrap(),
        WorkerExit::GaveUp { attempts: 5 }
    );
}

#[tokio::test(start_paused = true)]
async fn dropped_acceptor_stops_the_worker() {
    let mut s = start(config(22));
    let mut c = FakeCoordinator::accept(&mut s.acceptor).await;
    c.handshake(10_000).await;
    drop(c);
    drop(s.acceptor);
    assert_eq!(
        s.handle.await.unwrap().unwrap(),
        WorkerExit::ConnectorShutdown
    );
}

/// A scripted scenario whose whole event log is returned.
async fn scenario(seed: u64) -> (String, Vec<String>) {
    let mut s = start(WorkerConfig {
        slots: 2,
        latency: worker_sim::Latency::Uniform {
            min_ms: 10,
            max_ms: 500,
        },
        faults: FaultPlan::none().on_job(1, JobFault::BadSignature).on_job(
            3,
            JobFault::Crash {
                restart_after_ms: 1_000,
            },
        ),
        ..config(seed)
    });
    let mut c = FakeCoordinator::accept(&mut s.acceptor).await;
    c.handshake(300).await;
    c.assign(llm(1, "a"));
    c.assign(task(2, TaskType::Summarize, "b. c."));
    let mut results = 0;
    while results < 2 {
        if let Some(WorkerFrame::Result { .. }) = c.recv().await {
            results += 1;
        }
    }
    c.assign(task(3, TaskType::ExtractJson, "k: v"));
    c.assign(task(4, TaskType::Classify, "crash here"));
    while c.recv().await.is_some() {}
    let mut c2 = FakeCoordinator::accept(&mut s.acceptor).await;
    c2.handshake(300).await;
    c2.assign(llm(5, "after"));
    while !matches!(c2.recv().await, Some(WorkerFrame::Result { .. })) {}
    drop(c2);
    drop(s.acceptor);
    s.handle.await.unwrap().unwrap();
    (s.pubkey, s.log.json_lines())
}

#[tokio::test(start_paused = true)]
async fn same_seed_same_log_different_seed_different_keys() {
    let (key_a, log_a) = scenario(42).await;
    let (key_b, log_b) = scenario(42).await;
    assert_eq!(key_a, key_b);
    assert_eq!(log_a, log_b);
    assert!(log_a.len() > 20, "{}", log_a.len());
    let (key_c, log_c) = scenario(43).await;
    assert_ne!(key_a, key_c);
    assert_ne!(log_a, log_c);
}

#[tokio::test(start_paused = true)]
async fn an_outbox_frame_goes_out_verbatim_after_the_handshake() {
    let (outbox, scripted) = tokio::sync::mpsc::unbounded_channel();
    // Queued before any session: it waits for the welcome.
    outbox
        .send(r#"{"type":"gossip","n":1}"#.to_owned())
        .unwrap();
    let (connector, mut acceptor) = protocol::connection::channel_connector();
    let mut worker = worker_sim::Worker::new(config(3), worker_sim::TokioClock::shared(EPOCH_MS))
        .unwrap()
        .with_outbox(scripted);
    tokio::spawn(async move { worker.run(connector).await });
    let mut c = FakeCoordinator::accept(&mut acceptor).await;
    c.handshake(60_000).await;
    assert_eq!(
        c.recv_text().await.as_deref(),
        Some(r#"{"type":"gossip","n":1}"#)
    );
    // And one sent mid-session, as it is, even if it is not JSON.
    outbox.send("not json".to_owned()).unwrap();
    assert_eq!(c.recv_text().await.as_deref(), Some("not json"));
}
