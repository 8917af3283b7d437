//! The 402 answer: what we ask for one job, as the JSON body (spec section
//! 4.3 plus the x402 v1 fields) and as the v2 `PAYMENT-REQUIRED` header.

use crate::config::PaymentConfig;
use crate::reason::Reason;
use crate::wire::{
    encode_header, AcceptsEntry, AssetDomain, PaymentRequiredBody, PaymentRequiredV2,
    PaymentRequirementsV1, PaymentRequirementsV2, ResourceInfo, X402Version, SCHEME_EXACT,
};
use protocol::money::Price;

/// The `error` of a 402 answer when no payment was sent.
pub const PAYMENT_HEADER_REQUIRED: &str = "X-PAYMENT header is required";

/// What one request must pay: built per request from the deployment's
/// config, the job's price and the URL being paid for. The same offer is
/// used to answer 402, to verify the payment and to settle it, so all three
/// agree on the terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaymentOffer {
    pub config: PaymentConfig,
    pub price: Price,
    pub resource: ResourceInfo,
}

/// A ready 402 answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaymentRequiredAnswer {
    /// The JSON body.
    pub body: PaymentRequiredBody,
    /// The value of the [`crate::wire::PAYMENT_REQUIRED`] header.
    pub payment_required_header: String,
}

impl PaymentOffer {
    pub fn new(config: PaymentConfig, price: Price, resource: ResourceInfo) -> Self {
        Self {
            config,
            price,
            resource,
        }
    }

    /// A JSON resource at `url`.
    pub fn for_url(
        config: PaymentConfig,
        price: Price,
        url: impl Into<String>,
        description: impl Into<String>,
    ) -> Self {
        Self::new(
            config,
            price,
            ResourceInfo {
                url: url.into(),
                description: description.into(),
                mime_type: "application/json".to_owned(),
            },
        )
    }

    /// Atomic units: USDC has 6 decimals, like [`Price`]'s micro-dollars.
    pub fn amount(&self) -> String {
        self.price.micros().to_string()
    }

    fn extra(&self) -> AssetDomain {
        AssetDomain {
            name: self.config.asset_name.clone(),
            version: self.config.asset_version.clone(),
        }
    }

    fn extra_json(&self) -> serde_json::Value {
        serde_json::to_value(self.extra()).unwrap_or(serde_json::Value::Null)
    }

    pub fn requirements_v2(&self) -> PaymentRequirementsV2 {
        PaymentRequirementsV2 {
            scheme: SCHEME_EXACT.to_owned(),
            network: self.config.network.clone(),
            amount: self.amount(),
            asset: self.config.asset.to_string(),
            pay_to: self.config.pay_to.to_string(),
            max_timeout_seconds: self.config.max_timeout_seconds,
            extra: Some(self.extra_json()),
        }
    }

    pub fn requirements_v1(&self) -> PaymentRequirementsV1 {
        PaymentRequirementsV1 {
            scheme: SCHEME_EXACT.to_owned(),
            network: self.config.v1_network().to_owned(),
            max_amount_required: self.amount(),
            resource: self.resource.url.clone(),
            description: self.resource.description.clone(),
            mime_type: self.resource.mime_type.clone(),
            pay_to: self.config.pay_to.to_string(),
            max_timeout_seconds: self.config.max_timeout_seconds,
            asset: self.config.asset.to_string(),
            extra: Some(self.extra_json()),
        }
    }

    /// The requirements in the shape of `version`, as JSON for a facilitator.
    pub fn requirements_json(&self, version: X402Version) -> serde_json::Value {
        let v = match version {
            X402Version::V1 => serde_json::to_value(self.requirements_v1()),
            X402Version::V2 => serde_json::to_value(self.requirements_v2()),
        };
        v.unwrap_or(serde_json::Value::Null)
    }

    /// The body's `accepts` entry. Its `network` is the v1 name
    /// (`base-sepolia`) because v1 clients read the body; v2 clients read
    /// the CAIP-2 network from the header.
    pub fn accepts_entry(&self) -> AcceptsEntry {
        AcceptsEntry {
            x402_version: X402Version::V1.number(),
            scheme: SCHEME_EXACT.to_owned(),
            price: self.price.to_string(),
            network: self.config.v1_network().to_owned(),
            pay_to: self.config.pay_to.to_string(),
            asset: self.config.asset.to_string(),
            max_amount_required: self.amount(),
            amount: self.amount(),
            resource: self.resource.url.clone(),
            description: self.resource.description.clone(),
            mime_type: self.resource.mime_type.clone(),
            max_timeout_seconds: self.config.max_timeout_seconds,
            extra: self.extra(),
        }
    }

