//! Cluster mode in one process, deterministic: two nodes started through
//! `server::start_node` on the in-memory shared store, under tokio's
//! paused clock, as the simulation will run them (the node shell reads no
//! wall clock; its intervals are tokio time). Checks the node shell itself:
//! a job committed on one node reaches a worker connected to the other, a
//! poll on a node that does not hold a job reads it from the store, and a
//! backlog of pool jobs no worker can take fails at its pending deadline,
//! however many there are.

mod common;

use common::{call, spec_config, TestWorker, Wire, EPOCH_MS};
use coordinator::cluster::{MemoryShared, SharedStore};
use coordinator::config::Config;
use coordinator::node::ClusterSettings;
use coordinator::server::{self, Parts, Runtime, Server, Settings};
use coordinator::TokioClock;
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use std::sync::Arc;
use std::time::Duration;

const PENDING_TIMEOUT_MS: i64 = 5_000;

async fn node(shared: &Arc<MemoryShared>, name: &str, seed: u64) -> Server {
    node_with(shared, name, seed, spec_config()).await
}

async fn node_with(
    shared: &Arc<MemoryShared>,
    name: &str,
    seed: u64,
    mut config: Config,
) -> Server {
    config.timing.pending_timeout_ms = PENDING_TIMEOUT_MS;
    let settings = Settings {
        config,
        ..Settings::default()
    };
    let parts = Parts {
        clock: Arc::new(TokioClock::new(EPOCH_MS)),
        rng: ChaCha20Rng::seed_from_u64(seed),
        runtime: Runtime::Simulation,
        settler: None,
    };
    let cluster = ClusterSettings {
        url: "memory".into(),
        schema: None,
        node_id: name.into(),
        node_lease_ms: coordinator::node::NODE_LEASE_MS,
    };
    let shared: Arc<dyn SharedStore> = shared.clone();
    server::start_node(settings, parts, cluster, shared)
        .await
        .expect("node starts")
}

/// A worker connected to B, and the id of a job committed on A that it
/// was assigned, with the assignment.
async fn job_from_a_on_bs_worker(
    a: &Server,
    b: &Server,
) -> (TestWorker, String, protocol::worker::Assignment) {
    let mut worker =
        TestWorker::connect(Wire::channel(b.coordinator()), 5, &["LLM_INFER"], 1).await;
    let job = Some(common::llm_job("u"));
    let committed = call(&a.app(), "POST", "/v1/jobs/commit/fast", job).await;
    assert_eq!(committed.status, 201);
    let id = committed.body["job_id"].as_str().unwrap().to_owned();
    let assigned = worker.expect_assign().await;
    assert_eq!(assigned.job_id.to_string(), id, "B's worker gets A's job");
    (worker, id, assigned)
}

