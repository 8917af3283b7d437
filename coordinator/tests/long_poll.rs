//! `GET /v1/jobs/{id}?wait_ms=N`: a poll held until its job changes
//! status, times out, or the coordinator shuts down; bounded in total and
//! per client. Paused tokio time, so every wait is exact.

mod common;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, StatusCode};
use common::*;
use coordinator::config::Config;
use coordinator::{app, Coordinator, TokioClock};
use serde_json::Value;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::task::JoinHandle;
use tokio::time::{Duration, Instant};

async fn setup(config: Config) -> (Coordinator, axum::Router) {
    let c = coordinator(config, Arc::new(TokioClock::new(EPOCH_MS)), 17).await;
    (c.clone(), app(c))
}

fn id(r: &Response) -> String {
    r.body["job_id"].as_str().unwrap().to_owned()
}

/// A poll from `client` (an IP, as the socket would give it; `None` is
/// the in-process `local` client) running in the background; resolves to
/// the response and how long it was held.
fn held_poll(
    app: &axum::Router,
    job: &str,
    wait_ms: u64,
    client: Option<&str>,
) -> JoinHandle<(Response, Duration)> {
    let mut req = Request::get(format!("/v1/jobs/{job}?wait_ms={wait_ms}"))
        .body(Body::empty())
        .unwrap();
    if let Some(ip) = client {
        let peer: SocketAddr = format!("{ip}:40000").parse().unwrap();
        req.extensions_mut().insert(ConnectInfo(peer));
    }
    let app = app.clone();
    tokio::spawn(async move {
        let started = Instant::now();
        let response = send(&app, req).await;
        (response, started.elapsed())
    })
}

async fn status_after(poll: JoinHandle<(Response, Duration)>) -> (Value, Duration) {
    let (response, held) = poll.await.unwrap();
    assert_eq!(response.status, StatusCode::OK, "{}", response.body);
    (response.body["status"].clone(), held)
}

