//! OpenAI Chat Completions: `POST /v1/chat/completions` with
//! `Authorization: Bearer <key>`, plus `GET /v1/models`. Errors use OpenAI's
//! `{"error": {"message", "type", "param", "code"}}` shape. A streamed answer
//! is `chat.completion.chunk` events: the role, one content delta per word, a
//! last choice chunk with `finish_reason`, a usage chunk (empty `choices`) when
//! `stream_options.include_usage`, then `data: [DONE]`.

use super::{
    content_text, handle_call, sse_event, text_pieces, words, ChatRequest, Dialect, ErrorKind,
    StreamOptions, StubState,
};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use std::sync::Arc;

pub(crate) fn router(state: Arc<StubState>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/models", get(models))
        .with_state(state)
}

async fn chat_completions(
    State(state): State<Arc<StubState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    handle_call::<OpenAi>(state, "/v1/chat/completions", headers, &body).await
}

async fn models(State(state): State<Arc<StubState>>, headers: HeaderMap) -> Response {
    if !OpenAi::authorized(&headers, &state.api_key) {
        return OpenAi::error(
            StatusCode::UNAUTHORIZED,
            ErrorKind::Authentication,
            "Incorrect API key provided.",
        );
    }
    Json(json!({
        "object": "list",
        "data": [{"id": state.model, "object": "model", "created": 0, "owned_by": "worker-sim"}]
    }))
    .into_response()
}

struct OpenAi;

impl Dialect for OpenAi {
    fn authorized(headers: &HeaderMap, key: &str) -> bool {
        headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|presented| presented == key)
    }

    fn parse(body: &Value) -> Result<ChatRequest, String> {
        let model = body
            .get("model")
            .and_then(Value::as_str)
            .ok_or("you must provide a model parameter")?
            .to_owned();
        let messages = body
            .get("messages")
            .and_then(Value::as_array)
            .filter(|m| !m.is_empty())
            .ok_or("'messages' must be a non-empty array")?;
        let stream = match body.get("stream") {
            None | Some(Value::Null) | Some(Value::Bool(false)) => None,
            Some(Value::Bool(true)) => Some(StreamOptions {
                include_usage: body
                    .pointer("/stream_options/include_usage")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
            }),
            Some(_) => return Err("'stream' must be a boolean".into()),
        };
        if stream.is_none() && body.get("stream_options").is_some_and(|v| !v.is_null()) {
            return Err(
                "The 'stream_options' parameter is only allowed when 'stream' is enabled.".into(),
            );
        }
        let mut request = ChatRequest {
            model,
            stream,
            max_tokens: body
                .get("max_completion_tokens")
                .or_else(|| body.get("max_tokens"))
                .and_then(Value::as_u64),
            ..ChatRequest::default()
        };
        for message in messages {
            let role = message
                .get("role")
                .and_then(Value::as_str)
                .ok_or("each message needs a role")?;
            let text = message
                .get("content")
                .and_then(content_text)
                .ok_or("message content must be a string or an array of parts")?;
            match role {
                "system" | "developer" => {
                    if !request.system.is_empty() {
                        request.system.push('\n');
                    }
                    request.system.push_str(&text);
                }
                "user" => {
                    request.last_user = text.clone();
                    request.messages.push(text);
                }
                "assistant" | "tool" => request.messages.push(text),
                other => return Err(format!("invalid role {other:?}")),
            }
        }
        Ok(request)
    }

    fn error(status: StatusCode, kind: ErrorKind, message: &str) -> Response {
        let (kind, code) = match kind {
            ErrorKind::Authentication => ("invalid_request_error", Some("invalid_api_key")),
            ErrorKind::InvalidRequest => ("invalid_request_error", None),
            ErrorKind::RateLimit => ("requests", Some("rate_limit_exceeded")),
            ErrorKind::Server => ("server_error", None),
        };
        let body = json!({
            "error": {"message": message, "type": kind, "param": null, "code": code}
        });
        (status, Json(body)).into_response()
    }

    fn success(state: &StubState, request: &ChatRequest, content: &str) -> Value {
        let prompt_tokens = request.prompt_tokens();
        let completion_tokens = words(content);
        json!({
            "id": state.next_id("chatcmpl-", 29),
            "object": "chat.completion",
            "created": state.now_ms().div_euclid(1000),
            "model": request.model,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": content, "refusal": null},
                "logprobs": null,
                "finish_reason": "stop"
            }],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens
            },
            "system_fingerprint": "fp_worker_sim"
        })
    }

    fn stream_events(state: &StubState, request: &ChatRequest, content: &str) -> Vec<String> {
        let id = state.next_id("chatcmpl-", 29);
        let created = state.now_ms().div_euclid(1000);
        let include_usage = request.stream.is_some_and(|s| s.include_usage);
        let chunk = |choices: Value, usage: Option<Value>| {
            let mut chunk = json!({
                "id": id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": request.model,
                "system_fingerprint": "fp_worker_sim",
                "choices": choices,
            });
            // With include_usage every chunk has the field, null until the last.
            if include_usage {
                chunk["usage"] = usage.unwrap_or(Value::Null);
            }
            sse_event(None, &chunk.to_string())
        };
        let choice = |delta: Value, finish_reason: Value| json!([{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason}]);
        let mut events = vec![chunk(
            choice(
                json!({"role": "assistant", "content": "", "refusal": null}),
                Value::Null,
            ),
            None,
        )];
        for piece in text_pieces(content) {
            events.push(chunk(choice(json!({"content": piece}), Value::Null), None));
        }
        events.push(chunk(choice(json!({}), json!("stop")), None));
        if include_usage {
            let prompt_tokens = request.prompt_tokens();
            let completion_tokens = words(content);
            let usage = json!({
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens
            });
            events.push(chunk(json!([]), Some(usage)));
        }
        events.push(sse_event(None, "[DONE]"));
        events
    }

    fn truncated(state: &StubState) -> String {
        format!(
            r#"{{"id":"{}","object":"chat.completion","choices":[{{"index":0,"message":{{"role":"assis"#,
            state.next_id("chatcmpl-", 29)
        )
    }
}
