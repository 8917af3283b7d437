//! Small fakes of the coordinator and of both hosted providers, served
//! through the in-process transport. Each test binary uses a subset.
#![allow(dead_code)]

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Json;
use protocol::receipt::ReceiptBody;
use protocol::signing::Keypair;
use router::{
    ApiKey, ComputeRouter, CoordinatorUrls, PaymentChallenge, PaymentClient, RouterConfig,
};
use serde_json::{json, Value};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use testkit::InProcessTransport;
use uuid::Uuid;

pub const CHAIN_A_URL: &str = "http://coordinator-a.test";
pub const CHAIN_B_URL: &str = "http://coordinator-b.test:9000";
/// With `/v1`, as `OPENAI_BASE_URL` conventionally is.
pub const OPENAI_URL: &str = "http://openai.test/v1";
pub const ANTHROPIC_URL: &str = "http://anthropic.test";
pub const OPENAI_KEY: &str = "sk-test-openai";
pub const ANTHROPIC_KEY: &str = "sk-ant-test";
pub const PAID_HEADER_VALUE: &str = "signed-payment-token";
// Hardhat/anvil account #0: a well-known test key.
const WORKER_SECRET: &str = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";

pub fn worker_key() -> Keypair {
    Keypair::from_secret_hex(WORKER_SECRET).unwrap()
}

/// How the fake coordinator finishes a job.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// Completed with this output and a valid receipt.
    Complete(Value),
    /// Completed with a receipt over the first output but serving the second.
    Tampered {
        signed: Value,
        served: Value,
    },
    Fail(&'static str),
    /// Stays `running` for ever.
    Never,
}

/// What the fake coordinator does with a poll's `wait_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitSupport {
    /// Answers at once, as a spec-only coordinator does.
    Ignore,
    /// Holds the poll until the job's status changes or the wait ends,
    /// following the `timeline`.
    Hold,
    /// 400, as a coordinator with a lower wait bound does.
    Refuse,
}

/// With [`WaitSupport::Hold`]: a job is `pending`, then `running` from
/// `running_after_ms` after its commit, then finishes with the outcome at
/// `done_after_ms` (`None`: never).
#[derive(Debug, Clone, Copy)]
pub struct Timeline {
    pub running_after_ms: u64,
    pub done_after_ms: Option<u64>,
}

#[derive(Debug)]
pub struct CoordinatorState {
    pub wait: WaitSupport,
    pub timeline: Timeline,
    pub committed_at: Mutex<HashMap<Uuid, tokio::time::Instant>>,
    pub network: String,
    pub require_payment: bool,
    pub private_422: bool,
    pub outcome: Outcome,
    pub pending_polls: u32,
    pub next_id: Mutex<u128>,
    pub polls_left: Mutex<HashMap<Uuid, u32>>,
    /// `METHOD path` of each request, with `+X-PAYMENT=value` on paid commits.
    pub log: Mutex<Vec<String>>,
    pub commit_bodies: Mutex<Vec<Value>>,
    /// No cancel route, as a coordinator from before decision 0022.
    pub cancel_unsupported: bool,
    /// What `GET /v1/jobs/{id}/events` sends; `None`: 404, as a
    /// coordinator from before decision 0023.
    pub events: Option<EventsScript>,
}

/// One event of the fake's job events before the job's record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FakeEvent {
    Delta(&'static str),
    Restart,
}

/// The fake's job events: `items` (event `n` from 0 has id `n + 1`), then
/// the job's record as the outcome has it (an `Outcome::Never` job's
/// stream stays open). Connection `c` (from 0) is cut after `cuts[c]` of
/// the events it sends; connections past the list are not cut.
#[derive(Debug, Clone, Default)]
pub struct EventsScript {
    pub items: Vec<FakeEvent>,
    pub cuts: Vec<usize>,
}

