//! One run over real sockets: axum on 127.0.0.1 and the reqwest transport.

mod common;

use common::*;
use router::{
    Chain, ComputeRouter, CoordinatorUrls, HostedProvider, LlmRequest, ReqwestTransport, Route,
};
use serde_json::json;
use std::sync::Arc;

#[tokio::test]
async fn coordinator_and_provider_over_loopback_http() {
    let mut coordinator =
        CoordinatorState::new("eip155:8453", Outcome::Complete(json!("over tcp")));
    // Complete on the first poll, so the test does not wait 500 ms of real time.
    coordinator.pending_polls = 0;
    let coordinator = Arc::new(coordinator);
    let openai = Arc::new(ProviderState::new(ProviderKind::OpenAi));
    openai.set_reply("hosted over tcp");
    let chain_a = testkit::serve_loopback(fake_coordinator(coordinator.clone())).await;
    let openai_url = testkit::serve_loopback(fake_provider(openai.clone())).await;

    let mut config = config();
    // chain_b points at a closed port: connection refused.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    config.coordinator_urls = CoordinatorUrls {
        chain_a,
        chain_b: format!("http://{closed}"),
    };
    config.hosted.openai.base_url = format!("{openai_url}/v1");
    let router = ComputeRouter::with_transport(config, Arc::new(ReqwestTransport::new(5_000)));

    let result = router
        .run_llm(LlmRequest::new("hello", "alice"))
        .await
        .unwrap();
    assert_eq!(result.route, Route::Decentralized(Chain::ChainA));
    assert_eq!(result.output, json!("over tcp"));
    assert_eq!(result.price.as_deref(), Some("$0.010"));
    result
        .receipt
        .as_ref()
        .unwrap()
        .verify(&result.output)
        .unwrap();

    let mut request = LlmRequest::new("hello", "alice");
    request.chain_preference = Some(Chain::ChainB);
    let result = router.run_llm(request).await.unwrap();
    assert_eq!(result.route, Route::Hosted(HostedProvider::ProviderA));
    assert_eq!(result.output, json!("hosted over tcp"));
    assert_eq!(
        openai.last_request().0["authorization"],
        format!("Bearer {OPENAI_KEY}")
    );
}
