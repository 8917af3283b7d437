//! x402 payments (HTTP 402) for the coordinator and the paying clients.
//!
//! Layout:
//! - [`config`]: what a deployment accepts (`PaymentConfig`), CAIP-2 and v1 network names.
//! - [`wire`]: x402 v1/v2 JSON shapes, header names, base64.
//! - [`evm`]: addresses, `uint256`, `bytes32`, the EIP-712 digest of EIP-3009 `TransferWithAuthorization`.
//! - [`reason`]: x402 reason codes for refused payments.
//! - [`challenge`]: the 402 answer (JSON body and `PAYMENT-REQUIRED` header) for one price.
//! - [`decode`]: reading `X-PAYMENT` / `PAYMENT-SIGNATURE`, bounded and panic-free.
//! - [`verify`]: offline verification of scheme `exact` on `eip155:*`.
//! - [`replay`]: the used-nonce store, so one payment buys one job.
//! - [`svm`]: a Solana payment's identity (its transaction's message), for replay protection.
//! - [`settle`]: settlement through a facilitator or locally, and `PAYMENT-RESPONSE`.
//! - [`gate`]: the server-side flow in one call (`PaymentGate`).
//! - [`signer`]: the paying side (`PaymentSigner`, `LocalEvmSigner`).
//!
//! Feature `axum` (default; off in the workspace's dependency entry, on in
//! the coordinator's): the 402 answer and [`Refusal`] are axum responses.
//! Paying clients such as the router leave it off and need no web framework.
//!
//! Time is always passed in as Unix seconds and randomness as an RNG; this
//! crate never reads the clock.
//!
//! Without a facilitator URL, settlement is local: the payment is verified
//! (signature, recipient, amount, validity window, replay) but nothing is
//! submitted on chain, so **no money moves**; `payment_ref` is `x402:<nonce>`.
//!
//! A commit handler, once the body has validated (a 400 is never charged):
//!
//! ```
//! use axum::http::{HeaderMap, StatusCode};
//! use axum::response::{IntoResponse, Response};
//! use protocol::money::Price;
//! use x402::{PaymentConfig, PaymentGate};
//!
//! async fn commit(gate: &PaymentGate, headers: &HeaderMap, price: Price, now_seconds: u64) -> Response {
//!     let offer = gate.offer(price, "https://coordinator.example/v1/jobs/commit/fast", "FAST TASK job");
//!     // Decode, verify, reserve the nonce. No payment or a bad one: 402 with the accepts list.
//!     let auth = match gate.authorize(&offer, headers, now_seconds) {
//!         Ok(auth) => auth,
//!         Err(refusal) => return refusal.into_response(),
//!     };
//!     // Anything that would still refuse the job for free (a 422) goes here,
//!     // followed by `gate.refuse(auth)`.
//!     let paid = match gate.settle(auth).await {
//!         Ok(paid) => paid,
//!         Err(refusal) => return refusal.into_response(), // no job is created
//!     };
//!     let payment_ref = paid.payment_ref().to_owned(); // store on the job, goes into the receipt
//!     let mut resp = (StatusCode::CREATED, payment_ref).into_response();
//!     paid.insert_response_headers(resp.headers_mut());
//!     resp
//! }
//!
//! let config = PaymentConfig::base_sepolia_usdc("0x209693Bc6afc0C5328bA36FaF03C514EF312287C".parse().unwrap());
//! config.validate().unwrap();
//! let gate = PaymentGate::from_config(config).unwrap();
//! let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
//! let resp = rt.block_on(commit(&gate, &HeaderMap::new(), Price::from_micros(10_000), 1_795_255_200));
//! assert_eq!(resp.status(), StatusCode::PAYMENT_REQUIRED);
//! assert!(resp.headers().contains_key("payment-required"));
//! ```

pub mod challenge;
pub mod config;
pub mod decode;
pub mod evm;
pub mod gate;
pub mod reason;
pub mod replay;
pub mod settle;
pub mod signer;
pub mod svm;
pub mod verify;
pub mod wire;

pub use challenge::{PaymentOffer, PaymentRequiredAnswer};
pub use config::{ConfigError, PaymentConfig};
pub use decode::{decode_payment_header, payment_from_headers, DecodeError, DecodedPayment};
pub use evm::Address;
pub use gate::{Authorized, Paid, PaymentGate, Refusal};
pub use reason::Reason;
pub use replay::{InMemoryNonceStore, NonceKey, NonceStore, NonceUsed};
pub use settle::{
    FacilitatorSettler, LocalSettler, SettleOutcome, SettleRequest, SettleTicket, Settlement,
    Settler,
};
pub use signer::{LocalEvmSigner, PaymentHeader, PaymentRequired, PaymentSigner, SignError};
pub use verify::{verify_exact_evm, VerifiedPayment};
