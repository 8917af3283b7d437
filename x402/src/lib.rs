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
//! - [`settle`]: settlement through a facilitator or locally, and `PAYMENT-RESPONSE`.
//! - [`gate`]: the server-side flow in one call (`PaymentGate`).
//! - [`signer`]: the paying side (`PaymentSigner`, `LocalEvmSigner`).
//! - [`stub`]: a scriptable in-process facilitator for tests and the simulation.
//!
//! Time is always passed in as Unix seconds and randomness as an RNG; this
//! crate never reads the clock.

pub mod challenge;
pub mod config;
pub mod decode;
pub mod evm;
pub mod gate;
pub mod reason;
pub mod replay;
pub mod settle;
pub mod signer;
pub mod stub;
pub mod verify;
pub mod wire;

pub use challenge::{PaymentOffer, PaymentRequiredAnswer};
pub use config::{ConfigError, PaymentConfig};
pub use decode::{decode_payment_header, payment_from_headers, DecodeError, DecodedPayment};
pub use evm::Address;
pub use gate::{Authorized, Paid, PaymentGate, Refusal};
pub use reason::Reason;
pub use replay::{InMemoryNonceStore, NonceKey, NonceStore, NonceUsed};
pub use settle::{FacilitatorSettler, LocalSettler, SettleRequest, Settlement, Settler};
pub use signer::{LocalEvmSigner, PaymentHeader, PaymentRequired, PaymentSigner, SignError};
pub use stub::{FacilitatorStub, StubScript};
pub use verify::{verify_exact_evm, VerifiedPayment};
