//! secp256k1 keys and EIP-191 `personal_sign`, the scheme every Ethereum wallet
//! and library (ethers, viem, web3.py) can check, so receipts and worker
//! challenges are verifiable without this code base.
//!
//! A signature is 65 bytes `r || s || v` with `v` in {27, 28}, written as `0x` hex.
//! Verification accepts `v` in {0, 1, 27, 28} and rejects high-`s` (malleable)
//! signatures.

use k256::ecdsa::{RecoveryId, Signature, SigningKey, VerifyingKey};
use k256::elliptic_curve::ops::{Invert, LinearCombination, Reduce};
use k256::elliptic_curve::point::AffineCoordinates;
use k256::{FieldBytes, ProjectivePoint, Scalar, U256};
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
    pub fn generate(rng: &mut impl CryptoRngCore) -> Self {
        Self {
            key: SigningKey::random(rng),
        }
    }

    /// From 32 secret bytes, as hex with or without `0x`.
    pub fn from_secret_hex(secret: &str) -> Option<Self> {
        let bytes = hex::decode(secret.trim().trim_start_matches("0x")).ok()?;
        SigningKey::from_slice(&bytes).ok().map(|key| Self { key })
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

/// Parses a compressed (or uncompressed) SEC1 public key in `0x` hex.
pub fn parse_public_key(text: &str) -> Result<VerifyingKey, SignatureError> {
    let hex_part = text
        .strip_prefix("0x")
        .ok_or(SignatureError::MalformedPublicKey)?;
    if hex_part.len() != 66 {
        return Err(SignatureError::MalformedPublicKey);
    }
    let bytes = hex::decode(hex_part).map_err(|_| SignatureError::MalformedPublicKey)?;
    VerifyingKey::from_sec1_bytes(&bytes).map_err(|_| SignatureError::MalformedPublicKey)
}

/// Canonical text form of a key: compressed SEC1, lowercase `0x` hex.
pub fn public_key_hex(key: &VerifyingKey) -> String {
    format!("0x{}", hex::encode(key.to_encoded_point(true).as_bytes()))
}

/// EIP-55 checksummed address of a public key.
pub fn eth_address(key: &VerifyingKey) -> String {
    let uncompressed = key.to_encoded_point(false);
    let hash = keccak256(&uncompressed.as_bytes()[1..]);
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
pub fn recover_prehash(digest: &[u8; 32], signature: &str) -> Result<VerifyingKey, SignatureError> {
    let (sig, recid) = parse_signature(signature)?;
    VerifyingKey::recover_from_prehash(digest, &sig, recid)
        .map_err(|_| SignatureError::MalformedSignature)
}

/// Parses `0x` + r||s||v: rejects high `s`, accepts `v` in {0, 1, 27, 28}.
fn parse_signature(signature: &str) -> Result<(Signature, RecoveryId), SignatureError> {
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
/// the signature's `v` must be `public_key`.
///
/// Recovery is not needed to get that guarantee. Recovery lifts `R` from
/// `x = r` with the y parity `v` and returns `Q' = r⁻¹(s·R − z·G)`; so
/// `Q' = Q` exactly when `R = s⁻¹z·G + s⁻¹r·Q`. Computing that point (one
/// double-scalar multiplication, the same one a plain ECDSA verification does)
/// and checking that its x coordinate is `r` — as a field element, not
/// reduced mod n, as recovery with `v` ∈ {27, 28} assumes — and that its y
/// parity is `v` accepts exactly the signatures recovery accepts, at half
/// the cost (k256's recovery decompresses `R`, multiplies, then re-verifies).
/// A plain verification without the parity check would accept a wrong `v`,
/// and such a signature recovers to another address in ethers or viem.
pub fn verify_personal_sign(
    public_key: &VerifyingKey,
    message: &[u8],
    signature: &str,
) -> Result<(), SignatureError> {
    let (sig, recid) = parse_signature(signature)?;
    verify_prehash_with_parity(public_key, &eip191_hash(message), &sig, recid.is_y_odd())
}

/// `R = (z/s)·G + (r/s)·Q` must have x = r (unreduced) and the given y parity.
fn verify_prehash_with_parity(
    public_key: &VerifyingKey,
    digest: &[u8; 32],
    sig: &Signature,
    y_odd: bool,
) -> Result<(), SignatureError> {
    // A 32-byte digest is its own `bits2field` for a 256-bit curve.
    let z = <Scalar as Reduce<U256>>::reduce_bytes(&FieldBytes::from(*digest));
    let (r, s) = sig.split_scalars();
    // s is public (it is in the signature), so variable time is fine; it
    // is non-zero, so it has an inverse.
    let s_inv: Scalar = *s.invert_vartime();
    let q = ProjectivePoint::from(*public_key.as_affine());
    let big_r =
        ProjectivePoint::lincomb(&ProjectivePoint::GENERATOR, &(z * s_inv), &q, &(*r * s_inv));
    if big_r == ProjectivePoint::IDENTITY {
        return Err(SignatureError::WrongSigner);
    }
    let big_r = big_r.to_affine();
    if big_r.x() != r.to_bytes() || bool::from(big_r.y_is_odd()) != y_odd {
        return Err(SignatureError::WrongSigner);
    }
    Ok(())
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

    /// What the check must equal: recovery with the signature's `v` gives `public_key`.
    fn recovers_to(public_key: &VerifyingKey, message: &[u8], signature: &str) -> bool {
        recover_prehash(&eip191_hash(message), signature).as_ref() == Ok(public_key)
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

    /// The parity check accepts exactly what recovery accepts: over random
    /// keys and messages, with the right and the wrong `v` in both
    /// encodings, another signer's key, and random r || s.
    #[test]
    fn the_parity_check_agrees_with_recovery() {
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
    }
}
