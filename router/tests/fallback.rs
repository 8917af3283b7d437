//! How the router moves on from a coordinator (issue 30, item 4): a per-call
//! `max_price`, a circuit breaker that skips a coordinator that keeps
//! failing for its cooldown, and the other chain tried before hosted
//! providers when configured.

mod common;

use common::*;
use router::{
    AdapterError, Attempt, AttemptOutcome, CancelOutcome, Chain, HostedProvider, LlmRequest, Route,
};
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

/// The attempts of a call that gave up on chain A's job at its timeout and
/// answered from provider A, with how the cancel went.
fn gave_up_then_hosted(result: &router::ComputeResult) -> router::CancelOutcome {
    let [first, last] = result.attempts.as_slice() else {
        panic!("two attempts: {:?}", result.attempts);
    };
    assert_eq!(first.route, Route::Decentralized(Chain::ChainA));
    assert_eq!(
        *last,
        Attempt {
            route: Route::Hosted(HostedProvider::ProviderA),
            outcome: AttemptOutcome::Answered
        }
    );
    match &first.outcome {
        AttemptOutcome::Failed(AdapterError::PollTimeout {
            timeout_ms: 60_000,
            cancel,
            ..
        }) => cancel.clone(),
        other => panic!("a poll timeout: {other:?}"),
    }
}

/// Issue 30, item 4: one prompt is not paid for twice. The job the router
/// gives up on is cancelled before the hosted provider is asked.
#[tokio::test(start_paused = true)]
async fn a_job_that_never_finishes_is_cancelled_before_the_hosted_answer() {
    let world = World::new(
        CoordinatorState::new("a", Outcome::Never),
        CoordinatorState::new("b", Outcome::Never),
    );
    world.openai.set_reply("hosted answer");
    let result = world
        .router(config())
        .run_llm(LlmRequest::new("hi", "alice"))
        .await
        .unwrap();
    assert_eq!(result.output, json!("hosted answer"));
    assert_eq!(gave_up_then_hosted(&result), CancelOutcome::Cancelled);
    let log = world.chain_a.log();
    let cancel = "POST /v1/jobs/00000000-0000-0000-0000-000000000002/cancel";
    assert_eq!(log.last().map(String::as_str), Some(cancel), "{log:?}");
    assert_eq!(log.iter().filter(|l| l.ends_with("/cancel")).count(), 1);
    assert!(
        world.chain_b.log().is_empty(),
        "the other chain is not tried"
    );
}

/// A PRIVATE job's cancel carries the user's proof, as its commit does.
#[tokio::test(start_paused = true)]
async fn a_private_jobs_cancel_carries_the_users_proof() {
    use rand::SeedableRng;
    let mut chain_a = CoordinatorState::new("a", Outcome::Never);
    chain_a.private_422 = false;
    let world = World::new(chain_a, CoordinatorState::new("b", Outcome::Never));
    world.openai.set_reply("hosted answer");
    let user =
        protocol::signing::Keypair::generate(&mut rand_chacha::ChaCha20Rng::seed_from_u64(5));
    let mut config = config();
    config.allow_private_hosted = true;
    config.user_signer = Some(std::sync::Arc::new(router::KeyUserSigner::new(
        user.clone(),
        protocol::clock::TokioClock::shared(1_795_255_200_000),
        rand_chacha::ChaCha20Rng::seed_from_u64(6),
    )));
    let mut request = LlmRequest::new("hi", user.address());
    request.privacy = Some(router::PrivacyClass::Private);
    let result = world.router(config).run_llm(request).await.unwrap();
    assert_eq!(gave_up_then_hosted(&result), CancelOutcome::Cancelled);
    let log = world.chain_a.log();
    assert!(
        log.last().unwrap().ends_with("/cancel+X-User-Proof"),
        "{log:?}"
    );
}

/// A job that completed as the router gave up is paid for: the cancel's
/// 409 carries its record, whose verified result is used, and no hosted
/// provider is paid as well.
#[tokio::test(start_paused = true)]
async fn a_job_completed_by_the_time_of_the_cancel_is_used() {
    let mut chain_a = CoordinatorState::new("a", Outcome::Complete(json!("just in time")));
    chain_a.pending_polls = u32::MAX;
    let world = World::new(chain_a, CoordinatorState::new("b", Outcome::Never));
    world.openai.set_reply("hosted answer");
    let result = world
        .router(config())
        .run_llm(LlmRequest::new("hi", "alice"))
        .await
        .unwrap();
    assert_eq!(result.route, Route::Decentralized(Chain::ChainA));
    assert_eq!(result.output, json!("just in time"));
    assert!(result.receipt.is_some());
    assert_eq!(world.openai.hits(), 0, "no hosted provider paid as well");
    assert_eq!(
        result.attempts,
        vec![Attempt {
            route: Route::Decentralized(Chain::ChainA),
            outcome: AttemptOutcome::Answered
        }]
    );
}

/// A coordinator that cannot cancel (an older one: no such route) is
/// named in the attempt: the job may still run and be charged.
#[tokio::test(start_paused = true)]
async fn a_cancel_that_fails_is_reported_in_the_attempts() {
    let mut chain_a = CoordinatorState::new("a", Outcome::Never);
    chain_a.cancel_unsupported = true;
    let world = World::new(chain_a, CoordinatorState::new("b", Outcome::Never));
    world.openai.set_reply("hosted answer");
    let result = world
        .router(config())
        .run_llm(LlmRequest::new("hi", "alice"))
        .await
        .unwrap();
    match gave_up_then_hosted(&result) {
        CancelOutcome::NotCancelled(e) => assert!(
            matches!(
                *e,
                AdapterError::HttpStatus {
                    stage: router::Stage::Cancel,
                    status: 404,
                    ..
                }
            ),
            "{e:?}"
        ),
        other => panic!("not cancelled: {other:?}"),
    }
}
