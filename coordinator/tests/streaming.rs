//! Output deltas (issue 31, decision 0023): the worker protocol's `delta`
//! frames, checked by the session, and the job event stream that carries
//! them to clients, with the real session logic over in-memory channels
//! under paused tokio time.

mod common;

use common::*;
use coordinator::config::Config;
use coordinator::{app, TokioClock};
use protocol::worker::{Assignment, CoordinatorFrame, ErrorCode};
use serde_json::json;
use std::sync::Arc;

async fn setup(config: Config) -> (coordinator::Coordinator, axum::Router) {
    let c = coordinator(config, Arc::new(TokioClock::new(EPOCH_MS)), 11).await;
    (c.clone(), app(c))
}

fn id(r: &Response) -> String {
    r.body["job_id"].as_str().unwrap().to_owned()
}

/// A worker whose hello names `features`.
async fn worker_with(c: &coordinator::Coordinator, seed: u64, features: &[&str]) -> TestWorker {
    let key = protocol::signing::Keypair::generate(
        &mut <rand_chacha::ChaCha20Rng as rand::SeedableRng>::seed_from_u64(seed),
    );
    let mut w = TestWorker {
        key,
        wire: Wire::channel(c),
        session_id: 0,
    };
    w.authenticate_with(&["LLM_INFER", "TASK"], 1, features)
        .await;
    w
}

async fn delta(w: &mut TestWorker, a: &Assignment, seq: u32, text: &str) {
    w.send(json!({"type": "delta", "job_id": a.job_id, "seq": seq, "text": text}))
        .await;
}

async fn accept(w: &mut TestWorker, a: &Assignment) {
    w.send(json!({"type": "accept", "job_id": a.job_id})).await;
}

async fn expect_error(w: &mut TestWorker, code: ErrorCode) -> String {
    match w.recv().await {
        CoordinatorFrame::Error {
            code: got, message, ..
        } if got == code => message,
        other => panic!("expected a {code:?} error, got {other:?}"),
    }
}

/// Deltas that join to the output: the result is accepted as before.
#[tokio::test(start_paused = true)]
async fn deltas_that_join_to_the_output_are_accepted() {
    let (c, app) = setup(spec_config()).await;
    let mut w = worker_with(&c, 1, &["deltas"]).await;
    let job = id(&commit(&app, "fast", llm_job("alice")).await);
    let a = w.expect_assign().await;
    accept(&mut w, &a).await;
    delta(&mut w, &a, 0, "echo: ").await;
    delta(&mut w, &a, 1, "Say hi").await;
    w.send_result(&a).await;
    assert!(matches!(
        w.recv().await,
        CoordinatorFrame::ResultAccepted { .. }
    ));
    assert_eq!(job_status(&app, &job).await["status"], "completed");
}

/// Deltas that do not join to the output refuse the result as an invalid
/// output; the attempt is spent and the job goes back to the queue.
#[tokio::test(start_paused = true)]
async fn deltas_that_do_not_join_refuse_the_result() {
    let (c, app) = setup(spec_config()).await;
    let mut w = worker_with(&c, 1, &["deltas"]).await;
    let job = id(&commit(&app, "fast", llm_job("alice")).await);
    let a = w.expect_assign().await;
    accept(&mut w, &a).await;
    delta(&mut w, &a, 0, "echo: Say bye").await;
    w.send_result(&a).await;
    let message = expect_error(&mut w, ErrorCode::InvalidOutput).await;
    assert!(message.contains("deltas"), "{message}");
    settle().await;
    assert_ne!(job_status(&app, &job).await["status"], "completed");
}