#[tokio::test(start_paused = true)]
async fn a_held_poll_answers_each_status_change_as_it_happens() {
    let (c, app) = setup(Config::default()).await;
    let mut w = TestWorker::connect(Wire::channel(&c), 1, &["LLM_INFER"], 1).await;
    let job = id(&commit(&app, "fast", llm_job("alice")).await);
    let a = w.expect_assign().await;

    let poll = held_poll(&app, &job, 30_000, None);
    settle().await;
    assert_eq!(c.held_polls("local"), (1, 1));
    tokio::time::sleep(Duration::from_millis(70)).await;
    w.send(serde_json::json!({"type": "accept", "job_id": a.job_id}))
        .await;
    let (status, held) = status_after(poll).await;
    assert_eq!(status, "running");
    assert_eq!(held, Duration::from_millis(70));

    let poll = held_poll(&app, &job, 30_000, None);
    settle().await;
    tokio::time::sleep(Duration::from_millis(250)).await;
    w.complete(&a).await;
    let (response, held) = poll.await.unwrap();
    assert_eq!(response.body["status"], "completed");
    assert_eq!(response.body["result"]["output"], "echo: Say hi");
    assert!(response.body["receipt"].is_object());
    assert_eq!(held, Duration::from_millis(250));
    assert_eq!(c.held_polls("local"), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn a_held_poll_answers_a_failure() {
    let mut config = Config::default();
    config.timing.pending_timeout_ms = 5_000;
    let (_c, app) = setup(config).await;
    let job = id(&commit(&app, "fast", llm_job("alice")).await);
    let (response, held) = held_poll(&app, &job, 30_000, None).await.unwrap();
    assert_eq!(response.body["status"], "failed");
    assert_eq!(response.body["result"]["error"], "no_eligible_worker");
    assert_eq!(held, Duration::from_millis(5_000));
}

#[tokio::test(start_paused = true)]
async fn a_held_poll_answers_the_unchanged_record_when_its_wait_ends() {
    let (c, app) = setup(Config::default()).await;
    let job = id(&commit(&app, "fast", llm_job("alice")).await);
    let (status, held) = status_after(held_poll(&app, &job, 2_000, None)).await;
    assert_eq!(status, "pending");
    assert_eq!(held, Duration::from_millis(2_000));
    assert_eq!(c.held_polls("local"), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn terminal_jobs_zero_waits_and_unknown_jobs_answer_at_once() {
    let mut config = Config::default();
    config.timing.pending_timeout_ms = 1_000;
    let (_c, app) = setup(config).await;
    let job = id(&commit(&app, "fast", llm_job("alice")).await);
    let (status, held) = status_after(held_poll(&app, &job, 0, None)).await;
    assert_eq!((status, held), (Value::from("pending"), Duration::ZERO));

    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let (status, held) = status_after(held_poll(&app, &job, 30_000, None)).await;
    assert_eq!((status, held), (Value::from("failed"), Duration::ZERO));

    let unknown = uuid::Uuid::from_u128(7);
    let (response, held) = held_poll(&app, &unknown.to_string(), 30_000, None)
        .await
        .unwrap();
    assert_eq!(response.status, StatusCode::NOT_FOUND);
    assert_eq!(response.body["error"], "job not found");
    assert_eq!(held, Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn a_malformed_or_too_large_wait_is_a_400() {
    let (_c, app) = setup(Config::default()).await;
    let job = id(&commit(&app, "fast", llm_job("alice")).await);
    let message = "wait_ms must be a whole number of milliseconds from 0 to 30000";
    for query in [
        "wait_ms=30001",
        "wait_ms=abc",
        "wait_ms=-1",
        "wait_ms=%2B5",
        "wait_ms=",
        "wait_ms=1.5",
        "wait_ms=99999999999999999999999",
    ] {
        let r = call(&app, "GET", &format!("/v1/jobs/{job}?{query}"), None).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{query}");
        assert_eq!(r.body["error"], message, "{query}");
    }
    let r = call(
        &app,
        "GET",
        &format!("/v1/jobs/{job}?wait_ms=1&wait_ms=2"),
        None,
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.body["error"], "wait_ms given more than once");
    // The id is judged first, as without `wait_ms`.
    let r = call(&app, "GET", "/v1/jobs/not-a-uuid?wait_ms=abc", None).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    // Other parameters are ignored, as the spec's poll ignores its query.
    let started = Instant::now();
    let r = call(&app, "GET", &format!("/v1/jobs/{job}?x=1&wait_ms=10"), None).await;
    assert_eq!(r.body["status"], "pending");
    assert_eq!(started.elapsed(), Duration::from_millis(10));
}

#[tokio::test(start_paused = true)]
async fn polls_beyond_the_bounds_answer_at_once_and_places_come_back() {
    let mut config = Config::default();
    config.limits.held_polls_max = 3;
    config.limits.held_polls_per_client_max = 2;
    let (c, app) = setup(config).await;
    let job = id(&commit(&app, "fast", llm_job("alice")).await);

    let a = [
        held_poll(&app, &job, 10_000, Some("10.0.0.1")),
        held_poll(&app, &job, 10_000, Some("10.0.0.1")),
    ];
    settle().await;
    assert_eq!(c.held_polls("10.0.0.1"), (2, 2));
    // The client's third is not refused, only not held.
    let (status, held) = status_after(held_poll(&app, &job, 10_000, Some("10.0.0.1"))).await;
    assert_eq!((status, held), (Value::from("pending"), Duration::ZERO));

    let b = held_poll(&app, &job, 10_000, Some("10.0.0.2"));
    settle().await;
    assert_eq!(c.held_polls("10.0.0.2"), (3, 1));
    // The total is reached: a client holding none takes the place of the
    // heaviest client's oldest poll, which is answered now (issue 29,
    // finding 9: before, the newcomer was answered at once).
    let [a0, a1] = a;
    let c3 = held_poll(&app, &job, 10_000, Some("10.0.0.3"));
    settle().await;
    assert_eq!(c.held_polls("10.0.0.3"), (3, 1));
    assert_eq!(c.held_polls("10.0.0.1"), (3, 1));
    let (status, held) = status_after(a0).await;
    assert_eq!((status, held), (Value::from("pending"), Duration::ZERO));
    // Now every client holds one: a fourth is answered at once itself.
    let (_, held) = status_after(held_poll(&app, &job, 10_000, Some("10.0.0.4"))).await;
    assert_eq!(held, Duration::ZERO);

    // A client that goes away gives its place back.
    b.abort();
    settle().await;
    assert_eq!(c.held_polls("10.0.0.2"), (2, 0));
    let c4 = held_poll(&app, &job, 10_000, Some("10.0.0.4"));
    settle().await;
    assert_eq!(c.held_polls("10.0.0.4"), (3, 1));

    for poll in [a1, c3, c4] {
        let (status, held) = status_after(poll).await;
        assert_eq!(status, "pending");
        assert!(held <= Duration::from_millis(10_000));
    }
    assert_eq!(c.held_polls("10.0.0.1"), (0, 0));
}

/// Issue 29, finding 9: ten addresses holding every place do not make an
/// eleventh client's long poll return at once.
#[tokio::test(start_paused = true)]
async fn ten_heavy_clients_do_not_crowd_out_an_eleventh() {
    let mut config = Config::default();
    config.limits.held_polls_max = 100;
    config.limits.held_polls_per_client_max = 20;
    let (c, app) = setup(config).await;
    let job = id(&commit(&app, "fast", llm_job("alice")).await);
    let heavy: Vec<_> = (0..10)
        .flat_map(|i| {
            let ip = format!("10.0.1.{i}");
            (0..11).map(move |_| ip.clone()).collect::<Vec<_>>()
        })
        .map(|ip| held_poll(&app, &job, 10_000, Some(&ip)))
        .collect();
    settle().await;
    assert_eq!(c.held_polls("10.0.1.0").0, 100);
    let eleventh = held_poll(&app, &job, 10_000, Some("10.0.2.1"));
    settle().await;
    assert_eq!(c.held_polls("10.0.2.1"), (100, 1), "the eleventh is held");
    let (_, held) = status_after(eleventh).await;
    assert!(held >= Duration::from_millis(10_000), "{held:?}");
    for poll in heavy {
        status_after(poll).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_flood_from_one_client_holds_at_most_its_bound() {
    let mut config = Config::default();
    config.limits.held_polls_per_client_max = 100;
    let (c, app) = setup(config).await;
    let job = id(&commit(&app, "fast", llm_job("alice")).await);
    let polls: Vec<_> = (0..1_000)
        .map(|_| held_poll(&app, &job, 5_000, Some("192.0.2.9")))
        .collect();
    settle().await;
    assert_eq!(c.held_polls("192.0.2.9"), (100, 100));
    let mut at_once = 0;
    for poll in polls {
        let (status, held) = status_after(poll).await;
        assert_eq!(status, "pending");
        if held == Duration::ZERO {
            at_once += 1;
        }
    }
    assert_eq!(at_once, 900);
    assert_eq!(c.held_polls("192.0.2.9"), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn shutdown_releases_held_polls_and_holds_no_more() {
    let (c, app) = setup(Config::default()).await;
    let job = id(&commit(&app, "fast", llm_job("alice")).await);
    let poll = held_poll(&app, &job, 30_000, None);
    settle().await;
    tokio::time::sleep(Duration::from_millis(40)).await;
    c.shutdown();
    let (status, held) = status_after(poll).await;
    assert_eq!(
        (status, held),
        (Value::from("pending"), Duration::from_millis(40))
    );
    let (_, held) = status_after(held_poll(&app, &job, 30_000, None)).await;
    assert_eq!(held, Duration::ZERO);
    assert_eq!(c.held_polls("local"), (0, 0));
}
