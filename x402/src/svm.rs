//! Payments on Solana (`solana:*`), which only a facilitator verifies. What
//! this service reads itself is the payment's identity, for replay
//! protection: two commits carrying one transaction must not both reach the
//! facilitator's `/settle`.
//!
//! x402's `exact` scheme on SVM sends `{ "transaction": <base64> }`: a
//! partially signed transaction that the facilitator completes as fee payer.
//! Its identity is the transaction's *message* (what every signature signs:
//! accounts, recent blockhash, instructions). The signature slots are not
//! part of it, because the fee payer's slot is empty or arbitrary until the
//! facilitator signs; and nothing outside the transaction is, because the
//! old identity (a hash of the whole payload) let one extra JSON field make
//! a second identity for the same transaction (issue 29, finding 8).

use crate::reason::Reason;
use crate::wire::decode_base64;
use serde::Deserialize;

/// CAIP-2 namespace of Solana networks.
pub const NAMESPACE: &str = "solana";

/// The largest transaction Solana accepts (its packet data size), in bytes.
pub const TRANSACTION_BYTES_MAX: usize = 1232;

/// Length of one ed25519 signature in a transaction's signature list.
const SIGNATURE_BYTES: usize = 64;

/// The `exact` SVM payload. Unknown fields are refused: the payload is
/// forwarded to the facilitator as sent, so anything we do not read must
/// not be there.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExactSvmPayload {
    transaction: String,
}

/// The signed message of the payload's transaction, the payment's identity.
pub fn transaction_message(payload: &serde_json::Value) -> Result<Vec<u8>, Reason> {
    let payload = ExactSvmPayload::deserialize(payload).map_err(|_| Reason::InvalidPayload)?;
    // Bound the text before decoding it: 4 base64 characters per 3 bytes.
    if payload.transaction.len() > TRANSACTION_BYTES_MAX.div_ceil(3) * 4 {
        return Err(Reason::InvalidPayload);
    }
    let bytes = decode_base64(payload.transaction.as_bytes()).ok_or(Reason::InvalidPayload)?;
    if bytes.len() > TRANSACTION_BYTES_MAX {
        return Err(Reason::InvalidPayload);
    }
    message_of(&bytes)
        .map(<[u8]>::to_vec)
        .ok_or(Reason::InvalidPayload)
}

/// The bytes after the signature list (a compact-u16 count, then 64 bytes
/// per signature): `None` unless there is at least one signature slot and a
/// non-empty message.
fn message_of(transaction: &[u8]) -> Option<&[u8]> {
    let (signatures, prefix_bytes) = solana_short_vec::decode_shortu16_len(transaction).ok()?;
    if signatures == 0 {
        return None;
    }
    let start = prefix_bytes.checked_add(signatures.checked_mul(SIGNATURE_BYTES)?)?;
    transaction.get(start..).filter(|m| !m.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;
    use serde_json::json;

    fn encode_base64(bytes: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    /// A transaction with `signatures` slots (each filled with `fill`) and `message`.
    fn transaction(signatures: u8, fill: u8, message: &[u8]) -> String {
        let mut bytes = vec![signatures];
        bytes.extend(std::iter::repeat_n(
            fill,
            usize::from(signatures) * SIGNATURE_BYTES,
        ));
        bytes.extend_from_slice(message);
        encode_base64(&bytes)
    }

    #[test]
    fn the_identity_is_the_message_whatever_the_signature_slots_hold() {
        let empty_slots = json!({ "transaction": transaction(2, 0, b"message") });
        let filled_slots = json!({ "transaction": transaction(2, 7, b"message") });
        let a = transaction_message(&empty_slots).unwrap();
        assert_eq!(a, b"message");
        assert_eq!(transaction_message(&filled_slots).unwrap(), a);
        let other = json!({ "transaction": transaction(2, 0, b"another") });
        assert_ne!(transaction_message(&other).unwrap(), a);
    }

    #[test]
    fn extra_fields_and_malformed_transactions_are_refused() {
        let tx = transaction(1, 0, b"message");
        for bad in [
            json!({ "transaction": tx, "memo": "x" }),
            json!({}),
            json!({ "transaction": 5 }),
            json!({ "transaction": "not base64!" }),
            // No signature slot, or no message after the slots.
            json!({ "transaction": transaction(0, 0, b"message") }),
            json!({ "transaction": transaction(1, 0, b"") }),
            // More slots announced than bytes present.
            json!({ "transaction": encode_base64(&[3, 0, 0]) }),
            json!({ "transaction": encode_base64(&vec![1; TRANSACTION_BYTES_MAX + 1]) }),
        ] {
            assert_eq!(
                transaction_message(&bad),
                Err(Reason::InvalidPayload),
                "{bad}"
            );
        }
    }
}
