//! The owner's commands, run as the real `worker-sim` binary against the
//! real coordinator served on loopback: `keygen`, `claim` (a good code, the
//! same code again, a wrong code, an unreachable coordinator; user auth off,
//! plain user ids), `pair` (the user's key, user auth on), and then a worker
//! started with the key file serving that user's PRIVATE job.

mod common;

use coordinator::config::{Config, UserAuth};
use coordinator::server::{self, Parts, Settings};
use rand::SeedableRng;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;
use std::time::Duration;

const EPOCH_MS: i64 = 1_795_255_200_000;

/// A loopback coordinator and its URL; it serves until the `Server` drops.
/// User auth off: the spec's flows with plain user ids (decision 0017).
async fn start_coordinator() -> (server::Server, String) {
    start_coordinator_with(
        UserAuth::Off,
        Arc::new(coordinator::TokioClock::new(EPOCH_MS)),
    )
    .await
}

/// With user auth on, the clock is the system's: `worker-sim pair` signs
/// its proof at the wall-clock time, which must lie within the window.
async fn start_coordinator_with(
    user_auth: UserAuth,
    clock: Arc<dyn coordinator::Clock>,
) -> (server::Server, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let settings = Settings {
        config: Config {
            network: "eip155:10143".into(),
            user_auth,
            ..Config::default()
        },
        ..Settings::default()
    };
    let parts = Parts::new(clock, rand_chacha::ChaCha20Rng::seed_from_u64(1));
    let mut server = server::start(settings, parts).await.unwrap();
    // Serving runs on its own task for the rest of the test.
    server.serve_tcp(listener);
    (server, format!("http://{addr}"))
}

fn worker_sim() -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_worker-sim"));
    command
        .env_remove("WORKER_SIM_COORDINATOR")
        .kill_on_drop(true);
    command
}

