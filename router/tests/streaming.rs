//! `ComputeRouter::stream_llm` (issue 31, item 5): deltas from a
//! coordinator's job events and from hosted providers' streams, then the
//! verified result; a fallback after text was shown restarts the stream.

mod common;

use common::*;
use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use router::{
    AdapterError, CancelOutcome, Chain, ComputeResult, ComputeRouter, HostedProvider, HttpRequest,
    HttpResponse, HttpTransport, LlmRequest, RestartReason, Route, RouterError, StreamEvent,
    StreamingResponse, TransportError,
};
use serde_json::json;
use std::sync::{Arc, Mutex};
use testkit::{InProcessTransport, ProviderStub, StubConfig, StubFault};

/// Every request of the router, `METHOD url`, in the order sent.
#[derive(Clone)]
struct Recorded {
    inner: InProcessTransport,
    log: Arc<Mutex<Vec<String>>>,
}

impl Recorded {
    fn note(&self, request: &HttpRequest) {
        let line = format!("{} {}", request.method, request.url);
        self.log.lock().unwrap().push(line);
    }

    fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

impl HttpTransport for Recorded {
    fn send(&self, request: HttpRequest) -> BoxFuture<'_, Result<HttpResponse, TransportError>> {
        self.note(&request);
        self.inner.send(request)
    }

    fn send_streaming(
        &self,
        request: HttpRequest,
    ) -> BoxFuture<'_, Result<StreamingResponse, TransportError>> {
        self.note(&request);
        self.inner.send_streaming(request)
    }
}

/// The provider stubs of testkit, which stream in each provider's format,
/// in place of the plain fakes.
fn with_streaming_stubs(world: &World) -> (ProviderStub, ProviderStub) {
    let clock: protocol::clock::SharedClock = Arc::new(protocol::clock::FixedClock(0));
    let config = |key: &str| StubConfig {
        api_key: key.into(),
        ..StubConfig::default()
    };
    let openai = ProviderStub::openai(config(OPENAI_KEY), clock.clone());
    let anthropic = ProviderStub::anthropic(config(ANTHROPIC_KEY), clock);
    world.transport.insert(OPENAI_URL, openai.router());
    world.transport.insert(ANTHROPIC_URL, anthropic.router());
    (openai, anthropic)
}

fn recorded(world: &World) -> (ComputeRouter, Recorded) {
    let transport = Recorded {
        inner: world.transport.clone(),
        log: Arc::default(),
    };
    let mut config = config();
    config.stream.reconnect_delay_ms = 100;
    let router = ComputeRouter::with_transport(config, Arc::new(transport.clone()));
    (router, transport)
}

/// Every event of a call; the stream must end after `Done` or an error.
async fn collect(router: &ComputeRouter, prompt: &str) -> Vec<Result<StreamEvent, RouterError>> {
    router
        .stream_llm(LlmRequest::new(prompt, "alice"))
        .collect()
        .await
}

/// The deltas kept (dropped at each restart) and the result.
fn kept(events: &[Result<StreamEvent, RouterError>]) -> (String, &ComputeResult) {
    let mut text = String::new();
    let mut done = None;
    for event in events {
        match event.as_ref().unwrap() {
            StreamEvent::Delta(piece) => text.push_str(piece),
            StreamEvent::Restart { .. } => text.clear(),
            StreamEvent::Done(result) => done = Some(result),
        }
    }
    (text, done.expect("a Done event"))
}

fn deltas(events: &[Result<StreamEvent, RouterError>]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            Ok(StreamEvent::Delta(text)) => Some(text.clone()),
            _ => None,
        })
        .collect()
}

fn restarts(events: &[Result<StreamEvent, RouterError>]) -> Vec<(Route, RestartReason)> {
    events
        .iter()
        .filter_map(|e| match e {
            Ok(StreamEvent::Restart { route, reason }) => Some((*route, reason.clone())),
            _ => None,
        })
        .collect()
}

fn scripted(outcome: Outcome, script: EventsScript) -> World {
    let mut chain_a = CoordinatorState::new("eip155:8453", outcome);
    chain_a.events = Some(script);
    World::new(
        chain_a,
        CoordinatorState::new("eip155:84532", Outcome::Never),
    )
}

