//! The paying side: read a 402 answer, sign an EIP-3009 authorization for
//! one of its `exact` EVM requirements, and produce the payment header.

use crate::config::{eip155_chain_id, v1_network_chain_id};
use crate::evm::{Address, Bytes32, Eip712Domain, TransferWithAuthorization, U256};
use crate::wire::{
    decode_base64, encode_header, AssetDomain, AuthorizationWire, ExactEvmPayload,
    PaymentRequirementsV1, PaymentRequirementsV2, X402Version, PAYMENT_SIGNATURE, SCHEME_EXACT,
    X_PAYMENT,
};
use protocol::signing::Keypair;
use rand_core::RngCore;
use serde_json::Value;

/// How long before "now" the authorization becomes valid, so that a payee
/// whose clock runs a little behind still accepts it.
pub const VALID_AFTER_SLACK_SECONDS: u64 = 600;

/// Why no payment could be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignError {
    #[error("the 402 answer has neither a PAYMENT-REQUIRED header nor an x402 v1 body")]
    NoPaymentRequired,
    #[error("the 402 answer is malformed: {0}")]
    Malformed(String),
    #[error("no accepted requirement is scheme exact on an EVM network with an EIP-712 domain")]
    NoSupportedRequirement,
}

/// The payment requirements of a 402 answer, as the server sent them.
#[derive(Debug, Clone, PartialEq)]
pub struct PaymentRequired {
    pub version: X402Version,
    /// v2: the `resource` object, echoed in the payment.
    pub resource: Option<Value>,
    /// Raw entries, so the chosen one is echoed exactly in a v2 payment.
    pub accepts: Vec<Value>,
}

impl PaymentRequired {
    /// Reads a 402 answer the way the official client does: the v2
    /// `PAYMENT-REQUIRED` header if present, else a body with `x402Version: 1`.
    pub fn from_response(header: Option<&[u8]>, body: Option<&[u8]>) -> Result<Self, SignError> {
        if let Some(h) = header {
            if h.len() > crate::decode::MAX_HEADER_BYTES {
                return Err(SignError::Malformed("PAYMENT-REQUIRED too large".into()));
            }
            let json = decode_base64(h.trim_ascii())
                .ok_or_else(|| SignError::Malformed("PAYMENT-REQUIRED is not base64".into()))?;
            let v: Value =
                serde_json::from_slice(&json).map_err(|e| SignError::Malformed(e.to_string()))?;
            return Self::from_json(&v, X402Version::V2);
        }
        let body = body.ok_or(SignError::NoPaymentRequired)?;
        let v: Value = serde_json::from_slice(body).map_err(|_| SignError::NoPaymentRequired)?;
        if v.get("x402Version").and_then(Value::as_u64) != Some(1) {
            return Err(SignError::NoPaymentRequired);
        }
        Self::from_json(&v, X402Version::V1)
    }

    fn from_json(v: &Value, version: X402Version) -> Result<Self, SignError> {
        if v.get("x402Version").and_then(Value::as_u64) != Some(u64::from(version.number())) {
            return Err(SignError::Malformed("unexpected x402Version".into()));
        }
        let accepts = v
            .get("accepts")
            .and_then(Value::as_array)
            .ok_or_else(|| SignError::Malformed("accepts missing".into()))?
            .clone();
        Ok(Self {
            version,
            resource: v.get("resource").cloned(),
            accepts,
        })
    }
}

/// A payment header to add to the retried request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaymentHeader {
    /// `X-PAYMENT` (v1) or `PAYMENT-SIGNATURE` (v2).
    pub name: &'static str,
    pub value: String,
}

/// Something that can pay a 402 answer.
pub trait PaymentSigner {
    /// The paying address.
    fn address(&self) -> Address;

    /// Signs a payment for the first requirement it supports.
    /// `now_seconds` is Unix time; the nonce is drawn from `rng`.
    fn pay(
        &self,
        required: &PaymentRequired,
        now_seconds: u64,
        rng: &mut dyn RngCore,
    ) -> Result<PaymentHeader, SignError>;
}

/// Pays from a local secp256k1 key (an EOA), `exact` scheme, EIP-3009.
#[derive(Debug, Clone)]
pub struct LocalEvmSigner {
    key: Keypair,
    address: Address,
}

