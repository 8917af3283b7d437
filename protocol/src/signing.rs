//! secp256k1 keys and EIP-191 `personal_sign`, the scheme every Ethereum wallet
//! and library (ethers, viem, web3.py) can check, so receipts and worker
//! challenges are verifiable without this code base.
//!
//! A signature is 65 bytes `r || s || v` with `v` in {27, 28}, written as `0x` hex.
//! Verification accepts `v` in {0, 1, 27, 28} and rejects high-`s` (malleable)
//! signatures.
//!
//! Two curve libraries, each where it is strongest. Keys are made and
//! messages signed with k256 (the workspace's curve crate: pure Rust, seeded
//! from our ChaCha RNG in the simulation, and faster at signing). Signatures
//! are *checked* with libsecp256k1 (the `secp256k1` crate, Bitcoin Core's C
//! library, the one go-ethereum recovers with): a receipt check is the largest
//! single cost of a job, and libsecp256k1's variable-time recovery does it in
//! less than half of k256's constant-time verification (issue 14; figures in
//! `benches/README.md`). Every check is recovery with `v` and a comparison,
//! exactly what Ethereum tooling does; the tests hold it to k256's recovery.

use k256::ecdsa::{RecoveryId, Signature, SigningKey, VerifyingKey};
use k256::NonZeroScalar;
use rand_core::CryptoRngCore;
use sha3::{Digest, Keccak256};

/// Why a key or signature was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("public key must be 0x followed by 66 hex characters (compressed SEC1)")]
    MalformedPublicKey,
    #[error("signature must be 0x followed by 130 hex characters")]
    MalformedSignature,
    #[error("signature s value is not in the lower half of the curve order")]
    HighS,
    #[error("signature does not recover to the expected key")]
    WrongSigner,
}

/// A worker's (or any signer's) secp256k1 private key.
#[derive(Clone)]
pub struct Keypair {
    key: SigningKey,
}

impl std::fmt::Debug for Keypair {
    // Never print the secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keypair")
            .field("public_key", &self.public_key_hex())
            .finish_non_exhaustive()
    }
}

impl Keypair {
    /// Draws the secret as `SigningKey::random` does (one `NonZeroScalar`
    /// from `rng`), so a seed gives the keys it always gave.
    pub fn generate(rng: &mut impl CryptoRngCore) -> Self {
        Self::from_scalar(NonZeroScalar::random(rng))
    }

    /// From 32 secret bytes, as hex with or without `0x`.
    pub fn from_secret_hex(secret: &str) -> Option<Self> {
        let bytes = hex::decode(secret.trim().trim_start_matches("0x")).ok()?;
        // `SigningKey::from_slice`'s own parse, then the same derivation.
        let secret = k256::SecretKey::from_slice(&bytes).ok()?;
        Some(Self::from_scalar(secret.to_nonzero_scalar()))
    }

    /// The key pair of `secret`: its public point is a scalar
    /// multiplication, memoised in the simulation (`crypto_memo`).
    fn from_scalar(secret: NonZeroScalar) -> Self {
        let memo = crate::crypto_memo::KeyPairKey {
            secret: secret.to_bytes().into(),
        };
        Self {
            key: crate::crypto_memo::key_pair(memo, || SigningKey::from(secret)),
        }
    }

    pub fn secret_hex(&self) -> String {
        format!("0x{}", hex::encode(self.key.to_bytes()))
    }

    /// Compressed SEC1 public key: `0x` + 66 hex characters.
    pub fn public_key_hex(&self) -> String {
        public_key_hex(self.key.verifying_key())
    }

    /// The Ethereum address of this key, EIP-55 checksummed.
    pub fn address(&self) -> String {
        eth_address(self.key.verifying_key())
    }

    /// EIP-191 `personal_sign` of `message`.
    pub fn personal_sign(&self, message: &[u8]) -> String {
        self.sign_prehash(&eip191_hash(message))
    }