#[tokio::test(start_paused = true)]
async fn coordinator_deltas_then_the_verified_result() {
    let world = scripted(
        Outcome::Complete(json!("one two three")),
        EventsScript {
            items: vec![
                FakeEvent::Delta("one "),
                FakeEvent::Delta("two "),
                FakeEvent::Delta("three"),
            ],
            cuts: vec![],
        },
    );
    let (router, _) = recorded(&world);
    let events = collect(&router, "count").await;
    assert_eq!(deltas(&events), ["one ", "two ", "three"]);
    let (text, result) = kept(&events);
    assert_eq!(result.route, Route::Decentralized(Chain::ChainA));
    assert_eq!(result.output, json!(text));
    assert_eq!(result.price.as_deref(), Some("$0.010"));
    result
        .receipt
        .as_ref()
        .unwrap()
        .verify(&result.output)
        .unwrap();
    assert!(!world.chain_a.log().iter().any(|l| l.contains("/cancel")));
}

#[tokio::test(start_paused = true)]
async fn a_dropped_event_stream_resumes_after_its_last_event_id() {
    let world = scripted(
        Outcome::Complete(json!("one two three")),
        EventsScript {
            items: vec![
                FakeEvent::Delta("one "),
                FakeEvent::Delta("two "),
                FakeEvent::Delta("three"),
            ],
            // The first connection is cut after its first event.
            cuts: vec![1],
        },
    );
    let (router, _) = recorded(&world);
    let events = collect(&router, "count").await;
    // Nothing twice, nothing missed, no restart.
    assert_eq!(deltas(&events), ["one ", "two ", "three"]);
    assert!(restarts(&events).is_empty());
    let (text, result) = kept(&events);
    assert_eq!(result.output, json!(text));
    assert_eq!(result.route, Route::Decentralized(Chain::ChainA));
    let reads: Vec<String> = world
        .chain_a
        .log()
        .into_iter()
        .filter(|l| l.contains("/events"))
        .map(|l| l.split_once("/events").unwrap().1.to_owned())
        .collect();
    assert_eq!(reads, ["", "+Last-Event-ID=1"]);
}

#[tokio::test(start_paused = true)]
async fn a_coordinator_restart_event_is_passed_on() {
    let world = scripted(
        Outcome::Complete(json!("second try")),
        EventsScript {
            items: vec![
                FakeEvent::Delta("first "),
                FakeEvent::Restart,
                FakeEvent::Delta("second try"),
            ],
            cuts: vec![],
        },
    );
    let (router, _) = recorded(&world);
    let events = collect(&router, "retry me").await;
    assert_eq!(
        restarts(&events),
        [(
            Route::Decentralized(Chain::ChainA),
            RestartReason::JobRetried
        )]
    );
    let (text, result) = kept(&events);
    assert_eq!(text, "second try");
    assert_eq!(result.output, json!("second try"));
}

#[tokio::test(start_paused = true)]
async fn a_coordinator_cut_mid_stream_is_cancelled_then_hosted_streams_after_a_restart() {
    let world = scripted(
        Outcome::Never,
        EventsScript {
            items: vec![FakeEvent::Delta("partial "), FakeEvent::Delta("text ")],
            // Cut after two deltas; every reconnect is cut before an event.
            cuts: vec![2, 0, 0, 0, 0, 0],
        },
    );
    let (openai, _) = with_streaming_stubs(&world);
    let (router, transport) = recorded(&world);
    let events = collect(&router, "Say hello to the stream").await;

    assert_eq!(deltas(&events)[..2], ["partial ", "text "]);
    let restarts = restarts(&events);
    assert_eq!(restarts.len(), 1, "{restarts:?}");
    let (route, reason) = &restarts[0];
    assert_eq!(*route, Route::Hosted(HostedProvider::ProviderA));
    let RestartReason::Fallback { from, error } = reason else {
        panic!("{reason:?}")
    };
    assert_eq!(*from, Route::Decentralized(Chain::ChainA));
    assert!(
        matches!(
            error,
            AdapterError::StreamBroken {
                cancel: CancelOutcome::Cancelled,
                ..
            }
        ),
        "{error:?}"
    );
    let (text, result) = kept(&events);
    assert_eq!(result.route, Route::Hosted(HostedProvider::ProviderA));
    assert_eq!(result.output, json!(text));
    assert!(text.split_whitespace().count() > 1, "hosted text: {text:?}");
    assert!(openai.calls()[0].stream, "the provider was asked to stream");
    // One first read and three reconnects (`reconnects_max`), then the
    // cancel, and only then the hosted provider.
    let log = transport.log();
    let reads = log.iter().filter(|l| l.contains("/events")).count();
    assert_eq!(reads, 4, "{log:#?}");
    let cancel = log.iter().position(|l| l.ends_with("/cancel")).unwrap();
    let hosted = log.iter().position(|l| l.contains("openai.test")).unwrap();
    assert!(cancel < hosted, "{log:#?}");
}

