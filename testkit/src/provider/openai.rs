//! OpenAI Chat Completions: `POST /v1/chat/completions` with
//! `Authorization: Bearer <key>`, plus `GET /v1/models`. Errors use OpenAI's
//! `{"error": {"message", "type", "param", "code"}}` shape.

use super::{content_text, handle_call, words, ChatRequest, Dialect, ErrorKind, StubState};
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
        if body.get("stream").and_then(Value::as_bool) == Some(true) {
            return Err("this stub does not stream; set stream to false".into());
        }
        let mut request = ChatRequest {
            model,
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

    fn truncated(state: &StubState) -> String {
        format!(
            r#"{{"id":"{}","object":"chat.completion","choices":[{{"index":0,"message":{{"role":"assis"#,
            state.next_id("chatcmpl-", 29)
        )
    }
}
