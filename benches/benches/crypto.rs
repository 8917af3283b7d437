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
    // What the receipt check costs in signature work alone, in both curve
    // libraries: the check is a recovery with `v` (`signing::recover_prehash`,
    // libsecp256k1 since perf round 5) compared with the session's key; k256's
    // recovery (the check until round 2) and k256's plain verify with a known
    // key (round 2 to 4: verify plus a parity check) are kept beside it.
    let output = fixtures::string_output(64);
    let receipt = fixtures::receipt(&key, Uuid::from_u128(42), &output);
    let digest = signing::eip191_hash(&receipt.body().signing_bytes());
    let sig_bytes = hex::decode(&receipt.signature[2..]).expect("hex");
    group.bench_function(BenchmarkId::new("recover_prehash", 64), |b| {
        b.iter(|| signing::recover_prehash(black_box(&digest), &receipt.signature).expect("ok"))
    });
    k256_checks(&mut group, &key, &digest, &sig_bytes);
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

/// k256's signature checks, and libsecp256k1's plain verify and signing, to
/// keep the trade-off of the two libraries measured (issue 14 item 1,
/// `benches/README.md`).
fn k256_checks(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    key: &protocol::signing::Keypair,
    digest: &[u8; 32],
    sig_bytes: &[u8],
) {
    use k256::ecdsa::signature::hazmat::PrehashVerifier;
    let sig = k256::ecdsa::Signature::from_slice(&sig_bytes[..64]).expect("sig");
    let recid = k256::ecdsa::RecoveryId::from_byte(sig_bytes[64] - 27).expect("recid");
    let known = k256::ecdsa::VerifyingKey::from_sec1_bytes(
        &hex::decode(&key.public_key_hex()[2..]).expect("hex"),
    )
    .expect("key");
    group.bench_function(BenchmarkId::new("k256_recover_prehash", 64), |b| {
        b.iter(|| {
            k256::ecdsa::VerifyingKey::recover_from_prehash(black_box(digest), &sig, recid)
                .expect("ok")
        })
    });
    group.bench_function(BenchmarkId::new("k256_verify_prehash_known_key", 64), |b| {
        b.iter(|| known.verify_prehash(black_box(digest), &sig).expect("ok"))
    });
    libsecp256k1(group, key, digest, sig_bytes);
}

/// libsecp256k1's plain verify with a known key, and a recoverable signature
/// as workers would make it, beside k256's signing (`sign_prehash`).
fn libsecp256k1(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    key: &protocol::signing::Keypair,
    digest: &[u8; 32],
    sig_bytes: &[u8],
) {
    use secp256k1::ecdsa::{RecoverableSignature, RecoveryId, Signature};
    use secp256k1::{Message, PublicKey, SecretKey};
    let message = Message::from_digest(*digest);
    let recid = RecoveryId::try_from(i32::from(sig_bytes[64] - 27)).expect("recid");
    let recoverable = RecoverableSignature::from_compact(&sig_bytes[..64], recid).expect("sig");
    let plain = Signature::from_compact(&sig_bytes[..64]).expect("sig");
    let public_bytes = hex::decode(&key.public_key_hex()[2..]).expect("hex");
    let public = PublicKey::from_slice(&public_bytes).expect("key");
    let secret_bytes: [u8; 32] = hex::decode(&key.secret_hex()[2..])
        .expect("hex")
        .try_into()
        .expect("32 bytes");
    let secret = SecretKey::from_secret_bytes(secret_bytes).expect("secret");
    assert_eq!(recoverable.recover_ecdsa(message).expect("ok"), public);
    group.bench_function(
        BenchmarkId::new("libsecp256k1_verify_prehash_known_key", 64),
        |b| b.iter(|| black_box(&plain).verify(message, &public).expect("ok")),
    );
    group.bench_function(BenchmarkId::new("libsecp256k1_sign_recoverable", 64), |b| {
        b.iter(|| RecoverableSignature::sign_ecdsa_recoverable(black_box(message), &secret))
    });
    group.bench_function(BenchmarkId::new("sign_prehash", 64), |b| {
        b.iter(|| key.sign_prehash(black_box(digest)))
    });
}