#[tokio::test(start_paused = true)]
async fn deltas_that_do_not_join_to_the_output_are_an_error_and_the_next_route_runs() {
    let world = scripted(
        Outcome::Complete(json!("what the receipt covers")),
        EventsScript {
            items: vec![FakeEvent::Delta("something else")],
            cuts: vec![],
        },
    );
    // The plain fake provider answers a streaming request with one whole
    // JSON answer, as a server that ignores `stream` does.
    world.openai.set_reply("hosted answer");
    let (router, _) = recorded(&world);
    let events = collect(&router, "hi").await;
    let restarts = restarts(&events);
    let [(Route::Hosted(HostedProvider::ProviderA), RestartReason::Fallback { error, .. })] =
        &restarts[..]
    else {
        panic!("{restarts:?}")
    };
    assert!(
        matches!(error, AdapterError::StreamMismatch { .. }),
        "{error:?}"
    );
    let (text, result) = kept(&events);
    assert_eq!(text, "hosted answer");
    assert_eq!(result.output, json!("hosted answer"));
    assert_eq!(world.openai.last_request().1["stream"], json!(true));
}

#[tokio::test(start_paused = true)]
async fn a_coordinator_without_job_events_is_polled() {
    let world = World::completing(json!("polled output"));
    let (router, _) = recorded(&world);
    let events = collect(&router, "hi").await;
    assert_eq!(deltas(&events), ["polled output"]);
    let (_, result) = kept(&events);
    assert_eq!(result.route, Route::Decentralized(Chain::ChainA));
    assert!(result.receipt.is_some());
}

#[tokio::test(start_paused = true)]
async fn streams_from_the_openai_stub() {
    let world = World::completing(json!("unused"));
    world.transport.remove(CHAIN_A_URL);
    let (openai, _) = with_streaming_stubs(&world);
    let (router, _) = recorded(&world);
    let events = collect(&router, "Tell me about streams of water").await;
    assert!(restarts(&events).is_empty(), "no text before the fallback");
    assert!(deltas(&events).len() > 1, "{events:?}");
    let (text, result) = kept(&events);
    assert_eq!(result.route, Route::Hosted(HostedProvider::ProviderA));
    assert_eq!(result.output, json!(text));
    assert_eq!(result.receipt, None);
    assert!(openai.calls()[0].stream);
}

#[tokio::test(start_paused = true)]
async fn streams_from_the_anthropic_stub() {
    let world = World::completing(json!("unused"));
    world.transport.remove(CHAIN_A_URL);
    let (_, anthropic) = with_streaming_stubs(&world);
    let mut config = config();
    config.preferred_hosted = HostedProvider::ProviderB;
    let router = ComputeRouter::with_transport(config, Arc::new(world.transport.clone()));
    let events = collect(&router, "Tell me about streams of water").await;
    assert!(deltas(&events).len() > 1, "{events:?}");
    let (text, result) = kept(&events);
    assert_eq!(result.route, Route::Hosted(HostedProvider::ProviderB));
    assert_eq!(result.output, json!(text));
    assert!(anthropic.calls()[0].stream);
}

#[tokio::test(start_paused = true)]
async fn a_hosted_stream_cut_restarts_on_the_other_provider() {
    let world = World::completing(json!("unused"));
    world.transport.remove(CHAIN_A_URL);
    let (openai, _) = with_streaming_stubs(&world);
    openai.script(0, StubFault::CutStream { after_events: 3 });
    let (router, _) = recorded(&world);
    let events = collect(&router, "Tell me about streams of water").await;
    let restarts = restarts(&events);
    let [(
        Route::Hosted(HostedProvider::ProviderB),
        RestartReason::Fallback {
            from: Route::Hosted(HostedProvider::ProviderA),
            error: AdapterError::ProviderStreamCut { .. },
        },
    )] = &restarts[..]
    else {
        panic!("{restarts:?}")
    };
    let (text, result) = kept(&events);
    assert_eq!(result.route, Route::Hosted(HostedProvider::ProviderB));
    assert_eq!(result.output, json!(text));
}

