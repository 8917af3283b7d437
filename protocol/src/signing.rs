//! secp256k1 keys and EIP-191 `personal_sign`, the scheme every Ethereum wallet
//! and library (ethers, viem, web3.py) can check, so receipts and worker
//! challenges are verifiable without this code base.
//!
//! A signature is 65 bytes `r || s || v` with `v` in {27, 28}, written as `0x` hex.
//! Verification accepts `v` in {0, 1, 27, 28} and rejects high-`s` (malleable)
//! signatures.

use k256::ecdsa::{RecoveryId, Signature, SigningKey, VerifyingKey};
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
/// the signature's `v` must be `public_key`. A plain ECDSA verification
/// against the known key would be twice as fast but would accept a wrong
/// `v`, and such a receipt recovers to another address in ethers or viem.
pub fn verify_personal_sign(
    public_key: &VerifyingKey,
    message: &[u8],
    signature: &str,
) -> Result<(), SignatureError> {
    let recovered = recover_prehash(&eip191_hash(message), signature)?;
    if &recovered == public_key {
        Ok(())
    } else {
        Err(SignatureError::WrongSigner)
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
        assert!(verify_personal_sign(&pk, b"m", &twin).is_err());
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
