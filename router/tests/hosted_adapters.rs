//! The hosted adapters against small fake OpenAI and Anthropic handlers.

mod common;

use common::*;
use router::{
    AdapterError, Chain, HostedProvider, HttpTransport, LlmRequest, OpenAiClient, ProviderSettings,
    RetryPolicy, Route, RouterConfig, TaskRequest, TaskType,
};
use serde_json::json;
use std::sync::Arc;
use tokio::time::{Duration, Instant};

/// Chain A's coordinator is down, so every job goes to the hosted providers.
fn hosted_world() -> World {
    let world = World::completing(json!("unused"));
    world.transport.remove(CHAIN_A_URL);
    world
}

#[tokio::test(start_paused = true)]
async fn openai_request_has_bearer_auth_model_and_messages() {
    let world = hosted_world();
    world.openai.set_reply("Paris");
    let mut request = LlmRequest::new("Capital of France?", "alice");
    request.max_tokens = Some(32);
    let result = world.router(config()).run_llm(request).await.unwrap();
    assert_eq!(result.route, Route::Hosted(HostedProvider::ProviderA));
    assert_eq!(result.output, json!("Paris"));
    assert_eq!(result.price, None);
    assert_eq!(result.receipt, None);
    let (headers, body) = world.openai.last_request();
    assert_eq!(headers["authorization"], format!("Bearer {OPENAI_KEY}"));
    assert_eq!(headers["content-type"], "application/json");
    assert_eq!(
        body,
        json!({
            "model": "gpt-4o-mini",
            "messages": [{"role": "user", "content": "Capital of France?"}],
            "max_tokens": 32
        })
    );
    assert_eq!(world.anthropic.hits(), 0);
}

#[tokio::test(start_paused = true)]
async fn anthropic_request_has_key_version_and_text_blocks_are_joined() {
    let world = hosted_world();
    world.anthropic.set_reply("Bonjour");
    let mut config = config();
    config.preferred_hosted = HostedProvider::ProviderB;
    let result = world
        .router(config)
        .run_llm(LlmRequest::new("Say hello in French", "alice"))
        .await
        .unwrap();
    assert_eq!(result.route, Route::Hosted(HostedProvider::ProviderB));
    assert_eq!(result.output, json!("Bonjour"));
    let (headers, body) = world.anthropic.last_request();
    assert_eq!(headers["x-api-key"], ANTHROPIC_KEY);
    assert_eq!(headers["anthropic-version"], "2023-06-01");
    assert!(!headers.contains_key("authorization"));
    assert_eq!(body["model"], "claude-3-5-haiku-latest");
    assert_eq!(body["max_tokens"], 256);
    assert_eq!(
        body["messages"],
        json!([{"role": "user", "content": "Say hello in French"}])
    );
    assert_eq!(world.openai.hits(), 0);

    // Several text blocks (and a non-text block) become one string.
    world.anthropic.script([Scripted::status(
        200,
        json!({
            "id": "msg_2", "type": "message", "role": "assistant", "model": "m",
            "content": [
                {"type": "text", "text": "Bon"},
                {"type": "tool_use", "id": "t", "name": "x", "input": {}},
                {"type": "text", "text": "jour"}
            ],
            "stop_reason": "end_turn", "usage": {"input_tokens": 1, "output_tokens": 1}
        }),
    )]);
    let mut config = common::config();
    config.preferred_hosted = HostedProvider::ProviderB;
    let result = world
        .router(config)
        .run_llm(LlmRequest::new("again", "alice"))
        .await
        .unwrap();
    assert_eq!(result.output, json!("Bonjour"));
}

#[tokio::test(start_paused = true)]
async fn rate_limit_is_retried_after_retry_after() {
    let world = hosted_world();
    world.openai.script([Scripted::rate_limited(3)]);
    world.openai.set_reply("finally");
    let started = Instant::now();
    let result = world
        .router(config())
        .run_llm(LlmRequest::new("hi", "alice"))
        .await
        .unwrap();
    assert_eq!(result.route, Route::Hosted(HostedProvider::ProviderA));
    assert_eq!(result.output, json!("finally"));
    assert_eq!(world.openai.hits(), 2);
    assert_eq!(started.elapsed(), Duration::from_secs(3));
    assert_eq!(result.latency_ms, 3_000);
}

