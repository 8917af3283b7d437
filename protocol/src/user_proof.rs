//! The proof of a user: a per-request EIP-191 `personal_sign` by the
//! account a user id names, carried in the [`HEADER`] (`X-User-Proof`)
//! request header (decision 0017).
//!
//! A user id is *provable* when it is an account ([`Account`]): an EVM
//! address (`0x` + 40 hex, any case) or a CAIP-10 account
//! `eip155:<chain id>:0x<40 hex>`. Its normal form ([`Account::normal_form`])
//! has the hex in lowercase, so two spellings of one account are one user.
//!
//! The header value is base64 (standard alphabet, padded) of a JSON object
//! ([`UserProof`]): `user_id`, `issued_at_ms`, `nonce` (hex) and `signature`
//! (`0x` + r||s||v). The signature is over a human-readable text a wallet
//! shows ([`message`]) that binds a fixed domain line, the user id, the HTTP
//! method, the path (with its query), the SHA-256 of the body, the issue time
//! and the nonce:
//!
//! ```text
//! compute-coordinator user proof v1
//! User: 0x…
//! Request: POST /v1/trust/create
//! Body-SHA256: 9f86d0…
//! Issued-At: 2026-11-28T18:00:00.000Z (1795888800000)
//! Nonce: 6b7c…
//! ```
//!
//! [`verify`] checks the shape, the time window and the signature (the
//! address recovered with libsecp256k1 must be the account's,
//! `protocol::signing`); the verifier remembers nonces itself (each
//! address's nonce is accepted once within the window).

use crate::signing::{self, Keypair, SignatureError};
use base64::Engine as _;
use rand_core::RngCore;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The request header that carries the proof.
pub const HEADER: &str = "X-User-Proof";

/// The first line of every signed text: names what is signed and its version,
/// so a signature made for anything else never reads as a proof.
pub const DOMAIN: &str = "compute-coordinator user proof v1";

/// How far the issue time may lie from the verifier's clock, either way.
pub const WINDOW_MS: i64 = 300_000;

/// Nonce length in hex characters: at least 64 bits, at most 256.
pub const NONCE_HEX_MIN: usize = 16;
pub const NONCE_HEX_MAX: usize = 64;

/// The machine-readable `error` codes of a refused proof (401 bodies).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RefusalCode {
    /// No `X-User-Proof` header (and no payment by the user's address).
    Required,
    /// The header is malformed, names another user, or the signature is not
    /// the account's over this request.
    Invalid,
    /// The issue time is outside the window around the verifier's clock.
    Expired,
    /// This address's nonce was accepted before, within the window.
    Replayed,
    /// The user id is not an account, so no signature can prove it.
    NotProvable,
}

impl RefusalCode {
    pub fn as_str(self) -> &'static str {
        match self {
            RefusalCode::Required => "user_proof_required",
            RefusalCode::Invalid => "user_proof_invalid",
            RefusalCode::Expired => "user_proof_expired",
            RefusalCode::Replayed => "user_proof_replayed",
            RefusalCode::NotProvable => "user_id_not_provable",
        }
    }

    pub fn parse(code: &str) -> Option<Self> {
        [
            RefusalCode::Required,
            RefusalCode::Invalid,
            RefusalCode::Expired,
            RefusalCode::Replayed,
            RefusalCode::NotProvable,
        ]
        .into_iter()
        .find(|c| c.as_str() == code)
    }
}

impl std::fmt::Display for RefusalCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An account a user id names: what a signature can prove.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Account {
    /// A bare EVM address.
    Address([u8; 20]),
    /// A CAIP-10 account on an `eip155` chain (decimal chain id, no leading zero).
    Eip155 { chain_id: String, address: [u8; 20] },
}

