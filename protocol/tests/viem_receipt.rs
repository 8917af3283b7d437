//! A receipt made by this crate verifies with standard Ethereum tooling:
//! viem's `verifyMessage` over the RFC 8785 form, and the SHA-256 output
//! hash (`x402/interop/verify-receipt.mjs`; needs `node` and
//! `npm ci --prefix x402/interop`, which scripts/test.sh runs).

use protocol::receipt::ReceiptBody;
use protocol::signing::Keypair;
use rand_chacha::rand_core::SeedableRng;
use serde_json::json;
use std::path::PathBuf;
use std::process::Command;

fn verify_with_viem(receipt: &serde_json::Value, output: &serde_json::Value) -> serde_json::Value {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../x402/interop");
    assert!(
        dir.join("node_modules/viem").exists(),
        "viem is not installed: run `npm ci --prefix x402/interop`"
    );
    let out = Command::new("node")
        .arg(dir.join("verify-receipt.mjs"))
        .env("RECEIPT", receipt.to_string())
        .env("OUTPUT", output.to_string())
        .output()
        .expect("node runs (install Node.js)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn viem_verifies_our_receipts_and_rejects_a_forged_one() {
    let key = Keypair::generate(&mut rand_chacha::ChaCha20Rng::seed_from_u64(5));
    let output = json!({"summary": "ok", "n": [1, 2.5, "é"]});
    let receipt = ReceiptBody::new(
        uuid::Uuid::from_u128(7),
        key.public_key_hex(),
        &output,
        "2026-11-21T10:00:00.000Z".into(),
        Some("x402:0xabc".into()),
    )
    .sign(&key);
    let receipt = serde_json::to_value(&receipt).unwrap();
    let answer = verify_with_viem(&receipt, &output);
    assert_eq!(answer["valid"], true, "{answer}");
    assert_eq!(answer["signer"], key.address());

    let mut forged = receipt.clone();
    forged["payment_ref"] = json!(null);
    assert_eq!(verify_with_viem(&forged, &output)["valid"], false);
    assert_eq!(verify_with_viem(&receipt, &json!("other"))["valid"], false);
}
