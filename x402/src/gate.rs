//! The whole server-side flow in one place, for the commit handler:
//! decode → verify → reserve the nonce → settle → mark spent (or release).
//!
//! It is split in two steps so that a request can still be refused for
//! free after its payment is known good: [`PaymentGate::authorize`] checks
//! and reserves, [`PaymentGate::settle`] moves the money, and
//! [`PaymentGate::refuse`] ends a payment whose request was refused after
//! authorization (for example a 422), keeping its nonce reserved so the same
//! authorization cannot be refused again and again. A 400 or 422 answer is
//! never charged.

use crate::challenge::{PaymentOffer, PaymentRequiredAnswer};
use crate::config::PaymentConfig;
use crate::decode::{payment_from_headers, DecodedPayment};
use crate::evm::{Address, Bytes32};
use crate::reason::Reason;
use crate::replay::{InMemoryNonceStore, NonceKey, NonceStore};
use crate::settle::{
    FacilitatorSettler, LocalSettler, SettleOutcome, SettleRequest, SettleTicket, Settlement,
    Settler, TransportError, DEFAULT_FACILITATOR_TIMEOUT,
};
use crate::verify::{verify_exact_evm, VerifiedPayment};
use http::HeaderMap;
use protocol::money::Price;
use std::sync::Arc;

/// Why the request is answered 402. Either way the answer carries the
/// accepts list; send `answer.body` as JSON and `answer.payment_required_header`
/// as the `PAYMENT-REQUIRED` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No payment header was sent.
    Required(PaymentRequiredAnswer),
    /// A payment was sent and refused for `reason`.
    Refused {
        reason: Reason,
        answer: PaymentRequiredAnswer,
    },
}

#[cfg(feature = "axum")]
impl axum::response::IntoResponse for Refusal {
    fn into_response(self) -> axum::response::Response {
        match self {
            Refusal::Required(a) | Refusal::Refused { answer: a, .. } => a.into_response(),
        }
    }
}

impl Refusal {
    pub fn answer(&self) -> &PaymentRequiredAnswer {
        match self {
            Refusal::Required(a) | Refusal::Refused { answer: a, .. } => a,
        }
    }

    pub fn reason(&self) -> Option<&Reason> {
        match self {
            Refusal::Required(_) => None,
            Refusal::Refused { reason, .. } => Some(reason),
        }
    }
}

/// A payment that verified and holds a nonce reservation, not yet settled.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "settle or cancel it, or the nonce stays reserved until it expires"]
pub struct Authorized {
    pub offer: PaymentOffer,
    pub payment: DecodedPayment,
    /// `None` on non-EVM networks, which only the facilitator verifies.
    pub verified: Option<VerifiedPayment>,
    /// The payment's identity, reserved in the nonce store until it is
    /// settled (spent) or cancelled (released).
    pub nonce_key: NonceKey,
    /// Unix seconds: the authorization's `validBefore` (on networks without
    /// one, the offer's `maxTimeoutSeconds` from authorization).
    pub valid_before_seconds: u64,
}

/// A settled payment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paid {
    pub verified: Option<VerifiedPayment>,
    pub settlement: Settlement,
    /// The payment's identity in the nonce store.
    pub nonce_key: NonceKey,
}

impl Paid {
    /// The job's `payment_ref`.
    pub fn payment_ref(&self) -> &str {
        &self.settlement.payment_ref
    }