#[tokio::test(start_paused = true)]
async fn retries_are_bounded_then_the_other_provider_answers() {
    let world = hosted_world();
    world.openai.script([
        Scripted::status(500, json!({"error": {"message": "boom 1"}})),
        Scripted::status(503, json!({"error": {"message": "boom 2"}})),
        Scripted::status(500, json!({"error": {"message": "boom 3"}})),
    ]);
    world.anthropic.set_reply("from anthropic");
    let started = Instant::now();
    let result = world
        .router(config())
        .run_llm(LlmRequest::new("hi", "alice"))
        .await
        .unwrap();
    assert_eq!(result.route, Route::Hosted(HostedProvider::ProviderB));
    assert_eq!(result.output, json!("from anthropic"));
    assert_eq!(world.openai.hits(), 3, "first attempt plus two retries");
    // Backoff without retry-after: 1 s then 2 s.
    assert_eq!(started.elapsed(), Duration::from_secs(3));
}

#[tokio::test(start_paused = true)]
async fn client_errors_are_not_retried() {
    let world = hosted_world();
    world.openai.script([Scripted::status(
        400,
        json!({"error": {"message": "max_tokens is too large"}}),
    )]);
    let mut config = config();
    config.hosted.anthropic.api_key = None;
    let error = world
        .router(config)
        .run_llm(LlmRequest::new("hi", "alice"))
        .await
        .unwrap_err();
    assert_eq!(world.openai.hits(), 1);
    assert_eq!(
        error.failures()[1].1,
        AdapterError::ProviderStatus {
            provider: HostedProvider::ProviderA,
            status: 400,
            attempts: 1,
            message: "max_tokens is too large".into()
        }
    );
}

#[tokio::test(start_paused = true)]
async fn missing_key_fails_without_sending_a_request() {
    let world = hosted_world();
    let mut config = config();
    config.hosted.openai.api_key = None;
    let result = world
        .router(config)
        .run_llm(LlmRequest::new("hi", "alice"))
        .await
        .unwrap();
    assert_eq!(result.route, Route::Hosted(HostedProvider::ProviderB));
    assert_eq!(world.openai.hits(), 0);

    let mut config = common::config();
    config.hosted.openai.api_key = None;
    config.hosted.anthropic.api_key = None;
    let error = world
        .router(config)
        .run_llm(LlmRequest::new("hi", "alice"))
        .await
        .unwrap_err();
    assert_eq!(
        error.failures()[1].1,
        AdapterError::MissingApiKey {
            provider: HostedProvider::ProviderA,
            env_var: "OPENAI_API_KEY"
        }
    );
    assert_eq!(
        error.failures()[2].1.to_string(),
        "no API key for provider_b: set ANTHROPIC_API_KEY"
    );
    assert_eq!(world.openai.hits(), 0);
    assert_eq!(
        world.anthropic.hits(),
        1,
        "only the first run reached provider_b"
    );
}

#[tokio::test(start_paused = true)]
async fn wrong_key_is_a_401_failure() {
    let world = hosted_world();
    let mut config = config();
    config.hosted.openai.api_key = Some(router::ApiKey::new("sk-wrong"));
    config.hosted.anthropic.api_key = Some(router::ApiKey::new("sk-wrong"));
    let error = world
        .router(config)
        .run_llm(LlmRequest::new("hi", "alice"))
        .await
        .unwrap_err();
    for (_, failure) in &error.failures()[1..] {
        assert!(
            matches!(failure, AdapterError::ProviderStatus { status: 401, .. }),
            "{failure:?}"
        );
    }
    // The key itself never appears in the error.
    assert!(!error.to_string().contains("sk-wrong"));
    assert!(!format!("{error:?}").contains("sk-wrong"));
}

#[tokio::test(start_paused = true)]
async fn malformed_json_is_a_failure() {
    let world = hosted_world();
    world.openai.script([Scripted::raw(200, "{not json")]);
    world
        .anthropic
        .script([Scripted::status(200, json!({"content": []}))]);
    let error = world
        .router(config())
        .run_llm(LlmRequest::new("hi", "alice"))
        .await
        .unwrap_err();
    let failures = error.failures();
    assert!(matches!(
        &failures[1].1,
        AdapterError::ProviderMalformed { provider: HostedProvider::ProviderA, message } if message.starts_with("not JSON")
    ));
    assert!(matches!(
        &failures[2].1,
        AdapterError::ProviderMalformed { provider: HostedProvider::ProviderB, message } if message.contains("no text block")
    ));
}