impl CoordinatorState {
    pub fn new(network: &str, outcome: Outcome) -> Self {
        Self {
            wait: WaitSupport::Ignore,
            timeline: Timeline {
                running_after_ms: 0,
                done_after_ms: Some(0),
            },
            committed_at: Mutex::new(HashMap::new()),
            network: network.into(),
            require_payment: false,
            private_422: true,
            outcome,
            pending_polls: 2,
            next_id: Mutex::new(1),
            polls_left: Mutex::new(HashMap::new()),
            log: Mutex::new(Vec::new()),
            commit_bodies: Mutex::new(Vec::new()),
            cancel_unsupported: false,
            events: None,
        }
    }

    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    pub fn poll_count(&self) -> usize {
        self.log()
            .iter()
            .filter(|l| l.starts_with("GET /v1/jobs/"))
            .count()
    }
}

pub fn fake_coordinator(state: Arc<CoordinatorState>) -> axum::Router {
    axum::Router::new()
        .route("/v1/quote", get(quote))
        .route("/v1/jobs/commit/{tier}", post(commit))
        .route("/v1/jobs/{id}", get(poll))
        .route("/v1/jobs/{id}/cancel", post(cancel))
        .route("/v1/jobs/{id}/events", get(events))
        .with_state(state)
}

/// `GET /v1/jobs/{id}/events` as scripted by [`EventsScript`], resuming
/// after the `Last-Event-ID` it is sent.
async fn events(
    State(s): State<Arc<CoordinatorState>>,
    Path(id): Path<Uuid>,
    headers: HeaderMap,
) -> Response {
    let last = headers
        .get("last-event-id")
        .map(|v| v.to_str().unwrap().to_owned());
    let mut line = format!("GET /v1/jobs/{id}/events");
    if let Some(last) = &last {
        line.push_str(&format!("+Last-Event-ID={last}"));
    }
    let connection = {
        let mut log = s.log.lock().unwrap();
        log.push(line);
        log.iter().filter(|l| l.contains("/events")).count() - 1
    };
    let Some(script) = &s.events else {
        let body = Json(json!({"error": "not found"}));
        return (StatusCode::NOT_FOUND, body).into_response();
    };
    let from: usize = last.map_or(0, |l| l.parse().unwrap());
    let mut chunks: Vec<String> = Vec::new();
    for (n, item) in script.items.iter().enumerate().skip(from) {
        let (name, data) = match item {
            FakeEvent::Delta(text) => ("delta", json!({ "text": text })),
            FakeEvent::Restart => ("restart", json!({})),
        };
        chunks.push(format!("event: {name}\nid: {}\ndata: {data}\n\n", n + 1));
    }
    let never = matches!(s.outcome, Outcome::Never);
    if !never {
        let record = axum::body::to_bytes(finished(&s, id).into_body(), usize::MAX)
            .await
            .unwrap();
        let record: Value = serde_json::from_slice(&record).unwrap();
        let next = script.items.len() + 1;
        chunks.push(format!("event: job\nid: {next}\ndata: {record}\n\n"));
    }
    let cut = script.cuts.get(connection).copied();
    event_stream(chunks, cut, never)
}

/// A 200 `text/event-stream` of `chunks`, one at a time; cut (a reset
/// connection) after `cut` of them, else left open when `hold`.
fn event_stream(chunks: Vec<String>, cut: Option<usize>, hold: bool) -> Response {
    use futures_util::StreamExt;
    let kept = chunks.len().min(cut.unwrap_or(usize::MAX));
    let items: Vec<Result<axum::body::Bytes, std::io::Error>> = chunks
        .into_iter()
        .take(kept)
        .map(|c| Ok(axum::body::Bytes::from(c)))
        .collect();
    let body = futures_util::stream::iter(items).then(|chunk| async {
        tokio::task::yield_now().await;
        chunk
    });
    let tail: futures_util::stream::BoxStream<'static, _> = match (cut, hold) {
        (Some(_), _) => futures_util::stream::iter([Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "the fake cut the stream",
        ))])
        .boxed(),
        (None, true) => futures_util::stream::pending().boxed(),
        (None, false) => futures_util::stream::empty().boxed(),
    };
    let mut response = Response::new(axum::body::Body::from_stream(body.chain(tail)));
    response.headers_mut().insert(
        "content-type",
        axum::http::HeaderValue::from_static("text/event-stream"),
    );
    response
}