/// The terms of one requirement, whichever version it came in.
struct Terms {
    chain_id: u64,
    amount: U256,
    asset: Address,
    pay_to: Address,
    max_timeout_seconds: u64,
    domain: AssetDomain,
}

impl LocalEvmSigner {
    pub fn new(key: Keypair) -> Self {
        let address = key
            .address()
            .parse()
            .expect("a key's address is 20 bytes of hex");
        Self { key, address }
    }

    /// From 32 secret bytes as hex (with or without `0x`).
    pub fn from_secret_hex(secret: &str) -> Option<Self> {
        Keypair::from_secret_hex(secret).map(Self::new)
    }

    /// Signs an authorization under `domain`: `0x` r||s||v, v = 27/28.
    pub fn sign_authorization(
        &self,
        domain: &Eip712Domain<'_>,
        auth: &TransferWithAuthorization,
    ) -> String {
        self.key.sign_prehash(&auth.digest(domain))
    }

    fn terms(version: X402Version, entry: &Value) -> Option<Terms> {
        let (chain_id, amount, asset, pay_to, max_timeout_seconds, extra) = match version {
            X402Version::V2 => {
                let r: PaymentRequirementsV2 = serde_json::from_value(entry.clone()).ok()?;
                if r.scheme != SCHEME_EXACT {
                    return None;
                }
                let chain = eip155_chain_id(&r.network)?;
                (
                    chain,
                    r.amount,
                    r.asset,
                    r.pay_to,
                    r.max_timeout_seconds,
                    r.extra,
                )
            }
            X402Version::V1 => {
                let r: PaymentRequirementsV1 = serde_json::from_value(entry.clone()).ok()?;
                if r.scheme != SCHEME_EXACT {
                    return None;
                }
                let chain =
                    v1_network_chain_id(&r.network).or_else(|| eip155_chain_id(&r.network))?;
                (
                    chain,
                    r.max_amount_required,
                    r.asset,
                    r.pay_to,
                    r.max_timeout_seconds,
                    r.extra,
                )
            }
        };
        Some(Terms {
            chain_id,
            amount: amount.parse().ok()?,
            asset: asset.parse().ok()?,
            pay_to: pay_to.parse().ok()?,
            max_timeout_seconds,
            domain: serde_json::from_value(extra?).ok()?,
        })
    }
}

impl PaymentSigner for LocalEvmSigner {
    fn address(&self) -> Address {
        self.address
    }

