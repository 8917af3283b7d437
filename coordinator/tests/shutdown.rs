//! Graceful shutdown (mini-redis's `shutdown_complete`): `Server::shutdown`
//! returns only after every worker session has ended, so what a session
//! does as it ends (giving its worker's jobs back) is in the store's last
//! commit, not lost behind it.

mod common;

use common::{TestWorker, Wire, EPOCH_MS};
use coordinator::config::Config;
use coordinator::server::{self, Parts, Settings};
use coordinator::store::Store;
use coordinator::ManualClock;
use protocol::api::JobStatus;
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use std::sync::Arc;

#[tokio::test]
async fn a_sessions_requeue_lands_before_the_final_commit() {
    let settings = Settings {
        config: Config::default(),
        db: ":memory:".into(),
        ..Settings::default()
    };
    let clock = Arc::new(ManualClock::new(EPOCH_MS));
    let parts = Parts::new(clock, ChaCha20Rng::seed_from_u64(32));
    let server = server::start(settings, parts).await.expect("starts");
    let c = server.coordinator().clone();
    let store = server.store().cloned().expect("a SQLite store");
    let app = server.app();

    let mut worker = TestWorker::connect(Wire::channel(&c), 1, &["LLM_INFER"], 1).await;
    let r = common::commit(&app, "fast", common::llm_job("alice")).await;
    assert_eq!(r.status, 201, "{:?}", r.body);
    let a = worker.expect_assign().await;
    let stored = |store: &dyn Store| {
        let snapshot = store.load().expect("the store reads");
        let job = snapshot.jobs.into_iter().find(|j| j.id == a.job_id);
        job.expect("the job is stored").status
    };
    assert_eq!(stored(&*store), JobStatus::Assigned);

    // The worker is still connected, holding the job, when shutdown begins.
    // Read the store the moment shutdown returns, before anything else runs:
    // the session has ended and given the job back (pending again, as a
    // disconnect does), and that change was committed.
    server.shutdown().await;
    assert_eq!(stored(&*store), JobStatus::Pending);
}
