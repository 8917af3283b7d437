//! The OpenAI-compatible door (decision 0023): `POST /v1/chat/completions`
//! and `GET /v1/models`, so the unmodified OpenAI SDKs (and the x402
//! inference clients that speak its format) reach the coordinator. A chat
//! request becomes an `LLM_INFER` commit through the commit path itself
//! (`jobs::commit`: validation, x402 payment, admission); the answer waits
//! for the job through the job's event feed (`events.rs`), whole or as
//! OpenAI's `chat.completion.chunk` events ending with `data: [DONE]`.
//! The completion's `id` and the `x-job-id` header are the job's id, so its
//! receipt can be fetched and checked. Errors are OpenAI's shape
//! (`ApiError::openai_response`), but for 402, which stays x402's answer.

use super::error::ApiError;
use super::events::{Feed, Item};
use super::extract::{ClientAddr, CommitRequest};
use super::user_auth::ProofContext;
use super::validate;
use crate::shell::{Coordinator, Cursor};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use protocol::api::{JobStatus, Tier};
use serde::Deserialize;
use serde_json::{json, Value};
use uuid::Uuid;

/// The model name `GET /v1/models` lists and a request without one gets.
pub const DEFAULT_MODEL: &str = "coordinator";
/// The user id of a chat job whose request names no `user`.
pub const DEFAULT_USER: &str = "openai";
/// A header that picks the tier: `cheap` or `fast` (any case).
pub const TIER_HEADER: &str = "x-compute-tier";

/// The fields of a chat request the door reads; others are ignored, as
/// the commit ignores unknown fields.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct ChatRequest {
    #[serde(default)]
    pub model: Option<String>,
    pub messages: Vec<ChatMessage>,
    #[serde(default)]
    pub max_tokens: Option<u32>,
    #[serde(default)]
    pub max_completion_tokens: Option<u32>,
    #[serde(default)]
    pub stream: Option<bool>,
    /// Becomes the job's `user_id` (default `openai`).
    #[serde(default)]
    pub user: Option<String>,
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct ChatMessage {
    pub role: String,
    /// A string, or an array of parts whose `text` parts are joined.
    #[schema(value_type = Object)]
    #[serde(default)]
    pub content: Value,
}

/// The prompt of a chat (the documented template): a lone user message is
/// the prompt as it is; otherwise each message is a line `role: content`,
/// in order, and a last line `assistant:` asks for the answer.
pub fn prompt_of(messages: &[ChatMessage]) -> String {
    let text = |content: &Value| match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    };
    if let [only] = messages {
        if only.role == "user" {
            return text(&only.content);
        }
    }
    let mut prompt = String::new();
    for m in messages {
        prompt.push_str(&format!("{}: {}\n", m.role, text(&m.content)));
    }
    prompt.push_str("assistant:");
    prompt
}

/// CHEAP when the tier header says so or the model is `cheap` or ends in
/// `:cheap`; else FAST (an LLM call waits for its answer).
fn tier_of(headers: &HeaderMap, model: &str) -> Tier {
    let header = headers.get(TIER_HEADER).and_then(|v| v.to_str().ok());
    match header.map(str::to_ascii_lowercase).as_deref() {
        Some("cheap") => Tier::Cheap,
        Some(_) => Tier::Fast,
        None if model == "cheap" || model.ends_with(":cheap") => Tier::Cheap,
        None => Tier::Fast,
    }
}

/// `POST /v1/chat/completions`.
#[utoipa::path(post, path = "/v1/chat/completions", tag = "openai",
    request_body = ChatRequest,
    params(
        ("X-PAYMENT" = Option<String>, Header, description = "x402 v1 payment, as for a commit"),
        ("PAYMENT-SIGNATURE" = Option<String>, Header, description = "x402 v2 payment, as for a commit"),
        ("X-Compute-Tier" = Option<String>, Header, description = "`cheap` or `fast` (default fast; a model `cheap` or ending in `:cheap` also picks CHEAP)"),
    ),
    responses(
        (status = 200, description = "A `chat.completion` (or, with `stream: true`, `text/event-stream` of \
            `chat.completion.chunk` ending with `data: [DONE]`); `id` and the `x-job-id` header are the job's id. \
            The prompt is the lone user message, else one line `role: content` per message and a last line \
            `assistant:`; `user` is the job's user_id (default `openai`); `max_completion_tokens` or \
            `max_tokens` its max_tokens.", body = Object,
            headers(("x-job-id" = String, description = "The job's id: poll it for its receipt"))),
        (status = 400, description = "OpenAI error shape {error: {message, type, code}}", body = Object),
        (status = 402, response = crate::api::docs::PaymentRequired),
        (status = 429, description = "OpenAI error shape", body = Object),
        (status = 502, description = "The job failed (OpenAI error shape, code `job_failed`)", body = Object),
        (status = 503, description = "OpenAI error shape", body = Object),
        (status = 504, description = "The job did not end in time; poll it (code `job_pending`)", body = Object),
    ))]