    /// Signs a 32-byte digest (for example an EIP-712 digest) as `0x` + r||s||v.
    pub fn sign_prehash(&self, digest: &[u8; 32]) -> String {
        let key = crate::crypto_memo::SignKey {
            secret: self.key.to_bytes().into(),
            digest: *digest,
        };
        crate::crypto_memo::signature(key, || self.sign_prehash_uncached(digest))
    }

    /// The real k256 signing behind [`Keypair::sign_prehash`].
    fn sign_prehash_uncached(&self, digest: &[u8; 32]) -> String {
        let (sig, recid) = self
            .key
            .sign_prehash_recoverable(digest)
            .expect("signing a 32-byte digest with a valid key");
        // k256 already returns low-s; normalise defensively and flip the parity if it changed.
        let (sig, recid) = match sig.normalize_s() {
            Some(low) => (
                low,
                RecoveryId::new(!recid.is_y_odd(), recid.is_x_reduced()),
            ),
            None => (sig, recid),
        };
        let mut out = [0u8; 65];
        out[..64].copy_from_slice(&sig.to_bytes());
        out[64] = 27 + recid.to_byte();
        format!("0x{}", hex::encode(out))
    }
}

/// `keccak256("\x19Ethereum Signed Message:\n" || len(message) || message)`.
pub fn eip191_hash(message: &[u8]) -> [u8; 32] {
    let mut h = Keccak256::new();
    h.update(format!("\x19Ethereum Signed Message:\n{}", message.len()).as_bytes());
    h.update(message);
    h.finalize().into()
}

pub fn keccak256(bytes: &[u8]) -> [u8; 32] {
    Keccak256::digest(bytes).into()
}

/// A signer's public key, as signatures are checked against it: a point on
/// the curve (parsing checked that), held in libsecp256k1's form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublicKey(secp256k1::PublicKey);

impl PublicKey {
    /// Canonical text form: compressed SEC1, lowercase `0x` hex.
    pub fn to_hex(&self) -> String {
        format!("0x{}", hex::encode(self.0.serialize()))
    }

    /// EIP-55 checksummed address.
    pub fn address(&self) -> String {
        address_of_uncompressed(&self.0.serialize_uncompressed())
    }
}

/// Parses a compressed SEC1 public key in `0x` hex (66 hex characters).
pub fn parse_public_key(text: &str) -> Result<PublicKey, SignatureError> {
    let hex_part = text
        .strip_prefix("0x")
        .ok_or(SignatureError::MalformedPublicKey)?;
    if hex_part.len() != 66 {
        return Err(SignatureError::MalformedPublicKey);
    }
    let mut sec1 = [0u8; 33];
    hex::decode_to_slice(hex_part, &mut sec1).map_err(|_| SignatureError::MalformedPublicKey)?;
    // Decompressing the point is a square root: memoised in the simulation.
    let memo = crate::crypto_memo::ParseKey { sec1 };
    crate::crypto_memo::parsed(memo, || {
        secp256k1::PublicKey::from_slice(&sec1).ok().map(PublicKey)
    })
    .ok_or(SignatureError::MalformedPublicKey)
}

/// Canonical text form of a signing key's public half (see [`PublicKey::to_hex`]).
fn public_key_hex(key: &VerifyingKey) -> String {
    format!("0x{}", hex::encode(key.to_encoded_point(true).as_bytes()))
}

/// EIP-55 checksummed address of a signing key's public half.
fn eth_address(key: &VerifyingKey) -> String {
    address_of_uncompressed(key.to_encoded_point(false).as_bytes())
}

/// The address of a key given as uncompressed SEC1 (`04 || x || y`): the
/// last 20 bytes of `keccak256(x || y)`, EIP-55 checksummed.
fn address_of_uncompressed(sec1: &[u8]) -> String {
    assert_eq!(sec1.len(), 65, "uncompressed SEC1 is 65 bytes");
    let hash = keccak256(&sec1[1..]);
    checksum_address(&hash[12..])
}

