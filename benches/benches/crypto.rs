//! Receipt signing and verification, RFC 8785 canonicalisation, the worker
//! auth check and x402 payment verification.

use benches::fixtures;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use protocol::canonical;
use protocol::money::Price;
use protocol::receipt::ReceiptBody;
use protocol::signing;
use protocol::worker::challenge_message;
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use std::hint::black_box;
use std::time::Duration;
use uuid::Uuid;
use x402::{
    decode_payment_header, verify_exact_evm, LocalEvmSigner, PaymentConfig, PaymentOffer,
    PaymentRequired, PaymentSigner,
};

const OUTPUT_BYTES: [usize; 3] = [64, 1_024, 16_384];

fn receipts(c: &mut Criterion) {
    let key = fixtures::keypair(7);
    let mut group = c.benchmark_group("receipt");
    group.throughput(Throughput::Elements(1));
    for bytes in OUTPUT_BYTES {
        let output = fixtures::string_output(bytes);
        let job = Uuid::from_u128(42);
        group.bench_with_input(BenchmarkId::new("sign", bytes), &output, |b, output| {
            b.iter(|| {
                ReceiptBody::new(
                    job,
                    key.public_key_hex(),
                    output,
                    "2026-11-21T10:00:01.000Z".into(),
                    None,
                )
                .sign(&key)
            })
        });
        let receipt = fixtures::receipt(&key, job, &output);
        group.bench_with_input(BenchmarkId::new("verify", bytes), &output, |b, output| {
            b.iter(|| receipt.verify(black_box(output)).expect("valid"))
        });
    }
    // What the receipt check costs in signature work alone: recovering the
    // key from the signature (what `verify_personal_sign` did until perf
    // round 2; k256's recovery also re-verifies), against a plain verify
    // with the key the session already knows. `verify_personal_sign` now
    // costs the latter plus one parity check (see `signing.rs`).
    let output = fixtures::string_output(64);
    let receipt = fixtures::receipt(&key, Uuid::from_u128(42), &output);
    let digest = signing::eip191_hash(&receipt.body().signing_bytes());
    let sig_bytes = hex::decode(&receipt.signature[2..]).expect("hex");
    let sig = k256::ecdsa::Signature::from_slice(&sig_bytes[..64]).expect("sig");
    let known = signing::parse_public_key(&key.public_key_hex()).expect("key");
    group.bench_function(BenchmarkId::new("recover_prehash", 64), |b| {
        b.iter(|| signing::recover_prehash(black_box(&digest), &receipt.signature).expect("ok"))
    });
    group.bench_function(BenchmarkId::new("verify_prehash_known_key", 64), |b| {
        use k256::ecdsa::signature::hazmat::PrehashVerifier;
        b.iter(|| known.verify_prehash(black_box(&digest), &sig).expect("ok"))
    });
    group.finish();

    let mut group = c.benchmark_group("worker_auth");
    group.throughput(Throughput::Elements(1));
    let message = challenge_message(
        "wss://coord.example.com",
        "eip155:84532",
        &format!("0x{}", "ab".repeat(32)),
    );
    let signature = key.personal_sign(message.as_bytes());
    let public = signing::parse_public_key(&key.public_key_hex()).expect("key");
    group.bench_function("verify_challenge", |b| {
        b.iter(|| {
            signing::verify_personal_sign(&public, black_box(message.as_bytes()), &signature)
                .expect("valid")
        })
    });
    group.finish();
}

fn jcs(c: &mut Criterion) {
    let mut group = c.benchmark_group("jcs");
    for bytes in OUTPUT_BYTES {
        let output = fixtures::object_output(bytes);
        let len = canonical::to_vec(&output).len() as u64;
        group.throughput(Throughput::Elements(1));
        group.bench_with_input(BenchmarkId::new("object", len), &output, |b, v| {
            b.iter(|| canonical::to_vec(black_box(v)))
        });
        group.bench_with_input(BenchmarkId::new("output_hash", len), &output, |b, v| {
            b.iter(|| canonical::output_hash(black_box(v)))
        });
    }
    let key = fixtures::keypair(7);
    let body = fixtures::receipt(&key, Uuid::from_u128(42), &fixtures::string_output(64)).body();
    group.bench_function(BenchmarkId::new("receipt_body", 0), |b| {
        b.iter(|| black_box(&body).signing_bytes())
    });
    group.finish();
}

const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
const PAYER_KEY: &str = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";
const NOW_SECONDS: u64 = 1_795_255_200;

fn x402_verify(c: &mut Criterion) {
    let config = PaymentConfig::base_sepolia_usdc(PAY_TO.parse().expect("address"));
    let offer = PaymentOffer::for_url(
        config,
        Price::from_micros(3_000),
        "http://127.0.0.1/v1/jobs/commit/fast",
        "FAST TASK job",
    );
    let answer = offer.payment_required();
    let required =
        PaymentRequired::from_response(Some(answer.payment_required_header.as_bytes()), None)
            .expect("402 answer");
    let signer = LocalEvmSigner::from_secret_hex(PAYER_KEY).expect("key");
    let header = signer
        .pay(&required, NOW_SECONDS, &mut ChaCha20Rng::seed_from_u64(1))
        .expect("pay");
    let mut group = c.benchmark_group("x402");
    group.throughput(Throughput::Elements(1));
    group.bench_function(BenchmarkId::new("decode_and_verify", "v2"), |b| {
        b.iter(|| {
            let payment =
                decode_payment_header(x402::wire::X402Version::V2, header.value.as_bytes())
                    .expect("decodes");
            verify_exact_evm(&offer, &payment, NOW_SECONDS).expect("valid")
        })
    });
    let payment = decode_payment_header(x402::wire::X402Version::V2, header.value.as_bytes())
        .expect("decodes");
    group.bench_function(BenchmarkId::new("verify", "v2"), |b| {
        b.iter(|| verify_exact_evm(&offer, black_box(&payment), NOW_SECONDS).expect("valid"))
    });
    group.bench_function(BenchmarkId::new("sign", "v2"), |b| {
        let mut rng = ChaCha20Rng::seed_from_u64(2);
        b.iter(|| signer.pay(&required, NOW_SECONDS, &mut rng).expect("pay"))
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = receipts, jcs, x402_verify
}
criterion_main!(benches);
