//! Stubs of hosted LLM providers: OpenAI Chat Completions ([`openai`]) and
//! Anthropic Messages ([`anthropic`]), close enough to the documented wire
//! formats that the official SDKs accept their answers.
//!
//! Answers are deterministic: content comes from the prompt (see
//! [`answer_for`]), ids from a ChaCha RNG seeded by [`StubConfig::seed`],
//! `created` from the injected clock. Faults are scripted per call index (every
//! POST to the API counts, from 0) or as a default for every call, and each
//! call is recorded ([`RecordedCall`], without the key).
//!
//! Order of checks per call: a scripted `unauthorized` fault, the auth header,
//! the request shape, then the other scripted faults.
//!
//! A request with `"stream": true` is answered with server-sent events in the
//! provider's streaming format (one text delta per word); errors before the
//! answer starts (401, 429, 500) stay plain JSON, as with the real APIs.

pub mod anthropic;
pub mod openai;

use crate::outputs;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use protocol::clock::SharedClock;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderKind {
    #[serde(rename = "openai")]
    OpenAi,
    Anthropic,
}

impl FromStr for ProviderKind {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "openai" | "provider_a" => Ok(ProviderKind::OpenAi),
            "anthropic" | "provider_b" => Ok(ProviderKind::Anthropic),
            _ => Err(format!(
                "unknown provider kind {text:?}: openai or anthropic"
            )),
        }
    }
}

/// A scripted misbehaviour of one call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StubFault {
    /// 401 even with the right key (a revoked key).
    Unauthorized,
    /// 429 with `retry-after: retry_after_s`.
    RateLimited {
        #[serde(default = "default_retry_after_s")]
        retry_after_s: u64,
    },
    /// 500 in the provider's error shape.
    ServerError,
    /// A normal answer after `delay_ms` (tokio time).
    Slow { delay_ms: u64 },
    /// 200 with a truncated JSON body (streaming: one event with truncated JSON data).
    MalformedJson,
    /// 200, then the connection drops after `after_events` server-sent events
    /// (a non-streaming answer: after the first half of its JSON body), with
    /// no end of the chunked body: what a client sees when a stream is cut.
    CutStream {
        #[serde(default)]
        after_events: usize,
    },
}

fn default_retry_after_s() -> u64 {
    1
}

impl StubFault {
    pub fn name(&self) -> &'static str {
        match self {
            StubFault::Unauthorized => "unauthorized",
            StubFault::RateLimited { .. } => "rate_limited",
            StubFault::ServerError => "server_error",
            StubFault::Slow { .. } => "slow",
            StubFault::MalformedJson => "malformed_json",
            StubFault::CutStream { .. } => "cut_stream",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StubFaultRule {
    pub call: u64,
    #[serde(flatten)]
    pub fault: StubFault,
}

#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct StubConfig {
    pub seed: u64,
    /// The key callers must present (`Authorization: Bearer` / `x-api-key`).
    pub api_key: String,
    /// Listed by `GET /v1/models`; answers echo the requested model.
    pub model: String,
    pub faults: Vec<StubFaultRule>,
    /// For every call without a rule.
    pub default_fault: Option<StubFault>,
}

impl std::fmt::Debug for StubConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StubConfig")
            .field("seed", &self.seed)
            .field("model", &self.model)
            .field("faults", &self.faults)
            .field("default_fault", &self.default_fault)
            .finish_non_exhaustive()
    }
}

impl Default for StubConfig {
    fn default() -> Self {
        Self {
            seed: 0,
            api_key: "test-key".to_owned(),
            model: "stub-model".to_owned(),
            faults: Vec::new(),
            default_fault: None,
        }
    }
}

/// One call as the stub saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RecordedCall {
    pub index: u64,
    pub at_ms: i64,
    pub path: String,
    /// Whether the right key was presented (the key itself is not kept).
    pub authorized: bool,
    pub model: Option<String>,
    /// The text of all messages (system first), newline-separated.
    pub prompt: String,
    pub max_tokens: Option<u64>,
    pub status: u16,
    pub fault: Option<String>,
    /// Whether the caller asked for server-sent events.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub stream: bool,
}

