//! Anthropic Messages: `POST /v1/messages` with `x-api-key` and
//! `anthropic-version` (a `Authorization: Bearer` key is accepted too). Errors use Anthropic's
//! `{"type": "error", "error": {"type", "message"}}` shape. A streamed answer
//! is `message_start`, `content_block_start`, a `ping`, one `content_block_delta`
//! (`text_delta`) per word, `content_block_stop`, `message_delta` (stop reason,
//! output usage) and `message_stop`.

use super::{
    content_text, handle_call, sse_event, text_pieces, words, ChatRequest, Dialect, ErrorKind,
    StreamOptions, StubState,
};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};
use std::sync::Arc;

pub(crate) fn router(state: Arc<StubState>) -> Router {
    Router::new()
        .route("/v1/messages", post(messages))
        .with_state(state)
}

async fn messages(
    State(state): State<Arc<StubState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    handle_call::<Anthropic>(state, "/v1/messages", headers, &body).await
}

struct Anthropic;

impl Dialect for Anthropic {
    /// `x-api-key` as documented; recent official SDKs send the key as
    /// `Authorization: Bearer` instead, so that is accepted too.
    fn authorized(headers: &HeaderMap, key: &str) -> bool {
        let x_api_key = headers.get("x-api-key").and_then(|v| v.to_str().ok());
        let bearer = headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        x_api_key
            .or(bearer)
            .is_some_and(|presented| presented == key)
    }

    fn header_problem(headers: &HeaderMap) -> Option<String> {
        if headers.contains_key("anthropic-version") {
            None
        } else {
            Some("anthropic-version: header is required".into())
        }
    }

    fn parse(body: &Value) -> Result<ChatRequest, String> {
        let model = body
            .get("model")
            .and_then(Value::as_str)
            .ok_or("model: Field required")?
            .to_owned();
        let max_tokens = body
            .get("max_tokens")
            .and_then(Value::as_u64)
            .ok_or("max_tokens: Field required")?;
        let messages = body
            .get("messages")
            .and_then(Value::as_array)
            .filter(|m| !m.is_empty())
            .ok_or("messages: at least one message is required")?;
        let system = match body.get("system") {
            None => String::new(),
            Some(s) => content_text(s).ok_or("system: must be a string or text blocks")?,
        };
        let stream = match body.get("stream") {
            None | Some(Value::Null) | Some(Value::Bool(false)) => None,
            Some(Value::Bool(true)) => Some(StreamOptions::default()),
            Some(_) => return Err("stream: Input should be a valid boolean".into()),
        };
        let mut request = ChatRequest {
            model,
            system,
            stream,
            max_tokens: Some(max_tokens),
            ..ChatRequest::default()
        };
        for message in messages {
            let role = message
                .get("role")
                .and_then(Value::as_str)
                .ok_or("messages: each message needs a role")?;
            let text = message
                .get("content")
                .and_then(content_text)
                .ok_or("messages: content must be a string or content blocks")?;
            match role {
                "user" => {
                    request.last_user = text.clone();
                    request.messages.push(text);
                }
                "assistant" => request.messages.push(text),
                other => return Err(format!("messages: unexpected role {other:?}")),
            }
        }
        Ok(request)
    }

    fn error(status: StatusCode, kind: ErrorKind, message: &str) -> Response {
        let kind = match kind {
            ErrorKind::Authentication => "authentication_error",
            ErrorKind::InvalidRequest => "invalid_request_error",
            ErrorKind::RateLimit => "rate_limit_error",
            ErrorKind::Server => "api_error",
        };
        let body = json!({"type": "error", "error": {"type": kind, "message": message}});
        (status, Json(body)).into_response()
    }

    fn success(state: &StubState, request: &ChatRequest, content: &str) -> Value {
        json!({
            "id": state.next_id("msg_", 24),
            "type": "message",
            "role": "assistant",
            "model": request.model,
            "content": [{"type": "text", "text": content}],
            "stop_reason": "end_turn",
            "stop_sequence": null,
            "usage": {
                "input_tokens": request.prompt_tokens(),
                "output_tokens": words(content)
            }
        })
    }

    fn stream_events(state: &StubState, request: &ChatRequest, content: &str) -> Vec<String> {
        let event = |name: &str, data: Value| sse_event(Some(name), &data.to_string());
        let mut events = vec![
            event(
                "message_start",
                json!({"type": "message_start", "message": {
                    "id": state.next_id("msg_", 24),
                    "type": "message",
                    "role": "assistant",
                    "model": request.model,
                    "content": [],
                    "stop_reason": null,
                    "stop_sequence": null,
                    "usage": {"input_tokens": request.prompt_tokens(), "output_tokens": 1}
                }}),
            ),
            event(
                "content_block_start",
                json!({"type": "content_block_start", "index": 0,
                    "content_block": {"type": "text", "text": ""}}),
            ),
            event("ping", json!({"type": "ping"})),
        ];
        for piece in text_pieces(content) {
            events.push(event(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0,
                    "delta": {"type": "text_delta", "text": piece}}),
            ));
        }
        events.push(event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ));
        events.push(event(
            "message_delta",
            json!({"type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": null},
                "usage": {"output_tokens": words(content)}}),
        ));
        events.push(event("message_stop", json!({"type": "message_stop"})));
        events
    }

    /// Anthropic's SDK reads events by name; a nameless one it would skip.
    fn truncated_event(state: &StubState) -> String {
        sse_event(Some("message_start"), &Self::truncated(state))
    }

    fn truncated(state: &StubState) -> String {
        format!(
            r#"{{"id":"{}","type":"message","role":"assistant","content":[{{"type":"te"#,
            state.next_id("msg_", 24)
        )
    }
}
