//! The router against live peers over real loopback HTTP: two real
//! coordinators (one per chain, the first payment-gated), worker-sim workers
//! on real WebSockets, and the hosted-provider stubs on their own ports.

use coordinator::config::{Config, UserAuth};
use coordinator::server::{self, Parts, Settings};
use coordinator::SystemClock;
use futures_util::StreamExt;
use rand::SeedableRng;
use router::{
    AdapterError, Chain, ComputeRouter, CoordinatorUrls, HostedProvider, LlmRequest, PaymentClient,
    PrivacyClass, ProviderSettings, ReqwestTransport, RetryPolicy, Route, RouterConfig,
    RouterError, StreamEvent, TaskRequest, TaskType, WallClock, X402Payer,
};
use std::sync::Arc;
use testkit::{ProviderKind, ProviderStub, StubConfig, StubFault};
use worker_sim::{Worker, WorkerConfig, WsConnector};

const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
const PAYER: &str = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";

/// A coordinator on loopback with `workers` worker-sim workers connected,
/// with user auth off: the spec's flows with plain user ids (decision 0017).
async fn coordinator(network: &str, gated: bool, workers: u32) -> String {
    coordinator_with(network, gated, workers, UserAuth::Off, false)
        .await
        .0
}

/// [`coordinator`] with the given user auth, its workers streaming their
/// outputs (over 600 ms a job) when `stream`; also the workers' keys.
async fn coordinator_with(
    network: &str,
    gated: bool,
    workers: u32,
    user_auth: UserAuth,
    stream: bool,
) -> (String, Vec<String>) {
    let mut payment = None;
    if gated {
        let mut config = x402::PaymentConfig::base_sepolia_usdc(PAY_TO.parse().unwrap());
        config.network = network.into();
        payment = Some(config);
    }
    let settings = Settings {
        config: Config {
            network: network.into(),
            user_auth,
            ..Config::default()
        },
        payment,
        ..Settings::default()
    };
    let parts = Parts::new(
        Arc::new(SystemClock),
        rand_chacha::ChaCha20Rng::seed_from_u64(workers as u64),
    );
    let mut server = server::start(settings, parts).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    server.serve_tcp(listener);
    let c = server.coordinator().clone();
    // Serves to the end of the test: a dropped `Server` stops its tasks.
    std::mem::forget(server);
    let ws = format!("{}/v1/workers/ws", base.replace("http://", "ws://"));
    let clock: worker_sim::SharedClock = Arc::new(protocol::clock::SystemClock);
    let mut keys = Vec::new();
    for i in 0..workers {
        let mut config = WorkerConfig {
            network: network.into(),
            ..WorkerConfig::for_index(7, i)
        };
        if stream {
            config.stream = true;
            config.latency = worker_sim::Latency::Fixed { ms: 600 };
        }
        let mut worker = Worker::new(config, clock.clone()).unwrap();
        keys.push(worker.public_key_hex());
        let connector = WsConnector::new(ws.clone());
        tokio::spawn(async move {
            let _ = worker.run(connector).await;
        });
    }
    for _ in 0..200 {
        if c.read(|core| core.workers_online()) == workers as usize {
            return (base, keys);
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("workers did not connect");
}

struct Stubs {
    openai: ProviderStub,
    anthropic: ProviderStub,
    openai_url: String,
    anthropic_url: String,
}

async fn stubs() -> Stubs {
    let clock: worker_sim::SharedClock = Arc::new(protocol::clock::SystemClock);
    let config = |key: &str| StubConfig {
        api_key: key.into(),
        ..StubConfig::default()
    };
    let openai = ProviderStub::new(ProviderKind::OpenAi, config("sk-a"), clock.clone());
    let anthropic = ProviderStub::new(ProviderKind::Anthropic, config("sk-b"), clock);
    let openai_url = testkit::serve_loopback(openai.router()).await;
    let anthropic_url = testkit::serve_loopback(anthropic.router()).await;
    Stubs {
        openai,
        anthropic,
        openai_url,
        anthropic_url,
    }
}

fn router_for(
    chain_a: &str,
    chain_b: &str,
    stubs: &Stubs,
    preferred: HostedProvider,
) -> ComputeRouter {
    let mut config = RouterConfig::new(CoordinatorUrls {
        chain_a: chain_a.into(),
        chain_b: chain_b.into(),
    });
    config.preferred_hosted = preferred;
    config.hosted.openai =
        ProviderSettings::new(&stubs.openai_url, "stub-model").with_api_key("sk-a");
    config.hosted.anthropic =
        ProviderSettings::new(&stubs.anthropic_url, "stub-model").with_api_key("sk-b");
    config.hosted.retry = RetryPolicy {
        max_retries: 1,
        backoff_ms: 10,
        max_wait_ms: 50,
    };
    let clock: WallClock = Arc::new(protocol::clock::SystemClock);
    let signer = x402::LocalEvmSigner::from_secret_hex(PAYER).unwrap();
    let payer: Arc<dyn PaymentClient> = Arc::new(X402Payer::new(
        signer,
        clock,
        rand_chacha::ChaCha20Rng::seed_from_u64(9),
    ));
    config.payment_clients.chain_a = Some(payer);
    ComputeRouter::with_transport(config, Arc::new(ReqwestTransport::new(10_000)))
}

/// A base URL where nothing listens.
fn closed_port() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}")
}