impl Account {
    /// Parses a user id as an account; `None` for anything else (a plain
    /// name). Hex digits may be in any case; nothing else is lenient.
    pub fn parse(user_id: &str) -> Option<Account> {
        if let Some(address) = parse_address(user_id) {
            return Some(Account::Address(address));
        }
        let rest = user_id.strip_prefix("eip155:")?;
        let (chain_id, address) = rest.split_once(':')?;
        let chain_ok = (1..=32).contains(&chain_id.len())
            && chain_id.bytes().all(|b| b.is_ascii_digit())
            && (chain_id == "0" || !chain_id.starts_with('0'));
        if !chain_ok {
            return None;
        }
        Some(Account::Eip155 {
            chain_id: chain_id.to_owned(),
            address: parse_address(address)?,
        })
    }

    /// The 20-byte address whose key proves this account.
    pub fn address(&self) -> &[u8; 20] {
        match self {
            Account::Address(address) | Account::Eip155 { address, .. } => address,
        }
    }

    /// The address as `0x` + 40 lowercase hex.
    pub fn address_hex(&self) -> String {
        format!("0x{}", hex::encode(self.address()))
    }

    /// The one spelling of this account: lowercase hex, the CAIP-10 prefix
    /// kept. `0xAB…` and `0xab…` are one user; `eip155:1:0xab…` is another
    /// user id (scoped to a chain), proven by the same key.
    pub fn normal_form(&self) -> String {
        match self {
            Account::Address(_) => self.address_hex(),
            Account::Eip155 { chain_id, .. } => {
                format!("eip155:{chain_id}:{}", self.address_hex())
            }
        }
    }
}

/// The normal form of a user id that is an account; `None` for a plain name.
pub fn normalize_user_id(user_id: &str) -> Option<String> {
    Account::parse(user_id).map(|a| a.normal_form())
}

/// `0x` + 40 hex digits, any case.
fn parse_address(text: &str) -> Option<[u8; 20]> {
    let hex_part = text.strip_prefix("0x")?;
    if hex_part.len() != 40 {
        return None;
    }
    let mut out = [0u8; 20];
    hex::decode_to_slice(hex_part, &mut out).ok()?;
    Some(out)
}

/// The request a proof is for, as the signer sends it and the verifier
/// receives it.
#[derive(Debug, Clone, Copy)]
pub struct ProofRequest<'a> {
    /// `GET`, `POST`: upper case, as on the request line.
    pub method: &'a str,
    /// The request target's path and query exactly as sent, e.g.
    /// `/v1/trust/list?user_id=0xab…` or `/v1/jobs/commit/fast`.
    pub path_and_query: &'a str,
    /// The exact body bytes (empty for a GET).
    pub body: &'a [u8],
}

/// The header's JSON object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserProof {
    pub user_id: String,
    pub issued_at_ms: i64,
    pub nonce: String,
    pub signature: String,
}

impl UserProof {
    /// The header value: base64 of the JSON object.
    pub fn to_header(&self) -> String {
        let json = serde_json::to_vec(self).expect("a proof serializes");
        base64::engine::general_purpose::STANDARD.encode(json)
    }

    /// Parses a header value; the error says what is wrong, for the 401.
    pub fn from_header(value: &str) -> Result<Self, ProofError> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(value.trim())
            .map_err(|_| ProofError::Malformed("it is not base64 (standard alphabet)".into()))?;
        serde_json::from_slice(&bytes).map_err(|e| {
            ProofError::Malformed(format!(
                "it is not a JSON object of user_id, issued_at_ms, nonce and signature: {e}"
            ))
        })
    }
}

/// Lowercase hex SHA-256 of a body.
pub fn body_sha256(body: &[u8]) -> String {
    hex::encode(Sha256::digest(body))
}

/// The text the user signs (EIP-191 `personal_sign`), one field a line.
pub fn message(
    user_id: &str,
    request: &ProofRequest<'_>,
    issued_at_ms: i64,
    nonce: &str,
) -> String {
    format!(
        "{DOMAIN}\nUser: {user_id}\nRequest: {} {}\nBody-SHA256: {}\nIssued-At: {} ({issued_at_ms})\nNonce: {nonce}",
        request.method,
        request.path_and_query,
        body_sha256(request.body),
        crate::time::format_ms(issued_at_ms),
    )
}

