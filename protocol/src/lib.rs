//! Wire types shared by every crate of the workspace.
//!
//! Layout:
//! - [`api`]: HTTP request and response bodies of the coordinator (spec sections 2 and 4).
//! - [`worker`]: frames of the worker WebSocket protocol (`docs/worker-protocol.md`).
//! - [`receipt`]: the worker-signed receipt and how it is hashed, signed and verified.
//! - [`origin`]: the canonical origin of the coordinator a worker dialled, which its login signs.
//! - [`signing`]: secp256k1 keys, EIP-191 `personal_sign` and signature recovery.
//! - [`crypto_memo`]: the simulation's memo of pure curve results (key pairs, signatures, recoveries, public-key parses).
//! - [`user_proof`]: the proof of a user (the `X-User-Proof` header): accounts as user ids,
//!   the signed text, sign and verify.
//! - [`canonical`]: RFC 8785 (JCS) canonical JSON and the `sha256:` output hash.
//! - [`money`]: USD prices held as integer micro-dollars, never floats.
//! - [`time`]: the one timestamp format of the API.
//! - [`clock`]: the injected source of wall-clock time (`Clock`).
//! - [`connection`]: the text-frame connection (`FrameConnection`) and its dialer
//!   (`Connector`) both ends are written against, and in-memory channels.

pub mod api;
pub mod canonical;
pub mod clock;
pub mod connection;
pub mod crypto_memo;
pub mod money;
pub mod origin;
pub mod receipt;
pub mod signing;
pub mod time;
pub mod user_proof;
pub mod worker;
