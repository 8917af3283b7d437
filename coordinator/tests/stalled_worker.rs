//! Issue 29, finding 3: a worker that logs in and then stops reading is
//! closed within the heartbeat timeout, and its jobs go to other workers.
//! Before the fix its session waited forever in a send to the full TCP
//! window, so the heartbeat timer never fired and its jobs sat with it.

mod common;

use common::*;
use coordinator::config::Config;
use coordinator::{app, SystemClock};
use protocol::worker::CoordinatorFrame;
use serde_json::json;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// Jobs big enough that the stalled worker's socket buffers fill: 48 of
/// 240 KB each, about 11 MB, beyond loopback's default TCP buffers.
const JOBS: usize = 48;
const INPUT_BYTES: usize = 240_000;

#[tokio::test]
async fn a_worker_that_stops_reading_is_closed_and_its_jobs_go_elsewhere() {
    let mut config = Config::default();
    config.timing.heartbeat_timeout_ms = 2_000;
    config.timing.heartbeat_interval_ms = 500;
    config.timing.pending_timeout_ms = 120_000;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    config.public_urls = vec![format!("http://{addr}")];
    let c = coordinator(config, Arc::new(SystemClock), 7).await;
    let router = app(c);
    let service = router
        .clone()
        .into_make_service_with_connect_info::<SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, service).await.unwrap() });
    let url = format!("ws://{addr}/v1/workers/ws");

    // Logs in, then never reads (nor writes) again.
    let stalled = TestWorker::connect(Wire::ws(&url).await, 1, &["TASK"], 64).await;
    let last_frame = tokio::time::Instant::now();
    // Its sends block only 1.5 s after its last frame, so a deadline
    // counted from the first blocked send would end 1.5 s late.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let input = "x".repeat(INPUT_BYTES);
    let mut ids = Vec::new();
    for _ in 0..JOBS {
        let job = json!({"job_type": "TASK", "user_id": "alice",
            "payload": {"task_type": "summarize", "input": input}});
        let r = commit(&router, "fast", job).await;
        assert_eq!(r.status, 201, "{:?}", r.body);
        ids.push(r.body["job_id"].as_str().unwrap().to_owned());
    }
    let honest = TestWorker::connect(Wire::ws(&url).await, 2, &["TASK"], 64).await;
    let served = tokio::spawn(serve_all(honest));

    // Closed within the heartbeat timeout of its last frame (2 s; 900 ms
    // for the polling here and a loaded machine). Before, the timeout ran from its first blocked
    // send, and the close handshake took another second.
    loop {
        let online = call(&router, "GET", "/v1/health", None).await.body["workers_online"].clone();
        if online == 1 {
            break;
        }
        assert!(
            last_frame.elapsed() < Duration::from_millis(2_900),
            "the stalled worker is still online {:?} after its last frame",
            last_frame.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Every job completes, by the worker that reads.
    for id in &ids {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let job = job_status(&router, id).await;
            if job["status"] == "completed" {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "job {id}: {job}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    served.abort();
    drop(stalled);
}

/// Answers every assignment at once, and beats while idle, forever.
async fn serve_all(mut w: TestWorker) {
    loop {
        let text = match tokio::time::timeout(Duration::from_millis(300), w.wire.recv_text()).await
        {
            Err(_) => {
                w.send(json!({"type": "heartbeat"})).await;
                continue;
            }
            Ok(Some(text)) => text,
            Ok(None) => return,
        };
        if let Ok(CoordinatorFrame::Assign(a)) = serde_json::from_str(&text) {
            w.send(json!({"type": "accept", "job_id": a.job_id})).await;
            w.send_result(&a).await;
        }
    }
}