/// A request reduced to what the stub needs.
#[derive(Debug, Clone, Default)]
pub(crate) struct ChatRequest {
    pub model: String,
    pub system: String,
    pub messages: Vec<String>,
    pub last_user: String,
    pub max_tokens: Option<u64>,
    /// Server-sent events were asked for.
    pub stream: Option<StreamOptions>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct StreamOptions {
    /// OpenAI's `stream_options.include_usage`: a last chunk carrying usage.
    pub include_usage: bool,
}

impl ChatRequest {
    fn prompt(&self) -> String {
        let mut parts = Vec::new();
        if !self.system.is_empty() {
            parts.push(self.system.clone());
        }
        parts.extend(self.messages.iter().cloned());
        parts.join("\n")
    }

    fn prompt_tokens(&self) -> u64 {
        words(&self.prompt())
    }
}

pub(crate) fn words(text: &str) -> u64 {
    (text.split_whitespace().count() as u64).max(1)
}

/// The answer text for a conversation: task-looking prompts get an answer
/// of the task's shape (so a router's task templates parse), anything else an
/// LLM-style text from the last user message.
pub fn answer_for(system: &str, last_user: &str, max_tokens: Option<u64>) -> String {
    let instructions = format!("{system}\n{last_user}").to_lowercase();
    if instructions.contains("json") {
        outputs::extract_json(last_user).to_string()
    } else if instructions.contains("classify") {
        outputs::classify(last_user).to_owned()
    } else if instructions.contains("summar") {
        outputs::summarize(last_user)
    } else {
        let budget = max_tokens.unwrap_or(64).min(u32::MAX as u64) as u32;
        outputs::llm_text(last_user, budget)
    }
}

pub(crate) struct StubState {
    kind: ProviderKind,
    api_key: String,
    model: String,
    clock: SharedClock,
    rng: Mutex<ChaCha20Rng>,
    calls: Mutex<Vec<RecordedCall>>,
    scripted: Mutex<BTreeMap<u64, StubFault>>,
    default_fault: Mutex<Option<StubFault>>,
}

impl StubState {
    /// `prefix` + `len` base62 characters from the seeded RNG.
    pub(crate) fn next_id(&self, prefix: &str, len: usize) -> String {
        const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
        let mut rng = self.rng.lock().expect("stub rng poisoned");
        let tail: String = (0..len)
            .map(|_| ALPHABET[rng.gen_range(0..ALPHABET.len())] as char)
            .collect();
        format!("{prefix}{tail}")
    }

    pub(crate) fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }
}

/// A hosted-provider stub; clones share state.
#[derive(Clone)]
pub struct ProviderStub {
    state: Arc<StubState>,
}

impl std::fmt::Debug for ProviderStub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderStub")
            .field("kind", &self.state.kind)
            .finish_non_exhaustive()
    }
}

impl ProviderStub {
    pub fn new(kind: ProviderKind, config: StubConfig, clock: SharedClock) -> Self {
        let scripted = config
            .faults
            .iter()
            .map(|r| (r.call, r.fault.clone()))
            .collect();
        Self {
            state: Arc::new(StubState {
                kind,
                api_key: config.api_key,
                model: config.model,
                clock,
                rng: Mutex::new(ChaCha20Rng::seed_from_u64(config.seed)),
                calls: Mutex::new(Vec::new()),
                scripted: Mutex::new(scripted),
                default_fault: Mutex::new(config.default_fault),
            }),
        }
    }

    pub fn openai(config: StubConfig, clock: SharedClock) -> Self {
        Self::new(ProviderKind::OpenAi, config, clock)
    }

    pub fn anthropic(config: StubConfig, clock: SharedClock) -> Self {
        Self::new(ProviderKind::Anthropic, config, clock)
    }

    pub fn kind(&self) -> ProviderKind {
        self.state.kind
    }

