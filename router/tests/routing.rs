//! Routing order, the all-failed error, route names and configuration.

mod common;

use common::*;
use router::{
    AdapterError, Chain, ComputeResult, ConfigError, HostedProvider, LlmRequest, PollConfig, Route,
    RouterConfig, RouterError, Stage,
};
use serde_json::json;
use std::collections::BTreeMap;

#[test]
fn route_strings_are_exactly_the_spec_names() {
    let cases = [
        (Route::Decentralized(Chain::ChainA), "decentralized:chain_a"),
        (Route::Decentralized(Chain::ChainB), "decentralized:chain_b"),
        (
            Route::Hosted(HostedProvider::ProviderA),
            "hosted:provider_a",
        ),
        (
            Route::Hosted(HostedProvider::ProviderB),
            "hosted:provider_b",
        ),
    ];
    for (route, text) in cases {
        assert_eq!(route.to_string(), text);
        assert_eq!(serde_json::to_value(route).unwrap(), json!(text));
        assert_eq!(serde_json::from_value::<Route>(json!(text)).unwrap(), route);
        assert_eq!(text.parse::<Route>().unwrap(), route);
    }
    assert!("hosted:openai".parse::<Route>().is_err());
}

#[test]
fn compute_result_serialises_with_spec_fields() {
    let result = ComputeResult {
        output: json!("hi"),
        route: Route::Hosted(HostedProvider::ProviderB),
        price: None,
        latency_ms: 12,
        receipt: None,
        attempts: Vec::new(),
    };
    assert_eq!(
        serde_json::to_value(&result).unwrap(),
        json!({"output": "hi", "route": "hosted:provider_b", "price": null, "latency_ms": 12, "receipt": null})
    );
}