async fn quote(
    State(s): State<Arc<CoordinatorState>>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
) -> Response {
    let query = query.unwrap_or_default();
    s.log.lock().unwrap().push(format!("GET /v1/quote?{query}"));
    let (price, endpoint, tier) = if query.contains("policy=CHEAP") {
        ("$0.005", "/v1/jobs/commit/cheap", "CHEAP")
    } else {
        ("$0.010", "/v1/jobs/commit/fast", "FAST")
    };
    Json(json!({
        "price": price, "endpoint": endpoint, "policy_resolved": tier,
        "network": s.network, "expires_at": null
    }))
    .into_response()
}

async fn commit(
    State(s): State<Arc<CoordinatorState>>,
    Path(tier): Path<String>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let payment = headers
        .get("x-payment")
        .map(|v| v.to_str().unwrap().to_owned());
    let mut line = format!("POST /v1/jobs/commit/{tier}");
    if let Some(p) = &payment {
        line.push_str(&format!("+X-PAYMENT={p}"));
    }
    s.log.lock().unwrap().push(line);
    s.commit_bodies.lock().unwrap().push(body.clone());
    if s.require_payment && payment.as_deref() != Some(PAID_HEADER_VALUE) {
        let accepts = json!([{
            "scheme": "exact", "price": "$0.010", "network": s.network,
            "payTo": "0x000000000000000000000000000000000000dEaD",
            "asset": "0x0000000000000000000000000000000000000001"
        }]);
        return (
            StatusCode::PAYMENT_REQUIRED,
            [("PAYMENT-REQUIRED", "challenge-for-".to_owned() + &s.network)],
            Json(json!({"error": "X-PAYMENT header is required", "accepts": accepts})),
        )
            .into_response();
    }
    let job_id = {
        let mut next = s.next_id.lock().unwrap();
        *next += 1;
        Uuid::from_u128(*next)
    };
    if s.private_422 && body["privacy_class"] == "PRIVATE" {
        return (
            StatusCode::UNPROCESSABLE_ENTITY,
            Json(json!({"error": "no_trusted_worker", "job_id": job_id})),
        )
            .into_response();
    }
    s.polls_left.lock().unwrap().insert(job_id, s.pending_polls);
    s.committed_at
        .lock()
        .unwrap()
        .insert(job_id, tokio::time::Instant::now());
    (StatusCode::CREATED, Json(json!({"job_id": job_id}))).into_response()
}

async fn poll(
    State(s): State<Arc<CoordinatorState>>,
    Path(id): Path<Uuid>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
) -> Response {
    let wait_ms: Option<u64> = query
        .as_deref()
        .and_then(|q| q.strip_prefix("wait_ms="))
        .map(|ms| ms.parse().unwrap());
    match wait_ms {
        Some(ms) => s
            .log
            .lock()
            .unwrap()
            .push(format!("GET /v1/jobs/{id}?wait_ms={ms}")),
        None => s.log.lock().unwrap().push(format!("GET /v1/jobs/{id}")),
    }
    if s.wait == WaitSupport::Refuse && wait_ms.is_some() {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": "wait_ms must be a whole number of milliseconds from 0 to 10"})),
        )
            .into_response();
    }
    if s.wait == WaitSupport::Hold {
        return held_poll(&s, id, wait_ms.unwrap_or(0)).await;
    }
    let mut polls = s.polls_left.lock().unwrap();
    let Some(left) = polls.get_mut(&id) else {
        return (
            StatusCode::NOT_FOUND,
            Json(json!({"error": "job not found"})),
        )
            .into_response();
    };
    let created_at = "2026-11-21T10:00:00.000Z";
    let record = |status: &str, result: Value, receipt: Value, completed_at: Value| {
        Json(json!({
            "id": id, "status": status, "result": result, "receipt": receipt,
            "created_at": created_at, "completed_at": completed_at
        }))
        .into_response()
    };
    if *left > 0 {
        *left -= 1;
        return record("pending", Value::Null, Value::Null, Value::Null);
    }
    finished(&s, id)
}

