//! Why a payment was refused, as the x402 reason codes that facilitators and
//! clients already know (x402 v1 spec, section 9).

use std::fmt;

/// A refused payment. [`Reason::as_str`] is the wire code, sent as the
/// `error` of the 402 answer.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reason {
    InsufficientFunds,
    ValidAfter,
    ValidBefore,
    Value,
    Signature,
    RecipientMismatch,
    /// The `(chainId, asset, from, nonce)` already paid for something.
    NonceAlreadyUsed,
    InvalidNetwork,
    InvalidPayload,
    InvalidPaymentRequirements,
    InvalidScheme,
    UnsupportedScheme,
    InvalidX402Version,
    InvalidTransactionState,
    UnexpectedVerifyError,
    UnexpectedSettleError,
    /// A code we do not know, passed through from a facilitator.
    Other(String),
}

const CODES: &[(Reason, &str)] = &[
    (Reason::InsufficientFunds, "insufficient_funds"),
    (
        Reason::ValidAfter,
        "invalid_exact_evm_payload_authorization_valid_after",
    ),
    (
        Reason::ValidBefore,
        "invalid_exact_evm_payload_authorization_valid_before",
    ),
    (
        Reason::Value,
        "invalid_exact_evm_payload_authorization_value",
    ),
    (Reason::Signature, "invalid_exact_evm_payload_signature"),
    (
        Reason::RecipientMismatch,
        "invalid_exact_evm_payload_recipient_mismatch",
    ),
    // Not in the v1 list; the code @x402/evm 2.27 uses for a spent nonce.
    (
        Reason::NonceAlreadyUsed,
        "invalid_exact_evm_nonce_already_used",
    ),
    (Reason::InvalidNetwork, "invalid_network"),
    (Reason::InvalidPayload, "invalid_payload"),
    (
        Reason::InvalidPaymentRequirements,
        "invalid_payment_requirements",
    ),
    (Reason::InvalidScheme, "invalid_scheme"),
    (Reason::UnsupportedScheme, "unsupported_scheme"),
    (Reason::InvalidX402Version, "invalid_x402_version"),
    (Reason::InvalidTransactionState, "invalid_transaction_state"),
    (Reason::UnexpectedVerifyError, "unexpected_verify_error"),
    (Reason::UnexpectedSettleError, "unexpected_settle_error"),
];

impl Reason {
    pub fn as_str(&self) -> &str {
        if let Reason::Other(code) = self {
            return code;
        }
        CODES
            .iter()
            .find(|(r, _)| r == self)
            .map(|(_, code)| *code)
            .unwrap_or("unexpected_verify_error")
    }

    /// The reason for a wire code; unknown codes are kept as [`Reason::Other`].
    pub fn from_code(code: &str) -> Self {
        CODES
            .iter()
            .find(|(_, c)| *c == code)
            .map(|(r, _)| r.clone())
            .unwrap_or_else(|| Reason::Other(code.to_owned()))
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for (reason, code) in CODES {
            assert_eq!(reason.as_str(), *code);
            assert_eq!(Reason::from_code(code), *reason);
        }
        assert_eq!(Reason::from_code("weird").as_str(), "weird");
        assert_eq!(
            Reason::Signature.to_string(),
            "invalid_exact_evm_payload_signature"
        );
    }
}