    fn pay(
        &self,
        required: &PaymentRequired,
        now_seconds: u64,
        rng: &mut dyn RngCore,
    ) -> Result<PaymentHeader, SignError> {
        let (entry, terms) = required
            .accepts
            .iter()
            .find_map(|e| Self::terms(required.version, e).map(|t| (e, t)))
            .ok_or(SignError::NoSupportedRequirement)?;
        let mut nonce = [0u8; 32];
        rng.fill_bytes(&mut nonce);
        let auth = TransferWithAuthorization {
            from: self.address,
            to: terms.pay_to,
            value: terms.amount,
            valid_after: U256::from_u64(now_seconds.saturating_sub(VALID_AFTER_SLACK_SECONDS)),
            valid_before: U256::from_u64(now_seconds.saturating_add(terms.max_timeout_seconds)),
            nonce: Bytes32(nonce),
        };
        let domain = Eip712Domain {
            name: &terms.domain.name,
            version: &terms.domain.version,
            chain_id: terms.chain_id,
            verifying_contract: terms.asset,
        };
        let exact = ExactEvmPayload {
            signature: self.sign_authorization(&domain, &auth),
            authorization: AuthorizationWire {
                from: auth.from.to_string(),
                to: auth.to.to_string(),
                value: auth.value.to_string(),
                valid_after: auth.valid_after.to_string(),
                valid_before: auth.valid_before.to_string(),
                nonce: auth.nonce.to_string(),
            },
        };
        let payload =
            serde_json::to_value(exact).map_err(|e| SignError::Malformed(e.to_string()))?;
        Ok(match required.version {
            X402Version::V2 => {
                let mut v = serde_json::json!({
                    "x402Version": 2,
                    "payload": payload,
                    "accepted": entry,
                });
                if let Some(resource) = &required.resource {
                    v["resource"] = resource.clone();
                }
                PaymentHeader {
                    name: PAYMENT_SIGNATURE,
                    value: encode_header(&v),
                }
            }
            X402Version::V1 => PaymentHeader {
                name: X_PAYMENT,
                value: encode_header(&serde_json::json!({
                    "x402Version": 1,
                    "scheme": SCHEME_EXACT,
                    "network": entry.get("network").cloned().unwrap_or(Value::Null),
                    "payload": payload,
                })),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::challenge::PaymentOffer;
    use crate::config::PaymentConfig;
    use protocol::money::Price;
    use rand_chacha::rand_core::SeedableRng;

    const ANVIL0: &str = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";

    fn required() -> PaymentRequired {
        let offer = PaymentOffer::for_url(
            PaymentConfig::base_sepolia_usdc(
                "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
                    .parse()
                    .unwrap(),
            ),
            Price::from_micros(1_000_000),
            "http://h/r",
            "d",
        );
        let h = offer.payment_required().payment_required_header;
        PaymentRequired::from_response(Some(h.as_bytes()), Some(b"{}")).unwrap()
    }

    fn decode(h: &PaymentHeader) -> Value {
        serde_json::from_slice(&decode_base64(h.value.as_bytes()).unwrap()).unwrap()
    }

    #[test]
    fn v2_payload_has_the_official_shape() {
        let s = LocalEvmSigner::from_secret_hex(ANVIL0).unwrap();
        let req = required();
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(1);
        let h = s.pay(&req, 1_000_000, &mut rng).unwrap();
        assert_eq!(h.name, "PAYMENT-SIGNATURE");
        let v = decode(&h);
        assert_eq!(v["x402Version"], 2);
        assert_eq!(v["accepted"], req.accepts[0]);
        assert_eq!(v["resource"], req.resource.clone().unwrap());
        let a = &v["payload"]["authorization"];
        assert_eq!(a["from"], "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266");
        assert_eq!(a["to"], "0x70997970C51812dc3A010C7d01b50e0d17dc79C8");
        assert_eq!(a["value"], "1000000");
        assert_eq!(a["validAfter"], "999400");
        assert_eq!(a["validBefore"], "1000300");
        assert_eq!(a["nonce"].as_str().unwrap().len(), 66);
        assert_eq!(v["payload"]["signature"].as_str().unwrap().len(), 132);
    }

    #[test]
    fn same_seed_same_header_and_the_signing_vector() {
        let s = LocalEvmSigner::from_secret_hex(ANVIL0).unwrap();
        let pay = |seed| {
            let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(seed);
            s.pay(&required(), 5, &mut rng).unwrap()
        };
        assert_eq!(pay(9), pay(9));
        assert_ne!(pay(9), pay(10));

        // Issue 3's signing vector through the signer's own entry point.
        let domain = Eip712Domain {
            name: "USDC",
            version: "2",
            chain_id: 84532,
            verifying_contract: crate::config::BASE_SEPOLIA_USDC.parse().unwrap(),
        };
        let auth = TransferWithAuthorization {
            from: s.address(),
            to: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
                .parse()
                .unwrap(),
            value: U256::from_u64(1_000_000),
            valid_after: U256::from_u64(0),
            valid_before: U256::from_u64(9_999_999_999),
            nonce: "0x0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f20"
                .parse()
                .unwrap(),
        };
        assert_eq!(
            s.sign_authorization(&domain, &auth),
            "0x6d92aa87ba7a3e985953a3189173285bd9e9556353fed62d0ce84856461dba9d72f88dd1c39c7d88af0b6a11912dd801541288c26879b8f801180ddd928cd20c1c"
        );
    }

    #[test]
    fn refuses_what_it_cannot_pay() {
        let s = LocalEvmSigner::from_secret_hex(ANVIL0).unwrap();
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(1);
        let mut req = required();
        req.accepts[0]["network"] = serde_json::json!("solana:mainnet");
        assert_eq!(
            s.pay(&req, 5, &mut rng),
            Err(SignError::NoSupportedRequirement)
        );
        let mut req = required();
        req.accepts[0]["extra"] = Value::Null;
        assert_eq!(
            s.pay(&req, 5, &mut rng),
            Err(SignError::NoSupportedRequirement)
        );
        assert_eq!(
            PaymentRequired::from_response(None, Some(b"{\"error\":\"x\"}")),
            Err(SignError::NoPaymentRequired)
        );
        assert!(PaymentRequired::from_response(Some(b"!!"), None).is_err());
    }
}