/// `POST /v1/jobs/{id}/cancel`: a job that has not finished is cancelled
/// (200); one that has answers 409 with its record.
async fn cancel(
    State(s): State<Arc<CoordinatorState>>,
    Path(id): Path<Uuid>,
    headers: HeaderMap,
) -> Response {
    let mut line = format!("POST /v1/jobs/{id}/cancel");
    if headers.contains_key(protocol::user_proof::HEADER) {
        line.push_str("+X-User-Proof");
    }
    s.log.lock().unwrap().push(line);
    if s.cancel_unsupported || !s.polls_left.lock().unwrap().contains_key(&id) {
        let body = Json(json!({"error": "job not found"}));
        return (StatusCode::NOT_FOUND, body).into_response();
    }
    let record = |status: &str, result: Value| {
        json!({
            "id": id, "status": status, "result": result, "receipt": null,
            "created_at": "2026-11-21T10:00:00.000Z", "completed_at": null
        })
    };
    // Holding polls, the job follows its timeline; otherwise one with an
    // outcome is taken to have reached it by the time of a cancel.
    let done = match s.wait {
        WaitSupport::Hold => s.timeline.done_after_ms.is_some_and(|ms| {
            let committed = s.committed_at.lock().unwrap()[&id];
            tokio::time::Instant::now() >= committed + std::time::Duration::from_millis(ms)
        }),
        _ => !matches!(s.outcome, Outcome::Never),
    };
    if !done {
        return Json(record("failed", json!({"error": "cancelled"}))).into_response();
    }
    let finished = finished(&s, id).into_body();
    let bytes = axum::body::to_bytes(finished, usize::MAX).await.unwrap();
    let mut body: Value = serde_json::from_slice(&bytes).unwrap();
    body["error"] = json!("job_not_cancellable");
    (StatusCode::CONFLICT, Json(body)).into_response()
}

/// A poll of a coordinator that holds polls: the job follows `s.timeline`.
async fn held_poll(s: &CoordinatorState, id: Uuid, wait_ms: u64) -> Response {
    use tokio::time::{Duration, Instant};
    let committed = s.committed_at.lock().unwrap()[&id];
    let running_at = committed + Duration::from_millis(s.timeline.running_after_ms);
    let done_at = s
        .timeline
        .done_after_ms
        .map(|ms| committed + Duration::from_millis(ms));
    let status_at = |t: Instant| {
        if done_at.is_some_and(|d| t >= d) {
            "done"
        } else if t >= running_at {
            "running"
        } else {
            "pending"
        }
    };
    let now = Instant::now();
    let next_change = match status_at(now) {
        "pending" => Some(running_at),
        "running" => done_at,
        _ => Some(now),
    };
    let until = now + Duration::from_millis(wait_ms);
    tokio::time::sleep_until(next_change.map_or(until, |at| at.min(until))).await;
    match status_at(Instant::now()) {
        "done" => finished(s, id),
        status => Json(json!({
            "id": id, "status": status, "result": null, "receipt": null,
            "created_at": "2026-11-21T10:00:00.000Z", "completed_at": null
        }))
        .into_response(),
    }
}