/// A worker that did not announce the feature gets `unexpected_frame` for
/// a delta, and its job is untouched.
#[tokio::test(start_paused = true)]
async fn a_delta_without_the_feature_is_unexpected() {
    let (c, app) = setup(spec_config()).await;
    let mut w = worker_with(&c, 1, &[]).await;
    let job = id(&commit(&app, "fast", llm_job("alice")).await);
    let a = w.expect_assign().await;
    accept(&mut w, &a).await;
    delta(&mut w, &a, 0, "echo: ").await;
    expect_error(&mut w, ErrorCode::UnexpectedFrame).await;
    w.send_result(&a).await;
    assert!(matches!(
        w.recv().await,
        CoordinatorFrame::ResultAccepted { .. }
    ));
    assert_eq!(job_status(&app, &job).await["status"], "completed");
}

/// Deltas out of order, over the count, before the accept or for a
/// structured output are refused, and each spends the attempt.
#[tokio::test(start_paused = true)]
async fn deltas_breaking_a_rule_spend_the_attempt() {
    // What the refusal says, the deltas sent, and whether the job was accepted first.
    type Case = (&'static str, &'static [(u32, &'static str)], bool);
    let cases: [Case; 4] = [
        ("out of order", &[(1, "a")], true),
        ("more than 2", &[(0, "a"), (1, "b"), (2, "c")], true),
        ("after the job's accept", &[(0, "a")], false),
        ("text outputs only", &[(0, "a")], true),
    ];
    for (i, (expected, deltas, accepted)) in cases.into_iter().enumerate() {
        let mut config = spec_config();
        config.limits.deltas_per_job_max = 2;
        let (c, app) = setup(config).await;
        let mut w = worker_with(&c, 1, &["deltas"]).await;
        let job = match i {
            3 => json!({"job_type": "TASK", "user_id": "u", "payload":
                {"task_type": "extract_json", "input": "x"}}),
            _ => llm_job("alice"),
        };
        let job = id(&commit(&app, "fast", job).await);
        let a = w.expect_assign().await;
        if accepted {
            accept(&mut w, &a).await;
        }
        for (seq, text) in deltas {
            delta(&mut w, &a, *seq, text).await;
        }
        let message = expect_error(&mut w, ErrorCode::InvalidOutput).await;
        assert!(message.contains(expected), "{expected}: {message}");
        settle().await;
        let record = job_status(&app, &job).await;
        assert_ne!(record["status"], "running", "{record}");
    }
}

/// One server-sent event: its name, id and data.
#[derive(Debug, Clone)]
struct Sse {
    event: String,
    id: Option<String>,
    data: serde_json::Value,
}

/// A job's event stream read as it comes.
struct Events {
    body: axum::body::Body,
    buffer: String,
}

impl Events {
    async fn open(app: &axum::Router, job: &str, last_event_id: Option<&str>) -> Result<Self, u16> {
        use tower::ServiceExt;
        let mut req = axum::http::Request::get(format!("/v1/jobs/{job}/events"));
        if let Some(id) = last_event_id {
            req = req.header("last-event-id", id);
        }
        let response = app
            .clone()
            .oneshot(req.body(axum::body::Body::empty()).unwrap())
            .await
            .unwrap();
        if response.status() != 200 {
            return Err(response.status().as_u16());
        }
        let content_type = &response.headers()["content-type"];
        assert_eq!(content_type, "text/event-stream");
        Ok(Self {
            body: response.into_body(),
            buffer: String::new(),
        })
    }

    /// The next event (keep-alive comments skipped); `None` at the end.
    async fn next(&mut self) -> Option<Sse> {
        use http_body_util::BodyExt;
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let mut sse = Sse {
                    event: String::new(),
                    id: None,
                    data: serde_json::Value::Null,
                };
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("event: ") {
                        sse.event = v.to_owned();
                    } else if let Some(v) = line.strip_prefix("id: ") {
                        sse.id = Some(v.to_owned());
                    } else if let Some(v) = line.strip_prefix("data: ") {
                        sse.data = serde_json::from_str(v).unwrap();
                    }
                }
                if sse.event.is_empty() {
                    continue;
                }
                return Some(sse);
            }
            let frame =
                tokio::time::timeout(std::time::Duration::from_secs(600), self.body.frame())
                    .await
                    .expect("an event within 600 s")?;
            let frame = frame.unwrap();
            if let Ok(data) = frame.into_data() {
                self.buffer.push_str(std::str::from_utf8(&data).unwrap());
            }
        }
    }

    /// Events up to and including the first named `name`.
    async fn until(&mut self, name: &str) -> Vec<Sse> {
        let mut seen = Vec::new();
        while let Some(e) = self.next().await {
            let last = e.event == name;
            seen.push(e);
            if last {
                return seen;
            }
        }
        panic!("the stream ended before a {name} event: {seen:?}");
    }
}

