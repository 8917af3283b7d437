//! The server-side flow end to end, paid by this crate's own signer:
//! 402 answer → signed payment → verification → replay store → settlement.

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use protocol::money::Price;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha20Rng;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use testkit::{FacilitatorStub, RouterTransport, StubScript};
use x402::replay::NonceState;
use x402::settle::TransportError;
use x402::wire::{PaymentRequiredV2, SettleResponse, PAYMENT_RESPONSE, X_PAYMENT};
use x402::*;

const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
const PAYER_KEY: &str = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";
const NOW: u64 = 1_795_255_200;
const URL: &str = "http://coordinator/v1/jobs/commit/fast";

fn config() -> PaymentConfig {
    PaymentConfig::base_sepolia_usdc(PAY_TO.parse().unwrap())
}

fn offer() -> PaymentOffer {
    PaymentOffer::for_url(config(), Price::from_micros(10_000), URL, "FAST TASK job")
}

fn local_gate() -> PaymentGate {
    PaymentGate::new(
        config(),
        Arc::new(InMemoryNonceStore::new()),
        Arc::new(LocalSettler),
    )
}

fn signer() -> LocalEvmSigner {
    LocalEvmSigner::from_secret_hex(PAYER_KEY).unwrap()
}

/// The v2 requirements of the 402 answer, as a client sees them.
fn required_v2() -> PaymentRequired {
    let a = offer().payment_required();
    PaymentRequired::from_response(Some(a.payment_required_header.as_bytes()), None).unwrap()
}

/// The v1 requirements, read from the body only.
fn required_v1() -> PaymentRequired {
    let body = serde_json::to_vec(&offer().payment_required().body).unwrap();
    PaymentRequired::from_response(None, Some(&body)).unwrap()
}

fn pay(required: &PaymentRequired, now: u64, seed: u64) -> PaymentHeader {
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    signer().pay(required, now, &mut rng).unwrap()
}

fn headers(h: &PaymentHeader) -> HeaderMap {
    let mut m = HeaderMap::new();
    m.insert(
        HeaderName::from_bytes(h.name.as_bytes()).unwrap(),
        HeaderValue::from_str(&h.value).unwrap(),
    );
    m
}

fn decode_json(b64: &str) -> Value {
    serde_json::from_slice(&STANDARD.decode(b64).unwrap()).unwrap()
}

fn encode_json(v: &Value) -> String {
    STANDARD.encode(serde_json::to_vec(v).unwrap())
}

/// Rewrites the JSON inside a payment header (to tamper with it).
fn tamper(h: &PaymentHeader, f: impl FnOnce(&mut Value)) -> PaymentHeader {
    let mut v = decode_json(&h.value);
    f(&mut v);
    PaymentHeader {
        name: h.name,
        value: encode_json(&v),
    }
}

