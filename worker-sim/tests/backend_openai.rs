//! `OpenAiBackend` (the router's OpenAI adapter) against the OpenAI stub:
//! over real loopback HTTP, alone and inside a worker, and in-process under a
//! paused clock for the retry behaviour.

mod common;

use common::*;
use protocol::api::{Payload, TaskType};
use protocol::worker::WorkerFrame;
use router::RetryPolicy;
use serde_json::json;
use std::sync::Arc;
use testkit::{ProviderStub, StubConfig, StubFault};
use worker_sim::{Backend, BackendError, FixedClock, OpenAiBackend, Worker, WorkerConfig};

async fn serve_stub() -> (ProviderStub, String) {
    let stub = ProviderStub::openai(
        StubConfig {
            api_key: "sk-local".into(),
            ..StubConfig::default()
        },
        Arc::new(FixedClock(EPOCH_MS)),
    );
    let base = testkit::serve_loopback(stub.router()).await;
    (stub, format!("{base}/v1"))
}

#[tokio::test]
async fn backend_calls_chat_completions_per_job_type() {
    let (stub, base) = serve_stub().await;
    let backend = OpenAiBackend::new(base.clone(), "llama3.2", Some("sk-local".into()))
        .with_retry(RetryPolicy::none());

    let out = backend
        .execute(&Payload::Llm {
            prompt: "Tell me about the sea".into(),
            max_tokens: 12,
            model: None,
        })
        .await
        .unwrap();
    assert_eq!(
        out,
        json!(testkit::outputs::llm_text("Tell me about the sea", 12))
    );
    let out = backend
        .execute(&Payload::Task {
            task_type: TaskType::ExtractJson,
            input: "name: Ada, age: 36".into(),
        })
        .await
        .unwrap();
    assert_eq!(out, json!({"name": "Ada", "age": 36}));
    let out = backend
        .execute(&Payload::Task {
            task_type: TaskType::Classify,
            input: "great".into(),
        })
        .await
        .unwrap();
    assert!(testkit::outputs::LABELS.contains(&out.as_str().unwrap()));
    let out = backend
        .execute(&Payload::Task {
            task_type: TaskType::Summarize,
            input: "One. Two.".into(),
        })
        .await
        .unwrap();
    assert_eq!(out, json!("One."));

    let calls = stub.calls();
    assert_eq!(calls.len(), 4);
    assert!(calls.iter().all(|c| c.authorized));
    assert_eq!(calls[0].model.as_deref(), Some("llama3.2"));
    assert_eq!(calls[0].max_tokens, Some(12));

    stub.script_next(StubFault::ServerError);
    let err = backend
        .execute(&Payload::Llm {
            prompt: "x".into(),
            max_tokens: 4,
            model: None,
        })
        .await
        .unwrap_err();
    assert!(matches!(err, BackendError::Status { status: 500, .. }));
    stub.script_next(StubFault::MalformedJson);
    let err = backend
        .execute(&Payload::Llm {
            prompt: "x".into(),
            max_tokens: 4,
            model: None,
        })
        .await
        .unwrap_err();
    assert!(matches!(err, BackendError::BadAnswer(_)));
    let keyless = OpenAiBackend::new(format!("{base}/"), "m", None).with_retry(RetryPolicy::none());
    let err = keyless
        .execute(&Payload::Llm {
            prompt: "x".into(),
            max_tokens: 4,
            model: None,
        })
        .await
        .unwrap_err();
    assert!(
        matches!(err, BackendError::Status { status: 401, .. }),
        "{err}"
    );
}

#[tokio::test]
async fn worker_with_real_backend_answers_and_rejects_on_backend_failure() {
    let (stub, base) = serve_stub().await;
    let (connector, mut acceptor) = protocol::connection::channel_connector();
    let mut worker = Worker::new(
        WorkerConfig {
            latency: worker_sim::Latency::Fixed { ms: 0 },
            network: common::NETWORK.into(),
            ..WorkerConfig::with_seed(1)
        },
        worker_sim::TokioClock::shared(EPOCH_MS),
    )
    .unwrap()
    .with_backend(Arc::new(
        OpenAiBackend::new(base, "llama3.2", Some("sk-local".into()))
            .with_retry(RetryPolicy::none()),
    ));
    let pubkey = worker.public_key_hex();
    tokio::spawn(async move { worker.run(connector).await });
    let mut c = FakeCoordinator::accept(&mut acceptor).await;
    c.handshake(60_000).await;

    let job = task(1, TaskType::ExtractJson, "city: Paris");
    c.assign(job.clone());
    assert!(matches!(c.recv().await, Some(WorkerFrame::Accept { .. })));
    let Some(WorkerFrame::Result {
        output, receipt, ..
    }) = c.recv().await
    else {
        panic!()
    };
    assert_eq!(output, json!({"city": "Paris"}));
    assert_eq!(receipt.provider_pubkey, pubkey);
    receipt.verify(&output).unwrap();

    stub.script_next(StubFault::RateLimited { retry_after_s: 1 });
    c.assign(llm(2, "x"));
    assert!(matches!(c.recv().await, Some(WorkerFrame::Accept { .. })));
    assert!(matches!(
        c.recv().await,
        Some(WorkerFrame::Reject { reason, .. }) if reason.contains("429")
    ));
}