async fn run(args: &[&str]) -> Output {
    let output = worker_sim().args(args).output().await.unwrap();
    eprintln!(
        "worker-sim {args:?} -> {:?}\nstdout: {}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone())
        .unwrap()
        .trim()
        .to_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("worker-sim-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn keygen(path: &Path) -> String {
    let output = run(&["keygen", "--key-file", path.to_str().unwrap()]).await;
    assert!(output.status.success());
    stdout(&output)
}

#[tokio::test]
async fn keygen_writes_a_private_key_file_and_refuses_to_overwrite_it() {
    let dir = temp_dir("keygen-cli");
    let path = dir.join("worker.key");
    let pubkey = keygen(&path).await;
    let secret = std::fs::read_to_string(&path).unwrap();
    let keypair = worker_sim::KeySource::File(path.clone()).load(0).unwrap();
    assert_eq!(pubkey, keypair.public_key_hex());
    assert!(pubkey.starts_with("0x") && pubkey.len() == 68, "{pubkey}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    let again = run(&["keygen", "--key-file", path.to_str().unwrap()]).await;
    assert!(!again.status.success());
    assert!(stderr(&again).contains("--force"), "{}", stderr(&again));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), secret, "kept");

    let forced = run(&["keygen", "--key-file", path.to_str().unwrap(), "--force"]).await;
    assert!(forced.status.success());
    assert_ne!(stdout(&forced), pubkey);
    assert_ne!(std::fs::read_to_string(&path).unwrap(), secret);
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn claim_pairs_the_key_and_a_worker_with_it_serves_private_jobs() {
    let (_server, base) = start_coordinator().await;
    let http = reqwest::Client::new();
    let dir = temp_dir("claim-cli");
    let key_file = dir.join("worker.key");
    let key_arg = key_file.to_str().unwrap();
    let pubkey = keygen(&key_file).await;

    // A wrong code: the coordinator's error, and a failing exit status.
    let wrong = run(&[
        "claim",
        "--coordinator",
        &base,
        "--code",
        "zzzzzz",
        "--key-file",
        key_arg,
    ])
    .await;
    assert!(!wrong.status.success());
    assert!(
        stderr(&wrong).contains("invalid_code"),
        "{}",
        stderr(&wrong)
    );
    assert!(stdout(&wrong).is_empty());

    // The good code prints the user id.
    let code = common::pairing_code(&http, &base, "alice").await;
    let claimed = run(&[
        "claim",
        "--coordinator",
        &base,
        "--code",
        &code,
        "--key-file",
        key_arg,
    ])
    .await;
    assert!(claimed.status.success());
    assert_eq!(stdout(&claimed), "alice");
    let trusted: Value = http
        .get(format!("{base}/v1/trust/list?user_id=alice"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(trusted["providers"][0]["provider_pubkey"], pubkey.as_str());

    // The same code again, this time through the worker's WebSocket URL.
    let ws_url = format!("{}/v1/workers/ws", base.replacen("http", "ws", 1));
    let twice = run(&[
        "claim",
        "--coordinator",
        &ws_url,
        "--code",
        &code,
        "--key-file",
        key_arg,
    ])
    .await;
    assert!(!twice.status.success());
    assert!(
        stderr(&twice).contains("already_claimed"),
        "{}",
        stderr(&twice)
    );

    // The paired worker, run with its key file, gets alice's PRIVATE job.
    let mut worker = worker_sim()
        .args([
            "--coordinator",
            &ws_url,
            "--key-file",
            key_arg,
            "--latency-ms",
            "5",
            "--network",
            "eip155:10143",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let record = run_private_job(&http, &base).await;
    worker.kill().await.unwrap();
    assert_eq!(record["status"], "completed", "{record}");
    assert_eq!(record["receipt"]["provider_pubkey"], pubkey.as_str());
    std::fs::remove_dir_all(dir).unwrap();
}

/// Issue 28: `worker-sim pair` with the user's key creates a code bound to
/// the worker's key with the user's proof and claims it; the worker then
/// serves the user's PRIVATE job, committed with the user's proof. A plain
/// name cannot be paired with user auth on.
#[tokio::test]
async fn pair_proves_the_user_and_the_worker_serves_its_private_job() {
    let (_server, base) =
        start_coordinator_with(UserAuth::On, Arc::new(coordinator::SystemClock)).await;
    let http = reqwest::Client::new();
    let dir = temp_dir("pair-cli");
    let (user_file, key_file) = (dir.join("user.key"), dir.join("worker.key"));
    keygen(&user_file).await;
    let pubkey = keygen(&key_file).await;
    let user = worker_sim::KeySource::File(user_file.clone())
        .load(0)
        .unwrap();
    let (user_arg, key_arg) = (user_file.to_str().unwrap(), key_file.to_str().unwrap());
    let pair = |user_id: Option<&'static str>| {
        let mut args = vec![
            "pair",
            "--coordinator",
            &base,
            "--user-key-file",
            user_arg,
            "--key-file",
            key_arg,
        ];
        if let Some(user_id) = user_id {
            args.extend(["--user-id", user_id]);
        }
        args.into_iter().map(str::to_owned).collect::<Vec<_>>()
    };
    let plain = run(&pair(Some("alice"))
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>())
    .await;
    assert!(!plain.status.success());
    assert!(
        stderr(&plain).contains("user_id_not_provable"),
        "{}",
        stderr(&plain)
    );
    let paired = run(&pair(None).iter().map(String::as_str).collect::<Vec<_>>()).await;
    assert!(paired.status.success(), "{}", stderr(&paired));
    let user_id = user.address().to_lowercase();
    assert_eq!(stdout(&paired), user_id);

    let ws_url = format!("{}/v1/workers/ws", base.replacen("http", "ws", 1));
    let mut worker = worker_sim()
        .args([
            "--coordinator",
            &ws_url,
            "--key-file",
            key_arg,
            "--latency-ms",
            "5",
            "--network",
            "eip155:10143",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_for_worker(&http, &base).await;
    let body = json!({"job_type": "TASK", "user_id": user_id, "privacy_class": "PRIVATE",
        "payload": {"task_type": "extract_json", "input": "city: Paris"}})
    .to_string();
    let proof = protocol::user_proof::sign_now(
        &user,
        &user_id,
        &protocol::user_proof::ProofRequest {
            method: "POST",
            path_and_query: "/v1/jobs/commit/cheap",
            body: body.as_bytes(),
        },
        protocol::clock::Clock::now_ms(&protocol::clock::SystemClock),
        &mut rand_chacha::ChaCha20Rng::seed_from_u64(3),
    );
    let committed: Value = http
        .post(format!("{base}/v1/jobs/commit/cheap"))
        .header("content-type", "application/json")
        .header(protocol::user_proof::HEADER, proof)
        .body(body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = committed["job_id"].as_str().expect("job id").to_owned();
    let record = common::wait_terminal(&http, &base, &id).await;
    worker.kill().await.unwrap();
    assert_eq!(record["status"], "completed", "{record}");
    assert_eq!(record["receipt"]["provider_pubkey"], pubkey.as_str());
    std::fs::remove_dir_all(dir).unwrap();
}

async fn wait_for_worker(http: &reqwest::Client, base: &str) {
    for _ in 0..200 {
        let health: Value = http
            .get(format!("{base}/v1/health"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if health["workers_online"] == 1 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the worker did not come online");
}

/// Waits for the worker, commits a PRIVATE job for alice, polls it to the end.
async fn run_private_job(http: &reqwest::Client, base: &str) -> Value {
    wait_for_worker(http, base).await;
    let committed: Value = http
        .post(format!("{base}/v1/jobs/commit/cheap"))
        .json(
            &json!({"job_type": "TASK", "user_id": "alice", "privacy_class": "PRIVATE",
            "payload": {"task_type": "extract_json", "input": "city: Paris"}}),
        )
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
async fn claim_says_when_the_coordinator_is_unreachable() {
    let addr = {
        let probe = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        probe.local_addr().unwrap()
    };
    let dir = temp_dir("claim-unreachable");
    let key_file = dir.join("worker.key");
    keygen(&key_file).await;
    let output = run(&[
        "claim",
        "--coordinator",
        &format!("http://{addr}"),
        "--code",
        "abc123",
        "--key-file",
        key_file.to_str().unwrap(),
    ])
    .await;
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("could not reach the coordinator"),
        "{}",
        stderr(&output)
    );
    let missing = run(&[
        "claim",
        "--code",
        "abc123",
        "--key-file",
        "/nonexistent/key",
    ])
    .await;
    assert!(!missing.status.success());
    assert!(stderr(&missing).contains("/nonexistent/key"));
    std::fs::remove_dir_all(dir).unwrap();
}
