//! Several nodes on one PostgreSQL, live (docs/cluster.md): three
//! `coordinator` processes with the same `--db` form one coordinator.
//! Workers are spread over the nodes; paying clients commit on one node and
//! poll on another. Under load one node is killed with SIGKILL. Then:
//! - every job that got a 201, from any node, ends `completed` with a
//!   receipt that verifies against its output (none is lost, none is stuck:
//!   the dead node's jobs are taken over once its lease lapses, their
//!   interrupted attempts given back);
//! - the survivors finish the dead node's jobs within the node lease plus
//!   a few seconds;
//! - every payment that bought a job, retried on another node, gets that
//!   job and buys no other.
//!
//! Runs when `COORDINATOR_TEST_PG` names a PostgreSQL database
//! (`scripts/pg-throwaway.sh start DIR` starts one; `scripts/pg-cluster.sh`
//! does all of it); skipped otherwise.

mod common;

use common::{TestWorker, Wire};
use protocol::receipt::Receipt;
use protocol::signing::Keypair;
use protocol::worker::CoordinatorFrame;
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use uuid::Uuid;
use x402::{LocalEvmSigner, PaymentRequired, PaymentSigner};

const NODES: usize = 3;
const WORKERS_PER_NODE: u64 = 2;
/// The node killed.
const DEAD: usize = 1;
const CLIENTS: u64 = 6;
/// Must match `coordinator::node::NODE_LEASE_MS`.
const NODE_LEASE_MS: u64 = 10_000;
const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
/// Anvil account #0: a public test key.
const PAYER: &str = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";

struct Node {
    child: Child,
    base: String,
}

/// Starts node `i` of the cluster on `url` (tables in `schema`).
async fn start_node(url: &str, schema: &str, i: usize) -> Node {
    let mut child = Command::new(env!("CARGO_BIN_EXE_coordinator"))
        .args(["--listen", "127.0.0.1:0"])
        .args(["--db", url, "--db-schema", schema])
        .args(["--node-id", &format!("n{i}")])
        .args(["--payment-required", "--pay-to", PAY_TO])
        // Plain user ids across nodes: the spec's flows (decision 0017).
        .args(["--user-auth", "off"])
        .env("RUST_LOG", "info")
        .env_remove("COORDINATOR_LISTEN")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("coordinator binary starts");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let base = common::wait_listening(&mut lines, Duration::from_secs(30)).await;
    // Keep draining stderr so the child never blocks on a full pipe; the
    // take-over lines are the ones worth seeing when this test fails. With
    // CLUSTER_TEST_LOG_DIR set, each node's whole log goes to a file there.
    let mut full = std::env::var_os("CLUSTER_TEST_LOG_DIR").map(|dir| {
        let path = std::path::Path::new(&dir).join(format!("{schema}-n{i}.log"));
        std::fs::File::create(&path).expect("log file")
    });
    tokio::spawn(async move {
        use std::io::Write;
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(file) = full.as_mut() {
                let _ = writeln!(file, "{line}");
            }
            if line.contains("WARN") || line.contains("ERROR") {
                eprintln!("{line}");
            }
        }
    });
    Node { child, base }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// A worker that completes every assignment after `work_ms`, until its
/// node goes away.
async fn work(base: String, seed: u64, work_ms: u64) {
    let url = format!("{}/v1/workers/ws", base.replace("http://", "ws://"));
    let Ok((stream, _)) = tokio_tungstenite::connect_async(&url).await else {
        return;
    };
    let mut w = TestWorker {
        key: Keypair::generate(&mut ChaCha20Rng::seed_from_u64(seed)),
        wire: Wire::ws_stream(stream, &url),
        session_id: 0,
    };
    w.authenticate(&["LLM_INFER", "TASK"], 4).await;
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
    loop {
        tokio::select! {
            biased;
            Some(frame) = done_rx.recv() => w.send(frame).await,
            text = w.wire.recv_text() => {
                let Some(text) = text else { return };
                let Ok(CoordinatorFrame::Assign(a)) = serde_json::from_str(&text) else {
                    continue;
                };
                w.send(json!({"type": "accept", "job_id": a.job_id})).await;
                let frame = w.result_frame(&a, "2026-11-24T10:00:01.000Z");
                let done_tx = done_tx.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(work_ms)).await;
                    let _ = done_tx.send(frame);
                });
            }
        }
    }
}

