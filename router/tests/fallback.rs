//! How the router moves on from a coordinator (issue 30, item 4): a per-call
//! `max_price`, a circuit breaker that skips a coordinator that keeps
//! failing for its cooldown, and the other chain tried before hosted
//! providers when configured.

mod common;

use common::*;
use router::{AdapterError, Chain, HostedProvider, LlmRequest, Route};
use serde_json::json;
use std::time::Duration;

#[tokio::test(start_paused = true)]
async fn a_quote_above_max_price_is_not_committed_and_the_next_route_runs() {
    let world = World::completing(json!("decentralized"));
    world.openai.set_reply("hosted answer");
    let mut request = LlmRequest::new("hi", "alice");
    request.max_price = Some("$0.005".parse().unwrap());
    let result = world
        .router(config())
        .run_llm(request.clone())
        .await
        .unwrap();
    assert_eq!(result.route, Route::Hosted(HostedProvider::ProviderA));
    // Quoted (FAST, $0.010) but never committed.
    assert_eq!(
        world.chain_a.log(),
        vec!["GET /v1/quote?job_type=LLM_INFER&policy=FAST"]
    );
    request.max_price = Some("$0.010".parse().unwrap());
    let result = world.router(config()).run_llm(request).await.unwrap();
    assert_eq!(result.route, Route::Decentralized(Chain::ChainA));
}

#[tokio::test(start_paused = true)]
async fn a_coordinator_that_keeps_failing_is_skipped_for_its_cooldown() {
    let world = World::new(
        CoordinatorState::new("a", Outcome::Fail("no_eligible_worker")),
        CoordinatorState::new("b", Outcome::Never),
    );
    world.openai.set_reply("hosted answer");
    let mut config = config();
    config.breaker.failures_max = 2;
    config.breaker.cooldown_ms = 10_000;
    let router = world.router(config);
    for _ in 0..2 {
        let result = router
            .run_llm(LlmRequest::new("hi", "alice"))
            .await
            .unwrap();
        assert_eq!(result.route, Route::Hosted(HostedProvider::ProviderA));
    }
    let requests = world.chain_a.log().len();
    // Open: the coordinator is not asked at all, and the call says why.
    let result = router
        .run_llm(LlmRequest::new("hi", "alice"))
        .await
        .unwrap();
    assert_eq!(result.route, Route::Hosted(HostedProvider::ProviderA));
    assert_eq!(
        world.chain_a.log().len(),
        requests,
        "skipped while cooling down"
    );
    // After the cooldown it is tried again.
    tokio::time::advance(Duration::from_millis(10_000)).await;
    router
        .run_llm(LlmRequest::new("hi", "alice"))
        .await
        .unwrap();
    assert!(
        world.chain_a.log().len() > requests,
        "tried again after the cooldown"
    );
}

#[tokio::test(start_paused = true)]
async fn a_skipped_coordinator_is_named_in_the_failures() {
    let world = World::new(
        CoordinatorState::new("a", Outcome::Fail("no_eligible_worker")),
        CoordinatorState::new("b", Outcome::Never),
    );
    let mut config = config();
    config.hosted.openai.api_key = None;
    config.hosted.anthropic.api_key = None;
    config.breaker.failures_max = 1;
    let router = world.router(config);
    router
        .run_llm(LlmRequest::new("hi", "alice"))
        .await
        .unwrap_err();
    let error = router
        .run_llm(LlmRequest::new("hi", "alice"))
        .await
        .unwrap_err();
    let (route, failure) = error.failures()[0].clone();
    assert_eq!(route, Route::Decentralized(Chain::ChainA));
    assert!(
        matches!(failure, AdapterError::CoolingDown { chain: Chain::ChainA, remaining_ms } if remaining_ms > 0),
        "{failure:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn with_try_other_chain_the_other_coordinator_runs_before_hosted_providers() {
    let world = World::new(
        CoordinatorState::new("a", Outcome::Fail("no_eligible_worker")),
        CoordinatorState::new("b", Outcome::Complete(json!("from chain b"))),
    );
    world.openai.set_reply("hosted answer");
    let result = world
        .router(config())
        .run_llm(LlmRequest::new("hi", "alice"))
        .await
        .unwrap();
    assert_eq!(
        result.route,
        Route::Hosted(HostedProvider::ProviderA),
        "off by default (spec 4.8)"
    );
    let mut config = config();
    config.try_other_chain = true;
    let result = world
        .router(config)
        .run_llm(LlmRequest::new("hi", "alice"))
        .await
        .unwrap();
    assert_eq!(result.route, Route::Decentralized(Chain::ChainB));
    assert_eq!(result.output, json!("from chain b"));
}