#[tokio::test(start_paused = true)]
async fn two_nodes_share_jobs_and_fail_a_backlog_on_time() {
    let shared = Arc::new(MemoryShared::default());
    let a = node(&shared, "a", 1).await;
    let b = node(&shared, "b", 2).await;
    let (mut worker, id, assigned) = job_from_a_on_bs_worker(&a, &b).await;
    // A long poll on A, which does not hold the job, waits for its change.
    let app = a.app();
    let uri = format!("/v1/jobs/{id}?wait_ms=20000");
    let held = tokio::spawn(async move {
        let started = tokio::time::Instant::now();
        let res = call(&app, "GET", &uri, None).await;
        (res, started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert!(!held.is_finished(), "the poll is held");
    worker.complete(&assigned).await;
    let (polled, waited) = held.await.unwrap();
    assert_eq!(polled.body["status"], "completed", "A reads what B holds");
    assert!(
        waited < Duration::from_millis(1_500),
        "woken by the change, not the wait: {waited:?}"
    );
    let held_by_a = a
        .coordinator()
        .read(|core| core.job(&id.parse().unwrap()).is_some());
    assert!(!held_by_a, "A holds no job it released");

    // More TASK jobs than one claim takes, and no worker for TASK.
    let backlog = coordinator::node::CLAIM_BATCH_MAX + 44;
    let mut ids = Vec::with_capacity(backlog);
    for _ in 0..backlog {
        let res = call(
            &a.app(),
            "POST",
            "/v1/jobs/commit/cheap",
            Some(common::task_job("u")),
        )
        .await;
        assert_eq!(res.status, 201);
        ids.push(res.body["job_id"].as_str().unwrap().to_owned());
    }
    let past_deadline_ms = PENDING_TIMEOUT_MS as u64 + coordinator::node::CLAIM_INTERVAL_MS + 100;
    tokio::time::sleep(Duration::from_millis(past_deadline_ms)).await;
    for id in &ids {
        let polled = call(&b.app(), "GET", &format!("/v1/jobs/{id}"), None).await;
        assert_eq!(polled.body["status"], "failed", "job {id}: {}", polled.body);
        assert_eq!(polled.body["result"]["error"], "no_eligible_worker");
    }
}

/// Nodes draw pairing codes independently, so two may draw the same one
/// (here certainly: the same seed, the same draws). The store keeps the
/// first user's; the second user is handed another code, and the worker
/// that claims the code its user was given is paired to that user, not
/// to the one who drew the code first.
#[tokio::test(start_paused = true)]
async fn a_code_another_node_drew_first_is_not_handed_out() {
    let shared = Arc::new(MemoryShared::default());
    let a = node(&shared, "a", 1).await;
    let b = node(&shared, "b", 1).await;
    let create = |user: &str| Some(serde_json::json!({ "user_id": user }));
    let alice = call(&a.app(), "POST", "/v1/trust/create", create("alice")).await;
    let bob = call(&b.app(), "POST", "/v1/trust/create", create("bob")).await;
    assert_eq!(alice.status, 201);
    assert_eq!(bob.status, 201);
    assert_ne!(
        alice.body["pairing_code"], bob.body["pairing_code"],
        "bob is not handed alice's code"
    );
    let key =
        protocol::signing::Keypair::generate(&mut ChaCha20Rng::seed_from_u64(7)).public_key_hex();
    let claim = serde_json::json!({
        "pairing_code": bob.body["pairing_code"],
        "provider_pubkey": key,
    });
    let claimed = call(&b.app(), "POST", "/v1/trust/claim", Some(claim)).await;
    assert_eq!(claimed.status, 200, "{:?}", claimed.body);
    for (user, trusts) in [("bob", true), ("alice", false)] {
        let uri = format!("/v1/trust/list?user_id={user}");
        let listed = call(&a.app(), "GET", &uri, None).await;
        let found = listed.body["providers"]
            .as_array()
            .is_some_and(|p| p.iter().any(|p| p["provider_pubkey"] == key.as_str()));
        assert_eq!(found, trusts, "{user}'s trust list: {:?}", listed.body);
    }
}

/// The claim-failure budget is the cluster's, not each node's: failed
/// claims spread over two nodes use up one budget, after which every node
/// answers 429 (with N per-node budgets a guesser got N times the tries).
#[tokio::test(start_paused = true)]
async fn failed_claims_on_two_nodes_share_one_budget() {
    let shared = Arc::new(MemoryShared::default());
    let mut config = spec_config();
    config.limits.claim_failures_per_minute_max = 4;
    let a = node_with(&shared, "a", 1, config.clone()).await;
    let b = node_with(&shared, "b", 2, config).await;
    let key =
        protocol::signing::Keypair::generate(&mut ChaCha20Rng::seed_from_u64(7)).public_key_hex();
    let claim = serde_json::json!({ "pairing_code": "abcdef", "provider_pubkey": key });
    for i in 0..4 {
        let node = if i % 2 == 0 { &a } else { &b };
        let res = call(&node.app(), "POST", "/v1/trust/claim", Some(claim.clone())).await;
        assert_eq!(res.status, 400, "failure {i}: {:?}", res.body);
    }
    for node in [&a, &b] {
        let res = call(&node.app(), "POST", "/v1/trust/claim", Some(claim.clone())).await;
        assert_eq!(res.status, 429, "{:?}", res.body);
        assert_eq!(
            res.body["error"],
            "too many failed pairing claims on this coordinator; retry later"
        );
    }
    // A claim that succeeds does not count: a new window, a real code.
    tokio::time::sleep(Duration::from_millis(60_000)).await;
    let created = call(
        &a.app(),
        "POST",
        "/v1/trust/create",
        Some(serde_json::json!({ "user_id": "alice" })),
    )
    .await;
    let good = serde_json::json!({
        "pairing_code": created.body["pairing_code"],
        "provider_pubkey": key,
    });
    let res = call(&b.app(), "POST", "/v1/trust/claim", Some(good)).await;
    assert_eq!(res.status, 200, "{:?}", res.body);
    for i in 0..4 {
        let res = call(&a.app(), "POST", "/v1/trust/claim", Some(claim.clone())).await;
        assert_eq!(
            res.status, 400,
            "failure {i} after a success: {:?}",
            res.body
        );
    }
}

/// The per-user create budget is the cluster's too: codes created for one
/// user on two nodes count together.
#[tokio::test(start_paused = true)]
async fn creates_for_one_user_on_two_nodes_share_one_budget() {
    let shared = Arc::new(MemoryShared::default());
    let mut config = spec_config();
    config.limits.pairing_creates_per_user_per_minute_max = 3;
    let a = node_with(&shared, "a", 1, config.clone()).await;
    let b = node_with(&shared, "b", 2, config).await;
    let create = Some(serde_json::json!({ "user_id": "bob" }));
    for i in 0..3 {
        let node = if i % 2 == 0 { &a } else { &b };
        let res = call(&node.app(), "POST", "/v1/trust/create", create.clone()).await;
        assert_eq!(res.status, 201, "create {i}: {:?}", res.body);
    }
    for node in [&a, &b] {
        let res = call(&node.app(), "POST", "/v1/trust/create", create.clone()).await;
        assert_eq!(res.status, 429, "{:?}", res.body);
        assert_eq!(
            res.body["error"],
            "too many pairing codes created for this user; retry later"
        );
    }
}

/// `queue_len_max` bounds the shared pool, not only what a node holds (a
/// node keeps no pending job, so its own count was always 0): the
/// committing node counts what it put there at once, every node learns
/// the pool's length every claim interval.
#[tokio::test(start_paused = true)]
async fn the_pool_is_bounded_by_queue_len_max_across_nodes() {
    let shared = Arc::new(MemoryShared::default());
    let mut config = spec_config();
    config.limits.queue_len_max = 3;
    let a = node_with(&shared, "a", 1, config.clone()).await;
    let b = node_with(&shared, "b", 2, config).await;
    let commit = |node: &Server| {
        let app = node.app();
        async move {
            let job = Some(common::llm_job("u"));
            call(&app, "POST", "/v1/jobs/commit/fast", job).await
        }
    };
    for i in 0..3 {
        assert_eq!(commit(&a).await.status, 201, "commit {i}");
    }
    let full = commit(&a).await;
    assert_eq!(full.status, 503, "{:?}", full.body);
    tokio::time::sleep(Duration::from_millis(
        coordinator::node::CLAIM_INTERVAL_MS + 100,
    ))
    .await;
    let full = commit(&b).await;
    assert_eq!(
        full.status, 503,
        "B learned the pool's length: {:?}",
        full.body
    );
    let metrics = b.coordinator().render_metrics();
    assert!(metrics.contains("\ncluster_pool_jobs 3\n"), "{metrics}");
}

/// Held polls of a job another node holds count against the same bounds
/// as those of a job held here, per client too: beyond them a poll is
/// answered at once. The held ones are woken by the remote watch, which
/// reads every watched job in one query a round.
#[tokio::test(start_paused = true)]
async fn held_polls_of_another_nodes_job_keep_the_per_client_bound() {
    let shared = Arc::new(MemoryShared::default());
    let mut config = spec_config();
    config.limits.held_polls_per_client_max = 2;
    let a = node_with(&shared, "a", 1, config.clone()).await;
    let b = node_with(&shared, "b", 2, config).await;
    let (mut worker, id, assigned) = job_from_a_on_bs_worker(&a, &b).await;
    let uri = format!("/v1/jobs/{id}?wait_ms=20000");
    let mut held = Vec::new();
    for _ in 0..2 {
        let (app, uri) = (a.app(), uri.clone());
        held.push(tokio::spawn(
            async move { call(&app, "GET", &uri, None).await },
        ));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let at_once = call(&a.app(), "GET", &uri, None).await;
    assert_eq!(
        at_once.body["status"], "assigned",
        "the third is answered now"
    );
    assert!(held.iter().all(|h| !h.is_finished()), "two are held");
    let (total, of_client) = a.coordinator().held_polls("local");
    assert_eq!((total, of_client), (2, 2));
    worker.complete(&assigned).await;
    tokio::time::sleep(Duration::from_millis(
        coordinator::node::REMOTE_POLL_INTERVAL_MS + 50,
    ))
    .await;
    for h in held {
        assert!(h.is_finished(), "woken within a watch round");
        assert_eq!(h.await.unwrap().body["status"], "completed");
    }
    assert_eq!(a.coordinator().held_polls("local"), (0, 0));
}

/// A write that committed but whose answer was lost is retried as the
/// same batch, which the store recognises: the node goes on (it used to
/// find the job it had just released to the pool "not its own" and fence
/// itself).
#[tokio::test(start_paused = true)]
async fn a_write_whose_answer_was_lost_is_not_applied_twice() {
    let shared = Arc::new(MemoryShared::default());
    let a = node(&shared, "a", 1).await;
    shared.lose_next_answer("a");
    for i in 0..2 {
        let job = Some(common::llm_job("u"));
        let res = call(&a.app(), "POST", "/v1/jobs/commit/fast", job).await;
        assert_eq!(res.status, 201, "commit {i}: {:?}", res.body);
    }
    assert_eq!(shared.pool_len("a").await.unwrap(), 2, "each job once");
}

/// A job that went back to the pool because the only idle worker here
/// failed it (the other eligible worker is busy) waits there for that
/// worker, and the node does not spin claiming and returning it without
/// time passing. Before the fix its own return to the pool woke the
/// node's claim loop, which claimed it again at once, for ever (found by
/// swarm seeds 94 and 234: the run never ended). Run on a thread of its
/// own so a spin fails the test instead of hanging it.
#[test]
fn a_job_no_idle_worker_may_take_waits_in_the_pool_without_spinning() {
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    // A watchdog thread, in a test: the world itself stays on one thread.
    #[allow(clippy::disallowed_methods)]
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        runtime.block_on(a_job_returned_to_the_pool_waits_for_a_worker_it_did_not_fail());
        let _ = done_tx.send(());
    });
    done_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the world ended within 60 s of wall time");
}

async fn a_job_returned_to_the_pool_waits_for_a_worker_it_did_not_fail() {
    let shared = Arc::new(MemoryShared::default());
    let a = node(&shared, "a", 1).await;
    let channel = || Wire::channel(a.coordinator());
    let mut busy = TestWorker::connect(channel(), 5, &["LLM_INFER"], 1).await;
    let job = || Some(common::llm_job("u"));
    let app = a.app();
    assert_eq!(
        call(&app, "POST", "/v1/jobs/commit/fast", job())
            .await
            .status,
        201
    );
    let first = busy.expect_assign().await;
    let mut rejecting = TestWorker::connect(channel(), 6, &["LLM_INFER"], 1).await;
    let second = call(&app, "POST", "/v1/jobs/commit/fast", job()).await;
    let second_id = second.body["job_id"].as_str().unwrap().to_owned();
    let offered = rejecting.expect_assign().await;
    assert_eq!(offered.job_id.to_string(), second_id);
    rejecting
        .send(serde_json::json!({"type": "reject", "job_id": offered.job_id, "reason": "no"}))
        .await;
    // The second job may not go back to the worker that rejected it, and
    // the other worker is busy: it waits. Time passes.
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    busy.complete(&first).await;
    let next = busy.expect_assign().await;
    assert_eq!(
        next.job_id.to_string(),
        second_id,
        "the free worker gets it"
    );
}
