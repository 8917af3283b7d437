//! Reading a payment from the request headers: `X-PAYMENT` (v1) or
//! `PAYMENT-SIGNATURE` (v2), base64 of JSON. Hostile input: bounded, and
//! every failure is a typed error, never a panic.

use crate::reason::Reason;
use crate::wire::{
    decode_base64, PaymentPayloadV1, PaymentPayloadV2, PaymentRequirementsV2, X402Version,
    PAYMENT_SIGNATURE, X_PAYMENT,
};
use http::HeaderMap;

/// Largest header value accepted. A real EVM payment is about 1.5 KiB of
/// base64; the bound keeps a hostile header from costing much to parse.
pub const MAX_HEADER_BYTES: usize = 8 * 1024;

/// Why a payment header could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("payment header is larger than {MAX_HEADER_BYTES} bytes")]
    TooLarge,
    #[error("both X-PAYMENT and PAYMENT-SIGNATURE were sent")]
    BothHeaders,
    #[error("a payment header was sent more than once")]
    Repeated,
    #[error("payment header is not base64")]
    Base64,
    #[error("payment header is not a JSON payment: {0}")]
    Json(String),
    #[error("x402Version {found} does not belong in the {header} header")]
    Version { header: &'static str, found: u64 },
}

impl DecodeError {
    /// The reason code to answer with.
    pub fn reason(&self) -> Reason {
        match self {
            DecodeError::Version { .. } => Reason::InvalidX402Version,
            _ => Reason::InvalidPayload,
        }
    }
}

/// A payment as sent, before any check of its content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedPayment {
    pub version: X402Version,
    /// v1: the top-level `scheme`; v2: `accepted.scheme`.
    pub scheme: String,
    /// v1: the top-level `network` (a v1 name); v2: `accepted.network` (CAIP-2).
    pub network: String,
    /// v2 only: the requirements the client says it accepted.
    pub accepted: Option<PaymentRequirementsV2>,
    /// The scheme-specific payload (for `exact` on EVM: authorization and signature).
    pub payload: serde_json::Value,
    /// The whole decoded JSON, forwarded as is to a facilitator.
    pub raw: serde_json::Value,
}

/// The payment of a request, `Ok(None)` when it carries none.
pub fn payment_from_headers(headers: &HeaderMap) -> Result<Option<DecodedPayment>, DecodeError> {
    let single = |name: &str| -> Result<Option<&[u8]>, DecodeError> {
        let mut values = headers.get_all(name).iter();
        let first = values.next();
        if values.next().is_some() {
            return Err(DecodeError::Repeated);
        }
        Ok(first.map(|v| v.as_bytes()))
    };
    match (single(X_PAYMENT)?, single(PAYMENT_SIGNATURE)?) {
        (None, None) => Ok(None),
        (Some(_), Some(_)) => Err(DecodeError::BothHeaders),
        (Some(v1), None) => decode_payment_header(X402Version::V1, v1).map(Some),
        (None, Some(v2)) => decode_payment_header(X402Version::V2, v2).map(Some),
    }
}

