//! The decentralized adapter against a fake coordinator, in process.

mod common;

use common::*;
use router::{
    AdapterError, Chain, LlmRequest, PrivacyClass, Route, RouterError, TaskRequest, TaskType,
};
use serde_json::json;
use std::sync::Arc;
use tokio::time::{Duration, Instant};

#[tokio::test(start_paused = true)]
async fn llm_on_chain_a_returns_verified_output_with_price_and_receipt() {
    let world = World::completing(json!("forty-two"));
    let router = world.router(config());
    let started = Instant::now();
    let result = router
        .run_llm(LlmRequest::new("What is the answer?", "alice"))
        .await
        .unwrap();
    assert_eq!(result.route, Route::Decentralized(Chain::ChainA));
    assert_eq!(result.output, json!("forty-two"));
    assert_eq!(result.price.as_deref(), Some("$0.010"));
    let receipt = result.receipt.as_ref().unwrap();
    assert_eq!(receipt.provider_pubkey, worker_key().public_key_hex());
    receipt.verify(&result.output).unwrap();
    // Two pending answers, so two 500 ms waits on the virtual clock.
    assert_eq!(result.latency_ms, 1000);
    assert_eq!(started.elapsed(), Duration::from_millis(1000));
    assert_eq!(world.chain_a.poll_count(), 3);
    assert_eq!(world.openai.hits() + world.anthropic.hits(), 0);

    let log = world.chain_a.log();
    assert_eq!(log[0], "GET /v1/quote?job_type=LLM_INFER&policy=FAST");
    assert_eq!(log[1], "POST /v1/jobs/commit/fast");
    let body = world.chain_a.commit_bodies.lock().unwrap()[0].clone();
    assert_eq!(
        body,
        json!({
            "job_type": "LLM_INFER",
            "user_id": "alice",
            "payload": {"job_type": "LLM_INFER", "prompt": "What is the answer?", "max_tokens": 256},
            "privacy_class": "PUBLIC"
        })
    );
    assert!(world.chain_b.log().is_empty());
}

#[tokio::test(start_paused = true)]
async fn task_on_chain_b_uses_cheap_tier_by_default() {
    let world = World::completing(json!({"label": "positive"}));
    let router = world.router(config());
    let mut request = TaskRequest::new(TaskType::Classify, "I love it", "bob");
    request.chain_preference = Some(Chain::ChainB);
    let result = router.run_task(request).await.unwrap();
    assert_eq!(result.route, Route::Decentralized(Chain::ChainB));
    assert_eq!(result.output, json!({"label": "positive"}));
    assert_eq!(result.price.as_deref(), Some("$0.005"));
    let log = world.chain_b.log();
    assert_eq!(log[0], "GET /v1/quote?job_type=TASK&policy=CHEAP");
    assert_eq!(log[1], "POST /v1/jobs/commit/cheap");
    let body = world.chain_b.commit_bodies.lock().unwrap()[0].clone();
    assert_eq!(
        body["payload"],
        json!({"job_type": "TASK", "task_type": "classify", "input": "I love it"})
    );
    assert!(world.chain_a.log().is_empty());
}

/// Runs with the hosted fallback unusable (no keys), so the coordinator's
/// failure is what the error shows first.
fn no_hosted_config() -> router::RouterConfig {
    let mut config = config();
    config.hosted.openai.api_key = None;
    config.hosted.anthropic.api_key = None;
    config
}

fn first_failure(error: RouterError) -> (Route, AdapterError) {
    error.failures()[0].clone()
}