#[tokio::test]
async fn decentralized_on_each_chain_with_verified_receipts_and_a_paid_402() {
    let a = coordinator("eip155:84532", true, 2).await;
    let b = coordinator("solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1", false, 2).await;
    let stubs = stubs().await;
    let router = router_for(&a, &b, &stubs, HostedProvider::ProviderA);

    // chain_a is gated: the router gets 402, pays with its x402 payer, retries once.
    let r = router
        .run_llm(LlmRequest::new("Say hi", "alice"))
        .await
        .unwrap();
    assert_eq!(r.route, Route::Decentralized(Chain::ChainA));
    assert_eq!(r.price.as_deref(), Some("$0.010"));
    let receipt = r.receipt.expect("a receipt");
    receipt.verify(&r.output).unwrap();
    assert!(receipt
        .payment_ref
        .is_some_and(|p| p.starts_with("x402:0x")));

    let mut task = TaskRequest::new(
        TaskType::Classify,
        "Great product, would buy again.",
        "alice",
    );
    task.chain_preference = Some(Chain::ChainB);
    let r = router.run_task(task).await.unwrap();
    assert_eq!(r.route, Route::Decentralized(Chain::ChainB));
    assert_eq!(r.price.as_deref(), Some("$0.001"));
    let receipt = r.receipt.expect("a receipt");
    receipt.verify(&r.output).unwrap();
    assert_eq!(receipt.payment_ref, None);
    assert!(stubs.openai.calls().is_empty() && stubs.anthropic.calls().is_empty());
}

#[tokio::test]
async fn private_without_trusted_worker_is_422_and_never_goes_hosted() {
    let b = coordinator("eip155:10143", false, 1).await;
    let stubs = stubs().await;
    let router = router_for(&closed_port(), &b, &stubs, HostedProvider::ProviderA);
    let mut req = LlmRequest::new("my secret", "alice");
    req.privacy = Some(PrivacyClass::Private);
    req.chain_preference = Some(Chain::ChainB);
    let RouterError::AllAdaptersFailed { failures } = router.run_llm(req).await.unwrap_err();
    assert!(matches!(
        failures[0],
        (
            Route::Decentralized(Chain::ChainB),
            AdapterError::NoTrustedWorker { .. }
        )
    ));
    assert!(failures[1..]
        .iter()
        .all(|(_, e)| matches!(e, AdapterError::PrivateNotAllowed)));
    assert!(stubs.openai.calls().is_empty() && stubs.anthropic.calls().is_empty());
}