#[tokio::test(start_paused = true)]
async fn a_stream_past_its_bound_fails() {
    let world = World::completing(json!("unused"));
    world.transport.remove(CHAIN_A_URL);
    with_streaming_stubs(&world);
    let mut config = config();
    config.stream.deltas_max = 2;
    let router = ComputeRouter::with_transport(config, Arc::new(world.transport.clone()));
    let events = collect(&router, "Tell me about streams of water").await;
    let Some(Err(error)) = events.last() else {
        panic!("{events:?}")
    };
    let limited = error
        .failures()
        .iter()
        .filter(|(_, e)| {
            matches!(
                e,
                AdapterError::StreamLimit {
                    what: "deltas",
                    max: 2
                }
            )
        })
        .count();
    // Both providers went past it (the second one after the first's two deltas).
    assert_eq!(limited, 2, "{error}");
    assert_eq!(deltas(&events).len(), 2);
}

#[tokio::test(start_paused = true)]
async fn dropping_the_stream_cancels_the_coordinator_job() {
    let world = scripted(
        Outcome::Never,
        EventsScript {
            items: vec![FakeEvent::Delta("a ")],
            cuts: vec![],
        },
    );
    let (router, _) = recorded(&world);
    let mut stream = router.stream_llm(LlmRequest::new("hi", "alice"));
    let first = stream.next().await.unwrap().unwrap();
    assert_eq!(first, StreamEvent::Delta("a ".into()));
    drop(stream);
    for _ in 0..100 {
        if world.chain_a.log().iter().any(|l| l.ends_with("/cancel")) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("not cancelled: {:?}", world.chain_a.log());
}

#[tokio::test(start_paused = true)]
async fn a_job_that_completed_while_its_events_were_lost_is_used() {
    let world = scripted(
        Outcome::Complete(json!("one two")),
        EventsScript {
            items: vec![FakeEvent::Delta("one "), FakeEvent::Delta("two")],
            cuts: vec![1, 0, 0, 0],
        },
    );
    let (router, _) = recorded(&world);
    let events = collect(&router, "count").await;
    // The cancel found it completed (409 with its record): paid for, so
    // used, its unseen text sent on.
    assert!(world.chain_a.log().iter().any(|l| l.ends_with("/cancel")));
    assert_eq!(deltas(&events), ["one ", "two"]);
    let (text, result) = kept(&events);
    assert_eq!(result.route, Route::Decentralized(Chain::ChainA));
    assert_eq!(result.output, json!(text));
    assert!(result.receipt.is_some());
}

#[tokio::test(start_paused = true)]
async fn a_stream_past_the_deadline_is_cancelled_then_the_next_route_restarts_it() {
    let world = scripted(
        Outcome::Never,
        EventsScript {
            items: vec![FakeEvent::Delta("stuck ")],
            cuts: vec![],
        },
    );
    world.openai.set_reply("hosted answer");
    let (router, transport) = recorded(&world);
    let started = tokio::time::Instant::now();
    let events = collect(&router, "hi").await;
    assert_eq!(started.elapsed().as_millis(), 60_000, "llm_timeout_ms");
    let restarts = restarts(&events);
    let [(Route::Hosted(HostedProvider::ProviderA), RestartReason::Fallback { error, .. })] =
        &restarts[..]
    else {
        panic!("{restarts:?}")
    };
    assert!(
        matches!(
            error,
            AdapterError::PollTimeout {
                cancel: CancelOutcome::Cancelled,
                ..
            }
        ),
        "{error:?}"
    );
    let (text, _) = kept(&events);
    assert_eq!(text, "hosted answer");
    let log = transport.log();
    let cancel = log.iter().position(|l| l.ends_with("/cancel")).unwrap();
    let hosted = log.iter().position(|l| l.contains("openai.test")).unwrap();
    assert!(cancel < hosted, "{log:#?}");
}