#[tokio::test(start_paused = true)]
async fn tampered_output_is_refused_and_falls_back() {
    let world = World::new(
        CoordinatorState::new(
            "eip155:8453",
            Outcome::Tampered {
                signed: json!("honest"),
                served: json!("tampered"),
            },
        ),
        CoordinatorState::new("eip155:84532", Outcome::Never),
    );
    world.openai.set_reply("hosted answer");
    let result = world
        .router(config())
        .run_llm(LlmRequest::new("hi", "alice"))
        .await
        .unwrap();
    assert_eq!(
        result.route,
        Route::Hosted(router::HostedProvider::ProviderA)
    );
    assert_eq!(result.output, json!("hosted answer"));
    assert_eq!(result.price, None);
    assert_eq!(result.receipt, None);

    let error = world
        .router(no_hosted_config())
        .run_llm(LlmRequest::new("hi", "alice"))
        .await
        .unwrap_err();
    let (route, failure) = first_failure(error);
    assert_eq!(route, Route::Decentralized(Chain::ChainA));
    match failure {
        AdapterError::InvalidReceipt { reason, .. } => {
            assert!(reason.contains("output_hash"), "{reason}")
        }
        other => panic!("expected InvalidReceipt, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn payment_required_is_paid_and_retried_once() {
    let mut coordinator = CoordinatorState::new("eip155:8453", Outcome::Complete(json!("paid")));
    coordinator.require_payment = true;
    let world = World::new(coordinator, CoordinatorState::new("b", Outcome::Never));
    let payer = Arc::new(FixedPayer::default());
    let mut config = config();
    config.payment_clients.chain_a = Some(payer.clone());
    let result = world
        .router(config)
        .run_llm(LlmRequest::new("hi", "alice"))
        .await
        .unwrap();
    assert_eq!(result.route, Route::Decentralized(Chain::ChainA));
    assert_eq!(result.output, json!("paid"));
    let log = world.chain_a.log();
    assert_eq!(
        &log[1..3],
        [
            "POST /v1/jobs/commit/fast".to_owned(),
            format!("POST /v1/jobs/commit/fast+X-PAYMENT={PAID_HEADER_VALUE}")
        ]
    );
    let challenges = payer.challenges.lock().unwrap();
    assert_eq!(challenges.len(), 1);
    let challenge = &challenges[0];
    assert_eq!(challenge.status, 402);
    assert_eq!(challenge.chain, Chain::ChainA);
    assert_eq!(challenge.url, format!("{CHAIN_A_URL}/v1/jobs/commit/fast"));
    assert_eq!(
        challenge.payment_required_header(),
        Some("challenge-for-eip155:8453")
    );
    assert_eq!(challenge.accepts()[0]["scheme"], "exact");
}

#[tokio::test(start_paused = true)]
async fn payment_required_without_payment_client_is_a_failure() {
    let mut coordinator = CoordinatorState::new("eip155:8453", Outcome::Complete(json!("x")));
    coordinator.require_payment = true;
    let world = World::new(coordinator, CoordinatorState::new("b", Outcome::Never));
    // chain_b has a payer, chain_a (the one used) has none.
    let mut config = no_hosted_config();
    config.payment_clients.chain_b = Some(Arc::new(FixedPayer::default()));
    let error = world
        .router(config)
        .run_llm(LlmRequest::new("hi", "alice"))
        .await
        .unwrap_err();
    assert_eq!(
        first_failure(error).1,
        AdapterError::PaymentRequired {
            chain: Chain::ChainA
        }
    );
    assert_eq!(world.chain_a.log().len(), 2, "no retry without a payer");
}

#[tokio::test(start_paused = true)]
async fn payment_client_refusal_and_rejected_payment_are_failures() {
    let mut coordinator = CoordinatorState::new("eip155:8453", Outcome::Complete(json!("x")));
    coordinator.require_payment = true;
    let world = World::new(coordinator, CoordinatorState::new("b", Outcome::Never));
    let mut config = no_hosted_config();
    config.payment_clients.chain_a = Some(Arc::new(FixedPayer {
        refuse: true,
        ..FixedPayer::default()
    }));
    let error = world
        .router(config)
        .run_llm(LlmRequest::new("hi", "alice"))
        .await
        .unwrap_err();
    assert_eq!(
        first_failure(error).1,
        AdapterError::PaymentFailed {
            chain: Chain::ChainA,
            reason: "price above the configured cap".into()
        }
    );

    /// Pays with a header the coordinator does not accept.
    struct BadPayer;
    impl router::PaymentClient for BadPayer {
        fn payment_header(&self, _: &router::PaymentChallenge) -> Result<(String, String), String> {
            Ok(("X-PAYMENT".into(), "forged".into()))
        }
    }
    let mut config = no_hosted_config();
    config.payment_clients.chain_a = Some(Arc::new(BadPayer));
    let error = world
        .router(config)
        .run_llm(LlmRequest::new("hi", "alice"))
        .await
        .unwrap_err();
    assert!(matches!(
        first_failure(error).1,
        AdapterError::PaymentRejected { .. }
    ));
    let paid_commits = world
        .chain_a
        .log()
        .iter()
        .filter(|l| l.contains("X-PAYMENT=forged"))
        .count();
    assert_eq!(paid_commits, 1, "exactly one paid retry");
}

#[tokio::test(start_paused = true)]
async fn private_job_without_trusted_worker_never_goes_hosted_by_default() {
    let world = World::completing(json!("x"));
    let mut request = LlmRequest::new("my secret", "alice");
    request.privacy = Some(PrivacyClass::Private);
    let error = world.router(config()).run_llm(request).await.unwrap_err();
    let failures = error.failures();
    assert_eq!(failures.len(), 3);
    assert_eq!(
        failures[0],
        (
            Route::Decentralized(Chain::ChainA),
            AdapterError::NoTrustedWorker {
                job_id: uuid::Uuid::from_u128(2).to_string()
            }
        )
    );
    for (i, provider) in [
        router::HostedProvider::ProviderA,
        router::HostedProvider::ProviderB,
    ]
    .into_iter()
    .enumerate()
    {
        assert_eq!(
            failures[i + 1],
            (Route::Hosted(provider), AdapterError::PrivateNotAllowed)
        );
    }
    assert_eq!(world.openai.hits() + world.anthropic.hits(), 0);
    let message = error.to_string();
    assert!(
        message.starts_with("all compute adapters failed"),
        "{message}"
    );
    assert!(message.contains("no_trusted_worker"), "{message}");
    assert!(
        message.contains("PRIVATE jobs are not sent to hosted providers"),
        "{message}"
    );
    assert_eq!(
        world.chain_a.commit_bodies.lock().unwrap()[0]["privacy_class"],
        "PRIVATE"
    );
}

#[tokio::test(start_paused = true)]
async fn private_job_goes_hosted_when_explicitly_allowed() {
    let world = World::completing(json!("x"));
    let mut config = config();
    config.allow_private_hosted = true;
    let mut request = LlmRequest::new("my secret", "alice");
    request.privacy = Some(PrivacyClass::Private);
    let result = world.router(config).run_llm(request).await.unwrap();
    assert_eq!(
        result.route,
        Route::Hosted(router::HostedProvider::ProviderA)
    );
}

#[tokio::test(start_paused = true)]
async fn failed_job_names_its_reason() {
    let world = World::new(
        CoordinatorState::new("a", Outcome::Fail("no_eligible_worker")),
        CoordinatorState::new("b", Outcome::Never),
    );
    let error = world
        .router(no_hosted_config())
        .run_task(TaskRequest::new(TaskType::Summarize, "text", "alice"))
        .await
        .unwrap_err();
    let (route, failure) = first_failure(error.clone());
    assert_eq!(route, Route::Decentralized(Chain::ChainA));
    assert!(matches!(
        &failure,
        AdapterError::JobFailed { reason, .. } if reason == "no_eligible_worker"
    ));
    assert!(error.to_string().contains("no_eligible_worker"));
}

async fn time_out(request_is_task: bool) -> (Duration, AdapterError, usize) {
    let world = World::new(
        CoordinatorState::new("a", Outcome::Never),
        CoordinatorState::new("b", Outcome::Never),
    );
    let router = world.router(no_hosted_config());
    let started = Instant::now();
    let error = if request_is_task {
        router
            .run_task(TaskRequest::new(TaskType::Summarize, "text", "alice"))
            .await
    } else {
        router.run_llm(LlmRequest::new("hi", "alice")).await
    }
    .unwrap_err();
    (
        started.elapsed(),
        first_failure(error).1,
        world.chain_a.poll_count(),
    )
}

#[tokio::test(start_paused = true)]
async fn task_poll_times_out_after_30_seconds() {
    let (elapsed, failure, polls) = time_out(true).await;
    assert_eq!(elapsed, Duration::from_secs(30));
    assert!(matches!(
        failure,
        AdapterError::PollTimeout {
            timeout_ms: 30_000,
            ..
        }
    ));
    // One poll at t = 0, then every 500 ms; the one due exactly at the
    // deadline still runs (a last chance) before the timeout fires.
    assert_eq!(polls, 61);
}

#[tokio::test(start_paused = true)]
async fn llm_poll_times_out_after_60_seconds() {
    let (elapsed, failure, polls) = time_out(false).await;
    assert_eq!(elapsed, Duration::from_secs(60));
    assert!(matches!(
        failure,
        AdapterError::PollTimeout {
            timeout_ms: 60_000,
            ..
        }
    ));
    assert_eq!(polls, 121);
}

#[tokio::test(start_paused = true)]
async fn poll_timeout_is_configurable() {
    let world = World::new(
        CoordinatorState::new("a", Outcome::Never),
        CoordinatorState::new("b", Outcome::Never),
    );
    let mut config = no_hosted_config();
    config.poll.task_timeout_ms = 2_000;
    config.poll.poll_interval_ms = 250;
    let started = Instant::now();
    router_err(
        world
            .router(config)
            .run_task(TaskRequest::new(TaskType::Summarize, "t", "u"))
            .await,
    );
    assert_eq!(started.elapsed(), Duration::from_secs(2));
    assert_eq!(world.chain_a.poll_count(), 9);
}

fn router_err<T: std::fmt::Debug>(r: Result<T, RouterError>) -> RouterError {
    r.unwrap_err()
}

#[tokio::test(start_paused = true)]
async fn coordinator_down_is_a_transport_failure() {
    let world = World::completing(json!("x"));
    world.transport.remove(CHAIN_A_URL);
    let error = world
        .router(no_hosted_config())
        .run_llm(LlmRequest::new("hi", "alice"))
        .await
        .unwrap_err();
    let failure = first_failure(error).1;
    assert!(
        matches!(
            failure,
            AdapterError::Transport {
                stage: router::Stage::Quote,
                ..
            }
        ),
        "{failure:?}"
    );
}

/// Chain A holds polls and finishes its jobs on `timeline`.
fn holding_world(timeline: Timeline) -> World {
    let mut chain_a = CoordinatorState::new("eip155:8453", Outcome::Complete(json!("held")));
    chain_a.wait = WaitSupport::Hold;
    chain_a.timeline = timeline;
    World::new(chain_a, CoordinatorState::new("b", Outcome::Never))
}

fn poll_log(state: &CoordinatorState) -> Vec<String> {
    state
        .log()
        .into_iter()
        .filter(|l| l.starts_with("GET /v1/jobs/"))
        .map(|l| {
            l.split_once('?')
                .map_or("plain".into(), |(_, q)| q.to_owned())
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn one_held_poll_answers_as_soon_as_the_job_completes() {
    let world = holding_world(Timeline {
        running_after_ms: 0,
        done_after_ms: Some(50),
    });
    let started = Instant::now();
    let result = world
        .router(no_hosted_config())
        .run_llm(LlmRequest::new("hi", "alice"))
        .await
        .unwrap();
    assert_eq!(result.output, json!("held"));
    assert_eq!(result.latency_ms, 50);
    assert_eq!(started.elapsed(), Duration::from_millis(50));
    assert_eq!(poll_log(&world.chain_a), ["wait_ms=30000"]);
}

#[tokio::test(start_paused = true)]
async fn an_early_status_change_is_followed_by_another_held_poll() {
    let world = holding_world(Timeline {
        running_after_ms: 20,
        done_after_ms: Some(70),
    });
    let mut request = TaskRequest::new(TaskType::Summarize, "text", "alice");
    request.chain_preference = Some(router::Chain::ChainA);
    let started = Instant::now();
    world
        .router(no_hosted_config())
        .run_task(request)
        .await
        .unwrap();
    assert_eq!(started.elapsed(), Duration::from_millis(70));
    // pending -> running at 20 ms answers the first; the second waits for
    // what is left of the 30 s task timeout.
    assert_eq!(poll_log(&world.chain_a), ["wait_ms=30000", "wait_ms=29980"]);
}

#[tokio::test(start_paused = true)]
async fn held_polls_keep_the_overall_timeout() {
    let world = holding_world(Timeline {
        running_after_ms: 0,
        done_after_ms: None,
    });
    let started = Instant::now();
    let error = world
        .router(no_hosted_config())
        .run_llm(LlmRequest::new("hi", "alice"))
        .await
        .unwrap_err();
    assert_eq!(started.elapsed(), Duration::from_secs(60));
    assert!(matches!(
        first_failure(error).1,
        AdapterError::PollTimeout {
            timeout_ms: 60_000,
            ..
        }
    ));
    // The first poll sees `running` after its full 30 s (not early, so
    // still held); the second asks for the 30 s left; the deadline is due
    // when it answers, and the last chance is a plain poll.
    assert_eq!(
        poll_log(&world.chain_a),
        ["wait_ms=30000", "wait_ms=30000", "plain"]
    );
}

#[tokio::test(start_paused = true)]
async fn a_coordinator_ignoring_wait_ms_is_polled_every_500_ms() {
    let mut chain_a = CoordinatorState::new("eip155:8453", Outcome::Complete(json!("x")));
    chain_a.pending_polls = 3;
    let world = World::new(chain_a, CoordinatorState::new("b", Outcome::Never));
    let started = Instant::now();
    world
        .router(no_hosted_config())
        .run_llm(LlmRequest::new("hi", "alice"))
        .await
        .unwrap();
    assert_eq!(started.elapsed(), Duration::from_millis(1_500));
    assert_eq!(
        poll_log(&world.chain_a),
        ["wait_ms=30000", "plain", "plain", "plain"]
    );
}

#[tokio::test(start_paused = true)]
async fn a_coordinator_refusing_the_wait_is_polled_at_once_then_every_500_ms() {
    let mut chain_a = CoordinatorState::new("eip155:8453", Outcome::Complete(json!("x")));
    chain_a.wait = WaitSupport::Refuse;
    let world = World::new(chain_a, CoordinatorState::new("b", Outcome::Never));
    let started = Instant::now();
    let result = world
        .router(no_hosted_config())
        .run_llm(LlmRequest::new("hi", "alice"))
        .await
        .unwrap();
    assert_eq!(result.output, json!("x"));
    assert_eq!(started.elapsed(), Duration::from_millis(1_000));
    assert_eq!(
        poll_log(&world.chain_a),
        ["wait_ms=30000", "plain", "plain", "plain"]
    );
}

#[tokio::test(start_paused = true)]
async fn wait_ms_max_zero_polls_the_spec_way() {
    let world = holding_world(Timeline {
        running_after_ms: 0,
        done_after_ms: Some(700),
    });
    let mut config = no_hosted_config();
    config.poll.wait_ms_max = 0;
    let started = Instant::now();
    world
        .router(config)
        .run_llm(LlmRequest::new("hi", "alice"))
        .await
        .unwrap();
    assert_eq!(started.elapsed(), Duration::from_millis(1_000));
    assert_eq!(poll_log(&world.chain_a), ["plain", "plain", "plain"]);
}