/// The record of a job that reached its outcome.
fn finished(s: &CoordinatorState, id: Uuid) -> Response {
    let created_at = "2026-11-21T10:00:00.000Z";
    let record = |status: &str, result: Value, receipt: Value, completed_at: Value| {
        Json(json!({
            "id": id, "status": status, "result": result, "receipt": receipt,
            "created_at": created_at, "completed_at": completed_at
        }))
        .into_response()
    };
    let sign = |output: &Value| {
        let body = ReceiptBody::new(
            id,
            worker_key().public_key_hex(),
            output,
            "2026-11-21T10:00:01.000Z".into(),
            None,
        );
        serde_json::to_value(body.sign(&worker_key())).unwrap()
    };
    let done = json!("2026-11-21T10:00:01.000Z");
    match &s.outcome {
        Outcome::Complete(output) => {
            record("completed", json!({"output": output}), sign(output), done)
        }
        Outcome::Tampered { signed, served } => {
            record("completed", json!({"output": served}), sign(signed), done)
        }
        Outcome::Fail(reason) => {
            record("failed", json!({"error": reason}), Value::Null, Value::Null)
        }
        Outcome::Never => record("running", Value::Null, Value::Null, Value::Null),
    }
}

/// One scripted provider answer.
#[derive(Debug, Clone)]
pub struct Scripted {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub body: String,
}