/// Signs a proof for `request` as `user_id` with `key`, issued at
/// `issued_at_ms` with `nonce` (hex); returns the header value.
pub fn sign(
    key: &Keypair,
    user_id: &str,
    request: &ProofRequest<'_>,
    issued_at_ms: i64,
    nonce: &str,
) -> String {
    let text = message(user_id, request, issued_at_ms, nonce);
    UserProof {
        user_id: user_id.to_owned(),
        issued_at_ms,
        nonce: nonce.to_owned(),
        signature: key.personal_sign(text.as_bytes()),
    }
    .to_header()
}

/// [`sign`] with a fresh 128-bit nonce drawn from `rng` (the caller's
/// injected RNG) at `now_ms` (the caller's injected clock).
pub fn sign_now(
    key: &Keypair,
    user_id: &str,
    request: &ProofRequest<'_>,
    now_ms: i64,
    rng: &mut impl RngCore,
) -> String {
    let mut nonce = [0u8; 16];
    rng.fill_bytes(&mut nonce);
    sign(key, user_id, request, now_ms, &hex::encode(nonce))
}

/// A proof that verified: who signed, and the nonce the verifier must
/// accept only once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The account the proof's `user_id` names (its signer).
    pub account: Account,
    pub issued_at_ms: i64,
    /// Lowercase hex.
    pub nonce: String,
}

/// Why a proof header was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProofError {
    #[error("the X-User-Proof header is malformed: {0}")]
    Malformed(String),
    #[error("the proof's user_id is not an account (0x address or eip155:<chain id>:0x address)")]
    NotAnAccount,
    #[error("the proof was issued at {issued_at_ms} ms, more than {window_ms} ms from the coordinator's clock ({now_ms} ms); sign a new one")]
    Expired {
        issued_at_ms: i64,
        now_ms: i64,
        window_ms: i64,
    },
    #[error("the proof's signature is not the account's over this request: {0}")]
    Signature(SignatureError),
}

impl ProofError {
    /// The 401 code this refusal is answered with.
    pub fn code(&self) -> RefusalCode {
        match self {
            ProofError::Expired { .. } => RefusalCode::Expired,
            _ => RefusalCode::Invalid,
        }
    }
}