fn names(events: &[Sse]) -> Vec<&str> {
    events.iter().map(|e| e.event.as_str()).collect()
}

/// The text of the deltas, restarts dropping what came before.
fn joined(events: &[Sse]) -> String {
    let mut text = String::new();
    for e in events {
        match e.event.as_str() {
            "restart" => text.clear(),
            "delta" => text.push_str(e.data["text"].as_str().unwrap()),
            _ => {}
        }
    }
    text
}

/// Issue 31: a job's events carry its status, its deltas as they come and
/// the final record with its receipt; `Last-Event-ID` resumes after a cut.
#[tokio::test(start_paused = true)]
async fn a_jobs_events_stream_its_deltas_and_resume() {
    let (c, app) = setup(spec_config()).await;
    let mut w = worker_with(&c, 1, &["deltas"]).await;
    let job = id(&commit(&app, "fast", llm_job("alice")).await);
    let a = w.expect_assign().await;
    let mut events = Events::open(&app, &job, None).await.unwrap();
    let first = events.until("status").await;
    assert_eq!(first[0].data["status"], "assigned");
    accept(&mut w, &a).await;
    delta(&mut w, &a, 0, "echo: ").await;
    let seen = events.until("delta").await;
    assert_eq!(names(&seen), ["status", "delta"]);
    assert_eq!(seen[0].data["status"], "running");
    assert_eq!(seen[1].data["text"], "echo: ");
    let cut_at = seen[1].id.clone().unwrap();
    drop(events);
    delta(&mut w, &a, 1, "Say hi").await;
    settle().await;
    // Resumed after the first delta: only the rest.
    let mut resumed = Events::open(&app, &job, Some(&cut_at)).await.unwrap();
    let seen = resumed.until("delta").await;
    assert_eq!(seen.last().unwrap().data["text"], "Say hi");
    w.send_result(&a).await;
    let rest = resumed.until("job").await;
    let record = &rest.last().unwrap().data;
    assert_eq!(record["status"], "completed");
    assert_eq!(record["result"]["output"], "echo: Say hi");
    assert!(record["receipt"]["output_hash"].is_string());
    assert!(resumed.next().await.is_none(), "the job event is the last");
    // A reader from the start of a finished job gets the whole output.
    let mut late = Events::open(&app, &job, None).await.unwrap();
    let all = late.until("job").await;
    assert_eq!(joined(&all), "echo: Say hi");
}

/// Issue 31: when the attempt a reader followed dies and the job runs
/// again, the reader is told to restart, then gets the new attempt's text.
#[tokio::test(start_paused = true)]
async fn a_retried_job_restarts_its_readers() {
    let (c, app) = setup(spec_config()).await;
    let mut w1 = worker_with(&c, 1, &["deltas"]).await;
    let job = id(&commit(&app, "fast", llm_job("alice")).await);
    let a = w1.expect_assign().await;
    let mut events = Events::open(&app, &job, None).await.unwrap();
    accept(&mut w1, &a).await;
    delta(&mut w1, &a, 0, "half an ans").await;
    events.until("delta").await;
    drop(w1); // the worker dies mid-stream
    let mut w2 = worker_with(&c, 2, &["deltas"]).await;
    let a = w2.expect_assign().await;
    accept(&mut w2, &a).await;
    delta(&mut w2, &a, 0, "echo: Say hi").await;
    let seen = events.until("delta").await;
    assert!(names(&seen).contains(&"restart"), "{seen:?}");
    w2.send_result(&a).await;
    let mut all = seen;
    all.extend(events.until("job").await);
    assert_eq!(joined(&all), "echo: Say hi");
}