#[tokio::test(start_paused = true)]
async fn rate_limits_are_retried_after_retry_after_in_process() {
    let stub = ProviderStub::openai(
        StubConfig {
            api_key: "sk-sim".into(),
            ..StubConfig::default()
        },
        Arc::new(FixedClock(EPOCH_MS)),
    );
    stub.script(0, StubFault::RateLimited { retry_after_s: 3 });
    stub.script(1, StubFault::ServerError);
    let transport = testkit::InProcessTransport::new().with("http://openai.sim", stub.router());
    let backend = OpenAiBackend::with_transport(
        Arc::new(transport),
        "http://openai.sim/v1",
        "m",
        Some("sk-sim".into()),
    );
    let t0 = tokio::time::Instant::now();
    let out = backend
        .execute(&Payload::Task {
            task_type: TaskType::Summarize,
            input: "Short. Text.".into(),
        })
        .await
        .unwrap();
    assert_eq!(out, json!("Short."));
    let statuses: Vec<u16> = stub.calls().iter().map(|c| c.status).collect();
    assert_eq!(statuses, vec![429, 500, 200]);
    // 3 s asked by retry-after, then the router's 2 s second backoff step.
    assert!(
        t0.elapsed() >= std::time::Duration::from_secs(3),
        "{:?}",
        t0.elapsed()
    );
}

/// Issue 31: over real HTTP the backend streams an LLM job from the
/// server, forwarding each content delta as it arrives; they join to the
/// output it returns.
#[tokio::test]
async fn backend_streams_llm_jobs_from_the_server() {
    let (_stub, base) = serve_stub().await;
    let backend = OpenAiBackend::new(base, "llama3.2", Some("sk-local".into()));
    assert!(backend.streams());
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let payload = Payload::Llm {
        prompt: "Tell me about the sea".into(),
        max_tokens: 12,
        model: None,
    };
    let out = backend.execute_streaming(&payload, tx).await.unwrap();
    let mut deltas = Vec::new();
    while let Some(d) = rx.recv().await {
        deltas.push(d);
    }
    assert!(deltas.len() > 1, "one delta a word: {deltas:?}");
    assert_eq!(json!(deltas.concat()), out);
    assert_eq!(out, backend.execute(&payload).await.unwrap());
}

/// An LLM job streamed by the OpenAI backend from a server whose every
/// answer is `body` (server-sent events): the job's answer and the deltas
/// it forwarded.
async fn stream_from_a_server_answering(
    body: String,
) -> (
    Result<serde_json::Value, BackendError>,
    tokio::sync::mpsc::UnboundedReceiver<String>,
) {
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move || {
            let body = body.clone();
            async move { ([("content-type", "text/event-stream")], body) }
        }),
    );
    let base = testkit::serve_loopback(app).await;
    let backend = OpenAiBackend::new(format!("{base}/v1"), "m", None);
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let payload = Payload::Llm {
        prompt: "hi".into(),
        max_tokens: 12,
        model: None,
    };
    (backend.execute_streaming(&payload, tx).await, rx)
}

/// A server whose stream is one line of 2 MiB: the worker stops reading at
/// its bound (1 MiB) and refuses the answer, rather than buffering on until
/// a newline comes (it took the whole line before).
#[tokio::test]
async fn a_stream_line_past_the_bound_is_refused() {
    let huge = "x".repeat(2 * 1024 * 1024);
    let chunk = json!({"choices": [{"delta": {"content": huge}}]});
    let body = format!("data: {chunk}\n\ndata: [DONE]\n\n");
    let (answer, mut rx) = stream_from_a_server_answering(body).await;
    let shown: String = format!("{answer:?}").chars().take(200).collect();
    assert!(
        matches!(&answer, Err(BackendError::BadAnswer(m)) if m.contains("longer than")),
        "{shown}"
    );
    assert!(rx.recv().await.is_none(), "no delta forwarded");
}

/// A server whose stream never ends, in small chunks: the worker stops at
/// its output bound (1 MiB) and refuses the answer, rather than joining
/// the pieces without end (it had no bound on the whole output before).
#[tokio::test]
async fn a_stream_past_the_output_bound_is_refused() {
    let piece = json!({"choices": [{"delta": {"content": "y".repeat(64 * 1024)}}]});
    let body = format!("data: {piece}\n\n").repeat(24) + "data: [DONE]\n\n";
    let (answer, mut rx) = stream_from_a_server_answering(body).await;
    let shown: String = format!("{answer:?}").chars().take(200).collect();
    assert!(
        matches!(&answer, Err(BackendError::BadAnswer(m)) if m.contains("output is longer than")),
        "{shown}"
    );
    let mut forwarded = 0;
    while let Ok(piece) = rx.try_recv() {
        forwarded += piece.len();
    }
    assert!(forwarded <= 1024 * 1024, "{forwarded} bytes forwarded");
}
