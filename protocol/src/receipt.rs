//! The receipt a worker signs for a completed job (spec 2.5).
//!
//! Signed bytes: the RFC 8785 canonical JSON of the receipt *without* its
//! `signature` field (so with `job_id`, `provider_pubkey`, `output_hash`,
//! `completed_at` and `payment_ref`, the latter as `null` when absent).
//! Signature: EIP-191 `personal_sign` of those bytes by the worker's key.
//! Anyone can check one with `ethers.verifyMessage(bytes, signature)`, which
//! returns the address of `provider_pubkey`.

use crate::{canonical, signing};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The fields of a receipt that are signed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReceiptBody {
    pub job_id: Uuid,
    pub provider_pubkey: String,
    pub output_hash: String,
    pub completed_at: String,
    pub payment_ref: Option<String>,
}

/// A signed receipt as it appears in a job record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Receipt {
    pub job_id: Uuid,
    pub provider_pubkey: String,
    pub output_hash: String,
    pub completed_at: String,
    pub payment_ref: Option<String>,
    pub signature: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReceiptError {
    #[error("output_hash does not match the output")]
    OutputHashMismatch,
    #[error("provider_pubkey: {0}")]
    PublicKey(signing::SignatureError),
    #[error("signature: {0}")]
    Signature(signing::SignatureError),
}

impl ReceiptBody {
    /// The receipt body for `output`, with the output hash computed.
    pub fn new(
        job_id: Uuid,
        provider_pubkey: String,
        output: &serde_json::Value,
        completed_at: String,
        payment_ref: Option<String>,
    ) -> Self {
        Self {
            job_id,
            provider_pubkey,
            output_hash: canonical::output_hash(output),
            completed_at,
            payment_ref,
        }
    }

    /// The exact bytes that are signed.
    pub fn signing_bytes(&self) -> Vec<u8> {
        canonical::to_vec(self)
    }

    pub fn sign(self, key: &signing::Keypair) -> Receipt {
        let signature = key.personal_sign(&self.signing_bytes());
        Receipt {
            job_id: self.job_id,
            provider_pubkey: self.provider_pubkey,
            output_hash: self.output_hash,
            completed_at: self.completed_at,
            payment_ref: self.payment_ref,
            signature,
        }
    }
}

impl Receipt {
    pub fn body(&self) -> ReceiptBody {
        ReceiptBody {
            job_id: self.job_id,
            provider_pubkey: self.provider_pubkey.clone(),
            output_hash: self.output_hash.clone(),
            completed_at: self.completed_at.clone(),
            payment_ref: self.payment_ref.clone(),
        }
    }

    /// Checks the output hash against `output` and the signature against
    /// `provider_pubkey`. Whether the key, job and payment are the expected
    /// ones is the caller's business.
    pub fn verify(&self, output: &serde_json::Value) -> Result<(), ReceiptError> {
        self.check_output_hash(output)?;
        let key =
            signing::parse_public_key(&self.provider_pubkey).map_err(ReceiptError::PublicKey)?;
        self.check_signature(&key)
    }

    /// [`Receipt::verify`] with `provider_pubkey` already parsed: a worker
    /// session parses its key once at the handshake, where parsing per
    /// receipt (decompressing the point: a square root in the field) cost
    /// about a twentieth of the check. `key` must be what `provider_pubkey`
    /// parses to; then the answer is `verify`'s.
    pub fn verify_with_key(
        &self,
        key: &signing::PublicKey,
        output: &serde_json::Value,
    ) -> Result<(), ReceiptError> {
        self.check_output_hash(output)?;
        self.check_signature(key)
    }

    fn check_output_hash(&self, output: &serde_json::Value) -> Result<(), ReceiptError> {
        if canonical::output_hash(output) != self.output_hash {
            return Err(ReceiptError::OutputHashMismatch);
        }
        Ok(())
    }

    fn check_signature(&self, key: &signing::PublicKey) -> Result<(), ReceiptError> {
        signing::verify_personal_sign(key, &self.body().signing_bytes(), &self.signature)
            .map_err(ReceiptError::Signature)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::rand_core::SeedableRng;
    use serde_json::json;

    fn signed(output: &serde_json::Value) -> (signing::Keypair, Receipt) {
        let key = signing::Keypair::generate(&mut rand_chacha::ChaCha20Rng::seed_from_u64(1));
        let body = ReceiptBody::new(
            Uuid::from_u128(42),
            key.public_key_hex(),
            output,
            "2026-11-21T10:00:00.000Z".into(),
            None,
        );
        (key.clone(), body.sign(&key))
    }

    #[test]
    fn signing_bytes_are_canonical_with_null_payment_ref() {
        let (_, r) = signed(&json!("hi"));
        let text = String::from_utf8(r.body().signing_bytes()).unwrap();
        assert!(text.starts_with(r#"{"completed_at":"2026-11-21T10:00:00.000Z","job_id":"00000000-0000-0000-0000-00000000002a","output_hash":"sha256:"#));
        assert!(text.contains(r#""payment_ref":null,"provider_pubkey":"0x"#));
        assert!(!text.contains("signature"));
    }

    #[test]
    fn verifies_and_detects_tampering() {
        let output = json!({"label": "spam"});
        let (_, r) = signed(&output);
        assert_eq!(r.verify(&output), Ok(()));
        assert_eq!(
            r.verify(&json!({"label": "ham"})),
            Err(ReceiptError::OutputHashMismatch)
        );
        let mut forged = r.clone();
        forged.payment_ref = Some("x402:0xabc".into());
        assert_eq!(
            forged.verify(&output),
            Err(ReceiptError::Signature(
                signing::SignatureError::WrongSigner
            ))
        );
        let other = signing::Keypair::generate(&mut rand_chacha::ChaCha20Rng::seed_from_u64(2));
        let mut stolen = r.clone();
        stolen.provider_pubkey = other.public_key_hex();
        assert!(stolen.verify(&output).is_err());
    }

    #[test]
    fn verify_with_the_parsed_key_answers_as_verify() {
        let output = json!({"label": "spam"});
        let (key, r) = signed(&output);
        let parsed = signing::parse_public_key(&key.public_key_hex()).unwrap();
        let mut forged = r.clone();
        forged.payment_ref = Some("x402:0xabc".into());
        let mut bad_signature = r.clone();
        bad_signature.signature.replace_range(2..4, "00");
        for (receipt, out) in [
            (&r, &output),
            (&r, &json!({"label": "ham"})),
            (&forged, &output),
            (&bad_signature, &output),
        ] {
            assert_eq!(
                receipt.verify_with_key(&parsed, out),
                receipt.verify(out),
                "{receipt:?}"
            );
        }
        assert_eq!(r.verify_with_key(&parsed, &output), Ok(()));
    }
}
