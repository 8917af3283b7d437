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

/// A streamed answer read frame by frame: the body's pieces until its end or
/// the error that cut it.
struct Streamed {
    content_type: String,
    text: String,
    cut: bool,
}

impl Streamed {
    /// `(event name, data)` of every server-sent event.
    fn events(&self) -> Vec<(Option<String>, String)> {
        self.text
            .split_terminator("\n\n")
            .map(|event| {
                let mut name = None;
                let mut data = String::new();
                for line in event.lines() {
                    if let Some(n) = line.strip_prefix("event: ") {
                        name = Some(n.to_owned());
                    } else if let Some(d) = line.strip_prefix("data: ") {
                        data = d.to_owned();
                    } else {
                        panic!("unexpected SSE line {line:?}");
                    }
                }
                (name, data)
            })
            .collect()
    }

    fn data(&self) -> Vec<Value> {
        self.events()
            .into_iter()
            .filter(|(_, data)| data != "[DONE]")
            .map(|(_, data)| serde_json::from_str(&data).unwrap())
            .collect()
    }
}

async fn stream_call(
    stub: &ProviderStub,
    path: &str,
    headers: &[(&str, &str)],
    body: Value,
) -> Streamed {
    let mut request = Request::post(path).header("content-type", "application/json");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = stub
        .router()
        .oneshot(request.body(Body::from(body.to_string())).unwrap())
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    let mut body = response.into_body();
    let mut text = String::new();
    let mut cut = false;
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => text.push_str(std::str::from_utf8(frame.data_ref().unwrap()).unwrap()),
            Err(_) => {
                cut = true;
                break;
            }
        }
    }
    Streamed {
        content_type,
        text,
        cut,
    }
}

fn streaming(mut body: Value, include_usage: Option<bool>) -> Value {
    body["stream"] = json!(true);
    if let Some(include_usage) = include_usage {
        body["stream_options"] = json!({ "include_usage": include_usage });
    }
    body
}

#[tokio::test]
async fn openai_streams_chunks_that_add_up_to_the_plain_answer() {
    let plain = call(
        &openai(4),
        "/v1/chat/completions",
        &[BEARER],
        chat_body("Tell me about the sea"),
    )
    .await
    .json();
    let stub = openai(4);
    let streamed = stream_call(
        &stub,
        "/v1/chat/completions",
        &[BEARER],
        streaming(chat_body("Tell me about the sea"), Some(true)),
    )
    .await;
    assert!(streamed.content_type.starts_with("text/event-stream"));
    assert!(!streamed.cut);
    let events = streamed.events();
    assert!(events.iter().all(|(name, _)| name.is_none()));
    assert_eq!(events.last().unwrap().1, "[DONE]");
    let chunks = streamed.data();
    // The same seed draws the same id, streamed or not.
    assert!(chunks.iter().all(|c| c["id"] == plain["id"]
        && c["object"] == "chat.completion.chunk"
        && c["created"] == plain["created"]
        && c["model"] == "gpt-4o-mini"));
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, plain["choices"][0]["message"]["content"]);
    let (usage, choices) = chunks.split_last().unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"], plain["usage"]);
    assert!(choices.iter().all(|c| c["usage"].is_null()));
    let finish: Vec<&Value> = choices
        .iter()
        .map(|c| &c["choices"][0]["finish_reason"])
        .filter(|f| !f.is_null())
        .collect();
    assert_eq!(finish, vec!["stop"]);
    assert_eq!(choices.last().unwrap()["choices"][0]["delta"], json!({}));
    assert!(stub.calls()[0].stream);

    // Without include_usage: no usage field, no usage chunk.
    let streamed = stream_call(
        &openai(4),
        "/v1/chat/completions",
        &[BEARER],
        streaming(chat_body("Tell me about the sea"), None),
    )
    .await;
    let chunks = streamed.data();
    assert!(chunks.iter().all(|c| c.get("usage").is_none()));
    assert_eq!(
        chunks.last().unwrap()["choices"][0]["finish_reason"],
        "stop"
    );
}

/// Regression: the OpenAI stub used to refuse `stream: true` with a 400.
#[tokio::test]
async fn openai_stream_requests_are_answered_and_bad_stream_fields_refused() {
    let stub = openai(1);
    let streamed = stream_call(
        &stub,
        "/v1/chat/completions",
        &[BEARER],
        streaming(chat_body("hi"), Some(false)),
    )
    .await;
    assert!(streamed.content_type.starts_with("text/event-stream"));
    let mut body = chat_body("hi");
    body["stream_options"] = json!({"include_usage": true});
    let r = call(&stub, "/v1/chat/completions", &[BEARER], body).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("stream_options"));
    let mut body = chat_body("hi");
    body["stream"] = json!("yes");
    let r = call(&stub, "/v1/chat/completions", &[BEARER], body).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    // Errors before the answer starts stay plain JSON, as with the real API.
    stub.script_next(StubFault::RateLimited { retry_after_s: 1 });
    let r = call(
        &stub,
        "/v1/chat/completions",
        &[BEARER],
        streaming(chat_body("hi"), None),
    )
    .await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.json()["error"]["code"], "rate_limit_exceeded");
}

