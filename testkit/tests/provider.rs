//! The hosted-provider stubs driven in-process with `oneshot`.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use protocol::clock::FixedClock;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use testkit::{ProviderStub, StubConfig, StubFault};
use tower::ServiceExt;

const NOW_MS: i64 = 1_795_255_200_123;
const KEY: &str = "sk-test";

fn stub_config(seed: u64) -> StubConfig {
    StubConfig {
        seed,
        api_key: KEY.into(),
        ..StubConfig::default()
    }
}

fn openai(seed: u64) -> ProviderStub {
    ProviderStub::openai(stub_config(seed), Arc::new(FixedClock(NOW_MS)))
}

fn anthropic(seed: u64) -> ProviderStub {
    ProviderStub::anthropic(stub_config(seed), Arc::new(FixedClock(NOW_MS)))
}

struct Reply {
    status: StatusCode,
    retry_after: Option<String>,
    text: String,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("{e}: {}", self.text))
    }
}

async fn call(stub: &ProviderStub, path: &str, headers: &[(&str, &str)], body: Value) -> Reply {
    let mut request = Request::post(path).header("content-type", "application/json");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = stub
        .router()
        .oneshot(request.body(Body::from(body.to_string())).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    Reply {
        status,
        retry_after,
        text: String::from_utf8(bytes.to_vec()).unwrap(),
    }
}

const BEARER: (&str, &str) = ("authorization", "Bearer sk-test");

fn chat_body(prompt: &str) -> Value {
    json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": prompt}], "max_tokens": 16})
}

fn messages_body(prompt: &str) -> Value {
    json!({"model": "claude-sonnet-4-5", "max_tokens": 16, "messages": [{"role": "user", "content": prompt}]})
}

const ANTHROPIC_HEADERS: [(&str, &str); 2] = [
    ("x-api-key", "sk-test"),
    ("anthropic-version", "2023-06-01"),
];

#[tokio::test]
async fn openai_success_shape() {
    let stub = openai(1);
    let r = call(
        &stub,
        "/v1/chat/completions",
        &[BEARER],
        chat_body("Tell me about the sea"),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    let v = r.json();
    assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["created"], NOW_MS / 1000);
    assert_eq!(v["model"], "gpt-4o-mini");
    assert_eq!(v["choices"][0]["index"], 0);
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    let content = v["choices"][0]["message"]["content"].as_str().unwrap();
    assert_eq!(
        content,
        testkit::outputs::llm_text("Tell me about the sea", 16)
    );
    let usage = &v["usage"];
    assert_eq!(usage["prompt_tokens"], 5);
    assert_eq!(
        usage["total_tokens"].as_u64().unwrap(),
        usage["prompt_tokens"].as_u64().unwrap() + usage["completion_tokens"].as_u64().unwrap()
    );
    let calls = stub.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].status, 200);
    assert!(calls[0].authorized);
    assert_eq!(calls[0].prompt, "Tell me about the sea");
    assert_eq!(calls[0].model.as_deref(), Some("gpt-4o-mini"));
}

#[tokio::test]
async fn ids_follow_the_seed() {
    let id = |stub: ProviderStub| async move {
        call(&stub, "/v1/chat/completions", &[BEARER], chat_body("x"))
            .await
            .json()["id"]
            .clone()
    };
    assert_eq!(id(openai(5)).await, id(openai(5)).await);
    assert_ne!(id(openai(5)).await, id(openai(6)).await);
}

#[tokio::test]
async fn openai_auth_failures() {
    let stub = openai(1);
    for headers in [&[][..], &[("authorization", "Bearer wrong")][..]] {
        let r = call(&stub, "/v1/chat/completions", headers, chat_body("x")).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED);
        let v = r.json();
        assert_eq!(v["error"]["code"], "invalid_api_key");
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert!(v["error"]["message"].is_string());
        assert!(v["error"]["param"].is_null());
    }
    // Scripted: even the right key is refused.
    stub.script_next(StubFault::Unauthorized);
    let r = call(&stub, "/v1/chat/completions", &[BEARER], chat_body("x")).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    let calls = stub.calls();
    assert_eq!(calls.len(), 3);
    assert!(!calls[0].authorized && !calls[1].authorized && calls[2].authorized);
    assert_eq!(calls[2].fault.as_deref(), Some("unauthorized"));
}