    /// `PAYMENT-RESPONSE` and `X-PAYMENT-RESPONSE`, for the 201.
    pub fn response_headers(&self) -> [(&'static str, String); 2] {
        self.settlement.response_headers()
    }

    /// Adds [`Self::response_headers`] to a response's headers.
    pub fn insert_response_headers(&self, headers: &mut HeaderMap) {
        for (name, value) in self.response_headers() {
            // Base64 is always a valid header value.
            if let (Ok(n), Ok(v)) = (
                http::HeaderName::from_bytes(name.as_bytes()),
                http::HeaderValue::from_str(&value),
            ) {
                headers.insert(n, v);
            }
        }
    }
}

/// The replay identity of a payment on Solana, which has no EIP-3009 nonce
/// to read: the hash of the network and the transaction's signed message
/// ([`crate::svm`]), so neither a re-encoding nor an extra field nor other
/// bytes in a signature slot make a second identity for one transaction.
/// Chain id 0 is no EVM chain, so these keys never meet an EVM payment's.
fn non_evm_nonce_key(config: &PaymentConfig, payment: &DecodedPayment) -> Result<NonceKey, Reason> {
    let message = crate::svm::transaction_message(&payment.payload)?;
    let mut bytes = config.network.as_bytes().to_vec();
    bytes.push(0);
    bytes.extend_from_slice(&message);
    Ok(NonceKey {
        chain_id: NON_EVM_CHAIN_ID,
        asset: config.asset,
        from: Address([0; 20]),
        nonce: Bytes32(protocol::signing::keccak256(&bytes)),
    })
}

/// A 402 for `reason`, with the offer's accepts list.
fn refuse(offer: &PaymentOffer, reason: Reason) -> Refusal {
    Refusal::Refused {
        answer: offer.payment_refused(&reason),
        reason,
    }
}

/// The `chain_id` of every non-EVM payment's [`NonceKey`].
pub const NON_EVM_CHAIN_ID: u64 = 0;

/// Payment gating for one deployment.
#[derive(Clone)]
pub struct PaymentGate {
    config: PaymentConfig,
    nonces: Arc<dyn NonceStore>,
    settler: Arc<dyn Settler>,
}

impl std::fmt::Debug for PaymentGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PaymentGate")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl PaymentGate {
    pub fn new(
        config: PaymentConfig,
        nonces: Arc<dyn NonceStore>,
        settler: Arc<dyn Settler>,
    ) -> Self {
        Self {
            config,
            nonces,
            settler,
        }
    }

    /// An in-memory nonce store and, per the config, an HTTP facilitator or
    /// local settlement (which moves no money).
    pub fn from_config(config: PaymentConfig) -> Result<Self, TransportError> {
        let settler: Arc<dyn Settler> = match &config.facilitator_url {
            Some(url) => Arc::new(FacilitatorSettler::http(url, DEFAULT_FACILITATOR_TIMEOUT)?),
            None => Arc::new(LocalSettler),
        };
        Ok(Self::new(
            config,
            Arc::new(InMemoryNonceStore::new()),
            settler,
        ))
    }

    pub fn config(&self) -> &PaymentConfig {
        &self.config
    }

    pub fn nonces(&self) -> &Arc<dyn NonceStore> {
        &self.nonces
    }

    /// The terms for one request.
    pub fn offer(&self, price: Price, url: &str, description: &str) -> PaymentOffer {
        PaymentOffer::for_url(self.config.clone(), price, url, description)
    }

    /// Decodes and verifies the request's payment and reserves its nonce.
    pub fn authorize(
        &self,
        offer: &PaymentOffer,
        headers: &HeaderMap,
        now_seconds: u64,
    ) -> Result<Authorized, Refusal> {
        let (payment, verified, nonce_key, valid_before) =
            self.identify(offer, headers, now_seconds)?;
        self.nonces.purge_expired(now_seconds);
        self.nonces
            .check_and_mark(nonce_key, valid_before)
            .map_err(|_| refuse(offer, Reason::NonceAlreadyUsed))?;
        Ok(Authorized {
            offer: offer.clone(),
            payment,
            verified,
            nonce_key,
            valid_before_seconds: valid_before,
        })
    }

    /// The identity of the request's payment, if it is one that would pass
    /// [`Self::authorize`] but for its nonce: lets a server answer a retry
    /// of a payment that already bought something (idempotency).
    pub fn nonce_key(
        &self,
        offer: &PaymentOffer,
        headers: &HeaderMap,
        now_seconds: u64,
    ) -> Option<NonceKey> {
        self.identify(offer, headers, now_seconds)
            .ok()
            .map(|(_, _, key, _)| key)
    }

    /// Decodes and verifies a payment: the payment, what verification
    /// established, its replay identity and until when it is valid.
    fn identify(
        &self,
        offer: &PaymentOffer,
        headers: &HeaderMap,
        now_seconds: u64,
    ) -> Result<(DecodedPayment, Option<VerifiedPayment>, NonceKey, u64), Refusal> {
        let payment = match payment_from_headers(headers) {
            Ok(Some(p)) => p,
            Ok(None) => return Err(Refusal::Required(offer.payment_required())),
            Err(e) => return Err(refuse(offer, e.reason())),
        };
        if self.config.chain_id().is_none() {
            // Non-EVM: the facilitator verifies and the chain refuses a
            // second spend, but two concurrent commits with one payment
            // would both reach the facilitator; the local reservation makes
            // one of them lose here, as on EVM.
            if !self.config.is_our_network(&payment.network) {
                return Err(refuse(offer, Reason::InvalidNetwork));
            }
            let key = non_evm_nonce_key(&self.config, &payment).map_err(|r| refuse(offer, r))?;
            let valid_before = now_seconds.saturating_add(self.config.max_timeout_seconds);
            return Ok((payment, None, key, valid_before));
        }
        let verified =
            verify_exact_evm(offer, &payment, now_seconds).map_err(|r| refuse(offer, r))?;
        let key = verified.nonce_key();
        let valid_before = verified.valid_before;
        Ok((payment, Some(verified), key, valid_before))
    }

