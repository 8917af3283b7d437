//! JSON shapes of the x402 protocol (v1 and v2) and the header names and
//! base64 encoding that carry them.
//!
//! Amounts, times and addresses stay strings here, exactly as sent; they are
//! parsed into [`crate::evm`] values only where they are checked.

use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD};
use base64::engine::DecodePaddingMode;
use base64::Engine;
use serde::{Deserialize, Serialize};

/// Request header of an x402 v1 payment.
pub const X_PAYMENT: &str = "X-PAYMENT";
/// Request header of an x402 v2 payment.
pub const PAYMENT_SIGNATURE: &str = "PAYMENT-SIGNATURE";
/// Response header of a v2 402 answer.
pub const PAYMENT_REQUIRED: &str = "PAYMENT-REQUIRED";
/// Response header of a settled v2 payment.
pub const PAYMENT_RESPONSE: &str = "PAYMENT-RESPONSE";
/// Response header of a settled v1 payment.
pub const X_PAYMENT_RESPONSE: &str = "X-PAYMENT-RESPONSE";

/// The only scheme this crate verifies offline.
pub const SCHEME_EXACT: &str = "exact";

/// Protocol version of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum X402Version {
    V1 = 1,
    V2 = 2,
}

impl X402Version {
    pub fn number(self) -> u8 {
        self as u8
    }
}

/// `extra` of an EVM `exact` requirement: the asset's EIP-712 domain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AssetDomain {
    pub name: String,
    pub version: String,
}

/// The v2 `resource` object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceInfo {
    pub url: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub mime_type: String,
}

/// One v2 `accepts` entry (and the `accepted` echo in a v2 payment).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentRequirementsV2 {
    pub scheme: String,
    /// CAIP-2.
    pub network: String,
    /// Atomic units of the asset, decimal.
    pub amount: String,
    pub asset: String,
    pub pay_to: String,
    pub max_timeout_seconds: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<serde_json::Value>,
}

/// The v2 PaymentRequired object (the `PAYMENT-REQUIRED` header, decoded).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentRequiredV2 {
    pub x402_version: u8,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub resource: ResourceInfo,
    pub accepts: Vec<PaymentRequirementsV2>,
}

/// One v1 `accepts` entry, as the facilitator's v1 API expects it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentRequirementsV1 {
    pub scheme: String,
    /// v1 network name (`base-sepolia`).
    pub network: String,
    pub max_amount_required: String,
    pub resource: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub mime_type: String,
    pub pay_to: String,
    pub max_timeout_seconds: u64,
    pub asset: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<serde_json::Value>,
}

/// One `accepts` entry of the 402 body: the spec's fields (`price`) plus
/// the x402 v1 fields and the v2 `amount`, so that both our own router and
/// stock x402 clients understand it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AcceptsEntry {
    pub x402_version: u8,
    pub scheme: String,
    /// `$0.010`.
    pub price: String,
    pub network: String,
    pub pay_to: String,
    pub asset: String,
    pub max_amount_required: String,
    pub amount: String,
    pub resource: String,
    pub description: String,
    pub mime_type: String,
    pub max_timeout_seconds: u64,
    pub extra: AssetDomain,
}

/// The JSON body of a 402 answer (x402 v1 shape, spec section 4.3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentRequiredBody {
    pub x402_version: u8,
    pub error: String,
    pub accepts: Vec<AcceptsEntry>,
}

/// The EVM `exact` payload: an EIP-3009 authorization and its signature.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExactEvmPayload {
    pub signature: String,
    pub authorization: AuthorizationWire,
}

/// An EIP-3009 authorization as sent: every integer a decimal string.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuthorizationWire {
    pub from: String,
    pub to: String,
    pub value: String,
    pub valid_after: String,
    pub valid_before: String,
    pub nonce: String,
}

/// The x402 v1 payment (`X-PAYMENT`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentPayloadV1 {
    pub x402_version: u8,
    pub scheme: String,
    pub network: String,
    pub payload: serde_json::Value,
}

/// The x402 v2 payment (`PAYMENT-SIGNATURE`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentPayloadV2 {
    pub x402_version: u8,
    pub payload: serde_json::Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<ResourceInfo>,
    pub accepted: PaymentRequirementsV2,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<serde_json::Value>,
}

/// A facilitator's `/settle` answer; base64 of it is the `PAYMENT-RESPONSE` header.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SettleResponse {
    pub success: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payer: Option<String>,
    #[serde(default)]
    pub transaction: String,
    #[serde(default)]
    pub network: String,
}

/// A facilitator's `/verify` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VerifyResponse {
    pub is_valid: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalid_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payer: Option<String>,
}

/// One entry of a facilitator's `/supported` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SupportedKind {
    pub x402_version: u8,
    pub scheme: String,
    pub network: String,
}

/// A facilitator's `/supported` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SupportedResponse {
    pub kinds: Vec<SupportedKind>,
}

/// Lenient on padding (some clients strip it), strict on the alphabet.
const DECODER: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Standard, padded base64 of the UTF-8 JSON of `value`.
pub fn encode_header<T: Serialize>(value: &T) -> String {
    // Serialising these plain structs cannot fail (no maps with non-string keys).
    let json = serde_json::to_vec(value).unwrap_or_default();
    STANDARD.encode(json)
}

/// Base64 (standard alphabet, padding optional) to bytes.
pub fn decode_base64(text: &[u8]) -> Option<Vec<u8>> {
    DECODER.decode(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_is_standard_padded_and_utf8() {
        let v = AssetDomain {
            name: "USDC ü".into(),
            version: "2".into(),
        };
        let h = encode_header(&v);
        assert!(h.ends_with('='), "{h}");
        let back: AssetDomain =
            serde_json::from_slice(&decode_base64(h.as_bytes()).unwrap()).unwrap();
        assert_eq!(back, v);
        assert!(decode_base64(h.trim_end_matches('=').as_bytes()).is_some());
        assert!(decode_base64(b"a-b_").is_none());
    }
}