/// Checks the header value `header` for `request` at the verifier's `now_ms`:
/// shape, issue time within `window_ms`, then the signature by the account's
/// address over [`message`]. The caller compares `Verified::account` with
/// the request's user id and remembers the nonce.
pub fn verify(
    header: &str,
    request: &ProofRequest<'_>,
    now_ms: i64,
    window_ms: i64,
) -> Result<Verified, ProofError> {
    let proof = UserProof::from_header(header)?;
    let account = Account::parse(&proof.user_id).ok_or(ProofError::NotAnAccount)?;
    let nonce_ok = (NONCE_HEX_MIN..=NONCE_HEX_MAX).contains(&proof.nonce.len())
        && proof.nonce.bytes().all(|b| b.is_ascii_hexdigit());
    if !nonce_ok {
        return Err(ProofError::Malformed(format!(
            "nonce must be {NONCE_HEX_MIN} to {NONCE_HEX_MAX} hex characters"
        )));
    }
    // Checked before the signature: the cheap refusal first.
    if proof.issued_at_ms.abs_diff(now_ms) > window_ms.unsigned_abs() {
        return Err(ProofError::Expired {
            issued_at_ms: proof.issued_at_ms,
            now_ms,
            window_ms,
        });
    }
    let text = message(&proof.user_id, request, proof.issued_at_ms, &proof.nonce);
    let recovered =
        signing::recover_prehash(&signing::eip191_hash(text.as_bytes()), &proof.signature)
            .map_err(ProofError::Signature)?;
    if !recovered
        .address()
        .eq_ignore_ascii_case(&account.address_hex())
    {
        return Err(ProofError::Signature(SignatureError::WrongSigner));
    }
    Ok(Verified {
        account,
        issued_at_ms: proof.issued_at_ms,
        nonce: proof.nonce.to_ascii_lowercase(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::rand_core::SeedableRng;

    const NOW: i64 = 1_795_888_800_000;
    const NONCE: &str = "00112233445566778899aabbccddeeff";

    fn key(seed: u64) -> Keypair {
        Keypair::generate(&mut rand_chacha::ChaCha20Rng::seed_from_u64(seed))
    }

    fn create(body: &[u8]) -> ProofRequest<'_> {
        ProofRequest {
            method: "POST",
            path_and_query: "/v1/trust/create",
            body,
        }
    }

    #[test]
    fn a_proof_round_trips_for_an_address_and_a_caip10_id() {
        let k = key(1);
        let body = br#"{"user_id":"x"}"#;
        for user in [
            k.address(),
            k.address().to_lowercase(),
            format!("eip155:84532:{}", k.address()),
        ] {
            let header = sign(&k, &user, &create(body), NOW, NONCE);
            let verified = verify(&header, &create(body), NOW + 1_000, WINDOW_MS).unwrap();
            assert_eq!(verified.account, Account::parse(&user).unwrap());
            assert_eq!(verified.nonce, NONCE);
            assert_eq!(verified.issued_at_ms, NOW);
        }
    }

    #[test]
    fn the_message_is_readable_and_binds_every_field() {
        let text = message("0xab", &create(b""), NOW, NONCE);
        assert_eq!(
            text,
            "compute-coordinator user proof v1\nUser: 0xab\nRequest: POST /v1/trust/create\n\
             Body-SHA256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n\
             Issued-At: 2026-11-28T18:00:00.000Z (1795888800000)\nNonce: 00112233445566778899aabbccddeeff"
        );
    }

    #[test]
    fn a_tampered_request_or_user_is_refused() {
        let k = key(2);
        let user = k.address();
        let body = br#"{"user_id":"a"}"#;
        let header = sign(&k, &user, &create(body), NOW, NONCE);
        let wrong = Err(ProofError::Signature(SignatureError::WrongSigner));
        let other_method = ProofRequest {
            method: "GET",
            ..create(body)
        };
        let other_path = ProofRequest {
            path_and_query: "/v1/jobs/commit/fast",
            ..create(body)
        };
        for request in [other_method, other_path, create(br#"{"user_id":"b"}"#)] {
            assert_eq!(verify(&header, &request, NOW, WINDOW_MS), wrong);
        }
        // Another user id in the header, the signature left as it was.
        let mut proof = UserProof::from_header(&header).unwrap();
        proof.user_id = key(3).address();
        assert_eq!(
            verify(&proof.to_header(), &create(body), NOW, WINDOW_MS),
            wrong
        );
        // Another issue time or nonce, likewise.
        let mut proof = UserProof::from_header(&header).unwrap();
        proof.issued_at_ms += 1;
        assert_eq!(
            verify(&proof.to_header(), &create(body), NOW, WINDOW_MS),
            wrong
        );
        let mut proof = UserProof::from_header(&header).unwrap();
        proof.nonce = "ff".repeat(16);
        assert_eq!(
            verify(&proof.to_header(), &create(body), NOW, WINDOW_MS),
            wrong
        );
    }

    #[test]
    fn another_signer_is_refused() {
        let victim = key(4);
        let attacker = key(5);
        let header = sign(&attacker, &victim.address(), &create(b"{}"), NOW, NONCE);
        assert_eq!(
            verify(&header, &create(b"{}"), NOW, WINDOW_MS),
            Err(ProofError::Signature(SignatureError::WrongSigner))
        );
    }

    #[test]
    fn a_high_s_twin_is_refused() {
        use k256::ecdsa::Signature;
        let k = key(6);
        let header = sign(&k, &k.address(), &create(b"{}"), NOW, NONCE);
        let mut proof = UserProof::from_header(&header).unwrap();
        let bytes = hex::decode(&proof.signature[2..]).unwrap();
        let low = Signature::from_slice(&bytes[..64]).unwrap();
        let (r, s) = low.split_scalars();
        let high = Signature::from_scalars(r.to_bytes(), (-*s).to_bytes()).unwrap();
        let mut twin = high.to_bytes().to_vec();
        twin.push(if bytes[64] == 27 { 28 } else { 27 });
        proof.signature = format!("0x{}", hex::encode(twin));
        assert_eq!(
            verify(&proof.to_header(), &create(b"{}"), NOW, WINDOW_MS),
            Err(ProofError::Signature(SignatureError::HighS))
        );
    }

    #[test]
    fn the_window_holds_both_ways() {
        let k = key(7);
        let header = sign(&k, &k.address(), &create(b""), NOW, NONCE);
        for now in [NOW - WINDOW_MS, NOW + WINDOW_MS] {
            assert!(verify(&header, &create(b""), now, WINDOW_MS).is_ok());
        }
        for now in [NOW - WINDOW_MS - 1, NOW + WINDOW_MS + 1] {
            let refused = verify(&header, &create(b""), now, WINDOW_MS).unwrap_err();
            assert_eq!(refused.code(), RefusalCode::Expired);
        }
    }

    #[test]
    fn malformed_headers_are_invalid() {
        let k = key(8);
        let good =
            UserProof::from_header(&sign(&k, &k.address(), &create(b""), NOW, NONCE)).unwrap();
        let mut cases = vec![
            "not base64!".to_owned(),
            base64::engine::general_purpose::STANDARD.encode("[]"),
        ];
        for nonce in ["abc", "zz".repeat(10).as_str(), &"a".repeat(65)] {
            cases.push(
                UserProof {
                    nonce: nonce.into(),
                    ..good.clone()
                }
                .to_header(),
            );
        }
        cases.push(
            UserProof {
                signature: "0x12".into(),
                ..good.clone()
            }
            .to_header(),
        );
        for case in cases {
            let refused = verify(&case, &create(b""), NOW, WINDOW_MS).unwrap_err();
            assert_eq!(refused.code(), RefusalCode::Invalid, "{case}: {refused}");
        }
        let name = UserProof {
            user_id: "alice".into(),
            ..good
        };
        assert_eq!(
            verify(&name.to_header(), &create(b""), NOW, WINDOW_MS),
            Err(ProofError::NotAnAccount)
        );
    }

    #[test]
    fn accounts_parse_and_normalize() {
        let a = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266";
        let lower = a.to_lowercase();
        assert_eq!(normalize_user_id(a).as_deref(), Some(lower.as_str()));
        assert_eq!(
            normalize_user_id(&format!("eip155:84532:{a}")),
            Some(format!("eip155:84532:{lower}"))
        );
        for plain in [
            "alice",
            "",
            "0x1234",
            &lower[..41],
            &format!("{lower}00"),
            &format!("0X{}", &lower[2..]),
            &format!("eip155:0084532:{lower}"),
            &format!("eip155::{lower}"),
            &format!("EIP155:1:{lower}"),
            &format!("solana:1:{lower}"),
            &format!("eip155:1:{lower}:x"),
        ] {
            assert_eq!(Account::parse(plain), None, "{plain}");
        }
    }

    #[test]
    fn refusal_codes_round_trip() {
        for code in [
            RefusalCode::Required,
            RefusalCode::Invalid,
            RefusalCode::Expired,
            RefusalCode::Replayed,
            RefusalCode::NotProvable,
        ] {
            assert_eq!(RefusalCode::parse(code.as_str()), Some(code));
        }
    }
}