    /// Settles an authorized payment. On failure the nonce is released, so
    /// the payer may retry, and no job must be created.
    pub async fn settle(&self, auth: Authorized) -> Result<Paid, Refusal> {
        let paid = self.settle_unspent(auth).await?;
        self.nonces.mark_spent(&paid.nonce_key);
        Ok(paid)
    }

    /// Like [`Self::settle`], but leaves the nonce reserved: the caller
    /// records the spend itself, in the same write as what the payment
    /// bought (a crash must not leave one without the other). On failure
    /// the nonce is released, as by `settle`.
    pub async fn settle_unspent(&self, auth: Authorized) -> Result<Paid, Refusal> {
        let req = SettleRequest {
            offer: &auth.offer,
            payment: &auth.payment,
            verified: auth.verified.as_ref(),
        };
        match self.settler.settle(req).await {
            Ok(settlement) => Ok(Paid {
                verified: auth.verified,
                settlement,
                nonce_key: auth.nonce_key,
            }),
            Err(reason) => {
                self.cancel(&auth);
                Err(Refusal::Refused {
                    answer: auth.offer.payment_refused(&reason),
                    reason,
                })
            }
        }
    }

    /// Settling on completion, at commit: what the facilitator checks before
    /// it would settle (`/verify`: balance, on-chain nonce state), nothing
    /// moved. On a refusal the nonce is released, as by a failed `settle`.
    pub async fn verify(&self, auth: &Authorized) -> Result<(), Refusal> {
        let req = SettleRequest {
            offer: &auth.offer,
            payment: &auth.payment,
            verified: auth.verified.as_ref(),
        };
        self.settler.verify(req).await.map_err(|reason| {
            self.cancel(auth);
            Refusal::Refused {
                answer: auth.offer.payment_refused(&reason),
                reason,
            }
        })
    }

    /// What settling `auth` later needs, to keep with what it buys.
    pub fn ticket(&self, auth: &Authorized) -> SettleTicket {
        let req = SettleRequest {
            offer: &auth.offer,
            payment: &auth.payment,
            verified: auth.verified.as_ref(),
        };
        SettleTicket {
            body: FacilitatorSettler::<crate::settle::ReqwestTransport>::body(&req),
            payment_ref: format!("x402:{}", auth.nonce_key.nonce),
            payer: auth.verified.as_ref().map(|v| v.from.to_string()),
            network: self.config.network.clone(),
            valid_before_seconds: auth.valid_before_seconds,
        }
    }

    /// One attempt at settling a stored ticket (see [`SettleOutcome`]).
    pub async fn settle_ticket(&self, ticket: &SettleTicket) -> SettleOutcome {
        self.settler.settle_ticket(ticket).await
    }

    /// Ends a payment whose request was refused after authorization (a 422
    /// or 503 decided later): nothing is settled, but the nonce stays
    /// reserved until the authorization expires (at most `maxTimeoutSeconds`
    /// plus the clock allowance away), so one signed authorization cannot buy
    /// an unbounded number of refusals, each of which costs the service a
    /// record (issue 29, finding 6). The payer signs a fresh authorization to
    /// try again, as official clients do for every request.
    pub fn refuse(&self, auth: Authorized) {
        // Consuming it without `cancel` is the point: the reservation stays.
        let Authorized { .. } = auth;
    }

    /// Drops the reservation of a payment that will not be settled and may
    /// be presented again (a settlement that failed).
    pub fn cancel(&self, auth: &Authorized) {
        self.nonces.release(&auth.nonce_key);
    }

    /// [`Self::authorize`] then [`Self::settle`].
    pub async fn accept(
        &self,
        offer: &PaymentOffer,
        headers: &HeaderMap,
        now_seconds: u64,
    ) -> Result<Paid, Refusal> {
        let auth = self.authorize(offer, headers, now_seconds)?;
        self.settle(auth).await
    }
}
