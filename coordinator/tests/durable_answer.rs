//! Issue 29, finding 9: `result_accepted` tells a worker its job is done
//! for good, so it is sent only once the completion is on disk. Before the
//! fix a failed flush was ignored and the answer went out anyway: after a
//! crash the job ran again on a worker that had been told it was finished.

mod common;

use common::*;
use coordinator::server::{self, Parts, Settings};
use coordinator::TokioClock;
use protocol::worker::CoordinatorFrame;
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_that_did_not_become_durable_gets_no_result_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("jobs.db").to_string_lossy().into_owned();
    let settings = Settings {
        db: db.clone(),
        ..Settings::default()
    };
    let parts = Parts::new(
        Arc::new(TokioClock::new(1_700_000_000_000)),
        rand::SeedableRng::seed_from_u64(3),
    );
    let server = server::start(settings, parts).await.expect("starts");
    let c = server.coordinator().clone();
    let app = server.app();
    let mut worker = TestWorker::connect(Wire::channel(&c), 4, &["TASK"], 1).await;
    assert_eq!(commit(&app, "cheap", task_job("u")).await.status, 201);
    let assignment = worker.expect_assign().await;
    worker
        .send(serde_json::json!({"type": "accept", "job_id": assignment.job_id}))
        .await;
    settle().await;
    c.durable().await.expect("the accept is on disk");

    // Another connection holds the database's write lock, so the writer's
    // next commit fails (SQLITE_BUSY after its 5 s busy timeout), as a
    // full or failing disk would make it.
    let blocker = rusqlite::Connection::open(&db).unwrap();
    blocker.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let result = worker.result_frame(&assignment, "2023-11-14T22:13:21.000Z");
    worker.send(result).await;
    loop {
        match tokio::time::timeout(std::time::Duration::from_secs(20), worker.wire.recv_text())
            .await
        {
            Ok(None) => break,
            Ok(Some(text)) => {
                let frame: CoordinatorFrame = serde_json::from_str(&text).unwrap();
                assert!(
                    !matches!(frame, CoordinatorFrame::ResultAccepted { .. }),
                    "told the worker its job is done though nothing reached the disk"
                );
            }
            Err(_) => panic!("the session neither closed nor answered"),
        }
    }
    drop(blocker);
}