#[tokio::test(start_paused = true)]
async fn coordinator_down_then_preferred_fails_then_other_succeeds() {
    for preferred in [HostedProvider::ProviderA, HostedProvider::ProviderB] {
        let world = World::completing(json!("x"));
        world.transport.remove(CHAIN_B_URL);
        let (bad, good) = match preferred {
            HostedProvider::ProviderA => (&world.openai, &world.anthropic),
            HostedProvider::ProviderB => (&world.anthropic, &world.openai),
        };
        bad.script([
            Scripted::rate_limited(1),
            Scripted::status(500, json!({"error": {"message": "internal"}})),
            Scripted::status(500, json!({"error": {"message": "internal"}})),
        ]);
        good.set_reply("rescued");
        let mut config = config();
        config.preferred_hosted = preferred;
        let mut request = LlmRequest::new("hi", "alice");
        request.chain_preference = Some(Chain::ChainB);
        let result = world.router(config).run_llm(request).await.unwrap();
        assert_eq!(result.route, Route::Hosted(preferred.other()));
        assert_eq!(result.output, json!("rescued"));
        assert_eq!(bad.hits(), 3);
        assert_eq!(good.hits(), 1);
        assert!(
            world.chain_a.log().is_empty(),
            "the other chain is not tried"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn all_failing_gives_typed_error_naming_each_reason_in_order() {
    let world = World::completing(json!("x"));
    world.transport.remove(CHAIN_A_URL);
    world.openai.script([Scripted::status(
        401,
        json!({"error": {"message": "Incorrect API key provided"}}),
    )]);
    world
        .anthropic
        .script([Scripted::raw(200, "<html>oops</html>")]);
    let error = world
        .router(config())
        .run_llm(LlmRequest::new("hi", "alice"))
        .await
        .unwrap_err();
    let RouterError::AllAdaptersFailed { failures } = &error;
    let routes: Vec<Route> = failures.iter().map(|(r, _)| *r).collect();
    assert_eq!(
        routes,
        [
            Route::Decentralized(Chain::ChainA),
            Route::Hosted(HostedProvider::ProviderA),
            Route::Hosted(HostedProvider::ProviderB),
        ]
    );
    assert!(matches!(
        failures[0].1,
        AdapterError::Transport {
            stage: Stage::Quote,
            ..
        }
    ));
    let message = error.to_string();
    assert_eq!(
        message,
        "all compute adapters failed: \
         [decentralized:chain_a] quote: could not connect: nothing serves http://coordinator-a.test:80; \
         [hosted:provider_a] provider_a answered HTTP 401 after 1 attempt(s): Incorrect API key provided; \
         [hosted:provider_b] provider_b answer is malformed: not JSON: expected value at line 1 column 1"
    );
}

#[tokio::test(start_paused = true)]
async fn coordinator_http_errors_are_failures_with_status() {
    // A coordinator that answers 500 to everything.
    let world = World::completing(json!("x"));
    world.transport.insert(
        CHAIN_A_URL,
        axum::Router::new().fallback(|| async {
            (
                axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                axum::Json(json!({"error": "database is on fire"})),
            )
        }),
    );
    let mut config = config();
    config.hosted.openai.api_key = None;
    config.hosted.anthropic.api_key = None;
    let error = world
        .router(config)
        .run_llm(LlmRequest::new("hi", "alice"))
        .await
        .unwrap_err();
    assert_eq!(
        error.failures()[0].1,
        AdapterError::HttpStatus {
            stage: Stage::Quote,
            status: 500,
            message: "database is on fire".into()
        }
    );
}

fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn config_from_env_map_defaults() {
    let config = RouterConfig::from_env_map(&BTreeMap::new()).unwrap();
    assert_eq!(config.coordinator_urls.chain_a, "http://127.0.0.1:8080");
    assert_eq!(config.coordinator_urls.chain_b, "http://127.0.0.1:8081");
    assert_eq!(config.preferred_hosted, HostedProvider::ProviderA);
    assert!(!config.allow_private_hosted);
    assert_eq!(config.hosted.openai.api_key, None);
    assert_eq!(config.hosted.openai.base_url, "https://api.openai.com");
    assert_eq!(config.hosted.openai.model, "gpt-4o-mini");
    assert_eq!(
        config.hosted.anthropic.base_url,
        "https://api.anthropic.com"
    );
    assert_eq!(config.hosted.anthropic.model, "claude-3-5-haiku-latest");
    assert_eq!(config.poll, PollConfig::default());
    assert_eq!(config.poll.poll_interval_ms, 500);
    assert_eq!(config.poll.task_timeout_ms, 30_000);
    assert_eq!(config.poll.llm_timeout_ms, 60_000);
    assert!(config.payment_clients.chain_a.is_none());
}

#[test]
fn config_from_env_map_reads_every_variable() {
    let config = RouterConfig::from_env_map(&env(&[
        ("COORDINATOR_URL_CHAIN_A", "http://a:1"),
        ("COORDINATOR_URL_CHAIN_B", "http://b:2"),
        ("PREFERRED_HOSTED_PROVIDER", "anthropic"),
        ("OPENAI_API_KEY", "sk-1"),
        ("OPENAI_BASE_URL", "http://127.0.0.1:11434/v1"),
        ("OPENAI_MODEL", "llama3.2"),
        ("ANTHROPIC_API_KEY", "sk-ant-2"),
        ("ANTHROPIC_BASE_URL", "http://anthropic.local"),
        ("ANTHROPIC_MODEL", "claude-x"),
        ("ROUTER_ALLOW_PRIVATE_HOSTED", "true"),
        ("ROUTER_POLL_INTERVAL_MS", "100"),
        ("ROUTER_POLL_WAIT_MS_MAX", "5000"),
        ("ROUTER_TASK_TIMEOUT_MS", "1000"),
        ("ROUTER_LLM_TIMEOUT_MS", "2000"),
        ("ROUTER_DEFAULT_MAX_TOKENS", "64"),
    ]))
    .unwrap();
    assert_eq!(config.coordinator_urls.chain_a, "http://a:1");
    assert_eq!(config.coordinator_urls.chain_b, "http://b:2");
    assert_eq!(config.preferred_hosted, HostedProvider::ProviderB);
    assert_eq!(
        config.hosted.openai.api_key.as_ref().unwrap().expose(),
        "sk-1"
    );
    assert_eq!(
        config.hosted.openai.endpoint("/v1/chat/completions"),
        "http://127.0.0.1:11434/v1/chat/completions"
    );
    assert_eq!(config.hosted.openai.model, "llama3.2");
    assert_eq!(
        config.hosted.anthropic.api_key.as_ref().unwrap().expose(),
        "sk-ant-2"
    );
    assert_eq!(
        config.hosted.anthropic.endpoint("/v1/messages"),
        "http://anthropic.local/v1/messages"
    );
    assert_eq!(config.hosted.anthropic.model, "claude-x");
    assert!(config.allow_private_hosted);
    assert_eq!(
        config.poll,
        PollConfig {
            poll_interval_ms: 100,
            wait_ms_max: 5000,
            task_timeout_ms: 1000,
            llm_timeout_ms: 2000
        }
    );
    assert_eq!(config.default_max_tokens, 64);
    // Keys never show in Debug output.
    let debug = format!("{config:?}");
    assert!(
        !debug.contains("sk-1") && !debug.contains("sk-ant-2"),
        "{debug}"
    );
}

#[test]
fn preferred_provider_accepts_spec_and_vendor_names() {
    for (value, expected) in [
        ("provider_a", HostedProvider::ProviderA),
        ("openai", HostedProvider::ProviderA),
        ("OpenAI", HostedProvider::ProviderA),
        ("provider_b", HostedProvider::ProviderB),
        ("anthropic", HostedProvider::ProviderB),
        ("", HostedProvider::ProviderA),
    ] {
        let config =
            RouterConfig::from_env_map(&env(&[("PREFERRED_HOSTED_PROVIDER", value)])).unwrap();
        assert_eq!(config.preferred_hosted, expected, "{value:?}");
    }
    let error =
        RouterConfig::from_env_map(&env(&[("PREFERRED_HOSTED_PROVIDER", "gemini")])).unwrap_err();
    assert!(matches!(
        error,
        ConfigError::InvalidValue {
            var: "PREFERRED_HOSTED_PROVIDER",
            ..
        }
    ));
}

#[test]
fn config_from_lookup_closure() {
    let config = RouterConfig::from_lookup(|name| {
        (name == "COORDINATOR_URL_CHAIN_A").then(|| "http://from-closure".to_owned())
    })
    .unwrap();
    assert_eq!(config.coordinator_urls.chain_a, "http://from-closure");
    assert!(RouterConfig::from_env_map(&env(&[("ROUTER_TASK_TIMEOUT_MS", "soon")])).is_err());
    assert!(RouterConfig::from_env_map(&env(&[("ROUTER_ALLOW_PRIVATE_HOSTED", "maybe")])).is_err());
}
