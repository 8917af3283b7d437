//! A streaming simulated worker against the real coordinator (issue 31):
//! its output arrives as deltas spread over its latency, and a reader of
//! the job's events sees the first well before the last.

mod common;

use axum::body::Body;
use axum::http::Request;
use common::EPOCH_MS;
use coordinator::config::Config;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tokio::time::{Duration, Instant};
use tower::ServiceExt;
use worker_sim::{Latency, TokioClock, Worker, WorkerConfig};

async fn coordinator_with_worker(stream: bool) -> axum::Router {
    let (c, connector) = common::real_coordinator(&Config::default().network).await;
    let config = WorkerConfig {
        latency: Latency::Fixed { ms: 1_500 },
        network: Config::default().network,
        stream,
        ..WorkerConfig::with_seed(3)
    };
    let mut worker = Worker::new(config, TokioClock::shared(EPOCH_MS)).unwrap();
    tokio::spawn(async move { worker.run(connector).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    coordinator::app(c)
}

/// Each event's name, data and when it was read.
async fn events(app: &axum::Router, job: &str) -> Vec<(String, Value, Instant)> {
    let req = Request::get(format!("/v1/jobs/{job}/events"))
        .body(Body::empty())
        .unwrap();
    let mut body = app.clone().oneshot(req).await.unwrap().into_body();
    let (mut seen, mut buffer) = (Vec::new(), String::new());
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.unwrap().into_data() else {
            continue;
        };
        buffer.push_str(std::str::from_utf8(&data).unwrap());
        while let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            let name = block.lines().find_map(|l| l.strip_prefix("event: "));
            let data = block.lines().find_map(|l| l.strip_prefix("data: "));
            if let (Some(name), Some(data)) = (name, data) {
                seen.push((
                    name.to_owned(),
                    serde_json::from_str(data).unwrap(),
                    Instant::now(),
                ));
            }
        }
    }
    seen
}

async fn commit(app: &axum::Router) -> String {
    let job = json!({"job_type": "LLM_INFER", "user_id": "u",
        "payload": {"prompt": "Tell me a story about streams", "max_tokens": 64}});
    let req = Request::post("/v1/jobs/commit/fast")
        .header("content-type", "application/json")
        .body(Body::from(job.to_string()))
        .unwrap();
    let body = app.clone().oneshot(req).await.unwrap().into_body();
    let created: Value = serde_json::from_slice(&body.collect().await.unwrap().to_bytes()).unwrap();
    created["job_id"].as_str().unwrap().to_owned()
}

#[tokio::test(start_paused = true)]
async fn a_streaming_worker_spreads_its_output_over_its_latency() {
    let app = coordinator_with_worker(true).await;
    let started = Instant::now();
    let job = commit(&app).await;
    let seen = events(&app, &job).await;
    let deltas: Vec<_> = seen.iter().filter(|(name, ..)| name == "delta").collect();
    assert!(deltas.len() > 2, "{seen:?}");
    let (_, record, ended) = seen.last().unwrap();
    let output = record["result"]["output"].as_str().unwrap();
    let joined: String = deltas
        .iter()
        .map(|(_, d, _)| d["text"].as_str().unwrap())
        .collect();
    assert_eq!(joined, output);
    let first = deltas[0].2 - started;
    let total = *ended - started;
    assert!(
        first.as_millis() * 100 < total.as_millis() * 60,
        "TTFT {first:?} of {total:?}"
    );
}

/// Without `stream` the worker names no feature and sends its result
/// alone: the reader gets the output as one delta at the end.
#[tokio::test(start_paused = true)]
async fn a_worker_that_does_not_stream_gives_one_delta_at_the_end() {
    let app = coordinator_with_worker(false).await;
    let job = commit(&app).await;
    let seen = events(&app, &job).await;
    let deltas = seen.iter().filter(|(name, ..)| name == "delta").count();
    assert_eq!(deltas, 1, "{seen:?}");
}
