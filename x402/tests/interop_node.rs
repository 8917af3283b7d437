//! Interoperability with the official x402 TypeScript client: a tiny axum
//! server gated by this crate (local settlement, Base Sepolia settings) is
//! paid by `@x402/fetch` + `@x402/evm` with a viem local account
//! (`interop/pay.mjs`), and must answer 201.
//!
//! Needs Node and the npm packages: `npm ci --prefix x402/interop`. Without
//! them this test fails (on purpose) rather than pass without checking.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use protocol::money::Price;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use x402::{PaymentConfig, PaymentGate};

const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
/// The payer of `pay.mjs`: anvil/hardhat account #0.
const PAYER: &str = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266";

/// (status, payment header name, payment_ref, refusal reason) of one request.
type Seen = (u16, Option<&'static str>, Option<String>, Option<String>);

#[derive(Clone)]
struct App {
    gate: PaymentGate,
    base_url: String,
    /// Answer 402 with the x402 v1 body only (no `PAYMENT-REQUIRED`), as a
    /// v1 server would, so the client has to pay with `X-PAYMENT`.
    body_only: bool,
    log: Arc<Mutex<Vec<Seen>>>,
}

/// The node client signs with its own clock, so verification must use the
/// real one. This is test-only; the crate itself never reads the clock.
fn wall_clock_seconds() -> u64 {
    use protocol::clock::Clock;
    u64::try_from(protocol::clock::SystemClock.now_ms() / 1000).expect("clock after 1970")
}

async fn commit(State(app): State<App>, headers: HeaderMap, Json(body): Json<Value>) -> Response {
    if body.get("job_type").and_then(Value::as_str).is_none() {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": "job_type, payload and user_id are required"})),
        )
            .into_response();
    }
    let sent = [x402::wire::X_PAYMENT, x402::wire::PAYMENT_SIGNATURE]
        .into_iter()
        .find(|h| headers.contains_key(*h));
    let url = format!("{}/v1/jobs/commit/fast", app.base_url);
    let offer = app
        .gate
        .offer(Price::from_micros(10_000), &url, "FAST TASK job");
    match app
        .gate
        .accept(&offer, &headers, wall_clock_seconds())
        .await
    {
        Ok(paid) => {
            app.log
                .lock()
                .unwrap()
                .push((201, sent, Some(paid.payment_ref().to_owned()), None));
            let mut resp = (
                StatusCode::CREATED,
                Json(json!({"job_id": "00000000-0000-4000-8000-000000000001"})),
            )
                .into_response();
            paid.insert_response_headers(resp.headers_mut());
            resp
        }
        Err(refusal) => {
            let reason = refusal.reason().map(|r| r.as_str().to_owned());
            app.log.lock().unwrap().push((402, sent, None, reason));
            let mut resp = refusal.into_response();
            if app.body_only {
                resp.headers_mut().remove(x402::wire::PAYMENT_REQUIRED);
            }
            resp
        }
    }
}

fn interop_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("interop")
}

/// Fails loudly when the client cannot run here.
async fn require_node() {
    let node = tokio::process::Command::new("node")
        .arg("--version")
        .output()
        .await;
    match node {
        Ok(out) if out.status.success() => {}
        _ => panic!(
            "`node` is not installed or not on PATH; this test runs the official x402 client. \
             Install Node.js >= 20, then run `npm ci --prefix x402/interop`"
        ),
    }
    let pkg = interop_dir().join("node_modules/@x402/fetch/package.json");
    assert!(
        pkg.exists(),
        "{} is missing: run `npm ci --prefix x402/interop` (from the workspace root) first",
        pkg.display()
    );
}

/// Serves the gated endpoint, runs `pay.mjs` against it, and returns what
/// the client printed and what the server saw.
async fn pay_with_official_client(body_only: bool) -> (Value, Vec<Seen>) {
    require_node().await;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base_url = format!("http://{}", listener.local_addr().unwrap());
    let config = PaymentConfig::base_sepolia_usdc(PAY_TO.parse().unwrap());
    config.validate().unwrap();
    let app = App {
        gate: PaymentGate::from_config(config).unwrap(),
        base_url: base_url.clone(),
        body_only,
        log: Arc::default(),
    };
    let router = Router::new()
        .route("/v1/jobs/commit/fast", post(commit))
        .with_state(app.clone());
    let server = tokio::spawn(async move { axum::serve(listener, router).await });

    let run = tokio::process::Command::new("node")
        .arg("pay.mjs")
        .current_dir(interop_dir())
        .env("X402_URL", format!("{base_url}/v1/jobs/commit/fast"))
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("node pay.mjs did not finish within 120 s")
        .expect("could not start node");
    server.abort();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let log = app.log.lock().unwrap().clone();
    assert!(
        out.status.success(),
        "node pay.mjs failed\nstdout: {stdout}\nstderr: {stderr}\nserver saw: {log:?}"
    );
    let result: Value = serde_json::from_str(stdout.trim().lines().last().unwrap_or(""))
        .unwrap_or_else(|e| panic!("unexpected output ({e}): {stdout}\nstderr: {stderr}"));
    (result, log)
}

fn assert_paid(result: &Value, log: &[Seen], header: &str) {
    assert_eq!(
        result["status"], 201,
        "client saw {result}; server saw {log:?}"
    );
    assert_eq!(result["payer"], PAYER);
    let body: Value = serde_json::from_str(result["body"].as_str().unwrap()).unwrap();
    assert!(body["job_id"].is_string());

    // First the 402 (no payment header), then the paid retry.
    assert_eq!(log.len(), 2, "{log:?}");
    assert_eq!(log[0], (402, None, None, None));
    assert_eq!((log[1].0, log[1].1), (201, Some(header)));
    let payment_ref = log[1].2.clone().unwrap();
    assert!(
        payment_ref.starts_with("x402:0x") && payment_ref.len() == 5 + 66,
        "{payment_ref}"
    );
    // The client decoded our PAYMENT-RESPONSE / X-PAYMENT-RESPONSE.
    assert_eq!(result["paymentResponse"]["success"], true);
    assert_eq!(
        result["paymentResponse"]["transaction"],
        payment_ref.as_str()
    );
    assert_eq!(result["paymentResponse"]["network"], "eip155:84532");
}

#[tokio::test]
async fn official_client_pays_v2_from_payment_required_header_and_gets_201() {
    let (result, log) = pay_with_official_client(false).await;
    assert_paid(&result, &log, x402::wire::PAYMENT_SIGNATURE);
}

#[tokio::test]
async fn official_client_pays_v1_from_body_and_gets_201() {
    let (result, log) = pay_with_official_client(true).await;
    assert_paid(&result, &log, x402::wire::X_PAYMENT);
}