    /// The axum service; serve it on a socket or drive it in-process with `oneshot`.
    pub fn router(&self) -> Router {
        match self.state.kind {
            ProviderKind::OpenAi => openai::router(self.state.clone()),
            ProviderKind::Anthropic => anthropic::router(self.state.clone()),
        }
    }

    /// Every call so far, in arrival order.
    pub fn calls(&self) -> Vec<RecordedCall> {
        self.state
            .calls
            .lock()
            .expect("stub calls poisoned")
            .clone()
    }

    /// Fault for call `call` (0-based over all calls of this stub).
    pub fn script(&self, call: u64, fault: StubFault) {
        self.state
            .scripted
            .lock()
            .expect("stub script poisoned")
            .insert(call, fault);
    }

    /// Fault for the next call to arrive.
    pub fn script_next(&self, fault: StubFault) {
        let next = self.state.calls.lock().expect("stub calls poisoned").len() as u64;
        self.script(next, fault);
    }

    pub fn set_default_fault(&self, fault: Option<StubFault>) {
        *self
            .state
            .default_fault
            .lock()
            .expect("stub fault poisoned") = fault;
    }
}

/// Serves `router` on `listener` until the task is dropped.
pub async fn serve(listener: tokio::net::TcpListener, router: Router) -> std::io::Result<()> {
    axum::serve(listener, router).await
}

/// What a provider module supplies to the shared call flow.
pub(crate) trait Dialect {
    fn authorized(headers: &HeaderMap, key: &str) -> bool;
    /// A problem with the request's headers other than auth (Anthropic's version header).
    fn header_problem(_headers: &HeaderMap) -> Option<String> {
        None
    }
    fn parse(body: &serde_json::Value) -> Result<ChatRequest, String>;
    fn error(status: StatusCode, kind: ErrorKind, message: &str) -> Response;
    fn success(state: &StubState, request: &ChatRequest, content: &str) -> serde_json::Value;
    /// The start of a success body, cut off: what `malformed_json` sends.
    fn truncated(state: &StubState) -> String;
    /// A streamed answer, each element one whole server-sent event.
    fn stream_events(state: &StubState, request: &ChatRequest, content: &str) -> Vec<String>;
    /// What `malformed_json` sends to a streaming request.
    fn truncated_event(state: &StubState) -> String {
        sse_event(None, &Self::truncated(state))
    }
}

/// One server-sent event: an optional `event:` line, one `data:` line.
pub(crate) fn sse_event(event: Option<&str>, data: &str) -> String {
    debug_assert!(!data.contains('\n'), "one data line per event");
    match event {
        Some(event) => format!("event: {event}\ndata: {data}\n\n"),
        None => format!("data: {data}\n\n"),
    }
}

/// The pieces a streamed answer delivers the text in: word by word, each
/// with the whitespace after it, so the pieces concatenate to `content`.
pub(crate) fn text_pieces(content: &str) -> Vec<&str> {
    let mut pieces = Vec::new();
    let mut start = 0;
    let mut in_space = false;
    for (at, c) in content.char_indices() {
        if c.is_whitespace() {
            in_space = true;
        } else if in_space {
            pieces.push(&content[start..at]);
            start = at;
            in_space = false;
        }
    }
    if start < content.len() {
        pieces.push(&content[start..]);
    }
    pieces
}

/// A 200 whose body is `pieces`, then (when `cut`) a dropped connection
/// after the first `after` of them instead of the body's end.
fn piecewise_response(
    content_type: &'static str,
    pieces: Vec<String>,
    cut: Option<usize>,
) -> Response {
    let (pieces, failure) = match cut {
        None => (pieces, None),
        Some(after) => {
            let kept = pieces.into_iter().take(after).collect();
            let error = std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "the stub cut the stream (cut_stream fault)",
            );
            (kept, Some(Err(error)))
        }
    };
    let chunks = pieces
        .into_iter()
        .map(|piece| Ok(axum::body::Bytes::from(piece)))
        .chain(failure);
    // A pause before each piece lets hyper flush what came before it: the
    // client sees events one at a time, and a cut after them, instead of a
    // connection dropped before the headers (hyper drops the unsent buffer).
    let chunks = futures_util::StreamExt::then(futures_util::stream::iter(chunks), |chunk| async {
        tokio::task::yield_now().await;
        chunk
    });
    let mut response = Response::new(axum::body::Body::from_stream(chunks));
    let headers = response.headers_mut();
    headers.insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static(content_type),
    );
    if content_type == SSE_CONTENT_TYPE {
        headers.insert(
            axum::http::header::CACHE_CONTROL,
            axum::http::HeaderValue::from_static("no-cache"),
        );
    }
    response
}