#[tokio::test]
async fn coordinator_down_then_preferred_provider_failing_then_the_other_answers() {
    let stubs = stubs().await;
    stubs
        .openai
        .set_default_fault(Some(StubFault::RateLimited { retry_after_s: 0 }));
    let router = router_for(
        &closed_port(),
        &closed_port(),
        &stubs,
        HostedProvider::ProviderA,
    );
    let r = router
        .run_llm(LlmRequest::new("Say hi", "alice"))
        .await
        .unwrap();
    assert_eq!(r.route, Route::Hosted(HostedProvider::ProviderB));
    assert_eq!((r.price, r.receipt), (None, None));
    assert_eq!(stubs.openai.calls().len(), 2, "one retry after the 429");

    // Now both providers fail (500 and 401): the typed error names every reason.
    stubs.openai.set_default_fault(Some(StubFault::ServerError));
    stubs
        .anthropic
        .set_default_fault(Some(StubFault::Unauthorized));
    let err = router
        .run_llm(LlmRequest::new("Say hi", "alice"))
        .await
        .unwrap_err();
    let RouterError::AllAdaptersFailed { failures } = &err;
    let routes: Vec<Route> = failures.iter().map(|(r, _)| *r).collect();
    assert_eq!(
        routes,
        [
            Route::Decentralized(Chain::ChainA),
            Route::Hosted(HostedProvider::ProviderA),
            Route::Hosted(HostedProvider::ProviderB)
        ]
    );
    let message = err.to_string();
    assert!(
        message.starts_with("all compute adapters failed"),
        "{message}"
    );
    assert!(
        message.contains("500") && message.contains("401"),
        "{message}"
    );
}

/// Workers answer in 50 ms (worker-sim's default); with polls held open
/// the router sees the result when it exists, not at the next 500 ms poll.
#[tokio::test]
async fn held_polls_return_a_50_ms_job_well_before_the_500_ms_poll() {
    let b = coordinator("eip155:10143", false, 2).await;
    let stubs = stubs().await;
    let router = router_for(&closed_port(), &b, &stubs, HostedProvider::ProviderA);
    let mut latencies_ms = Vec::new();
    for _ in 0..5 {
        let mut request = LlmRequest::new("Say hi", "alice");
        request.chain_preference = Some(Chain::ChainB);
        let r = router.run_llm(request).await.unwrap();
        assert_eq!(r.route, Route::Decentralized(Chain::ChainB));
        latencies_ms.push(r.latency_ms);
    }
    latencies_ms.sort_unstable();
    let median_ms = latencies_ms[2];
    // 50 ms of work plus loopback HTTP; a poll every 500 ms would give
    // at least 500. Generous for a loaded test machine.
    assert!(median_ms < 400, "latencies {latencies_ms:?}");
}