impl Scripted {
    pub fn status(status: u16, body: Value) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: body.to_string(),
        }
    }

    pub fn rate_limited(retry_after_s: u64) -> Self {
        Self {
            status: 429,
            headers: vec![("retry-after", retry_after_s.to_string())],
            body: json!({"error": {"message": "rate limited", "type": "rate_limit_error"}})
                .to_string(),
        }
    }

    pub fn raw(status: u16, body: &str) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: body.into(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderKind {
    OpenAi,
    Anthropic,
}

/// A fake provider: checks auth, answers scripted answers first, then
/// succeeds with `reply` (or an echo of the prompt).
#[derive(Debug)]
pub struct ProviderState {
    pub kind: ProviderKind,
    pub script: Mutex<VecDeque<Scripted>>,
    pub reply: Mutex<Option<String>>,
    /// (headers, body) of each request that passed auth.
    pub requests: Mutex<Vec<(HashMap<String, String>, Value)>>,
    pub hits: Mutex<u32>,
}

impl ProviderState {
    pub fn new(kind: ProviderKind) -> Self {
        Self {
            kind,
            script: Mutex::new(VecDeque::new()),
            reply: Mutex::new(None),
            requests: Mutex::new(Vec::new()),
            hits: Mutex::new(0),
        }
    }

    pub fn script(&self, answers: impl IntoIterator<Item = Scripted>) {
        self.script.lock().unwrap().extend(answers);
    }

    pub fn set_reply(&self, text: &str) {
        *self.reply.lock().unwrap() = Some(text.into());
    }

    pub fn hits(&self) -> u32 {
        *self.hits.lock().unwrap()
    }

    pub fn last_request(&self) -> (HashMap<String, String>, Value) {
        self.requests.lock().unwrap().last().cloned().unwrap()
    }
}

pub fn fake_provider(state: Arc<ProviderState>) -> axum::Router {
    let path = match state.kind {
        ProviderKind::OpenAi => "/v1/chat/completions",
        ProviderKind::Anthropic => "/v1/messages",
    };
    axum::Router::new()
        .route(path, post(provider_answer))
        .with_state(state)
}

async fn provider_answer(
    State(s): State<Arc<ProviderState>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    *s.hits.lock().unwrap() += 1;
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let authorised = match s.kind {
        ProviderKind::OpenAi => header("authorization") == Some(&format!("Bearer {OPENAI_KEY}")),
        ProviderKind::Anthropic => {
            header("x-api-key") == Some(ANTHROPIC_KEY)
                && header("anthropic-version") == Some("2023-06-01")
        }
    };
    if !authorised {
        return (
            StatusCode::UNAUTHORIZED,
            Json(json!({"error": {"message": "invalid api key"}})),
        )
            .into_response();
    }
    let map = headers
        .iter()
        .map(|(n, v)| (n.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
        .collect();
    s.requests.lock().unwrap().push((map, body.clone()));
    if let Some(answer) = s.script.lock().unwrap().pop_front() {
        let mut response =
            (StatusCode::from_u16(answer.status).unwrap(), answer.body).into_response();
        for (name, value) in answer.headers {
            response.headers_mut().insert(name, value.parse().unwrap());
        }
        response
            .headers_mut()
            .insert("content-type", "application/json".parse().unwrap());
        return response;
    }
    let prompt = body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default();
    let text = s
        .reply
        .lock()
        .unwrap()
        .clone()
        .unwrap_or_else(|| format!("echo: {prompt}"));
    match s.kind {
        ProviderKind::OpenAi => Json(json!({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 0,
            "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        }))
        .into_response(),
        ProviderKind::Anthropic => Json(json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": body["model"],
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn", "stop_sequence": null,
            "usage": {"input_tokens": 1, "output_tokens": 1}
        }))
        .into_response(),
    }
}

/// A payment client that returns a fixed header and records challenges.
#[derive(Debug, Default)]
pub struct FixedPayer {
    pub challenges: Mutex<Vec<PaymentChallenge>>,
    pub refuse: bool,
}

impl PaymentClient for FixedPayer {
    fn payment_header(&self, challenge: &PaymentChallenge) -> Result<(String, String), String> {
        self.challenges.lock().unwrap().push(challenge.clone());
        if self.refuse {
            return Err("price above the configured cap".into());
        }
        Ok(("X-PAYMENT".into(), PAID_HEADER_VALUE.into()))
    }
}

/// Two fake coordinators and both fake providers behind one transport.
pub struct World {
    pub transport: InProcessTransport,
    pub chain_a: Arc<CoordinatorState>,
    pub chain_b: Arc<CoordinatorState>,
    pub openai: Arc<ProviderState>,
    pub anthropic: Arc<ProviderState>,
}

impl World {
    pub fn new(chain_a: CoordinatorState, chain_b: CoordinatorState) -> Self {
        let chain_a = Arc::new(chain_a);
        let chain_b = Arc::new(chain_b);
        let openai = Arc::new(ProviderState::new(ProviderKind::OpenAi));
        let anthropic = Arc::new(ProviderState::new(ProviderKind::Anthropic));
        let transport = InProcessTransport::new()
            .with(CHAIN_A_URL, fake_coordinator(chain_a.clone()))
            .with(CHAIN_B_URL, fake_coordinator(chain_b.clone()))
            .with(OPENAI_URL, fake_provider(openai.clone()))
            .with(ANTHROPIC_URL, fake_provider(anthropic.clone()));
        Self {
            transport,
            chain_a,
            chain_b,
            openai,
            anthropic,
        }
    }

    /// Both coordinators complete every job with `output`.
    pub fn completing(output: Value) -> Self {
        Self::new(
            CoordinatorState::new("eip155:8453", Outcome::Complete(output.clone())),
            CoordinatorState::new("eip155:84532", Outcome::Complete(output)),
        )
    }

    pub fn router(&self, config: RouterConfig) -> ComputeRouter {
        ComputeRouter::with_transport(config, Arc::new(self.transport.clone()))
    }
}

/// Config pointing at the fakes, with both keys set.
pub fn config() -> RouterConfig {
    let mut config = RouterConfig::new(CoordinatorUrls {
        chain_a: CHAIN_A_URL.into(),
        chain_b: CHAIN_B_URL.into(),
    });
    config.hosted.openai.base_url = OPENAI_URL.into();
    config.hosted.openai.api_key = Some(ApiKey::new(OPENAI_KEY));
    config.hosted.anthropic.base_url = ANTHROPIC_URL.into();
    config.hosted.anthropic.api_key = Some(ApiKey::new(ANTHROPIC_KEY));
    config
}