/// Decodes the value of `X-PAYMENT` (`V1`) or `PAYMENT-SIGNATURE` (`V2`).
pub fn decode_payment_header(
    header_version: X402Version,
    value: &[u8],
) -> Result<DecodedPayment, DecodeError> {
    if value.len() > MAX_HEADER_BYTES {
        return Err(DecodeError::TooLarge);
    }
    let json = decode_base64(value.trim_ascii()).ok_or(DecodeError::Base64)?;
    let raw: serde_json::Value =
        serde_json::from_slice(&json).map_err(|e| DecodeError::Json(e.to_string()))?;
    let (header, expected) = match header_version {
        X402Version::V1 => (X_PAYMENT, 1),
        X402Version::V2 => (PAYMENT_SIGNATURE, 2),
    };
    let found = raw
        .get("x402Version")
        .and_then(|v| v.as_u64())
        .ok_or_else(|| DecodeError::Json("x402Version missing".to_owned()))?;
    if found != expected {
        return Err(DecodeError::Version { header, found });
    }
    let json_err = |e: serde_json::Error| DecodeError::Json(e.to_string());
    Ok(match header_version {
        X402Version::V1 => {
            let p: PaymentPayloadV1 = serde_json::from_value(raw.clone()).map_err(json_err)?;
            DecodedPayment {
                version: X402Version::V1,
                scheme: p.scheme,
                network: p.network,
                accepted: None,
                payload: p.payload,
                raw,
            }
        }
        X402Version::V2 => {
            let p: PaymentPayloadV2 = serde_json::from_value(raw.clone()).map_err(json_err)?;
            DecodedPayment {
                version: X402Version::V2,
                scheme: p.accepted.scheme.clone(),
                network: p.accepted.network.clone(),
                accepted: Some(p.accepted),
                payload: p.payload,
                raw,
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::STANDARD;
    use base64::Engine;
    use serde_json::json;

    fn hn(name: &str) -> http::HeaderName {
        http::HeaderName::from_bytes(name.as_bytes()).unwrap()
    }

    fn b64(v: &serde_json::Value) -> String {
        STANDARD.encode(serde_json::to_vec(v).unwrap())
    }

    fn v2_json() -> serde_json::Value {
        json!({
            "x402Version": 2,
            "payload": {"authorization": {}, "signature": "0x"},
            "resource": {"url": "http://h/x", "description": "", "mimeType": "application/json"},
            "accepted": {"scheme": "exact", "network": "eip155:84532", "amount": "10000",
                         "asset": "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
                         "payTo": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
                         "maxTimeoutSeconds": 300, "extra": {"name": "USDC", "version": "2"}}
        })
    }

    #[test]
    fn no_header_is_no_payment() {
        assert_eq!(payment_from_headers(&HeaderMap::new()), Ok(None));
    }

    #[test]
    fn decodes_v1_and_v2() {
        let mut h = HeaderMap::new();
        let v1 =
            json!({"x402Version": 1, "scheme": "exact", "network": "base-sepolia", "payload": {}});
        h.insert(hn(X_PAYMENT), b64(&v1).parse().unwrap());
        let p = payment_from_headers(&h).unwrap().unwrap();
        assert_eq!(
            (p.version, p.scheme.as_str(), p.network.as_str()),
            (X402Version::V1, "exact", "base-sepolia")
        );

        let mut h = HeaderMap::new();
        h.insert(hn(PAYMENT_SIGNATURE), b64(&v2_json()).parse().unwrap());
        let p = payment_from_headers(&h).unwrap().unwrap();
        assert_eq!(
            (p.version, p.network.as_str()),
            (X402Version::V2, "eip155:84532")
        );
        assert_eq!(p.raw, v2_json());
    }

    #[test]
    fn refuses_bad_input() {
        let v2 = b64(&v2_json());
        let d = |ver, s: &[u8]| decode_payment_header(ver, s);
        assert_eq!(
            d(X402Version::V2, &vec![b'A'; MAX_HEADER_BYTES + 4]),
            Err(DecodeError::TooLarge)
        );
        assert_eq!(d(X402Version::V2, b"%%%"), Err(DecodeError::Base64));
        assert!(matches!(
            d(X402Version::V2, STANDARD.encode("nope").as_bytes()),
            Err(DecodeError::Json(_))
        ));
        assert!(matches!(
            d(X402Version::V2, b64(&json!({"x402Version": 2})).as_bytes()),
            Err(DecodeError::Json(_))
        ));
        let e = d(X402Version::V1, v2.as_bytes()).unwrap_err();
        assert_eq!(
            e,
            DecodeError::Version {
                header: X_PAYMENT,
                found: 2
            }
        );
        assert_eq!(e.reason(), Reason::InvalidX402Version);
        assert_eq!(
            d(X402Version::V2, b64(&json!({"x402Version": 3})).as_bytes())
                .unwrap_err()
                .reason(),
            Reason::InvalidX402Version
        );

        let mut h = HeaderMap::new();
        h.insert(hn(PAYMENT_SIGNATURE), v2.parse().unwrap());
        h.insert(hn(X_PAYMENT), v2.parse().unwrap());
        assert_eq!(payment_from_headers(&h), Err(DecodeError::BothHeaders));
        let mut h = HeaderMap::new();
        h.append(hn(PAYMENT_SIGNATURE), v2.parse().unwrap());
        h.append(hn(PAYMENT_SIGNATURE), v2.parse().unwrap());
        assert_eq!(payment_from_headers(&h), Err(DecodeError::Repeated));
    }

    #[test]
    fn never_panics_on_junk() {
        // A cheap deterministic fuzz: byte soup, truncations and mutations of a real header.
        let v2 = b64(&v2_json()).into_bytes();
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for i in 0..2000 {
            let mut input = v2.clone();
            match i % 3 {
                0 => input.truncate((next() as usize) % v2.len()),
                1 => {
                    let at = (next() as usize) % v2.len();
                    input[at] = next() as u8;
                }
                _ => input = (0..(next() % 64)).map(|_| next() as u8).collect(),
            }
            let _ = decode_payment_header(X402Version::V2, &input);
            let _ = decode_payment_header(X402Version::V1, &input);
        }
    }
}