/// Issue 31 (found by the simulation): a job that leaves memory as it ends
/// (no finished-job cache) must not restart the reader that followed its
/// only attempt; it was told `restart` and sent the whole output again.
#[tokio::test(start_paused = true)]
async fn a_job_forgotten_as_it_ends_does_not_restart_its_reader() {
    let mut config = spec_config();
    config.limits.finished_jobs_cached_max = 0;
    let (c, app) = setup(config).await;
    let mut w = worker_with(&c, 1, &["deltas"]).await;
    let job = id(&commit(&app, "fast", llm_job("alice")).await);
    let a = w.expect_assign().await;
    let mut events = Events::open(&app, &job, None).await.unwrap();
    accept(&mut w, &a).await;
    delta(&mut w, &a, 0, "echo: ").await;
    delta(&mut w, &a, 1, "Say hi").await;
    let mut all = events.until("delta").await;
    w.send_result(&a).await;
    all.extend(events.until("job").await);
    assert!(!names(&all).contains(&"restart"), "{:?}", names(&all));
    assert_eq!(joined(&all), "echo: Say hi");
    let shown: usize = all
        .iter()
        .filter(|e| e.event == "delta")
        .map(|e| e.data["text"].as_str().unwrap().len())
        .sum();
    assert_eq!(shown, "echo: Say hi".len(), "no text shown twice: {all:?}");
}

/// Issue 31: held streams are bounded per client (then 503); a slow
/// reader holds a cursor, not a buffer: it gets what it missed as one delta.
#[tokio::test(start_paused = true)]
async fn streams_are_bounded_and_a_slow_reader_gets_one_delta() {
    let mut config = spec_config();
    config.limits.held_streams_per_client_max = 2;
    let (c, app) = setup(config).await;
    let mut w = worker_with(&c, 1, &["deltas"]).await;
    let job = id(&commit(&app, "fast", llm_job("alice")).await);
    let a = w.expect_assign().await;
    let mut slow = Events::open(&app, &job, None).await.unwrap();
    let _other = Events::open(&app, &job, None).await.unwrap();
    assert_eq!(Events::open(&app, &job, None).await.err(), Some(503));
    slow.until("status").await;
    accept(&mut w, &a).await;
    for (seq, piece) in ["ec", "ho", ": ", "Say", " hi"].into_iter().enumerate() {
        delta(&mut w, &a, seq as u32, piece).await;
    }
    settle().await;
    let seen = slow.until("delta").await;
    assert_eq!(seen.last().unwrap().data["text"], "echo: Say hi");
}

/// A chat completion request through the real router, answered once the
/// job ends: status, `x-job-id` and the body's bytes.
async fn chat(app: &axum::Router, body: serde_json::Value) -> (u16, Option<String>, String) {
    use http_body_util::BodyExt;
    use tower::ServiceExt;
    let req = axum::http::Request::post("/v1/chat/completions")
        .header("content-type", "application/json")
        .body(axum::body::Body::from(body.to_string()))
        .unwrap();
    let response = app.clone().oneshot(req).await.unwrap();
    let status = response.status().as_u16();
    let job = response
        .headers()
        .get("x-job-id")
        .map(|v| v.to_str().unwrap().to_owned());
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, job, String::from_utf8(bytes.to_vec()).unwrap())
}

/// Runs a streaming worker's one job: accept, two deltas, the result.
async fn serve_one(w: &mut TestWorker) -> Assignment {
    let a = w.expect_assign().await;
    accept(w, &a).await;
    let output = TestWorker::output_for(&a);
    let text = output.as_str().unwrap();
    let (head, tail) = text.split_at(text.len() / 2);
    delta(w, &a, 0, head).await;
    delta(w, &a, 1, tail).await;
    w.send_result(&a).await;
    a
}

