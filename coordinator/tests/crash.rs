//! Crash test of the durable store: runs the real `coordinator` binary on a
//! database file, drives commits, pairing claims and completions from real
//! WebSocket workers, `kill -9`s it at seeded pseudo-random moments, restarts
//! it on the same file, and checks after every restart that nothing a client
//! was told is lost:
//! - every job that got a 201 exists;
//! - every job seen `completed` is still `completed` with the same output and receipt;
//! - every claimed pairing is listed;
//! - every payment that bought a job (x402, local settlement), retried,
//!   gets that same job and buys no other;
//! - no payment nonce is spent without the job it bought (issue 16 #7: the
//!   spend and the job are one transaction), checked on the database itself;
//! - at the end, with no worker online, every job turns terminal within the
//!   pending timeout: none is left stuck (deadlines survive, held jobs are requeued).

mod common;

use common::{TestWorker, Wire};
use protocol::signing::Keypair;
use protocol::worker::CoordinatorFrame;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use uuid::Uuid;
use x402::{LocalEvmSigner, PaymentRequired, PaymentSigner};

const SEED: u64 = 20_261_121;
const KILLS: usize = 12;
const PENDING_TIMEOUT_MS: u64 = 3_000;
const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
/// Anvil account #0: a public test key.
const PAYER: &str = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";