/// Issue 28: with user auth on (the coordinator's default), the router's
/// user signer proves the user on a PRIVATE commit, which then runs on the
/// worker the user paired (with the user's proof, over HTTP); without a
/// signer the commit is refused 401 and never goes hosted.
#[tokio::test]
async fn a_private_job_with_the_users_signer_carries_a_valid_proof() {
    use protocol::user_proof::{self, ProofRequest};
    use router::{HttpRequest, HttpTransport, KeyUserSigner};
    let (b, keys) = coordinator_with("eip155:10143", false, 1, UserAuth::On, false).await;
    let user = protocol::signing::Keypair::from_secret_hex(PAYER).unwrap();
    let clock: WallClock = Arc::new(protocol::clock::SystemClock);
    // The user pairs the worker: a code bound to its key, with the proof.
    let transport = ReqwestTransport::new(5_000);
    let body = serde_json::json!({"user_id": user.address(), "provider_pubkey": keys[0]});
    let create = HttpRequest::post_json(format!("{b}/v1/trust/create"), &body);
    let proof = user_proof::sign_now(
        &user,
        &user.address(),
        &ProofRequest {
            method: "POST",
            path_and_query: "/v1/trust/create",
            body: &create.body,
        },
        clock.now_ms(),
        &mut rand_chacha::ChaCha20Rng::seed_from_u64(1),
    );
    let created = transport
        .send(create.header(user_proof::HEADER, proof))
        .await
        .unwrap();
    assert_eq!(created.status, 201, "{}", created.body_snippet(300));
    let code: serde_json::Value = created.json().unwrap();
    let claim =
        serde_json::json!({"pairing_code": code["pairing_code"], "provider_pubkey": keys[0]});
    let claimed = transport
        .send(HttpRequest::post_json(
            format!("{b}/v1/trust/claim"),
            &claim,
        ))
        .await
        .unwrap();
    assert_eq!(claimed.status, 200, "{}", claimed.body_snippet(300));

    let stubs = stubs().await;
    let private = || {
        let mut req = LlmRequest::new("my medical history: ...", user.address());
        req.privacy = Some(PrivacyClass::Private);
        req.chain_preference = Some(Chain::ChainB);
        req
    };
    // Without a signer: 401, and PRIVATE never goes hosted.
    let router = router_for(&closed_port(), &b, &stubs, HostedProvider::ProviderA);
    let RouterError::AllAdaptersFailed { failures } = router.run_llm(private()).await.unwrap_err();
    assert!(
        matches!(&failures[0], (Route::Decentralized(Chain::ChainB), AdapterError::UserProofRefused { code, .. }) if code == "user_proof_required"),
        "{failures:?}"
    );
    // With the user's signer: the job runs on the paired worker.
    let mut config = RouterConfig::new(CoordinatorUrls {
        chain_a: closed_port(),
        chain_b: b.clone(),
    });
    config.user_signer = Some(Arc::new(KeyUserSigner::new(
        user.clone(),
        clock,
        rand_chacha::ChaCha20Rng::seed_from_u64(2),
    )));
    let router = ComputeRouter::with_transport(config, Arc::new(ReqwestTransport::new(10_000)));
    let result = router.run_llm(private()).await.unwrap();
    assert_eq!(result.route, Route::Decentralized(Chain::ChainB));
    let receipt = result.receipt.as_ref().unwrap();
    receipt.verify(&result.output).unwrap();
    assert_eq!(receipt.provider_pubkey, keys[0]);
    assert!(stubs.openai.calls().is_empty() && stubs.anthropic.calls().is_empty());
}

/// The deltas of a streaming call and its result.
async fn streamed(router: &ComputeRouter, prompt: &str) -> (Vec<String>, router::ComputeResult) {
    let mut events = router.stream_llm(LlmRequest::new(prompt, "alice"));
    let mut deltas = Vec::new();
    while let Some(event) = events.next().await {
        match event.unwrap() {
            StreamEvent::Delta(text) => deltas.push(text),
            StreamEvent::Restart { .. } => panic!("no restart expected"),
            StreamEvent::Done(result) => return (deltas, result),
        }
    }
    panic!("the stream ended without a result");
}

#[tokio::test]
async fn streams_a_live_coordinators_deltas_then_its_verified_result() {
    let (b, _) = coordinator_with("eip155:10143", false, 1, UserAuth::Off, true).await;
    let stubs = stubs().await;
    let router = router_for(&b, &closed_port(), &stubs, HostedProvider::ProviderA);
    let prompt = "Write a few words about rivers and the sea";
    let (deltas, result) = streamed(&router, prompt).await;
    assert_eq!(result.route, Route::Decentralized(Chain::ChainA));
    assert!(deltas.len() > 1, "streamed as made: {deltas:?}");
    assert_eq!(result.output, serde_json::json!(deltas.concat()));
    result
        .receipt
        .as_ref()
        .expect("a receipt")
        .verify(&result.output)
        .unwrap();
    assert!(stubs.openai.calls().is_empty());
}

#[tokio::test]
async fn a_paid_stream_is_paid_once_and_shows_its_text_once_settled() {
    let a = coordinator_with("eip155:84532", true, 1, UserAuth::Off, true)
        .await
        .0;
    let stubs = stubs().await;
    let router = router_for(&a, &closed_port(), &stubs, HostedProvider::ProviderA);
    let (deltas, result) = streamed(&router, "Say hi").await;
    assert_eq!(result.route, Route::Decentralized(Chain::ChainA));
    // Settled on completion: the whole output comes as one delta (decision 0023).
    assert_eq!(deltas, [result.output.as_str().unwrap()]);
    let receipt = result.receipt.expect("a receipt");
    receipt.verify(&result.output).unwrap();
    assert!(receipt
        .payment_ref
        .is_some_and(|p| p.starts_with("x402:0x")));
}