/// Issue 31: the OpenAI door, whole: a chat request becomes an LLM_INFER
/// job whose output is the completion's message; `id` and `x-job-id` name it.
#[tokio::test(start_paused = true)]
async fn a_chat_completion_is_a_job() {
    let (c, app) = setup(spec_config()).await;
    let mut w = worker_with(&c, 1, &["deltas"]).await;
    let request = json!({"model": "m1", "messages": [{"role": "user", "content": "Say hi"}],
        "max_tokens": 8, "temperature": 0.2});
    let asked = tokio::spawn({
        let app = app.clone();
        async move { chat(&app, request).await }
    });
    let a = serve_one(&mut w).await;
    // The request's model goes to the worker with the job.
    assert!(
        matches!(&a.payload, protocol::api::Payload::Llm { model: Some(m), max_tokens: 8, .. } if m == "m1"),
        "{:?}",
        a.payload
    );
    let (status, job, body) = asked.await.unwrap();
    assert_eq!(status, 200, "{body}");
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["model"], "m1");
    assert_eq!(body["choices"][0]["message"]["content"], "echo: Say hi");
    assert_eq!(job.as_deref(), Some(a.job_id.to_string().as_str()));
    assert_eq!(body["id"], a.job_id.to_string());
    let record = job_status(&app, &a.job_id.to_string()).await;
    assert_eq!(record["status"], "completed");
    assert_eq!(record["result"]["output"], "echo: Say hi");
}

/// Issue 31: the OpenAI door, streamed: the role first, the deltas as
/// chunks that join to the job's output, a `stop` chunk, then `[DONE]`.
#[tokio::test(start_paused = true)]
async fn a_streamed_chat_completion_ends_with_done() {
    let (c, app) = setup(spec_config()).await;
    let mut w = worker_with(&c, 1, &["deltas"]).await;
    let request = json!({"messages": [{"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Say hi"}]}], "stream": true});
    let asked = tokio::spawn({
        let app = app.clone();
        async move { chat(&app, request).await }
    });
    let a = serve_one(&mut w).await;
    let (status, job, body) = asked.await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(job.as_deref(), Some(a.job_id.to_string().as_str()));
    let data: Vec<&str> = body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .collect();
    assert_eq!(*data.last().unwrap(), "[DONE]");
    let chunks: Vec<serde_json::Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "echo: system: Be brief.\nuser: Say hi\nassistant:");
    assert_eq!(
        chunks.last().unwrap()["choices"][0]["finish_reason"],
        "stop"
    );
    // This reader reads only at the end: the deltas it missed come as one.
    assert_eq!(chunks.len(), 3, "role, the text, stop: {chunks:?}");
}