fn refused_reason(r: Result<Paid, Refusal>) -> Reason {
    match r {
        Err(Refusal::Refused { reason, answer }) => {
            assert_eq!(answer.body.error, reason.as_str());
            assert_eq!(answer.body.accepts.len(), 1);
            reason
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn no_header_gives_402_with_accepts_and_payment_required() {
    let r = local_gate().accept(&offer(), &HeaderMap::new(), NOW).await;
    let Err(Refusal::Required(a)) = r else {
        panic!("{r:?}")
    };
    assert_eq!(a.body.error, "X-PAYMENT header is required");
    let e = &a.body.accepts[0];
    assert_eq!(
        (e.scheme.as_str(), e.price.as_str(), e.amount.as_str()),
        ("exact", "$0.010", "10000")
    );
    let v2: PaymentRequiredV2 =
        serde_json::from_value(decode_json(&a.payment_required_header)).unwrap();
    assert_eq!(v2.accepts[0].network, "eip155:84532");
    assert_eq!(v2.resource.url, URL);
}

#[tokio::test]
async fn v2_payment_is_accepted_once() {
    let gate = local_gate();
    let h = pay(&required_v2(), NOW, 1);
    assert_eq!(h.name, "PAYMENT-SIGNATURE");
    let paid = gate.accept(&offer(), &headers(&h), NOW).await.unwrap();
    let v = paid.verified.clone().unwrap();
    assert_eq!(v.from, signer().address());
    assert_eq!(paid.payment_ref(), format!("x402:{}", v.nonce));
    assert_eq!(gate.nonces().state(&v.nonce_key()), Some(NonceState::Spent));

    let [(n1, v1), (n2, v2)] = paid.response_headers();
    assert_eq!((n1, n2), (PAYMENT_RESPONSE, "X-PAYMENT-RESPONSE"));
    assert_eq!(v1, v2);
    let resp: SettleResponse = serde_json::from_value(decode_json(&v1)).unwrap();
    assert!(resp.success);
    assert_eq!(resp.transaction, paid.payment_ref());
    assert_eq!(resp.network, "eip155:84532");

    // The same payment again, even a second later, buys nothing.
    let again = gate.accept(&offer(), &headers(&h), NOW + 1).await;
    assert_eq!(refused_reason(again), Reason::NonceAlreadyUsed);
    // A new payment from the same payer is fine.
    let h2 = pay(&required_v2(), NOW, 2);
    assert!(gate.accept(&offer(), &headers(&h2), NOW).await.is_ok());
}

#[tokio::test]
async fn v1_payment_from_the_body_is_accepted() {
    let h = pay(&required_v1(), NOW, 3);
    assert_eq!(h.name, X_PAYMENT);
    let v = decode_json(&h.value);
    assert_eq!(v["network"], "base-sepolia");
    assert_eq!(v["x402Version"], 1);
    let paid = local_gate()
        .accept(&offer(), &headers(&h), NOW)
        .await
        .unwrap();
    assert_eq!(paid.verified.unwrap().version, x402::wire::X402Version::V1);
}

#[tokio::test]
async fn x402_spec_v1_example_verifies_end_to_end() {
    let payment = json!({
        "x402Version": 1, "scheme": "exact", "network": "base-sepolia",
        "payload": {
            "signature": "0x2d6a7588d6acca505cbf0d9a4a227e0c52c6c34008c8e8986a1283259764173608a2ce6496642e377d6da8dbbf5836e9bd15092f9ecab05ded3d6293af148b571c",
            "authorization": {
                "from": "0x857b06519E91e3A54538791bDbb0E22373e36b66",
                "to": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
                "value": "10000", "validAfter": "1740672089", "validBefore": "1740672154",
                "nonce": "0xf3746613c2d920b5fdabc0856f2aeb2d4f88ee6037b8cc5d04a71a4462f13480"
            }
        }
    });
    let h = PaymentHeader {
        name: X_PAYMENT,
        value: encode_json(&payment),
    };
    let gate = local_gate();
    let paid = gate
        .accept(&offer(), &headers(&h), 1_740_672_100)
        .await
        .unwrap();
    assert_eq!(
        paid.payment_ref(),
        "x402:0xf3746613c2d920b5fdabc0856f2aeb2d4f88ee6037b8cc5d04a71a4462f13480"
    );
    // Under Base mainnet's domain name the same signature is somebody else's.
    let mut cfg = config();
    cfg.asset_name = "USD Coin".into();
    let other = PaymentOffer::for_url(cfg, Price::from_micros(10_000), URL, "");
    let d = decode_payment_header(x402::wire::X402Version::V1, h.value.as_bytes()).unwrap();
    assert_eq!(
        verify_exact_evm(&other, &d, 1_740_672_100),
        Err(Reason::Signature)
    );
}

#[tokio::test]
async fn each_bad_payment_is_refused_with_its_reason() {
    let gate = local_gate();
    let good = pay(&required_v2(), NOW, 10);
    let check = |h: PaymentHeader, now: u64, want: Reason| {
        let gate = gate.clone();
        async move {
            let r = gate.accept(&offer(), &headers(&h), now).await;
            assert_eq!(refused_reason(r), want, "{}", decode_json(&h.value));
        }
    };

    // Tampered signature: one bit of r flipped.
    let t = tamper(&good, |v| {
        let s = v["payload"]["signature"].as_str().unwrap().to_owned();
        let flipped = if &s[2..3] == "0" { "1" } else { "0" };
        v["payload"]["signature"] = json!(format!("0x{flipped}{}", &s[3..]));
    });
    check(t, NOW, Reason::Signature).await;
    // A signature that is not 65 bytes.
    check(
        tamper(&good, |v| v["payload"]["signature"] = json!("0x1234")),
        NOW,
        Reason::Signature,
    )
    .await;
    // Tampered value after signing: the signature no longer matches.
    check(
        tamper(&good, |v| {
            v["payload"]["authorization"]["value"] = json!("20000")
        }),
        NOW,
        Reason::Signature,
    )
    .await;

    // Correctly signed, but to someone else.
    let mut req = required_v2();
    req.accepts[0]["payTo"] = json!("0x0000000000000000000000000000000000000001");
    check(pay(&req, NOW, 11), NOW, Reason::RecipientMismatch).await;

    // Correctly signed, wrong amount: v2 wants exactly the price.
    for amount in ["9999", "10001"] {
        let mut req = required_v2();
        req.accepts[0]["amount"] = json!(amount);
        check(pay(&req, NOW, 12), NOW, Reason::Value).await;
    }
    // v1 wants at least the price.
    let mut req = required_v1();
    req.accepts[0]["maxAmountRequired"] = json!("9999");
    check(pay(&req, NOW, 13), NOW, Reason::Value).await;
    let mut req = required_v1();
    req.accepts[0]["maxAmountRequired"] = json!("10001");
    assert!(gate
        .accept(&offer(), &headers(&pay(&req, NOW, 13)), NOW)
        .await
        .is_ok());

    // Expired: validBefore = NOW + 300; refused once fewer than 6 s remain.
    let h = pay(&required_v2(), NOW, 14);
    check(h.clone(), NOW + 295, Reason::ValidBefore).await;
    // Not yet valid: validAfter = NOW - 600.
    check(h.clone(), NOW - 600, Reason::ValidAfter).await;
    // The boundaries are accepted (and the refusals above reserved nothing).
    assert!(gate.accept(&offer(), &headers(&h), NOW + 294).await.is_ok());
    // A payer's clock may run ahead of ours by the 60 s allowance.
    let h = pay(&required_v2(), NOW, 15);
    assert!(gate.accept(&offer(), &headers(&h), NOW - 60).await.is_ok());
    // Valid for too long (issue 29, finding 6: one valid until 2100 was
    // accepted and its nonce never purged): at most maxTimeoutSeconds (300)
    // plus the 60 s clock allowance ahead.
    for (timeout_s, seed) in [(300 + 61, 40), (4_102_444_800 - NOW, 41)] {
        let mut req = required_v2();
        req.accepts[0]["maxTimeoutSeconds"] = json!(timeout_s);
        check(pay(&req, NOW, seed), NOW, Reason::ValidBefore).await;
    }
    let mut req = required_v2();
    req.accepts[0]["maxTimeoutSeconds"] = json!(300 + 60);
    let h = pay(&req, NOW, 42);
    assert!(gate.accept(&offer(), &headers(&h), NOW).await.is_ok());

    // Wrong network, in the echoed requirements, signed for it.
    let mut req = required_v2();
    req.accepts[0]["network"] = json!("eip155:8453");
    check(pay(&req, NOW, 16), NOW, Reason::InvalidNetwork).await;
    // Signed on another chain but claiming ours: the domain differs, so the signature fails.
    let mut req = required_v2();
    req.accepts[0]["network"] = json!("eip155:8453");
    let h = tamper(&pay(&req, NOW, 17), |v| {
        v["accepted"]["network"] = json!("eip155:84532")
    });
    check(h, NOW, Reason::Signature).await;
    // Other scheme, other asset, other version, junk.
    check(
        tamper(&good, |v| v["accepted"]["scheme"] = json!("upto")),
        NOW,
        Reason::InvalidScheme,
    )
    .await;
    check(
        tamper(&good, |v| {
            v["accepted"]["asset"] = json!("0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913")
        }),
        NOW,
        Reason::InvalidPaymentRequirements,
    )
    .await;
    check(
        tamper(&good, |v| v["x402Version"] = json!(1)),
        NOW,
        Reason::InvalidX402Version,
    )
    .await;
    check(
        tamper(&good, |v| v["payload"] = json!({"x": 1})),
        NOW,
        Reason::InvalidPayload,
    )
    .await;
    check(
        tamper(&good, |v| {
            v["payload"]["authorization"]["validBefore"] = json!(1e12)
        }),
        NOW,
        Reason::InvalidPayload,
    )
    .await;
    let junk = PaymentHeader {
        name: "PAYMENT-SIGNATURE",
        value: "not base64!".into(),
    };
    check(junk, NOW, Reason::InvalidPayload).await;

    // None of these bought anything: the good payment still works.
    assert!(gate.accept(&offer(), &headers(&good), NOW).await.is_ok());
}

fn stub_gate(stub: &FacilitatorStub, timeout: Duration) -> PaymentGate {
    let settler = FacilitatorSettler::new(RouterTransport::new(stub.router()), timeout);
    let mut cfg = config();
    cfg.facilitator_url = Some("http://stub".into());
    PaymentGate::new(cfg, Arc::new(InMemoryNonceStore::new()), Arc::new(settler))
}

#[tokio::test]
async fn facilitator_settlement_sets_the_transaction_as_payment_ref() {
    let stub = FacilitatorStub::new("eip155:84532");
    let gate = stub_gate(&stub, Duration::from_secs(5));
    let h = pay(&required_v2(), NOW, 20);
    let paid = gate.accept(&offer(), &headers(&h), NOW).await.unwrap();
    assert!(paid.payment_ref().starts_with("0x") && paid.payment_ref().len() == 66);
    assert_eq!(stub.settled(), 1);
    let calls = stub.calls();
    assert_eq!(
        calls.iter().map(|c| c.path).collect::<Vec<_>>(),
        ["/verify", "/settle"]
    );
    let body = &calls[1].body;
    assert_eq!(body["x402Version"], 2);
    assert_eq!(body["paymentPayload"], decode_json(&h.value));
    assert_eq!(
        body["paymentRequirements"],
        serde_json::to_value(offer().requirements_v2()).unwrap()
    );
    let resp: SettleResponse =
        serde_json::from_value(decode_json(&paid.settlement.payment_response_header())).unwrap();
    assert_eq!(resp.transaction, paid.payment_ref());
    assert_eq!(
        resp.payer.as_deref(),
        Some(signer().address().to_string().as_str())
    );
}

#[tokio::test]
async fn facilitator_refusals_create_nothing_and_release_the_nonce() {
    let stub = FacilitatorStub::new("eip155:84532");
    let gate = stub_gate(&stub, Duration::from_secs(5));
    let h = pay(&required_v2(), NOW, 21);

    stub.set_script(StubScript::insufficient_funds());
    let r = gate.accept(&offer(), &headers(&h), NOW).await;
    assert_eq!(refused_reason(r), Reason::InsufficientFunds);
    assert_eq!(stub.calls().len(), 1, "no /settle after a failed /verify");

    stub.set_script(StubScript::settle_failure("invalid_transaction_state"));
    let r = gate.accept(&offer(), &headers(&h), NOW).await;
    assert_eq!(refused_reason(r), Reason::InvalidTransactionState);
    assert_eq!(stub.settled(), 0);

    // The reservation was released each time, so the payer can retry.
    stub.set_script(StubScript::success());
    assert!(gate.accept(&offer(), &headers(&h), NOW).await.is_ok());
    assert_eq!(stub.settled(), 1);
}

#[tokio::test(start_paused = true)]
async fn hung_facilitator_times_out_in_virtual_time() {
    let stub = FacilitatorStub::new("eip155:84532");
    stub.set_script(StubScript::settle_delay(Duration::from_secs(3600)));
    let gate = stub_gate(&stub, Duration::from_secs(10));
    let h = pay(&required_v2(), NOW, 22);
    let start = tokio::time::Instant::now();
    let r = gate.accept(&offer(), &headers(&h), NOW).await;
    assert_eq!(refused_reason(r), Reason::UnexpectedSettleError);
    assert_eq!(start.elapsed(), Duration::from_secs(10));
    let key = decode_payment_header(x402::wire::X402Version::V2, h.value.as_bytes())
        .ok()
        .and_then(|d| verify_exact_evm(&offer(), &d, NOW).ok())
        .unwrap()
        .nonce_key();
    assert_eq!(gate.nonces().state(&key), None);
}

#[tokio::test]
async fn authorize_then_cancel_charges_nothing() {
    let stub = FacilitatorStub::new("eip155:84532");
    let gate = stub_gate(&stub, Duration::from_secs(5));
    let h = pay(&required_v2(), NOW, 23);
    let auth = gate.authorize(&offer(), &headers(&h), NOW).unwrap();
    // While reserved, a concurrent second use is refused.
    assert!(gate.authorize(&offer(), &headers(&h), NOW).is_err());
    gate.cancel(&auth);
    assert!(stub.calls().is_empty());
    let auth = gate.authorize(&offer(), &headers(&h), NOW).unwrap();
    assert!(gate.settle(auth).await.is_ok());
}

#[tokio::test]
async fn facilitator_over_http() {
    let stub = FacilitatorStub::new("eip155:84532");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = stub.router();
    let server = tokio::spawn(async move { axum::serve(listener, router).await });

    let settler =
        FacilitatorSettler::http(&format!("http://{addr}/"), Duration::from_secs(5)).unwrap();
    let supported = settler.supported().await.unwrap();
    assert_eq!(supported.kinds.len(), 2);
    let gate = PaymentGate::new(
        config(),
        Arc::new(InMemoryNonceStore::new()),
        Arc::new(settler),
    );
    let h = pay(&required_v2(), NOW, 24);
    let paid = gate.accept(&offer(), &headers(&h), NOW).await.unwrap();
    assert_eq!(stub.settled(), 1);
    assert!(paid.payment_ref().starts_with("0x"));

    // A facilitator that is not there is a settle error, not a panic.
    let dead = FacilitatorSettler::http("http://127.0.0.1:9", Duration::from_secs(2)).unwrap();
    assert!(matches!(
        dead.supported().await,
        Err(TransportError::Http(_))
    ));
    server.abort();
}

#[tokio::test]
async fn v1_payment_goes_to_the_facilitator_in_v1_shape() {
    let stub = FacilitatorStub::new("eip155:84532");
    let gate = stub_gate(&stub, Duration::from_secs(5));
    let h = pay(&required_v1(), NOW, 25);
    gate.accept(&offer(), &headers(&h), NOW).await.unwrap();
    let calls = stub.calls();
    let body = &calls[0].body;
    assert_eq!(body["x402Version"], 1);
    assert_eq!(body["paymentPayload"], decode_json(&h.value));
    let req = &body["paymentRequirements"];
    assert_eq!(req["network"], "base-sepolia");
    assert_eq!(req["maxAmountRequired"], "10000");
    assert_eq!(req["resource"], URL);
    assert_eq!(req["extra"], json!({"name": "USDC", "version": "2"}));
}

/// A v2 payment on Solana: no EIP-3009 nonce, a transaction whose signed
/// message is `message`, with `fill` in its two signature slots.
fn solana_payment(message: &[u8], fill: u8) -> HeaderMap {
    solana_payment_with(message, fill, |_| {})
}

fn solana_payment_with(message: &[u8], fill: u8, edit: impl FnOnce(&mut Value)) -> HeaderMap {
    let mut transaction = vec![2u8];
    transaction.extend(std::iter::repeat_n(fill, 2 * 64));
    transaction.extend_from_slice(message);
    let mut payment = json!({"x402Version": 2,
        "payload": {"transaction": STANDARD.encode(&transaction)},
        "accepted": {"scheme": "exact", "network": SOLANA, "amount": "10000",
            "asset": "0x036CbD53842c5426634e7929541eC2318f3dCF7e", "payTo": PAY_TO,
            "maxTimeoutSeconds": 300}});
    edit(&mut payment);
    let mut m = HeaderMap::new();
    m.insert(
        HeaderName::from_static("payment-signature"),
        HeaderValue::from_str(&encode_json(&payment)).unwrap(),
    );
    m
}

const SOLANA: &str = "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1";

/// A facilitator that settles anything, standing in for one that knows the chain.
struct SettlesAnything;

impl Settler for SettlesAnything {
    fn settle<'a>(
        &'a self,
        req: SettleRequest<'a>,
    ) -> x402::settle::BoxFuture<'a, Result<Settlement, Reason>> {
        Box::pin(async move {
            Ok(Settlement {
                response: SettleResponse {
                    success: true,
                    error_reason: None,
                    payer: None,
                    transaction: "tx".into(),
                    network: req.offer.config.network.clone(),
                },
                payment_ref: "tx".into(),
            })
        })
    }
}

/// A gate on Solana behind a facilitator that settles anything, and its offer.
fn solana_gate() -> (PaymentGate, PaymentOffer) {
    let mut cfg = config();
    cfg.network = SOLANA.into();
    cfg.facilitator_url = Some("http://facilitator".into());
    let gate = PaymentGate::new(
        cfg.clone(),
        Arc::new(InMemoryNonceStore::new()),
        Arc::new(SettlesAnything),
    );
    let offer = PaymentOffer::for_url(cfg, Price::from_micros(10_000), URL, "FAST TASK job");
    (gate, offer)
}

#[tokio::test]
async fn non_evm_payments_are_reserved_locally_too() {
    // Issue 16 finding 8: two concurrent commits with one payment on a
    // non-EVM network both went to the facilitator.
    let (gate, offer) = solana_gate();
    let first = gate
        .authorize(&offer, &solana_payment(b"transfer A", 0), NOW)
        .unwrap();
    let again = gate.authorize(&offer, &solana_payment(b"transfer A", 0), NOW);
    assert_eq!(again.unwrap_err().reason(), Some(&Reason::NonceAlreadyUsed));
    // Another payment is its own identity.
    let other = gate
        .authorize(&offer, &solana_payment(b"transfer B", 0), NOW)
        .unwrap();
    gate.cancel(&other);
    // A released reservation may be used again; a spent one never.
    gate.cancel(&first);
    let first = gate
        .authorize(&offer, &solana_payment(b"transfer A", 0), NOW)
        .unwrap();
    gate.settle(first).await.unwrap();
    let replay = gate.authorize(&offer, &solana_payment(b"transfer A", 0), NOW);
    assert_eq!(
        replay.unwrap_err().reason(),
        Some(&Reason::NonceAlreadyUsed)
    );
}

#[tokio::test]
async fn a_solana_payment_is_its_transaction_message() {
    // Issue 29, finding 8: the identity was the hash of the whole payload,
    // so one extra field let two commits with one transaction both reach
    // the facilitator's /settle.
    let (gate, offer) = solana_gate();
    let _first = gate
        .authorize(&offer, &solana_payment(b"transfer A", 0), NOW)
        .unwrap();
    // The same transaction with other bytes in a signature slot (the fee
    // payer's slot is the facilitator's to fill) is the same payment.
    let refilled = gate.authorize(&offer, &solana_payment(b"transfer A", 9), NOW);
    assert_eq!(
        refilled.unwrap_err().reason(),
        Some(&Reason::NonceAlreadyUsed)
    );
    // An extra field is refused outright, never a second identity.
    let padded = solana_payment_with(b"transfer A", 0, |p| p["payload"]["memo"] = json!("x"));
    let padded = gate.authorize(&offer, &padded, NOW);
    assert_eq!(padded.unwrap_err().reason(), Some(&Reason::InvalidPayload));
    let junk = solana_payment_with(b"", 0, |p| p["payload"]["transaction"] = json!("AAAA"));
    let junk = gate.authorize(&offer, &junk, NOW);
    assert_eq!(junk.unwrap_err().reason(), Some(&Reason::InvalidPayload));
}