#[tokio::test(start_paused = true)]
async fn extract_json_task_returns_parsed_json() {
    let world = hosted_world();
    world
        .openai
        .set_reply("```json\n{\"name\": \"Ada\", \"born\": 1815}\n```");
    let result = world
        .router(config())
        .run_task(TaskRequest::new(
            TaskType::ExtractJson,
            "Ada Lovelace was born in 1815.",
            "alice",
        ))
        .await
        .unwrap();
    assert_eq!(result.output, json!({"name": "Ada", "born": 1815}));
    let (_, body) = world.openai.last_request();
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0]["role"], "system");
    assert_eq!(
        messages[0]["content"],
        router::hosted::prompts::task_instructions(TaskType::ExtractJson)
    );
    assert_eq!(
        messages[1],
        json!({"role": "user", "content": "Ada Lovelace was born in 1815."})
    );
    assert_eq!(body["max_tokens"], 1024);
}

#[tokio::test(start_paused = true)]
async fn extract_json_that_does_not_parse_is_a_failure() {
    let world = hosted_world();
    world.openai.set_reply("Sorry, I cannot do that.");
    world.anthropic.set_reply("{\"ok\": true}");
    let result = world
        .router(config())
        .run_task(TaskRequest::new(TaskType::ExtractJson, "x", "alice"))
        .await
        .unwrap();
    // provider_a's prose is refused; provider_b's JSON is taken.
    assert_eq!(result.route, Route::Hosted(HostedProvider::ProviderB));
    assert_eq!(result.output, json!({"ok": true}));
    // Anthropic takes the instructions as the top-level system prompt.
    let (_, body) = world.anthropic.last_request();
    assert_eq!(
        body["system"],
        router::hosted::prompts::task_instructions(TaskType::ExtractJson)
    );
    assert_eq!(body["messages"], json!([{"role": "user", "content": "x"}]));
}

#[tokio::test(start_paused = true)]
async fn summarize_and_classify_return_strings() {
    let world = hosted_world();
    world.openai.set_reply("  positive\n");
    let result = world
        .router(config())
        .run_task(TaskRequest::new(TaskType::Classify, "Great!", "alice"))
        .await
        .unwrap();
    assert_eq!(result.output, json!("positive"));
    let (_, body) = world.openai.last_request();
    assert!(body["messages"][0]["content"]
        .as_str()
        .unwrap()
        .starts_with("Classify the text the user sends."));

    world.openai.set_reply("A short summary.");
    let mut request = TaskRequest::new(TaskType::Summarize, "Long text", "alice");
    request.chain_preference = Some(Chain::ChainA);
    let result = world.router(config()).run_task(request).await.unwrap();
    assert_eq!(result.output, json!("A short summary."));
}

#[tokio::test(start_paused = true)]
async fn openai_client_is_usable_on_its_own_and_keyless_for_local_servers() {
    let world = hosted_world();
    world.openai.set_reply("direct");
    let transport: Arc<dyn HttpTransport> = Arc::new(world.transport.clone());
    let settings = ProviderSettings::new(OPENAI_URL, "llama3.2").with_api_key(OPENAI_KEY);
    let client = OpenAiClient::new(transport.clone(), settings).with_retry(RetryPolicy::none());
    assert_eq!(client.url(), "http://openai.test/v1/chat/completions");
    assert_eq!(client.complete("hi", 8).await.unwrap(), "direct");
    assert_eq!(world.openai.last_request().1["model"], "llama3.2");

    // Without a key: refused unless allowed; allowed, it sends no
    // Authorization (the fake then answers 401).
    let keyless = ProviderSettings::new("http://openai.test", "llama3.2");
    let refused = OpenAiClient::new(transport.clone(), keyless.clone());
    assert!(matches!(
        refused.complete("hi", 8).await,
        Err(AdapterError::MissingApiKey { .. })
    ));
    let hits = world.openai.hits();
    let local = OpenAiClient::new(transport, keyless).allow_missing_key();
    assert!(matches!(
        local.complete("hi", 8).await,
        Err(AdapterError::ProviderStatus { status: 401, .. })
    ));
    assert_eq!(world.openai.hits(), hits + 1);
}

#[tokio::test(start_paused = true)]
async fn retry_after_is_capped() {
    let world = hosted_world();
    world.openai.script([Scripted::rate_limited(3600)]);
    let mut config: RouterConfig = config();
    config.hosted.retry.max_wait_ms = 5_000;
    let started = Instant::now();
    let result = world
        .router(config)
        .run_llm(LlmRequest::new("hi", "alice"))
        .await
        .unwrap();
    assert_eq!(result.route, Route::Hosted(HostedProvider::ProviderA));
    assert_eq!(started.elapsed(), Duration::from_secs(5));
}