const SSE_CONTENT_TYPE: &str = "text/event-stream; charset=utf-8";

/// `text` split in two at a character boundary near its middle.
fn halves(text: String) -> Vec<String> {
    let mut middle = text.len() / 2;
    while !text.is_char_boundary(middle) {
        middle -= 1;
    }
    let (first, second) = text.split_at(middle);
    vec![first.to_owned(), second.to_owned()]
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorKind {
    Authentication,
    InvalidRequest,
    RateLimit,
    Server,
}

/// An answer and what the call record keeps of it: the status and the
/// fault that shaped it (if one did).
type Answer<'f> = (u16, Option<&'f StubFault>, Response);

/// The call flow shared by both providers.
pub(crate) async fn handle_call<D: Dialect>(
    state: Arc<StubState>,
    path: &str,
    headers: HeaderMap,
    body: &[u8],
) -> Response {
    let (index, fault) = next_fault(&state);
    let at_ms = state.now_ms();
    let authorized = D::authorized(&headers, &state.api_key);
    let parsed = serde_json::from_slice::<serde_json::Value>(body)
        .map_err(|e| format!("invalid JSON body: {e}"))
        .and_then(|v| D::parse(&v));
    let mut record = RecordedCall {
        index,
        at_ms,
        path: path.to_owned(),
        authorized,
        model: parsed.as_ref().ok().map(|r| r.model.clone()),
        prompt: parsed.as_ref().map(ChatRequest::prompt).unwrap_or_default(),
        max_tokens: parsed.as_ref().ok().and_then(|r| r.max_tokens),
        status: 0,
        fault: None,
        stream: parsed.as_ref().is_ok_and(|r| r.stream.is_some()),
    };
    // Record before any slow sleep so the call order is the arrival order.
    let slot = {
        let mut calls = state.calls.lock().expect("stub calls poisoned");
        calls.push(record.clone());
        calls.len() - 1
    };
    let (status, fired, response) = match admit::<D>(fault.as_ref(), authorized, &headers, parsed) {
        Ok(request) => respond::<D>(&state, fault.as_ref(), &request).await,
        Err(r) => (
            r.status.as_u16(),
            r.fault,
            D::error(r.status, r.kind, &r.message),
        ),
    };
    record.status = status;
    record.fault = fired.map(|f| f.name().to_owned());
    state.calls.lock().expect("stub calls poisoned")[slot] = record;
    response
}

/// The index of the call arriving now and the fault scripted for it (its
/// own rule, else the default).
fn next_fault(state: &StubState) -> (u64, Option<StubFault>) {
    let calls = state.calls.lock().expect("stub calls poisoned");
    let index = calls.len() as u64;
    let scripted = state.scripted.lock().expect("stub script poisoned");
    let fault = scripted.get(&index).cloned().or_else(|| {
        state
            .default_fault
            .lock()
            .expect("stub fault poisoned")
            .clone()
    });
    (index, fault)
}

/// Why a call is not let in: the error to answer with and, for a scripted
/// `unauthorized`, the fault.
struct Refusal<'f> {
    status: StatusCode,
    kind: ErrorKind,
    message: String,
    fault: Option<&'f StubFault>,
}

