//! Logs an operator can ship: the real binary at debug level with
//! `--log-format json` writes one JSON object a line, HTTP lines carry the
//! request id the answer's `x-request-id` header gives, a finished job gets
//! one info line, and no prompt, output or payment reaches any line.

mod common;

use base64::Engine;
use common::{TestWorker, Wire};
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;
use x402::{LocalEvmSigner, PaymentRequired, PaymentSigner};

const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
/// Anvil account #0: a public test key.
const PAYER: &str = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";
const PROMPT: &str = "recognisable-prompt-5d1e9c";
/// A payment header's signature nobody would log by chance.
const FAKE_SIGNATURE: &str = "0x5151515151515151515151515151515151515151515151515151515151515151";

#[tokio::test]
async fn debug_logs_are_json_with_request_ids_and_no_secrets() {
    let (mut child, lines, base) = spawn(
        &[
            "--log-format",
            "json",
            "--payment-required",
            "--pay-to",
            PAY_TO,
        ],
        "debug",
    )
    .await;
    let http = reqwest::Client::new();
    let ws = format!("{}/v1/workers/ws", base.replace("http://", "ws://"));
    let mut worker = TestWorker::connect(Wire::ws(&ws).await, 3, &["LLM_INFER"], 1).await;

    let path = format!("{base}/v1/jobs/commit/fast");
    let job = json!({"job_type": "LLM_INFER", "user_id": "u-logs",
        "payload": {"prompt": PROMPT, "max_tokens": 8}});
    // Unpaid, and with a payment carrying a recognisable signature: 402.
    let unpaid = http.post(&path).json(&job).send().await.unwrap();
    assert_eq!(unpaid.status(), 402);
    let request_id = unpaid.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let header = unpaid.headers().get("payment-required").cloned();
    let raw = unpaid.bytes().await.unwrap();
    let terms =
        PaymentRequired::from_response(header.as_ref().map(|h| h.as_bytes()), Some(&raw)).unwrap();
    let fake = base64::engine::general_purpose::STANDARD.encode(
        json!({"x402Version": 1, "scheme": "exact", "network": "base-sepolia",
            "payload": {"signature": FAKE_SIGNATURE, "authorization": {}}})
        .to_string(),
    );
    let refused = http
        .post(&path)
        .header("X-PAYMENT", &fake)
        .json(&job)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 402);

    // Paid: 201, and a worker completes it.
    let health: Value = http
        .get(format!("{base}/v1/health"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let now_s = protocol::time::parse_ms(health["timestamp"].as_str().unwrap()).unwrap() / 1000;
    let payment = LocalEvmSigner::from_secret_hex(PAYER)
        .unwrap()
        .pay(&terms, now_s as u64, &mut ChaCha20Rng::seed_from_u64(9))
        .unwrap();
    let paid = http
        .post(&path)
        .header(payment.name, &payment.value)
        .header("x-request-id", "caller-id-1")
        .json(&job)
        .send()
        .await
        .unwrap();
    assert_eq!(paid.status(), 201);
    assert_eq!(paid.headers()["x-request-id"], "caller-id-1");
    let job_id = paid.json::<Value>().await.unwrap()["job_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let assignment = worker.expect_assign().await;
    worker.complete(&assignment).await;
    let record: Value = http
        .get(format!("{base}/v1/jobs/{job_id}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(record["status"], "completed");
    let output = record["result"]["output"].as_str().unwrap().to_owned();
    let paid_signature = payment_signature(&payment.value);

    // Let the last lines reach the pipe, then stop the process.
    tokio::time::sleep(Duration::from_millis(200)).await;
    child.kill().await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let lines = lines.lock().unwrap().clone();
    assert!(lines.len() > 10, "a debug run logs: {lines:?}");

    let all = lines.join("\n");
    for secret in [
        PROMPT,
        &output,
        FAKE_SIGNATURE,
        &fake,
        &payment.value,
        &paid_signature,
    ] {
        assert!(!all.contains(secret), "a log line holds {secret}:\n{all}");
    }
    let parsed: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    // Every line in an HTTP request's span carries its id.
    let http_lines: Vec<&Value> = parsed
        .iter()
        .filter(|v| v["span"]["name"] == "http")
        .collect();
    assert!(!http_lines.is_empty());
    assert!(http_lines.iter().all(|v| v["span"]["request_id"]
        .as_str()
        .is_some_and(|id| !id.is_empty())));
    assert!(http_lines
        .iter()
        .any(|v| v["span"]["request_id"] == request_id.as_str()));
    assert!(http_lines
        .iter()
        .any(|v| v["span"]["request_id"] == "caller-id-1"));
    // One info line for the job's end, naming job, tier, worker and duration.
    let ends: Vec<&Value> = parsed
        .iter()
        .filter(|v| v["fields"]["job"] == job_id.replace('-', "")[..8])
        .collect();
    assert_eq!(ends.len(), 1, "{ends:?}");
    let end = &ends[0];
    // Issue 29, finding 9: no log line carries the whole job id (a bearer
    // capability for the output).
    let bare = job_id.replace('-', "");
    assert!(!lines
        .iter()
        .any(|l| l.contains(job_id.as_str()) || l.contains(&bare)));
    assert_eq!(end["level"], "INFO");
    assert_eq!(end["fields"]["message"], "job completed");
    assert_eq!(end["fields"]["tier"], "FAST");
    assert_eq!(end["fields"]["worker_session"], worker.session_id);
    assert!(end["fields"]["duration_ms"].as_i64().unwrap() >= 0);
}

/// Starts the coordinator binary with logs at `level` and `args`;
/// returns it, the lines it writes to stderr (collected as they come) and
/// its base URL once it answers.
async fn spawn(
    args: &[&str],
    level: &str,
) -> (tokio::process::Child, Arc<Mutex<Vec<String>>>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_coordinator"))
        .args(["--listen", "127.0.0.1:0", "--seed", "5", "--db", ":memory:"])
        .args(args)
        .env("RUST_LOG", level)
        .env_remove("COORDINATOR_LISTEN")
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("coordinator binary starts");
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut reader = BufReader::new(child.stderr.take().unwrap()).lines();
    let (addr_tx, addr_rx) = tokio::sync::oneshot::channel();
    let collected = lines.clone();
    tokio::spawn(async move {
        let mut addr_tx = Some(addr_tx);
        while let Ok(Some(line)) = reader.next_line().await {
            if let Some(at) = line.find("listening on http://") {
                let rest = &line[at + "listening on ".len()..];
                let base = rest.split(['"', ' ']).next().unwrap().to_owned();
                if let Some(tx) = addr_tx.take() {
                    let _ = tx.send(base);
                }
            }
            collected.lock().unwrap().push(line);
        }
    });
    let base = tokio::time::timeout(Duration::from_secs(20), addr_rx)
        .await
        .expect("listens within 20 s")
        .unwrap();
    let http = reqwest::Client::new();
    for _ in 0..200 {
        if http.get(format!("{base}/v1/health")).send().await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    (child, lines, base)
}

/// Issue 29, finding 9: a worker's claimed origin, peer-supplied before
/// login, cannot forge a line of the default text logs (it is logged
/// escaped); and a flood of refused commits (jobs no worker ever held)
/// writes no line at INFO.
#[tokio::test]
async fn peer_text_cannot_forge_lines_and_refusals_stay_below_info() {
    let (mut child, lines, base) = spawn(&["--user-auth", "off"], "info").await;
    let ws = format!("{}/v1/workers/ws", base.replace("http://", "ws://"));
    let forged = "FORGED-LINE level=ERROR";
    let mut w = TestWorker {
        key: protocol::signing::Keypair::from_secret_hex(&"55".repeat(32)).unwrap(),
        wire: Wire::ws(&ws).await,
        session_id: 0,
    };
    let pubkey = w.key.public_key_hex();
    w.send(
        json!({"type": "hello", "protocol_version": protocol::worker::PROTOCOL_VERSION,
        "coordinator": format!("http://evil\n{forged}\r\u{1b}[2J"),
        "provider_pubkey": pubkey, "capabilities": ["TASK"], "slots": 1}),
    )
    .await;
    let _refusal = w.recv().await;

    // PRIVATE commits for users with no trusted worker: 422 each.
    let http = reqwest::Client::new();
    let refusals = 20;
    for i in 0..refusals {
        let job = json!({"job_type": "TASK", "user_id": format!("nobody-{i}"),
            "privacy_class": "PRIVATE",
            "payload": {"task_type": "classify", "input": "x"}});
        let answer = http
            .post(format!("{base}/v1/jobs/commit/cheap"))
            .json(&job)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 422);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    child.kill().await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let lines = lines.lock().unwrap().clone();
    for line in &lines {
        assert!(!line.starts_with("FORGED"), "{line}");
        assert!(!line.contains('\u{1b}'), "a raw escape code: {line}");
        assert!(!line.contains("job failed"), "{line}");
    }
    assert!(
        lines
            .iter()
            .any(|l| l.contains("FORGED-LINE") && l.contains("worker login refused")),
        "the refused origin is logged, escaped: {lines:?}"
    );
}

/// The signature inside an x402 payment header (base64 JSON).
fn payment_signature(header: &str) -> String {
    let raw = base64::engine::general_purpose::STANDARD
        .decode(header)
        .unwrap();
    let v: Value = serde_json::from_slice(&raw).unwrap();
    v["payload"]["signature"].as_str().unwrap().to_owned()
}