/// What clients were told: the jobs that got a 201, with the node that
/// answered and the payment that bought each.
#[derive(Default)]
struct Promised {
    jobs: BTreeMap<Uuid, usize>,
    paid: Vec<(String, Value, &'static str, String, Uuid)>,
}

/// Commits paid jobs on `commit_at` until `stop`, polling each once on
/// `poll_at` (another node).
async fn drive(
    bases: Vec<String>,
    commit_at: usize,
    poll_at: usize,
    promised: Arc<Mutex<Promised>>,
    seed: u64,
    stop: Arc<std::sync::atomic::AtomicBool>,
) {
    let http = client();
    let signer = LocalEvmSigner::from_secret_hex(PAYER).unwrap();
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    let base = &bases[commit_at];
    let now_s = server_now_ms(base).await / 1000;
    let mut terms: BTreeMap<&str, PaymentRequired> = BTreeMap::new();
    let mut i = 0u64;
    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
        i += 1;
        let job = if i % 2 == 0 {
            common::task_job(&format!("user-{seed}"))
        } else {
            common::llm_job(&format!("user-{seed}"))
        };
        let tier = if i % 3 == 0 { "fast" } else { "cheap" };
        let path = format!("/v1/jobs/commit/{tier}");
        if !terms.contains_key(tier) {
            let res = http.post(format!("{base}{path}")).json(&job).send().await;
            let Ok(res) = res else { return };
            assert_eq!(res.status(), 402, "an unpaid commit is refused");
            let header = res.headers().get("payment-required").cloned();
            let raw = res.bytes().await.unwrap();
            let required =
                PaymentRequired::from_response(header.as_ref().map(|h| h.as_bytes()), Some(&raw));
            terms.insert(tier, required.unwrap());
        }
        let payment = signer.pay(&terms[tier], now_s as u64, &mut rng).unwrap();
        let res = http
            .post(format!("{base}{path}"))
            .header(payment.name, &payment.value)
            .json(&job)
            .send()
            .await;
        let Ok(res) = res else { return };
        if res.status() != 201 {
            continue;
        }
        let Ok(body) = res.json::<Value>().await else {
            return;
        };
        let id: Uuid = body["job_id"].as_str().unwrap().parse().unwrap();
        {
            let mut p = promised.lock().unwrap();
            p.jobs.insert(id, commit_at);
            p.paid.push((path, job, payment.name, payment.value, id));
        }
        // Any node answers a poll, whoever holds the job.
        let poll = http
            .get(format!("{}/v1/jobs/{id}", bases[poll_at]))
            .send()
            .await;
        if let Ok(res) = poll {
            assert_eq!(res.status(), 200, "job {id} is pollable on another node");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The coordinator's clock, in Unix milliseconds.
async fn server_now_ms(base: &str) -> i64 {
    let health: Value = client()
        .get(format!("{base}/v1/health"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    protocol::time::parse_ms(health["timestamp"].as_str().unwrap()).unwrap()
}

/// Polls `id` on `base` until it is terminal or `deadline` passes.
async fn wait_terminal(
    http: &reqwest::Client,
    base: &str,
    id: Uuid,
    deadline: tokio::time::Instant,
) -> Value {
    loop {
        let body: Value = http
            .get(format!("{base}/v1/jobs/{id}"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let status = body["status"].as_str().unwrap_or("");
        if status == "completed" || status == "failed" || tokio::time::Instant::now() > deadline {
            return body;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_node_loses_no_acknowledged_job() {
    let Ok(url) = std::env::var("COORDINATOR_TEST_PG") else {
        eprintln!("skipped: set COORDINATOR_TEST_PG=postgres://… to run");
        return;
    };
    let schema = format!("kill{}", std::process::id());
    let mut nodes = Vec::new();
    for i in 0..NODES {
        nodes.push(start_node(&url, &schema, i).await);
    }
    let bases: Vec<String> = nodes.iter().map(|n| n.base.clone()).collect();
    let mut workers = Vec::new();
    for (i, base) in bases.iter().enumerate() {
        for w in 0..WORKERS_PER_NODE {
            let seed = i as u64 * 100 + w;
            // The doomed node's workers are slow, so it holds jobs when it
            // dies (with 40 ms jobs it held none in about one run in ten).
            let work_ms = if i == DEAD { 400 } else { 40 };
            workers.push((i, tokio::spawn(work(base.clone(), seed, work_ms))));
        }
    }
    let promised = Arc::new(Mutex::new(Promised::default()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut clients = Vec::new();
    for c in 0..CLIENTS {
        let commit_at = c as usize % NODES;
        let poll_at = (commit_at + 1) % NODES;
        clients.push((
            commit_at,
            tokio::spawn(drive(
                bases.clone(),
                commit_at,
                poll_at,
                promised.clone(),
                c,
                stop.clone(),
            )),
        ));
    }
    tokio::time::sleep(Duration::from_secs(3)).await;

    // kill -9 node DEAD under load; its clients and workers go with it.
    let before_kill = promised.lock().unwrap().jobs.len();
    nodes[DEAD].child.start_kill().expect("kill -9");
    nodes[DEAD].child.wait().await.unwrap();
    let killed_at = tokio::time::Instant::now();
    let killed_ms = server_now_ms(&bases[0]).await;
    for (node, task) in workers.iter().chain(&clients) {
        if *node == DEAD {
            task.abort();
        }
    }
    // The survivors keep serving through the take-over.
    tokio::time::sleep(Duration::from_millis(NODE_LEASE_MS + 2_000)).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    for (_, task) in clients {
        let _ = task.await;
    }

    let p = std::mem::take(&mut *promised.lock().unwrap());
    assert!(
        before_kill >= 30,
        "only {before_kill} commits before the kill"
    );
    let of_dead = p.jobs.values().filter(|&&n| n == DEAD).count();
    assert!(of_dead > 0, "the dead node acknowledged no job");
    let http = client();
    let live = &bases[0];
    let deadline = killed_at + Duration::from_millis(NODE_LEASE_MS + 20_000);
    // When the survivors finished the jobs the dead node had taken, by
    // the coordinators' clock.
    let mut taken_over_ms = 0;
    for (&id, &node) in &p.jobs {
        let body = wait_terminal(&http, live, id, deadline).await;
        assert_eq!(
            body["status"], "completed",
            "job {id} (acknowledged by node {node}): {body}"
        );
        let receipt: Receipt = serde_json::from_value(body["receipt"].clone()).unwrap();
        receipt
            .verify(&body["result"]["output"])
            .unwrap_or_else(|e| panic!("job {id}: receipt does not verify: {e}"));
        let completed_ms =
            protocol::time::parse_ms(body["completed_at"].as_str().unwrap()).unwrap();
        if node == DEAD && completed_ms > killed_ms {
            taken_over_ms = taken_over_ms.max(completed_ms - killed_ms);
        }
    }
    // Its lease lapses at most NODE_LEASE_MS after the kill, and a
    // survivor looks every third of its own lease.
    let bound_ms = (NODE_LEASE_MS + NODE_LEASE_MS / 3 + 2_000) as i64;
    assert!(
        taken_over_ms > 0,
        "no job of the dead node was finished after the kill"
    );
    assert!(
        taken_over_ms <= bound_ms,
        "the dead node's jobs ended {taken_over_ms} ms after the kill (bound {bound_ms} ms)"
    );
    // A retried payment, on another node than the one that took it, gets
    // the same job.
    for (path, job, name, value, id) in &p.paid {
        let node = (p.jobs[id] + 2) % NODES;
        let node = if node == DEAD { 0 } else { node };
        let res = http
            .post(format!("{}{path}", bases[node]))
            .header(*name, value)
            .json(job)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 201, "a retried payment gets its job");
        let body: Value = res.json().await.unwrap();
        assert_eq!(
            body["job_id"],
            id.to_string(),
            "the same job, not a second one"
        );
    }
    eprintln!(
        "{} jobs acknowledged ({before_kill} before the kill, {of_dead} by the killed node): all completed with valid receipts; the dead node's last one {taken_over_ms} ms after the kill; every payment retried on another node got its job",
        p.jobs.len()
    );
    for mut node in nodes {
        let _ = node.child.start_kill();
    }
}

/// Pairings and PRIVATE jobs across nodes: a code made on node 0 is
/// claimed on node 2 for a worker connected to node 2, once (a second
/// claim on node 1 answers `already_claimed`); the user's PRIVATE job,
/// committed on node 0, is admitted for that worker (the shared presence)
/// and completed by it, and node 1 answers its poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pairings_and_private_jobs_cross_nodes() {
    let Ok(url) = std::env::var("COORDINATOR_TEST_PG") else {
        eprintln!("skipped: set COORDINATOR_TEST_PG=postgres://… to run");
        return;
    };
    let schema = format!("private{}", std::process::id());
    let mut nodes = Vec::new();
    for i in 0..NODES {
        nodes.push(start_node(&url, &schema, i).await);
    }
    let bases: Vec<String> = nodes.iter().map(|n| n.base.clone()).collect();
    let http = client();
    let post =
        |base: &str, path: &str, body: Value| http.post(format!("{base}{path}")).json(&body).send();
    const WORKER_SEED: u64 = 7;
    let key = Keypair::generate(&mut ChaCha20Rng::seed_from_u64(WORKER_SEED)).public_key_hex();
    let worker = tokio::spawn(work(bases[2].clone(), WORKER_SEED, 10));

    let res = post(&bases[0], "/v1/trust/create", json!({"user_id": "alice"}));
    let created: Value = res.await.unwrap().json().await.unwrap();
    let code = created["pairing_code"].as_str().unwrap().to_owned();
    let claim = json!({"pairing_code": code.to_uppercase(), "provider_pubkey": key});
    let res = post(&bases[2], "/v1/trust/claim", claim.clone())
        .await
        .unwrap();
    assert_eq!(
        res.status(),
        200,
        "a code made on node 0 is claimed on node 2"
    );
    let other = Keypair::generate(&mut ChaCha20Rng::seed_from_u64(99)).public_key_hex();
    let again = json!({"pairing_code": code, "provider_pubkey": other});
    let res = post(&bases[1], "/v1/trust/claim", again).await.unwrap();
    assert_eq!(res.status(), 400);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["error"], "already_claimed", "a code is claimed once");
    let listed: Value = http
        .get(format!("{}/v1/trust/list?user_id=alice", bases[1]))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        listed["providers"][0]["provider_pubkey"],
        key.as_str(),
        "node 1 lists the claim node 2 took, at once: {listed}"
    );

    // Node 0 sees the worker through the shared presence once it is written.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let health: Value = http
            .get(format!("{}/v1/health", bases[0]))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if health["workers_online"] == 1 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "node 0 never saw the worker"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let terms = post(
        &bases[0],
        "/v1/jobs/commit/fast",
        common::private(common::llm_job("alice")),
    );
    let res = terms.await.unwrap();
    assert_eq!(res.status(), 402, "payments are on");
    let header = res.headers().get("payment-required").cloned();
    let raw = res.bytes().await.unwrap();
    let required =
        PaymentRequired::from_response(header.as_ref().map(|h| h.as_bytes()), Some(&raw)).unwrap();
    let signer = LocalEvmSigner::from_secret_hex(PAYER).unwrap();
    let now_s = server_now_ms(&bases[0]).await / 1000;
    let payment = signer
        .pay(&required, now_s as u64, &mut ChaCha20Rng::seed_from_u64(1))
        .unwrap();
    let res = http
        .post(format!("{}/v1/jobs/commit/fast", bases[0]))
        .header(payment.name, &payment.value)
        .json(&common::private(common::llm_job("alice")))
        .send()
        .await
        .unwrap();
    assert_eq!(
        res.status(),
        201,
        "admitted on node 0 for the worker on node 2"
    );
    let body: Value = res.json().await.unwrap();
    let id: Uuid = body["job_id"].as_str().unwrap().parse().unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let done = wait_terminal(&http, &bases[1], id, deadline).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["receipt"]["provider_pubkey"],
        key.as_str(),
        "by the trusted worker"
    );
    worker.abort();
    for mut node in nodes {
        let _ = node.child.start_kill();
    }
}