    /// The v2 PaymentRequired object.
    pub fn payment_required_v2(&self, error: &str) -> PaymentRequiredV2 {
        PaymentRequiredV2 {
            x402_version: X402Version::V2.number(),
            error: Some(error.to_owned()),
            resource: self.resource.clone(),
            accepts: vec![self.requirements_v2()],
        }
    }

    /// The 402 answer when no payment was sent.
    pub fn payment_required(&self) -> PaymentRequiredAnswer {
        self.answer(PAYMENT_HEADER_REQUIRED)
    }

    /// The 402 answer for a refused payment: `error` is the reason code.
    pub fn payment_refused(&self, reason: &Reason) -> PaymentRequiredAnswer {
        self.answer(reason.as_str())
    }

    fn answer(&self, error: &str) -> PaymentRequiredAnswer {
        PaymentRequiredAnswer {
            body: PaymentRequiredBody {
                x402_version: X402Version::V1.number(),
                error: error.to_owned(),
                accepts: vec![self.accepts_entry()],
            },
            payment_required_header: encode_header(&self.payment_required_v2(error)),
        }
    }
}

#[cfg(feature = "axum")]
impl axum::response::IntoResponse for PaymentRequiredAnswer {
    /// 402 with the JSON body and the `PAYMENT-REQUIRED` header.
    fn into_response(self) -> axum::response::Response {
        let mut resp = (http::StatusCode::PAYMENT_REQUIRED, axum::Json(self.body)).into_response();
        // Base64 is always a valid header value.
        if let (Ok(n), Ok(v)) = (
            http::HeaderName::from_bytes(crate::wire::PAYMENT_REQUIRED.as_bytes()),
            http::HeaderValue::from_str(&self.payment_required_header),
        ) {
            resp.headers_mut().insert(n, v);
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::decode_base64;
    use serde_json::json;

    fn offer() -> PaymentOffer {
        let config = PaymentConfig::base_sepolia_usdc(
            "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"
                .parse()
                .unwrap(),
        );
        PaymentOffer::for_url(
            config,
            Price::from_micros(10_000),
            "http://host/v1/jobs/commit/fast",
            "FAST LLM_INFER job",
        )
    }

    #[test]
    fn body_has_spec_and_x402_fields() {
        let body = serde_json::to_value(offer().payment_required().body).unwrap();
        assert_eq!(
            body,
            json!({
                "x402Version": 1,
                "error": "X-PAYMENT header is required",
                "accepts": [{
                    "x402Version": 1,
                    "scheme": "exact",
                    "price": "$0.010",
                    "network": "base-sepolia",
                    "payTo": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
                    "asset": "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
                    "maxAmountRequired": "10000",
                    "amount": "10000",
                    "resource": "http://host/v1/jobs/commit/fast",
                    "description": "FAST LLM_INFER job",
                    "mimeType": "application/json",
                    "maxTimeoutSeconds": 300,
                    "extra": {"name": "USDC", "version": "2"}
                }]
            })
        );
    }

    #[test]
    fn header_is_v2_payment_required() {
        let h = offer().payment_required().payment_required_header;
        let v: serde_json::Value =
            serde_json::from_slice(&decode_base64(h.as_bytes()).unwrap()).unwrap();
        assert_eq!(
            v,
            json!({
                "x402Version": 2,
                "error": "X-PAYMENT header is required",
                "resource": {
                    "url": "http://host/v1/jobs/commit/fast",
                    "description": "FAST LLM_INFER job",
                    "mimeType": "application/json"
                },
                "accepts": [{
                    "scheme": "exact",
                    "network": "eip155:84532",
                    "amount": "10000",
                    "asset": "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
                    "payTo": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
                    "maxTimeoutSeconds": 300,
                    "extra": {"name": "USDC", "version": "2"}
                }]
            })
        );
    }

    #[test]
    fn refusal_carries_the_reason() {
        let a = offer().payment_refused(&Reason::Signature);
        assert_eq!(a.body.error, "invalid_exact_evm_payload_signature");
        let v: PaymentRequiredV2 =
            serde_json::from_slice(&decode_base64(a.payment_required_header.as_bytes()).unwrap())
                .unwrap();
        assert_eq!(
            v.error.as_deref(),
            Some("invalid_exact_evm_payload_signature")
        );
    }
}
