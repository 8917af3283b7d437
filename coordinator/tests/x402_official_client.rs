//! Interoperability: the official x402 TypeScript client (`@x402/fetch` with
//! `@x402/evm` and a viem local account, `x402/interop/pay.mjs`) pays a commit
//! on a gated coordinator with Base Sepolia settings, over real HTTP, and gets
//! 201. Needs `node` and `npm ci --prefix x402/interop` (scripts/test.sh does it).

use coordinator::config::Config;
use coordinator::server::{self, Parts, Settings};
use coordinator::SystemClock;
use rand::SeedableRng;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::Arc;

fn interop_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../x402/interop")
}

async fn pay(url: &str, body: &Value) -> Value {
    assert!(
        interop_dir().join("node_modules/@x402/fetch").exists(),
        "the official x402 client is not installed: run `npm ci --prefix x402/interop`"
    );
    let out = tokio::process::Command::new("node")
        .arg(interop_dir().join("pay.mjs"))
        .env("X402_URL", url)
        .env("X402_BODY", body.to_string())
        .output()
        .await
        .expect("node runs (install Node.js)");
    assert!(
        out.status.success(),
        "pay.mjs failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("pay.mjs prints one JSON line")
}

#[tokio::test]
async fn the_official_client_pays_a_commit_and_gets_201() {
    let pay_to = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"
        .parse()
        .unwrap();
    let settings = Settings {
        config: Config {
            network: "eip155:84532".into(),
            ..Config::default()
        },
        payment: Some(x402::PaymentConfig::base_sepolia_usdc(pay_to)),
        ..Settings::default()
    };
    let parts = Parts::new(
        Arc::new(SystemClock),
        rand_chacha::ChaCha20Rng::seed_from_u64(1),
    );
    let mut server = server::start(settings, parts).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    server.serve_tcp(listener);
    let c = server.coordinator().clone();

    let body = json!({"job_type": "LLM_INFER", "user_id": "interop", "payload": {"prompt": "hi", "max_tokens": 8}});
    let result = pay(&format!("http://{addr}/v1/jobs/commit/fast"), &body).await;
    assert_eq!(result["status"], 201, "{result}");
    let created: Value = serde_json::from_str(result["body"].as_str().unwrap()).unwrap();
    let job_id: uuid::Uuid = created["job_id"].as_str().unwrap().parse().unwrap();
    // Settled on completion (the default, decision 0021): the 201 reports
    // no settlement yet, and the unmodified client pays without one.
    assert!(result["paymentResponse"].is_null(), "{result}");
    let payment_ref = c.read(|core| core.job(&job_id).unwrap().payment_ref.clone());
    assert!(payment_ref.is_some_and(|r| r.starts_with("x402:0x")));
}