/// EIP-55 mixed-case form of a 20-byte address.
pub fn checksum_address(addr: &[u8]) -> String {
    let lower = hex::encode(addr);
    let hash = keccak256(lower.as_bytes());
    let mut out = String::with_capacity(42);
    out.push_str("0x");
    for (i, c) in lower.chars().enumerate() {
        let nibble = (hash[i / 2] >> (if i % 2 == 0 { 4 } else { 0 })) & 0x0f;
        if c.is_ascii_alphabetic() && nibble >= 8 {
            out.push(c.to_ascii_uppercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// Recovers the public key that produced `signature` over `digest`.
pub fn recover_prehash(digest: &[u8; 32], signature: &str) -> Result<PublicKey, SignatureError> {
    let signature = parse_signature(signature)?;
    recover(digest, &signature).ok_or(SignatureError::MalformedSignature)
}

/// libsecp256k1's recovery with `v`: `None` when no key recovers.
fn recover(
    digest: &[u8; 32],
    signature: &secp256k1::ecdsa::RecoverableSignature,
) -> Option<PublicKey> {
    let (recid, compact) = signature.serialize_compact();
    let key = crate::crypto_memo::RecoverKey {
        digest: *digest,
        compact,
        recid: recid.to_u8(),
    };
    crate::crypto_memo::recovery(key, || {
        signature
            .recover_ecdsa(secp256k1::Message::from_digest(*digest))
            .ok()
            .map(PublicKey)
    })
}

/// Parses `0x` + r||s||v: rejects high `s`, accepts `v` in {0, 1, 27, 28}.
///
/// The checks are k256's (`r` and `s` in `[1, n)`, `s` low), so which error a
/// bad signature gets did not change when checking moved to libsecp256k1.
fn parse_signature(
    signature: &str,
) -> Result<secp256k1::ecdsa::RecoverableSignature, SignatureError> {
    let (sig, recid) = parse_signature_k256(signature)?;
    let recid = secp256k1::ecdsa::RecoveryId::try_from(i32::from(recid.to_byte()))
        .expect("0 or 1 is a recovery id");
    secp256k1::ecdsa::RecoverableSignature::from_compact(&sig.to_bytes(), recid)
        .map_err(|_| SignatureError::MalformedSignature)
}

/// The parse itself, in k256's types (the tests' independent recovery uses them too).
fn parse_signature_k256(signature: &str) -> Result<(Signature, RecoveryId), SignatureError> {
    let hex_part = signature
        .strip_prefix("0x")
        .ok_or(SignatureError::MalformedSignature)?;
    if hex_part.len() != 130 {
        return Err(SignatureError::MalformedSignature);
    }
    let bytes = hex::decode(hex_part).map_err(|_| SignatureError::MalformedSignature)?;
    let sig =
        Signature::from_slice(&bytes[..64]).map_err(|_| SignatureError::MalformedSignature)?;
    if sig.normalize_s().is_some() {
        return Err(SignatureError::HighS);
    }
    let v = match bytes[64] {
        0 | 27 => 0,
        1 | 28 => 1,
        _ => return Err(SignatureError::MalformedSignature),
    };
    let recid = RecoveryId::from_byte(v).ok_or(SignatureError::MalformedSignature)?;
    Ok((sig, recid))
}

/// Checks that `signature` is an EIP-191 `personal_sign` of `message` by
/// `public_key`, the way Ethereum tooling checks it: the key recovered with
/// the signature's `v` must be `public_key`. A plain ECDSA verification would
/// accept a wrong `v`, and such a signature recovers to another address in
/// ethers or viem.
pub fn verify_personal_sign(
    public_key: &PublicKey,
    message: &[u8],
    signature: &str,
) -> Result<(), SignatureError> {
    let signature = parse_signature(signature)?;
    match recover(&eip191_hash(message), &signature) {
        Some(recovered) if recovered == *public_key => Ok(()),
        _ => Err(SignatureError::WrongSigner),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::rand_core::SeedableRng;

    // Hardhat/anvil account #0: a well-known test key with a well-known address.
    const ANVIL0: &str = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";

    #[test]
    fn address_of_known_key() {
        let k = Keypair::from_secret_hex(ANVIL0).unwrap();
        assert_eq!(k.address(), "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266");
    }

    #[test]
    fn personal_sign_matches_ethers() {
        // ethers.js: new Wallet(ANVIL0).signMessage("hello")
        let k = Keypair::from_secret_hex(ANVIL0).unwrap();
        assert_eq!(
            k.personal_sign(b"hello"),
            "0xf16ea9a3478698f695fd1401bfe27e9e4a7e8e3da94aa72b021125e31fa899cc573c48ea3fe1d4ab61a9db10c19032026e3ed2dbccba5a178235ac27f94504311c"
        );
    }

    #[test]
    fn sign_then_verify_and_tamper() {
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(7);
        let k = Keypair::generate(&mut rng);
        let pk = parse_public_key(&k.public_key_hex()).unwrap();
        let sig = k.personal_sign(b"message");
        assert_eq!(verify_personal_sign(&pk, b"message", &sig), Ok(()));
        assert_eq!(
            verify_personal_sign(&pk, b"messagf", &sig),
            Err(SignatureError::WrongSigner)
        );
        assert_eq!(
            verify_personal_sign(&pk, b"message", "0x1234"),
            Err(SignatureError::MalformedSignature)
        );
    }

    #[test]
    fn a_wrong_recovery_byte_is_refused() {
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(9);
        let k = Keypair::generate(&mut rng);
        let pk = parse_public_key(&k.public_key_hex()).unwrap();
        let sig = k.personal_sign(b"m");
        let flipped = if sig.ends_with("1b") { "1c" } else { "1b" };
        let twin = format!("{}{flipped}", &sig[..sig.len() - 2]);
        assert_eq!(
            verify_personal_sign(&pk, b"m", &twin),
            Err(SignatureError::WrongSigner)
        );
    }

    /// What the check must equal, by an independent implementation: k256's
    /// recovery with the signature's `v` gives `public_key`.
    fn recovers_to(public_key: &PublicKey, message: &[u8], signature: &str) -> bool {
        let Ok((sig, recid)) = parse_signature_k256(signature) else {
            return false;
        };
        VerifyingKey::recover_from_prehash(&eip191_hash(message), &sig, recid)
            .is_ok_and(|key| public_key_hex(&key) == public_key.to_hex())
    }

    fn with_v(signature: &str, v: u8) -> String {
        format!("{}{v:02x}", &signature[..signature.len() - 2])
    }

    #[test]
    fn a_valid_signature_with_the_other_v_is_refused() {
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(10);
        for _ in 0..20 {
            let k = Keypair::generate(&mut rng);
            let pk = parse_public_key(&k.public_key_hex()).unwrap();
            let sig = k.personal_sign(b"receipt");
            let v = u8::from_str_radix(&sig[sig.len() - 2..], 16).unwrap();
            assert_eq!(verify_personal_sign(&pk, b"receipt", &sig), Ok(()));
            // The same r and s verify as plain ECDSA; only v is wrong.
            let flipped = with_v(&sig, if v == 27 { 28 } else { 27 });
            assert_eq!(
                verify_personal_sign(&pk, b"receipt", &flipped),
                Err(SignatureError::WrongSigner)
            );
            assert!(!recovers_to(&pk, b"receipt", &flipped));
        }
    }

    /// The check accepts exactly what k256's recovery accepts: over random
    /// keys and messages, with the right and the wrong `v` in both
    /// encodings, another signer's key, and random r || s.
    #[test]
    fn the_check_agrees_with_k256_recovery() {
        use rand_core::RngCore;
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(11);
        let mut accepted = 0;
        for round in 0..200 {
            let k = Keypair::generate(&mut rng);
            let other = Keypair::generate(&mut rng);
            let pk = parse_public_key(&k.public_key_hex()).unwrap();
            let other_pk = parse_public_key(&other.public_key_hex()).unwrap();
            let mut message = vec![0u8; (rng.next_u32() % 300) as usize];
            rng.fill_bytes(&mut message);
            let sig = k.personal_sign(&message);
            let mut random = [0u8; 64];
            rng.fill_bytes(&mut random);
            let mut candidates = vec![format!("0x{}1b", hex::encode(random))];
            for v in [0u8, 1, 27, 28] {
                candidates.push(with_v(&sig, v));
            }
            for candidate in &candidates {
                for key in [&pk, &other_pk] {
                    let verified = verify_personal_sign(key, &message, candidate).is_ok();
                    assert_eq!(
                        verified,
                        recovers_to(key, &message, candidate),
                        "round {round}: {candidate}"
                    );
                    accepted += usize::from(verified);
                }
            }
        }
        // Each round's own signature passes with its v in both encodings.
        assert_eq!(accepted, 400);
    }

    #[test]
    fn high_s_is_rejected() {
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(8);
        let k = Keypair::generate(&mut rng);
        let pk = parse_public_key(&k.public_key_hex()).unwrap();
        let sig = k.personal_sign(b"m");
        let bytes = hex::decode(&sig[2..]).unwrap();
        let low = Signature::from_slice(&bytes[..64]).unwrap();
        // s' = n - s is the malleable twin; it recovers with the other parity.
        let (r, s) = low.split_scalars();
        let high = Signature::from_scalars(r.to_bytes(), (-*s).to_bytes()).unwrap();
        let v = if bytes[64] == 27 { 28 } else { 27 };
        let mut twin = high.to_bytes().to_vec();
        twin.push(v);
        let twin = format!("0x{}", hex::encode(twin));
        assert_eq!(
            verify_personal_sign(&pk, b"m", &twin),
            Err(SignatureError::HighS)
        );
    }

    #[test]
    fn public_key_format() {
        let k = Keypair::from_secret_hex(ANVIL0).unwrap();
        let pk = k.public_key_hex();
        assert_eq!(pk.len(), 68);
        assert!(pk.starts_with("0x02") || pk.starts_with("0x03"));
        assert!(parse_public_key(&pk).is_ok());
        assert!(parse_public_key(&pk[2..]).is_err());
        assert!(parse_public_key("0x02zz").is_err());
        assert!(parse_public_key(&format!("0x04{}", "00".repeat(32))).is_err());
        // Points on and off the curve: the parse agrees with k256's.
        let mut off_curve = 0;
        for x in 1u8..=40 {
            let text = format!("0x03{}{x:02x}", "00".repeat(31));
            let k256_parses = VerifyingKey::from_sec1_bytes(&hex::decode(&text[2..]).unwrap());
            assert_eq!(
                parse_public_key(&text).is_ok(),
                k256_parses.is_ok(),
                "{text}"
            );
            off_curve += usize::from(k256_parses.is_err());
        }
        assert!(off_curve > 0, "some small x has no point");
        let parsed = parse_public_key(&pk).unwrap();
        assert_eq!(parsed.to_hex(), pk);
        assert_eq!(parsed.address(), k.address());
    }

    /// A zero `r` or `s` is malformed, as k256 parses it, not a wrong signer.
    #[test]
    fn zero_r_or_s_is_malformed() {
        let k = Keypair::from_secret_hex(ANVIL0).unwrap();
        let pk = parse_public_key(&k.public_key_hex()).unwrap();
        let one = format!("{}01", "00".repeat(31));
        let zero = "00".repeat(32);
        for bad in [format!("0x{zero}{one}1b"), format!("0x{one}{zero}1b")] {
            assert_eq!(
                verify_personal_sign(&pk, b"m", &bad),
                Err(SignatureError::MalformedSignature)
            );
        }
    }
}