/// The request, or the refusal of a call that is not let in: a scripted
/// `unauthorized` fault or a wrong key (401), then a header problem or a
/// body that is not a request (400).
fn admit<'f, D: Dialect>(
    fault: Option<&'f StubFault>,
    authorized: bool,
    headers: &HeaderMap,
    parsed: Result<ChatRequest, String>,
) -> Result<ChatRequest, Refusal<'f>> {
    let bad_request = |message| Refusal {
        status: StatusCode::BAD_REQUEST,
        kind: ErrorKind::InvalidRequest,
        message,
        fault: None,
    };
    if fault == Some(&StubFault::Unauthorized) || !authorized {
        return Err(Refusal {
            status: StatusCode::UNAUTHORIZED,
            kind: ErrorKind::Authentication,
            message: "Incorrect API key provided.".into(),
            fault: fault.filter(|f| **f == StubFault::Unauthorized),
        });
    }
    if let Some(problem) = D::header_problem(headers) {
        return Err(bad_request(problem));
    }
    parsed.map_err(bad_request)
}

/// The answer to an admitted request: a scripted fault's, else the content,
/// plain or streamed, cut short under `cut_stream`.
async fn respond<'f, D: Dialect>(
    state: &StubState,
    fault: Option<&'f StubFault>,
    request: &ChatRequest,
) -> Answer<'f> {
    if let Some(answer) = fault_answer::<D>(state, fault, request).await {
        return answer;
    }
    let content = answer_for(&request.system, &request.last_user, request.max_tokens);
    let cut = match fault {
        Some(StubFault::CutStream { after_events }) => Some(*after_events),
        _ => None,
    };
    let response = if request.stream.is_some() {
        let events = D::stream_events(state, request, &content);
        piecewise_response(SSE_CONTENT_TYPE, events, cut)
    } else if cut.is_some() {
        let body = D::success(state, request, &content).to_string();
        piecewise_response("application/json", halves(body), Some(1))
    } else {
        // The plain answer stays byte-for-byte what it was before streaming.
        let body = D::success(state, request, &content);
        axum::Json(body).into_response()
    };
    (200, fault, response)
}

/// What a fault answers instead of the content; `None` for faults that
/// answer normally (`slow` after its delay, `cut_stream` in [`respond`]).
async fn fault_answer<'f, D: Dialect>(
    state: &StubState,
    fault: Option<&'f StubFault>,
    request: &ChatRequest,
) -> Option<Answer<'f>> {
    match fault {
        Some(f @ StubFault::RateLimited { retry_after_s }) => {
            let mut response = D::error(
                StatusCode::TOO_MANY_REQUESTS,
                ErrorKind::RateLimit,
                "Rate limit reached for requests. Please retry later.",
            );
            response.headers_mut().insert(
                "retry-after",
                retry_after_s
                    .to_string()
                    .parse()
                    .expect("digits are a header value"),
            );
            Some((429, Some(f), response))
        }
        Some(f @ StubFault::ServerError) => {
            let response = D::error(
                StatusCode::INTERNAL_SERVER_ERROR,
                ErrorKind::Server,
                "The server had an error while processing your request.",
            );
            Some((500, Some(f), response))
        }
        Some(f @ StubFault::MalformedJson) if request.stream.is_some() => {
            let event = D::truncated_event(state);
            let response = piecewise_response(SSE_CONTENT_TYPE, vec![event], None);
            Some((200, Some(f), response))
        }
        Some(f @ StubFault::MalformedJson) => {
            let response = (
                StatusCode::OK,
                [(axum::http::header::CONTENT_TYPE, "application/json")],
                D::truncated(state),
            )
                .into_response();
            Some((200, Some(f), response))
        }
        Some(StubFault::Slow { delay_ms }) => {
            tokio::time::sleep(Duration::from_millis(*delay_ms)).await;
            None
        }
        Some(StubFault::Unauthorized | StubFault::CutStream { .. }) | None => None,
    }
}

/// Text of a message `content`: a string, or an array of `{type:"text", text}` parts.
pub(crate) fn content_text(content: &serde_json::Value) -> Option<String> {
    match content {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Array(parts) => Some(
            parts
                .iter()
                .filter_map(|p| p.get("text").and_then(serde_json::Value::as_str))
                .collect::<Vec<_>>()
                .join("\n"),
        ),
        serde_json::Value::Null => Some(String::new()),
        _ => None,
    }
}