/// Issue 31: the door's errors are OpenAI's shape; `GET /v1/models` lists.
#[tokio::test(start_paused = true)]
async fn the_doors_errors_are_openai_shaped() {
    let (_c, app) = setup(spec_config()).await;
    let (status, _, body) = chat(&app, json!({"messages": []})).await;
    assert_eq!(status, 400);
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert!(body["error"]["message"].is_string());
    let (status, _, body) = chat(
        &app,
        json!({"messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 0}),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    let models = call(&app, "GET", "/v1/models", None).await;
    assert_eq!(models.body["object"], "list");
    assert_eq!(models.body["data"][0]["id"], "coordinator");
}

/// Issue 31: a stream held past `stream_ms_max` ends with an `end` event
/// (no id); the reader resumes from its last event id and gets the rest.
#[tokio::test(start_paused = true)]
async fn a_stream_held_too_long_ends_and_resumes() {
    let mut config = spec_config();
    config.limits.stream_ms_max = 1_000;
    let (c, app) = setup(config).await;
    let mut w = worker_with(&c, 1, &["deltas"]).await;
    let job = id(&commit(&app, "fast", llm_job("alice")).await);
    let a = w.expect_assign().await;
    accept(&mut w, &a).await;
    delta(&mut w, &a, 0, "echo: ").await;
    let mut events = Events::open(&app, &job, None).await.unwrap();
    let seen = events.until("end").await;
    let end = seen.last().unwrap();
    assert_eq!(end.data["reason"], "stream_time_limit");
    assert_eq!(end.id, None);
    assert!(events.next().await.is_none());
    let last_id = seen.iter().rev().find_map(|e| e.id.clone()).unwrap();
    delta(&mut w, &a, 1, "Say hi").await;
    w.send_result(&a).await;
    let mut resumed = Events::open(&app, &job, Some(&last_id)).await.unwrap();
    let rest = resumed.until("job").await;
    assert_eq!(joined(&rest), "Say hi");
}

/// Issue 31: a streamed chat completion whose job restarts after text was
/// sent ends with an OpenAI error object, code `stream_restarted`.
#[tokio::test(start_paused = true)]
async fn a_chat_stream_whose_job_restarts_ends_with_an_error() {
    let (c, app) = setup(spec_config()).await;
    let mut w = worker_with(&c, 1, &["deltas"]).await;
    let request = json!({"messages": [{"role": "user", "content": "Say hi"}], "stream": true});
    let asked = tokio::spawn({
        let app = app.clone();
        async move { chat(&app, request).await }
    });
    let a = w.expect_assign().await;
    accept(&mut w, &a).await;
    delta(&mut w, &a, 0, "half").await;
    settle().await;
    drop(w);
    let (status, _, body) = asked.await.unwrap();
    assert_eq!(status, 200);
    assert!(body.contains("\"half\""), "{body}");
    let last = body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .next_back()
        .unwrap();
    let error: serde_json::Value = serde_json::from_str(last).unwrap();
    assert_eq!(error["error"]["code"], "stream_restarted", "{body}");
}

/// Issue 30 with 31: a paid job settled on completion streams no delta
/// before it is settled; its whole output comes once it is `completed`.
/// A payer whose settlement fails gets no output, streamed or polled
/// (decision 0021); before the merge of the two the deltas went out while
/// the settlement was still pending.
#[tokio::test(start_paused = true)]
async fn a_paid_job_streams_its_output_only_once_settled() {
    let stub = testkit::FacilitatorStub::new("eip155:84532");
    stub.set_script(testkit::StubScript::settle_delay(
        std::time::Duration::from_secs(2),
    ));
    let config = Config {
        network: "eip155:84532".into(),
        ..spec_config()
    };
    let (c, app) = setup(config).await;
    enable_stub_payments(&c, &stub);
    let mut w = worker_with(&c, 2, &["deltas"]).await;
    let path = "/v1/jobs/commit/fast";
    let challenge = post(&app, path, &llm_job("alice"), None).await;
    let (name, value) = pay(&challenge, 3);
    let committed = post(&app, path, &llm_job("alice"), Some((&name, &value))).await;
    let job = id(&committed);
    let a = w.expect_assign().await;
    let mut events = Events::open(&app, &job, None).await.unwrap();
    accept(&mut w, &a).await;
    delta(&mut w, &a, 0, "echo: ").await;
    delta(&mut w, &a, 1, "Say hi").await;
    // The result comes a second later: meanwhile the job runs with text
    // its readers could be shown.
    let frame = w.result_frame(&a, "2026-11-21T10:00:01.000Z");
    let worker = tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        w.send(frame).await;
        w
    });
    // When the first delta arrives the job is settled and completed
    // already (the settlement takes 2 s here).
    let mut all = events.until("delta").await;
    assert_eq!(
        job_status(&app, &job).await["status"],
        "completed",
        "a delta before the settlement: {all:?}"
    );
    all.extend(events.until("job").await);
    drop(worker);
    assert_eq!(joined(&all), "echo: Say hi");
    assert_eq!(stub.settled(), 1);
}