pub(super) async fn chat_completions(
    State(c): State<Coordinator>,
    ClientAddr(client): ClientAddr,
    req: Request,
) -> Response {
    match chat(c, client, req).await {
        Ok(response) => response,
        Err(e) => e.openai_response(),
    }
}

async fn chat(c: Coordinator, client: String, req: Request) -> Result<Response, ApiError> {
    let (mut parts, body) = req.into_parts();
    // Reading the body needs the extensions (the size limit), not the headers.
    let headers = std::mem::take(&mut parts.headers);
    let (method, uri) = (parts.method.clone(), parts.uri.clone());
    let bytes = super::extract::read_body(Request::from_parts(parts, body), &c).await?;
    let chat: ChatRequest = serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::BadRequest(format!("not a chat completion request: {e}")))?;
    if chat.messages.is_empty() {
        return Err(ApiError::BadRequest("messages must not be empty".into()));
    }
    let model = chat.model.clone().unwrap_or_else(|| DEFAULT_MODEL.into());
    let tier = tier_of(&headers, &model);
    let mut payload = json!({"prompt": prompt_of(&chat.messages)});
    if let Some(model) = &chat.model {
        payload["model"] = json!(model);
    }
    if let Some(n) = chat.max_completion_tokens.or(chat.max_tokens) {
        payload["max_tokens"] = json!(n);
    }
    let body = json!({"job_type": "LLM_INFER", "payload": payload,
        "user_id": chat.user.as_deref().unwrap_or(DEFAULT_USER)});
    let submission = validate::submission(&body, &c.config().limits);
    let proof = ProofContext::new(&headers, &method, &uri, bytes);
    let request = CommitRequest {
        headers,
        submission,
        proof,
    };
    let committed = super::jobs::commit(c.clone(), tier, &client, request).await?;
    let settled = committed.headers().clone();
    let job_id = committed_job(committed).await?;
    let answer = Answer {
        job_id,
        model,
        created: c.now_ms() / 1000,
    };
    let answered = match Feed::open(&c, job_id, &client, Cursor::default(), false) {
        Ok(feed) if chat.stream.unwrap_or(false) => Ok(answer.stream(feed)),
        Ok(feed) => answer.whole(feed).await,
        Err(e) => Err(e),
    };
    // Every answer after the commit names the job (its receipt, or its
    // end, can be fetched) and carries the payment's settlement headers.
    let mut response = answered.unwrap_or_else(ApiError::openai_response);
    let headers = response.headers_mut();
    for name in [x402::wire::PAYMENT_RESPONSE, x402::wire::X_PAYMENT_RESPONSE] {
        let name = HeaderName::from_bytes(name.as_bytes()).expect("a header name");
        if let Some(value) = settled.get(&name) {
            headers.insert(name.clone(), value.clone());
        }
    }
    let id = HeaderValue::from_str(&job_id.to_string()).expect("a uuid is a header value");
    headers.insert("x-job-id", id);
    Ok(response)
}

/// The job id of a commit's 201 answer.
async fn committed_job(committed: Response) -> Result<Uuid, ApiError> {
    let body = axum::body::to_bytes(committed.into_body(), 4096)
        .await
        .map_err(ApiError::internal)?;
    let created: protocol::api::CommitResponse =
        serde_json::from_slice(&body).map_err(ApiError::internal)?;
    Ok(created.job_id)
}

/// What every completion of one job says about itself.
struct Answer {
    job_id: Uuid,
    model: String,
    created: i64,
}

