//! The worker over a real WebSocket (tokio-tungstenite) to the real
//! coordinator served on loopback, including connecting before the
//! coordinator is up (reconnect with backoff).

mod common;

use coordinator::config::Config;
use coordinator::server::{self, Parts, Settings};
use rand::SeedableRng;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use worker_sim::{
    EventKind, EventLog, Latency, ReconnectPolicy, TokioClock, Worker, WorkerConfig, WsConnector,
};

const EPOCH_MS: i64 = 1_795_255_200_000;

/// Serves a coordinator on `listener` until the returned `Server` drops.
async fn serve_on(listener: tokio::net::TcpListener) -> (server::Server, reqwest::Client) {
    let settings = Settings {
        config: Config {
            network: "eip155:10143".into(),
            ..Config::default()
        },
        ..Settings::default()
    };
    let parts = Parts::new(
        Arc::new(coordinator::TokioClock::new(EPOCH_MS)),
        rand_chacha::ChaCha20Rng::seed_from_u64(1),
    );
    let mut server = server::start(settings, parts).await.unwrap();
    server.serve_tcp(listener);
    (server, reqwest::Client::new())
}

async fn run_job(http: &reqwest::Client, base: &str) -> Value {
    let committed: Value = http
        .post(format!("{base}/v1/jobs/commit/cheap"))
        .json(&json!({"job_type": "TASK", "user_id": "bob",
            "payload": {"task_type": "extract_json", "input": "city: Paris, year: 2026"}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = committed["job_id"].as_str().expect("job id").to_owned();
    common::wait_terminal(http, base, &id).await
}

#[tokio::test]
async fn worker_connects_late_over_websocket_and_completes_a_job() {
    // Learn a free port, then leave it closed while the worker starts.
    let addr = {
        let probe = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        probe.local_addr().unwrap()
    };
    let log = EventLog::new();
    let mut worker = Worker::new(
        WorkerConfig {
            latency: Latency::Fixed { ms: 10 },
            network: "eip155:10143".into(),
            reconnect: ReconnectPolicy {
                initial_ms: 20,
                max_ms: 100,
                ..ReconnectPolicy::default()
            },
            ..WorkerConfig::with_seed(5)
        },
        TokioClock::shared(EPOCH_MS),
    )
    .unwrap()
    .with_observer(Arc::new(log.clone()));
    let pubkey = worker.public_key_hex();
    let connector = WsConnector::new(format!("ws://{addr}/v1/workers/ws")).with_nodelay(true);
    let handle = tokio::spawn(async move { worker.run(connector).await });

    tokio::time::sleep(Duration::from_millis(300)).await;
    let failures = log
        .events()
        .iter()
        .filter(|e| matches!(e.kind, EventKind::ConnectFailed { .. }))
        .count();
    assert!(failures >= 2, "the worker retried while nothing listened");

    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    let (_server, http) = serve_on(listener).await;
    let base = format!("http://{addr}");
    for _ in 0..100 {
        let health: Value = http
            .get(format!("{base}/v1/health"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if health["workers_online"] == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let record = run_job(&http, &base).await;
    assert_eq!(record["status"], "completed", "{record}");
    assert_eq!(
        record["result"]["output"],
        json!({"city": "Paris", "year": 2026})
    );
    let receipt: protocol::receipt::Receipt =
        serde_json::from_value(record["receipt"].clone()).unwrap();
    receipt.verify(&record["result"]["output"]).unwrap();
    assert_eq!(receipt.provider_pubkey, pubkey);
    handle.abort();
}
