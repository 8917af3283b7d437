//! Anthropic Messages: `POST /v1/messages` with `x-api-key` and
//! `anthropic-version` (a `Authorization: Bearer` key is accepted too). Errors use Anthropic's
//! `{"type": "error", "error": {"type", "message"}}` shape.

use super::{content_text, handle_call, words, ChatRequest, Dialect, ErrorKind, StubState};
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
        let mut request = ChatRequest {
            model,
            system,
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

    fn truncated(state: &StubState) -> String {
        format!(
            r#"{{"id":"{}","type":"message","role":"assistant","content":[{{"type":"te"#,
            state.next_id("msg_", 24)
        )
    }
}