impl Answer {
    /// Waits for the job's end: its output as one `chat.completion`.
    async fn whole(self, mut feed: Feed) -> Result<Response, ApiError> {
        while let Some(item) = feed.next().await {
            match item {
                Item::Job(record) => return self.completion(&record),
                Item::End(reason) => return Err(self.unfinished(reason)),
                _ => {}
            }
        }
        Err(self.unfinished("stream_ended"))
    }

    fn completion(&self, record: &protocol::api::JobRecord) -> Result<Response, ApiError> {
        let output = record.result.as_ref().and_then(|r| r.get("output"));
        let Some(text) = output
            .and_then(Value::as_str)
            .filter(|_| record.status == JobStatus::Completed)
        else {
            return Err(self.failed(record));
        };
        let body = json!({
            "id": self.job_id, "object": "chat.completion", "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        });
        Ok((StatusCode::OK, Json(body)).into_response())
    }

    fn failed(&self, record: &protocol::api::JobRecord) -> ApiError {
        let reason = record.result.as_ref().and_then(|r| r.get("error"));
        let reason = reason.and_then(Value::as_str).unwrap_or("failed");
        ApiError::JobFailed(format!("job {} failed: {reason}", self.job_id))
    }

    fn unfinished(&self, reason: &str) -> ApiError {
        ApiError::JobPending(format!(
            "job {} has not ended ({reason}); poll GET /v1/jobs/{}",
            self.job_id, self.job_id
        ))
    }

    fn chunk(&self, delta: Value, finish_reason: Option<&str>) -> Event {
        let chunk = json!({
            "id": self.job_id, "object": "chat.completion.chunk", "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        });
        Event::default().data(chunk.to_string())
    }

    /// The job's deltas as OpenAI chunks: the role first, then the text as
    /// it comes, a last chunk with `finish_reason`, then `[DONE]`. A
    /// restart after text was sent cannot be said in this format: the
    /// stream ends with an error (code `stream_restarted`) naming the job,
    /// which goes on and can be polled.
    fn stream(self, feed: Feed) -> Response {
        let first = self.chunk(json!({"role": "assistant", "content": ""}), None);
        let state = (self, feed, false, false);
        let rest =
            futures_util::stream::unfold(state, |(answer, mut feed, sent, done)| async move {
                if done {
                    return None;
                }
                let (event, sent, done) = match feed.next().await {
                    None => (Event::default().data("[DONE]"), sent, true),
                    Some(item) => answer.chunk_of(item, sent),
                };
                Some((
                    Ok::<_, std::convert::Infallible>(event),
                    (answer, feed, sent, done),
                ))
            });
        let first = futures_util::stream::once(async move { Ok(first) });
        let stream = futures_util::StreamExt::chain(first, rest);
        Sse::new(stream)
            .keep_alive(KeepAlive::default())
            .into_response()
    }

    /// One item as a chunk: (the event, text sent so far, the stream is over).
    fn chunk_of(&self, item: Item, sent: bool) -> (Event, bool, bool) {
        let error = |e: ApiError| {
            let (_, body) = e.openai_body();
            (Event::default().data(body.to_string()), sent, true)
        };
        match item {
            Item::Delta(text) => (self.chunk(json!({"content": text}), None), true, false),
            Item::Restart if sent => error(ApiError::StreamRestarted(format!(
                "the worker running job {} stopped mid-answer and the job was retried; \
                 poll GET /v1/jobs/{} for its output",
                self.job_id, self.job_id
            ))),
            Item::Job(record) if record.status == JobStatus::Completed => {
                (self.chunk(json!({}), Some("stop")), sent, false)
            }
            Item::Job(record) => error(self.failed(&record)),
            Item::End(reason) => error(self.unfinished(reason)),
            // Statuses and a restart before any text: nothing to show.
            _ => (Event::default().comment(""), sent, false),
        }
    }
}

/// `GET /v1/models`: the one model name this door answers to; the model a
/// request names is passed through to its answer whatever it is.
#[utoipa::path(get, path = "/v1/models", tag = "openai",
    responses((status = 200, description = "OpenAI's model list", body = Object)))]
pub(super) async fn models(State(c): State<Coordinator>) -> Json<Value> {
    let created = c.now_ms() / 1000;
    let model = |id: &str| json!({"id": id, "object": "model", "created": created, "owned_by": "coordinator"});
    Json(json!({"object": "list", "data": [model(DEFAULT_MODEL), model("cheap")]}))
}