#[tokio::test]
async fn openai_rate_limit_server_error_and_malformed() {
    let stub = openai(1);
    stub.script(0, StubFault::RateLimited { retry_after_s: 7 });
    stub.script(1, StubFault::ServerError);
    stub.script(2, StubFault::MalformedJson);
    let r = call(&stub, "/v1/chat/completions", &[BEARER], chat_body("x")).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.retry_after.as_deref(), Some("7"));
    assert_eq!(r.json()["error"]["code"], "rate_limit_exceeded");

    let r = call(&stub, "/v1/chat/completions", &[BEARER], chat_body("x")).await;
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(r.json()["error"]["type"], "server_error");

    let r = call(&stub, "/v1/chat/completions", &[BEARER], chat_body("x")).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(serde_json::from_str::<Value>(&r.text).is_err());
    assert!(r.text.starts_with(r#"{"id":"chatcmpl-"#));

    let r = call(&stub, "/v1/chat/completions", &[BEARER], chat_body("x")).await;
    assert_eq!(r.status, StatusCode::OK, "unscripted calls succeed");
    let statuses: Vec<u16> = stub.calls().iter().map(|c| c.status).collect();
    assert_eq!(statuses, vec![429, 500, 200, 200]);
}

#[tokio::test]
async fn default_fault_applies_to_every_call() {
    let stub = openai(1);
    stub.set_default_fault(Some(StubFault::ServerError));
    for _ in 0..3 {
        let r = call(&stub, "/v1/chat/completions", &[BEARER], chat_body("x")).await;
        assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
    }
    stub.set_default_fault(None);
    let r = call(&stub, "/v1/chat/completions", &[BEARER], chat_body("x")).await;
    assert_eq!(r.status, StatusCode::OK);
}

#[tokio::test(start_paused = true)]
async fn slow_answer_waits_on_tokio_time() {
    let stub = openai(1);
    stub.script(0, StubFault::Slow { delay_ms: 30_000 });
    let t0 = tokio::time::Instant::now();
    let r = call(&stub, "/v1/chat/completions", &[BEARER], chat_body("x")).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(t0.elapsed(), Duration::from_millis(30_000));
}

#[tokio::test]
async fn openai_bad_requests() {
    let stub = openai(1);
    let r = call(
        &stub,
        "/v1/chat/completions",
        &[BEARER],
        json!({"model": "m"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.json()["error"]["type"], "invalid_request_error");
    let response = stub
        .router()
        .oneshot(
            Request::post("/v1/chat/completions")
                .header("authorization", "Bearer sk-test")
                .body(Body::from("{nope"))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn task_shaped_prompts_get_task_shaped_answers() {
    let stub = openai(1);
    let body = json!({"model": "m", "messages": [
        {"role": "system", "content": "Extract the key facts as one JSON object."},
        {"role": "user", "content": [{"type": "text", "text": "name: Ada, age: 36"}]}
    ]});
    let v = call(&stub, "/v1/chat/completions", &[BEARER], body)
        .await
        .json();
    let content = v["choices"][0]["message"]["content"].as_str().unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(content).unwrap(),
        json!({"name": "Ada", "age": 36})
    );
    let body = json!({"model": "m", "messages": [
        {"role": "system", "content": "Classify the text."},
        {"role": "user", "content": "great stuff"}
    ]});
    let v = call(&stub, "/v1/chat/completions", &[BEARER], body)
        .await
        .json();
    let label = v["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(testkit::outputs::LABELS.contains(&label));
}

#[tokio::test]
async fn anthropic_success_shape() {
    let stub = anthropic(1);
    let r = call(
        &stub,
        "/v1/messages",
        &ANTHROPIC_HEADERS,
        messages_body("Tell me about the sea"),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    let v = r.json();
    assert!(v["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(v["type"], "message");
    assert_eq!(v["role"], "assistant");
    assert_eq!(v["model"], "claude-sonnet-4-5");
    assert_eq!(v["content"][0]["type"], "text");
    assert_eq!(
        v["content"][0]["text"].as_str().unwrap(),
        testkit::outputs::llm_text("Tell me about the sea", 16)
    );
    assert_eq!(v["stop_reason"], "end_turn");
    assert!(v["stop_sequence"].is_null());
    assert_eq!(v["usage"]["input_tokens"], 5);
    assert!(v["usage"]["output_tokens"].as_u64().unwrap() >= 1);
}

#[tokio::test]
async fn anthropic_errors() {
    let stub = anthropic(1);
    let r = call(
        &stub,
        "/v1/messages",
        &[("anthropic-version", "2023-06-01")],
        messages_body("x"),
    )
    .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        r.json(),
        json!({"type": "error", "error": {"type": "authentication_error", "message": "Incorrect API key provided."}})
    );
    let r = call(
        &stub,
        "/v1/messages",
        &[("x-api-key", "sk-test")],
        messages_body("x"),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.json()["error"]["type"], "invalid_request_error");
    let r = call(
        &stub,
        "/v1/messages",
        &ANTHROPIC_HEADERS,
        json!({"model": "m", "messages": [{"role": "user", "content": "x"}]}),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "max_tokens is required");

    stub.script_next(StubFault::RateLimited { retry_after_s: 3 });
    let r = call(
        &stub,
        "/v1/messages",
        &ANTHROPIC_HEADERS,
        messages_body("x"),
    )
    .await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.retry_after.as_deref(), Some("3"));
    assert_eq!(r.json()["error"]["type"], "rate_limit_error");

    stub.script_next(StubFault::ServerError);
    let r = call(
        &stub,
        "/v1/messages",
        &ANTHROPIC_HEADERS,
        messages_body("x"),
    )
    .await;
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(r.json()["error"]["type"], "api_error");

    stub.script_next(StubFault::MalformedJson);
    let r = call(
        &stub,
        "/v1/messages",
        &ANTHROPIC_HEADERS,
        messages_body("x"),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(serde_json::from_str::<Value>(&r.text).is_err());

    stub.script_next(StubFault::Unauthorized);
    let r = call(
        &stub,
        "/v1/messages",
        &ANTHROPIC_HEADERS,
        messages_body("x"),
    )
    .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);

    let statuses: Vec<u16> = stub.calls().iter().map(|c| c.status).collect();
    assert_eq!(statuses, vec![401, 400, 400, 429, 500, 200, 401]);
}

#[tokio::test]
async fn anthropic_system_prompt_is_read() {
    let stub = anthropic(1);
    let body = json!({"model": "m", "max_tokens": 100,
        "system": "Summarize the user's text.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "First. Second."}]}]});
    let v = call(&stub, "/v1/messages", &ANTHROPIC_HEADERS, body)
        .await
        .json();
    assert_eq!(v["content"][0]["text"], "First.");
    assert_eq!(
        stub.calls()[0].prompt,
        "Summarize the user's text.\nFirst. Second."
    );
}

#[test]
fn stub_config_from_toml() {
    let c: StubConfig = toml::from_str(
        r#"
seed = 3
api_key = "k"
default_fault = { kind = "slow", delay_ms = 100 }
[[faults]]
call = 0
kind = "rate_limited"
retry_after_s = 2
"#,
    )
    .unwrap();
    assert_eq!(
        c.faults[0].fault,
        StubFault::RateLimited { retry_after_s: 2 }
    );
    assert_eq!(c.default_fault, Some(StubFault::Slow { delay_ms: 100 }));
    assert!(!format!("{c:?}").contains("\"k\""));
}

#[tokio::test]
async fn anthropic_accepts_a_bearer_key_as_recent_sdks_send() {
    let stub = anthropic(1);
    let headers = [
        ("authorization", "Bearer sk-test"),
        ("anthropic-version", "2023-06-01"),
    ];
    let r = call(&stub, "/v1/messages", &headers, messages_body("x")).await;
    assert_eq!(r.status, StatusCode::OK);
    let headers = [
        ("authorization", "Bearer nope"),
        ("anthropic-version", "2023-06-01"),
    ];
    let r = call(&stub, "/v1/messages", &headers, messages_body("x")).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
}