/// What clients were told, and so what must survive.
#[derive(Default, Clone)]
struct Promised {
    /// Jobs that got a 201.
    committed: Vec<Uuid>,
    /// Jobs seen `completed`: (output, receipt).
    completed: BTreeMap<Uuid, (Value, Value)>,
    /// Claims that got a 200: (user, provider key).
    claimed: Vec<(String, String)>,
    /// Payments that bought a job: (commit path, job, header name, header value, job id).
    paid: Vec<(String, Value, &'static str, String, Uuid)>,
}

struct Running {
    child: Child,
    base: String,
}

/// Starts the binary on `db` and waits for the address it listens on.
async fn start(db: &Path) -> Running {
    let mut child = Command::new(env!("CARGO_BIN_EXE_coordinator"))
        .args(["--listen", "127.0.0.1:0", "--seed", &SEED.to_string()])
        .args(["--db", db.to_str().unwrap()])
        .args(["--pending-timeout-ms", &PENDING_TIMEOUT_MS.to_string()])
        // Most polls and paid retries then read finished jobs from the
        // database, not from memory (docs/durability.md, "Job memory").
        .args(["--finished-jobs-cached-max", "16"])
        .args(["--claim-failures-per-client-per-minute-max", "100000"])
        .args(["--pairing-creates-per-client-per-minute-max", "100000"])
        .args(["--payment-required", "--pay-to", PAY_TO])
        // The spec's flows with plain user ids (decision 0017).
        .args(["--user-auth", "off"])
        .env("RUST_LOG", "info")
        .env_remove("COORDINATOR_LISTEN")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("coordinator binary starts");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let base = common::wait_listening(&mut lines, Duration::from_secs(20)).await;
    // Keep draining stderr so the child never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    // The listener is bound before the state is restored; wait for the API.
    let http = reqwest::Client::new();
    for _ in 0..200 {
        if http.get(format!("{base}/v1/health")).send().await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Running { child, base }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// A worker that accepts and completes every assignment until the connection ends.
async fn work(base: String, seed: u64) {
    let url = format!("{}/v1/workers/ws", base.replace("http://", "ws://"));
    let Ok((stream, _)) = tokio_tungstenite::connect_async(&url).await else {
        return;
    };
    let mut w = TestWorker {
        key: Keypair::generate(&mut ChaCha20Rng::seed_from_u64(seed)),
        wire: Wire::ws_stream(stream, &url),
        session_id: 0,
    };
    w.authenticate(&["LLM_INFER", "TASK"], 16).await;
    while let Some(text) = w.wire.recv_text().await {
        let Ok(CoordinatorFrame::Assign(a)) = serde_json::from_str(&text) else {
            continue;
        };
        w.send(json!({"type": "accept", "job_id": a.job_id})).await;
        w.send_result(&a).await;
    }
}

/// Commits jobs and polls them, recording what the answers promised.
async fn drive_jobs(base: String, promised: Arc<Mutex<Promised>>, task: u64, seed: u64) {
    let http = client();
    let signer = LocalEvmSigner::from_secret_hex(PAYER).unwrap();
    // Nonces must differ across tasks and rounds: a reused one is refused.
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    let Some(now_s) = server_time_s(&http, &base).await else {
        return;
    };
    let mut terms: BTreeMap<&str, PaymentRequired> = BTreeMap::new();
    let mut mine: Vec<Uuid> = Vec::new();
    for i in 0u64.. {
        let job = if i % 2 == 0 {
            common::task_job(&format!("user-{task}"))
        } else {
            common::llm_job(&format!("user-{task}"))
        };
        let tier = if i % 3 == 0 { "fast" } else { "cheap" };
        let path = format!("/v1/jobs/commit/{tier}");
        if !terms.contains_key(tier) {
            let Some(required) = payment_terms(&http, &base, &path, &job).await else {
                return;
            };
            terms.insert(tier, required);
        }
        let payment = signer.pay(&terms[tier], now_s, &mut rng).unwrap();
        let Ok(res) = http
            .post(format!("{base}{path}"))
            .header(payment.name, &payment.value)
            .json(&job)
            .send()
            .await
        else {
            return;
        };
        if res.status() == 201 {
            let Ok(body) = res.json::<Value>().await else {
                return;
            };
            let id: Uuid = body["job_id"].as_str().unwrap().parse().unwrap();
            let mut p = promised.lock().unwrap();
            p.committed.push(id);
            p.paid
                .push((path, job.clone(), payment.name, payment.value, id));
            mine.push(id);
        }
        // Poll the oldest jobs not yet seen terminal.
        let mut k = 0;
        while k < mine.len().min(4) {
            let id = mine[k];
            let Ok(res) = http.get(format!("{base}/v1/jobs/{id}")).send().await else {
                return;
            };
            let Ok(body) = res.json::<Value>().await else {
                return;
            };
            match body["status"].as_str() {
                Some("completed") => {
                    promised.lock().unwrap().completed.insert(
                        id,
                        (body["result"]["output"].clone(), body["receipt"].clone()),
                    );
                    mine.remove(k);
                }
                Some("failed") => {
                    mine.remove(k);
                }
                _ => k += 1,
            }
        }
        // Leave the workers room to finish jobs while we watch.
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
}

/// The server's clock in Unix seconds, which payments are dated by.
async fn server_time_s(http: &reqwest::Client, base: &str) -> Option<u64> {
    let health: Value = http
        .get(format!("{base}/v1/health"))
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    let ms = protocol::time::parse_ms(health["timestamp"].as_str()?)?;
    Some((ms / 1000) as u64)
}

/// The 402 answer of an unpaid commit, as the paying client reads it.
async fn payment_terms(
    http: &reqwest::Client,
    base: &str,
    path: &str,
    job: &Value,
) -> Option<PaymentRequired> {
    let res = http
        .post(format!("{base}{path}"))
        .json(job)
        .send()
        .await
        .ok()?;
    assert_eq!(res.status(), 402, "an unpaid commit is refused");
    let header = res.headers().get("payment-required").cloned();
    let raw = res.bytes().await.ok()?;
    Some(PaymentRequired::from_response(header.as_ref().map(|h| h.as_bytes()), Some(&raw)).unwrap())
}

/// Creates pairing codes and claims them, recording the claims that got a 200.
async fn drive_pairings(base: String, promised: Arc<Mutex<Promised>>, seed: u64) {
    let http = client();
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    for i in 0u64.. {
        let user = format!("pair-{seed}-{i}");
        let Ok(res) = http
            .post(format!("{base}/v1/trust/create"))
            .json(&json!({"user_id": user}))
            .send()
            .await
        else {
            return;
        };
        let Ok(body) = res.json::<Value>().await else {
            return;
        };
        let Some(code) = body["pairing_code"].as_str() else {
            continue;
        };
        let key = Keypair::generate(&mut rng).public_key_hex();
        let Ok(res) = http
            .post(format!("{base}/v1/trust/claim"))
            .json(&json!({"pairing_code": code, "provider_pubkey": key}))
            .send()
            .await
        else {
            return;
        };
        if res.status() == 200 {
            promised.lock().unwrap().claimed.push((user, key));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Checks every promise against a freshly restarted coordinator.
async fn check(base: &str, promised: &Promised) {
    let http = client();
    for id in &promised.committed {
        let res = http
            .get(format!("{base}/v1/jobs/{id}"))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200, "job {id} got a 201 but is gone");
    }
    for (id, (output, receipt)) in &promised.completed {
        let body: Value = http
            .get(format!("{base}/v1/jobs/{id}"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(body["status"], "completed", "job {id} was seen completed");
        assert_eq!(&body["result"]["output"], output, "job {id} output");
        assert_eq!(&body["receipt"], receipt, "job {id} receipt");
    }
    for (user, key) in &promised.claimed {
        let body: Value = http
            .get(format!("{base}/v1/trust/list?user_id={user}"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let listed = body["providers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["provider_pubkey"] == key.as_str());
        assert!(listed, "claimed pairing of {user} with {key} is not listed");
    }
    for (path, job, name, value, id) in &promised.paid {
        let res = http
            .post(format!("{base}{path}"))
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
}

/// On the database of a killed coordinator: every spent payment nonce has
/// the job it bought.
fn check_no_spend_without_job(db: &Path) {
    let conn = rusqlite::Connection::open(db).unwrap();
    let mut stmt = conn
        .prepare("SELECT nonce FROM payment_nonces WHERE state = 'spent'")
        .unwrap();
    let spent: Vec<String> = stmt
        .query_map([], |r| r.get::<_, Vec<u8>>(0))
        .unwrap()
        .map(|n| format!("0x{}", hex::encode(n.unwrap())))
        .collect();
    let mut stmt = conn.prepare("SELECT body FROM jobs").unwrap();
    let bought: std::collections::BTreeSet<String> = stmt
        .query_map([], |r| r.get::<_, String>(0))
        .unwrap()
        .filter_map(|body| {
            let job: Value = serde_json::from_str(&body.unwrap()).unwrap();
            job["paid_with"]["nonce"]["nonce"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    for nonce in &spent {
        assert!(
            bought.contains(nonce),
            "nonce {nonce} is spent but bought no job"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_coordinator_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("coordinator.db");
    let promised = Arc::new(Mutex::new(Promised::default()));
    let mut rng = ChaCha20Rng::seed_from_u64(SEED);
    for round in 0..KILLS as u64 {
        let mut running = start(&db).await;
        let so_far = promised.lock().unwrap().clone();
        check(&running.base, &so_far).await;
        let mut tasks = Vec::new();
        for w in 0..2 {
            tasks.push(tokio::spawn(work(running.base.clone(), round * 10 + w)));
        }
        for t in 0..3 {
            tasks.push(tokio::spawn(drive_jobs(
                running.base.clone(),
                promised.clone(),
                t,
                round * 100 + t,
            )));
        }
        tasks.push(tokio::spawn(drive_pairings(
            running.base.clone(),
            promised.clone(),
            SEED + round,
        )));
        let alive_ms = rng.gen_range(150..700);
        tokio::time::sleep(Duration::from_millis(alive_ms)).await;
        running.child.kill().await.expect("kill -9");
        for t in tasks {
            t.abort();
        }
        check_no_spend_without_job(&db);
    }
    let p = promised.lock().unwrap().clone();
    assert!(
        p.committed.len() >= 50,
        "only {} commits",
        p.committed.len()
    );
    assert!(!p.completed.is_empty(), "no completion was seen");
    assert!(!p.claimed.is_empty(), "no claim went through");
    assert_eq!(p.paid.len(), p.committed.len(), "every commit was paid");

    // Last start, no worker: every job must end within the pending timeout.
    let mut running = start(&db).await;
    check(&running.base, &p).await;
    tokio::time::sleep(Duration::from_millis(PENDING_TIMEOUT_MS + 1_000)).await;
    let http = client();
    for id in &p.committed {
        let body: Value = http
            .get(format!("{}/v1/jobs/{id}", running.base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let status = body["status"].as_str().unwrap();
        assert!(
            status == "completed" || status == "failed",
            "job {id} is still {status} past its deadline"
        );
    }
    running.child.kill().await.unwrap();
    eprintln!(
        "{KILLS} kills: {} paid jobs committed, {} seen completed, {} claims; all kept, no payment replayed",
        p.committed.len(),
        p.completed.len(),
        p.claimed.len()
    );
}

/// The same recovery in process, deterministic (paused tokio time, the
/// per-event SQLite mode without a thread), as the simulation runs it: the
/// crash is a copy of the database files taken mid-run, as a power cut
/// would leave them; a second coordinator opens the copy.
#[tokio::test(start_paused = true)]
async fn in_process_restart_from_a_crash_image() {
    use coordinator::server::{self, Parts, Runtime, Settings};
    use coordinator::{app, TokioClock};

    let dir = tempfile::tempdir().unwrap();
    let live = dir.path().join("live.db");
    let image = dir.path().join("image.db");
    let clock = Arc::new(TokioClock::new(common::EPOCH_MS));
    let open = |path: &Path| {
        let settings = Settings {
            db: path.to_str().unwrap().to_owned(),
            config: common::spec_config(),
            ..Settings::default()
        };
        // Paused time: the writer must be a task of this runtime (a thread
        // would let time jump ahead while a commit waits on the disk).
        let parts = Parts {
            runtime: Runtime::Simulation,
            ..Parts::new(clock.clone(), ChaCha20Rng::seed_from_u64(3))
        };
        server::start(settings, parts)
    };

    let server1 = open(&live).await.unwrap();
    let c1 = server1.coordinator().clone();
    let app1 = app(c1.clone());
    let mut w1 = TestWorker::connect(Wire::channel(&c1), 1, &["LLM_INFER", "TASK"], 1).await;
    let done = common::commit(&app1, "fast", common::llm_job("alice"))
        .await
        .body["job_id"]
        .clone();
    let a = w1.expect_assign().await;
    w1.complete(&a).await;
    let running = common::commit(&app1, "fast", common::llm_job("alice"))
        .await
        .body["job_id"]
        .clone();
    let a = w1.expect_assign().await;
    w1.send(json!({"type": "accept", "job_id": a.job_id})).await;
    common::settle().await;
    let waiting = common::commit(&app1, "cheap", common::task_job("bob"))
        .await
        .body["job_id"]
        .clone();
    let worker2 = Keypair::generate(&mut ChaCha20Rng::seed_from_u64(2));
    common::pair(&app1, "carol", &worker2).await;
    let done_before = common::job_status(&app1, done.as_str().unwrap()).await;
    assert_eq!(
        common::job_status(&app1, running.as_str().unwrap()).await["status"],
        "running"
    );

    // The crash: the files as they are now. Every commit above fsynced.
    std::fs::copy(&live, &image).unwrap();
    std::fs::copy(
        live.with_extension("db-wal"),
        image.with_extension("db-wal"),
    )
    .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;

    let server2 = open(&image).await.unwrap();
    let c2 = server2.coordinator().clone();
    let app2 = app(c2.clone());
    let status = |v: &Value| v["status"].as_str().unwrap().to_owned();
    assert_eq!(
        common::job_status(&app2, done.as_str().unwrap()).await,
        done_before
    );
    assert_eq!(
        status(&common::job_status(&app2, running.as_str().unwrap()).await),
        "pending"
    );
    assert_eq!(
        status(&common::job_status(&app2, waiting.as_str().unwrap()).await),
        "pending"
    );
    let list = common::call(&app2, "GET", "/v1/trust/list?user_id=carol", None).await;
    assert_eq!(
        list.body["providers"][0]["provider_pubkey"],
        worker2.public_key_hex()
    );

    // A worker that connects gets the requeued job first, then the waiting one.
    let mut w2 = TestWorker::connect(Wire::channel(&c2), 2, &["LLM_INFER", "TASK"], 2).await;
    let first = w2.expect_assign().await;
    assert_eq!(json!(first.job_id), running);
    let second = w2.expect_assign().await;
    assert_eq!(json!(second.job_id), waiting);
    w2.complete(&first).await;
    assert_eq!(
        status(&common::job_status(&app2, running.as_str().unwrap()).await),
        "completed"
    );
    // New ids do not repeat the ones from before the crash.
    let fresh = common::commit(&app2, "fast", common::llm_job("dave"))
        .await
        .body["job_id"]
        .clone();
    assert!(![&done, &running, &waiting].contains(&&fresh));
    c1.shutdown();
    c2.shutdown();
}