#[tokio::test]
async fn anthropic_streams_the_documented_event_sequence() {
    let plain = call(
        &anthropic(2),
        "/v1/messages",
        &ANTHROPIC_HEADERS,
        messages_body("Tell me about the sea"),
    )
    .await
    .json();
    let streamed = stream_call(
        &anthropic(2),
        "/v1/messages",
        &ANTHROPIC_HEADERS,
        streaming(messages_body("Tell me about the sea"), None),
    )
    .await;
    assert!(streamed.content_type.starts_with("text/event-stream"));
    assert!(!streamed.cut);
    let events = streamed.events();
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_deref().unwrap()).collect();
    let deltas = names
        .iter()
        .filter(|n| **n == "content_block_delta")
        .count();
    assert!(deltas > 1);
    let mut want = vec!["message_start", "content_block_start", "ping"];
    want.extend(std::iter::repeat_n("content_block_delta", deltas));
    want.extend(["content_block_stop", "message_delta", "message_stop"]);
    assert_eq!(names, want);
    let data = streamed.data();
    // Each event's data names its own type.
    for ((name, _), data) in events.iter().zip(&data) {
        assert_eq!(data["type"], name.as_deref().unwrap());
    }
    let start = &data[0]["message"];
    assert_eq!(start["id"], plain["id"]);
    assert_eq!(start["content"], json!([]));
    assert!(start["stop_reason"].is_null());
    assert_eq!(
        start["usage"]["input_tokens"],
        plain["usage"]["input_tokens"]
    );
    let text: String = data
        .iter()
        .filter(|d| d["type"] == "content_block_delta")
        .map(|d| {
            assert_eq!(d["delta"]["type"], "text_delta");
            d["delta"]["text"].as_str().unwrap()
        })
        .collect();
    assert_eq!(text, plain["content"][0]["text"]);
    let delta = &data[data.len() - 2];
    assert_eq!(delta["delta"]["stop_reason"], "end_turn");
    assert_eq!(
        delta["usage"]["output_tokens"],
        plain["usage"]["output_tokens"]
    );
}

#[tokio::test]
async fn cut_stream_drops_the_answer_after_the_given_events() {
    let stub = anthropic(2);
    stub.script(0, StubFault::CutStream { after_events: 4 });
    let streamed = stream_call(
        &stub,
        "/v1/messages",
        &ANTHROPIC_HEADERS,
        streaming(messages_body("Tell me about the sea"), None),
    )
    .await;
    assert!(streamed.cut, "the body ends in an error, not its end");
    let names: Vec<String> = streamed
        .events()
        .into_iter()
        .map(|(n, _)| n.unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "ping",
            "content_block_delta"
        ]
    );
    let call = &stub.calls()[0];
    assert_eq!(
        (call.status, call.fault.as_deref(), call.stream),
        (200, Some("cut_stream"), true)
    );

    // A plain answer is cut in the middle of its JSON.
    let stub = openai(1);
    stub.script(0, StubFault::CutStream { after_events: 0 });
    let streamed = stream_call(
        &stub,
        "/v1/chat/completions",
        &[BEARER],
        chat_body("Tell me about the sea"),
    )
    .await;
    assert!(streamed.cut);
    assert!(streamed.content_type.starts_with("application/json"));
    assert!(
        streamed.text.starts_with("{\"") && serde_json::from_str::<Value>(&streamed.text).is_err()
    );

    let c: StubConfig =
        toml::from_str("[[faults]]\ncall = 1\nkind = \"cut_stream\"\nafter_events = 3\n").unwrap();
    assert_eq!(c.faults[0].fault, StubFault::CutStream { after_events: 3 });
}

#[tokio::test]
async fn malformed_json_in_a_stream_is_one_broken_event() {
    let stub = anthropic(2);
    stub.script(0, StubFault::MalformedJson);
    let streamed = stream_call(
        &stub,
        "/v1/messages",
        &ANTHROPIC_HEADERS,
        streaming(messages_body("x"), None),
    )
    .await;
    let events = streamed.events();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].0.as_deref(), Some("message_start"));
    assert!(serde_json::from_str::<Value>(&events[0].1).is_err());
}
