//! Offline verification of scheme `exact` on `eip155:*`: the EIP-3009
//! authorization must be signed by its `from` under *our* asset's EIP-712
//! domain, pay us the price, and be valid now.
//!
//! This proves the payer authorised the transfer; it does not prove the
//! payer has the funds or that the nonce is unused on chain. Replay within
//! this service is the [`crate::replay`] store's job.

use crate::challenge::PaymentOffer;
use crate::decode::DecodedPayment;
use crate::evm::{
    recover_address, Address, Bytes32, Eip712Domain, TransferWithAuthorization, U256,
};
use crate::reason::Reason;
use crate::replay::NonceKey;
use crate::wire::{ExactEvmPayload, X402Version, SCHEME_EXACT};

/// An authorization must stay valid this long after we accept it, so that
/// settlement can still land before `validBefore` (the official facilitator
/// uses the same margin).
pub const VALID_BEFORE_MARGIN_SECONDS: u64 = 6;

/// How far a payer's clock may run ahead of ours: `validBefore` may lie at
/// most `maxTimeoutSeconds` plus this far in the future. Without an upper
/// bound an authorization valid until 2100 was accepted and its nonce row
/// was never purged (issue 29, finding 6); official clients sign
/// `validBefore = now + maxTimeoutSeconds`.
pub const CLOCK_ALLOWANCE_SECONDS: u64 = 60;

/// A payment whose signature and terms checked out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedPayment {
    pub version: X402Version,
    pub chain_id: u64,
    pub asset: Address,
    pub from: Address,
    pub to: Address,
    pub value: U256,
    pub nonce: Bytes32,
    pub valid_after: u64,
    pub valid_before: u64,
}

impl VerifiedPayment {
    /// The key under which this payment is remembered against replay.
    pub fn nonce_key(&self) -> NonceKey {
        NonceKey {
            chain_id: self.chain_id,
            asset: self.asset,
            from: self.from,
            nonce: self.nonce,
        }
    }
}

/// Checks `payment` against `offer` at `now_seconds` (Unix seconds).
///
/// The checks run in a fixed order (offer, then signature, then terms) so
/// that a payment wrong in several ways is always refused for the same
/// [`Reason`].
pub fn verify_exact_evm(
    offer: &PaymentOffer,
    payment: &DecodedPayment,
    now_seconds: u64,
) -> Result<VerifiedPayment, Reason> {
    let config = &offer.config;
    let (chain_id, domain) = check_offer(offer, payment)?;
    let (auth, signature) = parse_authorization(payment)?;
    if recover_address(&auth.digest(&domain), &signature) != Some(auth.from) {
        return Err(Reason::Signature);
    }
    let (valid_after, valid_before) = check_terms(offer, payment.version, &auth, now_seconds)?;
    Ok(VerifiedPayment {
        version: payment.version,
        chain_id,
        asset: config.asset,
        from: auth.from,
        to: auth.to,
        value: auth.value,
        nonce: auth.nonce,
        valid_after,
        valid_before,
    })
}

/// The payment names our scheme, our network and (v2) our asset: the chain
/// id and EIP-712 domain it must be signed under.
fn check_offer<'a>(
    offer: &'a PaymentOffer,
    payment: &DecodedPayment,
) -> Result<(u64, Eip712Domain<'a>), Reason> {
    let config = &offer.config;
    if payment.scheme != SCHEME_EXACT {
        return Err(Reason::InvalidScheme);
    }
    let (Some(chain_id), Some(domain)) = (config.chain_id(), config.domain()) else {
        // Not an EVM deployment: only a facilitator can verify.
        return Err(Reason::UnsupportedScheme);
    };
    if !config.is_our_network(&payment.network) {
        return Err(Reason::InvalidNetwork);
    }
    if let Some(accepted) = &payment.accepted {
        // A v2 client echoes the requirements it chose; they must be ours.
        let asset: Address = accepted.asset.parse().map_err(|_| Reason::InvalidPayload)?;
        if asset != config.asset {
            return Err(Reason::InvalidPaymentRequirements);
        }
    }
    Ok((chain_id, domain))
}

/// The EIP-3009 authorization and its signature, every field parsed.
fn parse_authorization(
    payment: &DecodedPayment,
) -> Result<(TransferWithAuthorization, String), Reason> {
    let p: ExactEvmPayload =
        serde_json::from_value(payment.payload.clone()).map_err(|_| Reason::InvalidPayload)?;
    let a = &p.authorization;
    let bad = |_| Reason::InvalidPayload;
    let auth = TransferWithAuthorization {
        from: a.from.parse().map_err(bad)?,
        to: a.to.parse().map_err(bad)?,
        value: a.value.parse().map_err(bad)?,
        valid_after: a.valid_after.parse().map_err(bad)?,
        valid_before: a.valid_before.parse().map_err(bad)?,
        nonce: a.nonce.parse().map_err(bad)?,
    };
    Ok((auth, p.signature))
}

/// The signed terms pay us the price and are valid at `now_seconds` (with
/// [`VALID_BEFORE_MARGIN_SECONDS`] left, and not valid for longer than the
/// offer's `maxTimeoutSeconds` plus [`CLOCK_ALLOWANCE_SECONDS`]):
/// `(valid_after, valid_before)`.
fn check_terms(
    offer: &PaymentOffer,
    version: X402Version,
    auth: &TransferWithAuthorization,
    now_seconds: u64,
) -> Result<(u64, u64), Reason> {
    if auth.to != offer.config.pay_to {
        return Err(Reason::RecipientMismatch);
    }
    let price = U256::from_u64(offer.price.micros());
    let value_ok = match version {
        // v2 `exact` means exact; v1 only had a maximum the server required.
        X402Version::V2 => auth.value == price,
        X402Version::V1 => auth.value >= price,
    };
    if !value_ok {
        return Err(Reason::Value);
    }
    let valid_after = auth.valid_after.saturating_u64();
    let valid_before = auth.valid_before.saturating_u64();
    if valid_after >= now_seconds {
        return Err(Reason::ValidAfter);
    }
    if now_seconds > valid_before.saturating_sub(VALID_BEFORE_MARGIN_SECONDS) {
        return Err(Reason::ValidBefore);
    }
    let latest = now_seconds
        .saturating_add(offer.config.max_timeout_seconds)
        .saturating_add(CLOCK_ALLOWANCE_SECONDS);
    if valid_before > latest {
        return Err(Reason::ValidBefore);
    }
    Ok((valid_after, valid_before))
}
