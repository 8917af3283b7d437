//! Settlement: turning a verified payment into money moved (through a
//! facilitator) or, in local mode, into a reference without moving money.
//!
//! The result's `payment_ref` is what the job records and the worker signs
//! in the receipt: the facilitator's transaction id, or `x402:<nonce>`
//! locally.

use crate::challenge::PaymentOffer;
use crate::decode::DecodedPayment;
use crate::reason::Reason;
use crate::verify::VerifiedPayment;
use crate::wire::{
    encode_header, SettleResponse, SupportedResponse, VerifyResponse, PAYMENT_RESPONSE,
    X_PAYMENT_RESPONSE,
};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// A boxed future, so that [`Settler`] and [`FacilitatorTransport`] can be
/// used as trait objects.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A settled payment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settlement {
    /// Recorded on the job and signed into the receipt.
    pub payment_ref: String,
    /// The settle answer, sent back base64-encoded in `PAYMENT-RESPONSE`.
    pub response: SettleResponse,
}

impl Settlement {
    /// The value of the `PAYMENT-RESPONSE` / `X-PAYMENT-RESPONSE` header.
    pub fn payment_response_header(&self) -> String {
        encode_header(&self.response)
    }

    /// The headers to add to the success answer: v2 clients read
    /// `PAYMENT-RESPONSE`, v1 clients `X-PAYMENT-RESPONSE`.
    pub fn response_headers(&self) -> [(&'static str, String); 2] {
        let v = self.payment_response_header();
        [(PAYMENT_RESPONSE, v.clone()), (X_PAYMENT_RESPONSE, v)]
    }
}

/// What to settle: the terms, the payment as sent, and (for EVM) what
/// offline verification established.
#[derive(Debug, Clone, Copy)]
pub struct SettleRequest<'a> {
    pub offer: &'a PaymentOffer,
    pub payment: &'a DecodedPayment,
    /// `None` on networks we cannot verify offline (facilitator only).
    pub verified: Option<&'a VerifiedPayment>,
}

/// Settles payments. On `Err` the caller releases the nonce reservation
/// and creates no job. An `Err` normally means no money moved; the one
/// exception is a facilitator that settled but whose answer was lost (a
/// timeout during `/settle`): the payer is then charged without a job, and
/// reconciling that needs the transaction log of the facilitator.
/// Settling on completion ([`Settler::verify`] at commit,
/// [`Settler::settle_ticket`] later) retries such a loss with the same
/// ticket instead.
pub trait Settler: Send + Sync {
    /// Verify then settle, at once (settlement at commit).
    fn settle<'a>(&'a self, req: SettleRequest<'a>) -> BoxFuture<'a, Result<Settlement, Reason>>;

    /// Only what `settle` checks before moving money (a facilitator's
    /// `/verify`); nothing to add for local settlement.
    fn verify<'a>(&'a self, req: SettleRequest<'a>) -> BoxFuture<'a, Result<(), Reason>> {
        let _ = req;
        Box::pin(async { Ok(()) })
    }

    /// Settles a payment verified earlier, from its stored ticket. Sending
    /// the same ticket again is safe: the chain spends one authorization
    /// once. Local settlement moves nothing and answers the ticket's
    /// reference.
    fn settle_ticket<'a>(&'a self, ticket: &'a SettleTicket) -> BoxFuture<'a, SettleOutcome> {
        Box::pin(async move { SettleOutcome::Settled(ticket.local_settlement()) })
    }
}

/// What settling a verified payment later needs, kept with the job it
/// bought (durably: a restart settles it too), so every attempt sends the
/// very same `/settle` body.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SettleTicket {
    /// The `/settle` body: `x402Version`, `paymentPayload`, `paymentRequirements`.
    pub body: serde_json::Value,
    /// The reference the job carries before settlement (and the worker
    /// signs into the receipt): `x402:<nonce>`, the authorization's nonce
    /// (a Solana payment's: the hash of its message). It names the
    /// payment from the moment it is verified; the settlement's
    /// transaction is recorded beside it once it exists.
    pub payment_ref: String,
    pub payer: Option<String>,
    /// CAIP-2.
    pub network: String,
    /// The authorization's `validBefore`, Unix seconds: no settlement is
    /// tried at or after it less the operator's margin.
    pub valid_before_seconds: u64,
}

impl SettleTicket {
    /// What local settlement answers: the reference, no money moved.
    pub fn local_settlement(&self) -> Settlement {
        Settlement {
            payment_ref: self.payment_ref.clone(),
            response: SettleResponse {
                success: true,
                error_reason: None,
                payer: self.payer.clone(),
                transaction: self.payment_ref.clone(),
                network: self.network.clone(),
            },
        }
    }
}

/// How one settlement attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettleOutcome {
    Settled(Settlement),
    /// The facilitator answered no: no money moved, none will.
    Refused(Reason),
    /// No usable answer (transport error, timeout, 5xx, unreadable body):
    /// the attempt may or may not have reached the chain; send the same
    /// ticket again.
    Lost(String),
}

/// Local verification mode: the payment was verified offline, but nothing
/// is submitted on chain, so **no money moves**. For development, tests and
/// the simulation. `payment_ref` is `x402:<nonce>`.
#[derive(Debug, Clone, Copy, Default)]
pub struct LocalSettler;

impl LocalSettler {
    pub fn payment_ref(verified: &VerifiedPayment) -> String {
        format!("x402:{}", verified.nonce)
    }
}

impl Settler for LocalSettler {
    fn settle<'a>(&'a self, req: SettleRequest<'a>) -> BoxFuture<'a, Result<Settlement, Reason>> {
        Box::pin(async move {
            let verified = req.verified.ok_or(Reason::UnsupportedScheme)?;
            let payment_ref = Self::payment_ref(verified);
            Ok(Settlement {
                response: SettleResponse {
                    success: true,
                    error_reason: None,
                    payer: Some(verified.from.to_string()),
                    // No transaction exists; the client sees the reference instead.
                    transaction: payment_ref.clone(),
                    network: req.offer.config.network.clone(),
                },
                payment_ref,
            })
        })
    }
}

/// Why a facilitator could not be asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    #[error("facilitator did not answer within {0:?}")]
    Timeout(Duration),
    #[error("facilitator request failed: {0}")]
    Http(String),
}

/// An HTTP answer: status and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportResponse {
    pub status: u16,
    pub body: Vec<u8>,
}

/// How the facilitator is reached: over HTTP ([`ReqwestTransport`]) or, in
/// tests and the simulation, in process (`testkit::RouterTransport`).
pub trait FacilitatorTransport: Send + Sync {
    fn get<'a>(&'a self, path: &'a str)
        -> BoxFuture<'a, Result<TransportResponse, TransportError>>;
    fn post_json<'a>(
        &'a self,
        path: &'a str,
        body: &'a serde_json::Value,
    ) -> BoxFuture<'a, Result<TransportResponse, TransportError>>;
}

/// Facilitator over HTTP(S), rustls.
#[derive(Debug, Clone)]
pub struct ReqwestTransport {
    client: reqwest::Client,
    base_url: String,
}

impl ReqwestTransport {
    pub fn new(base_url: &str, timeout: Duration) -> Result<Self, TransportError> {
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .map_err(|e| TransportError::Http(e.to_string()))?;
        Ok(Self {
            client,
            base_url: base_url.trim_end_matches('/').to_owned(),
        })
    }

    async fn send(
        &self,
        req: reqwest::RequestBuilder,
    ) -> Result<TransportResponse, TransportError> {
        let resp = req
            .send()
            .await
            .map_err(|e| TransportError::Http(e.to_string()))?;
        let status = resp.status().as_u16();
        let body = resp
            .bytes()
            .await
            .map_err(|e| TransportError::Http(e.to_string()))?;
        Ok(TransportResponse {
            status,
            body: body.to_vec(),
        })
    }
}

impl FacilitatorTransport for ReqwestTransport {
    fn get<'a>(
        &'a self,
        path: &'a str,
    ) -> BoxFuture<'a, Result<TransportResponse, TransportError>> {
        Box::pin(self.send(self.client.get(format!("{}{path}", self.base_url))))
    }

    fn post_json<'a>(
        &'a self,
        path: &'a str,
        body: &'a serde_json::Value,
    ) -> BoxFuture<'a, Result<TransportResponse, TransportError>> {
        Box::pin(
            self.send(
                self.client
                    .post(format!("{}{path}", self.base_url))
                    .json(body),
            ),
        )
    }
}

/// Settles through an x402 facilitator: `POST /verify`, then `POST /settle`.
#[derive(Debug, Clone)]
pub struct FacilitatorSettler<T> {
    transport: T,
    timeout: Duration,
}

/// Default bound on each facilitator call. Settlement waits for a block, so
/// this is generous; the payer's authorization outlives it by far.
pub const DEFAULT_FACILITATOR_TIMEOUT: Duration = Duration::from_secs(30);

impl FacilitatorSettler<ReqwestTransport> {
    /// An HTTP facilitator at `base_url` (e.g. `https://x402.org/facilitator`).
    pub fn http(base_url: &str, timeout: Duration) -> Result<Self, TransportError> {
        Ok(Self::new(
            ReqwestTransport::new(base_url, timeout)?,
            timeout,
        ))
    }
}

impl<T: FacilitatorTransport> FacilitatorSettler<T> {
    /// `timeout` bounds each call (tokio time, so the simulation's paused
    /// clock applies).
    pub fn new(transport: T, timeout: Duration) -> Self {
        Self { transport, timeout }
    }

    /// The `/verify` and `/settle` body of a payment.
    pub fn body(req: &SettleRequest<'_>) -> serde_json::Value {
        serde_json::json!({
            "x402Version": req.payment.version.number(),
            "paymentPayload": req.payment.raw,
            "paymentRequirements": req.offer.requirements_json(req.payment.version),
        })
    }

    async fn post(
        &self,
        path: &str,
        body: &serde_json::Value,
    ) -> Result<TransportResponse, TransportError> {
        match tokio::time::timeout(self.timeout, self.transport.post_json(path, body)).await {
            Ok(r) => r,
            Err(_) => Err(TransportError::Timeout(self.timeout)),
        }
    }

    /// `POST /verify`: `Ok(payer)` when the facilitator accepts the payment.
    pub async fn verify(&self, req: SettleRequest<'_>) -> Result<Option<String>, Reason> {
        let resp = self.post("/verify", &Self::body(&req)).await.map_err(|e| {
            tracing::warn!(error = %e, "facilitator /verify failed");
            Reason::UnexpectedVerifyError
        })?;
        // Facilitators answer a refusal with 400 and a normal body, so the
        // body decides, not the status.
        let answer: VerifyResponse =
            serde_json::from_slice(&resp.body).map_err(|_| Reason::UnexpectedVerifyError)?;
        if answer.is_valid {
            Ok(answer.payer)
        } else {
            Err(answer
                .invalid_reason
                .as_deref()
                .map(Reason::from_code)
                .unwrap_or(Reason::UnexpectedVerifyError))
        }
    }

    /// `POST /settle`.
    pub async fn settle_only(&self, req: SettleRequest<'_>) -> Result<Settlement, Reason> {
        let resp = self.post("/settle", &Self::body(&req)).await.map_err(|e| {
            tracing::warn!(error = %e, "facilitator /settle failed");
            Reason::UnexpectedSettleError
        })?;
        let answer: SettleResponse =
            serde_json::from_slice(&resp.body).map_err(|_| Reason::UnexpectedSettleError)?;
        if !answer.success {
            return Err(answer
                .error_reason
                .as_deref()
                .map(Reason::from_code)
                .unwrap_or(Reason::UnexpectedSettleError));
        }
        if answer.transaction.is_empty() {
            return Err(Reason::UnexpectedSettleError);
        }
        Ok(Settlement {
            payment_ref: answer.transaction.clone(),
            response: answer,
        })
    }

    /// `GET /supported`.
    pub async fn supported(&self) -> Result<SupportedResponse, TransportError> {
        let resp = match tokio::time::timeout(self.timeout, self.transport.get("/supported")).await
        {
            Ok(r) => r?,
            Err(_) => return Err(TransportError::Timeout(self.timeout)),
        };
        serde_json::from_slice(&resp.body).map_err(|e| TransportError::Http(e.to_string()))
    }

    /// `POST /settle` with a stored ticket's body: [`Settler::settle_ticket`].
    pub async fn settle_body(&self, body: &serde_json::Value) -> SettleOutcome {
        let resp = match self.post("/settle", body).await {
            Ok(resp) => resp,
            Err(e) => return SettleOutcome::Lost(e.to_string()),
        };
        if resp.status >= 500 {
            return SettleOutcome::Lost(format!("facilitator answered {}", resp.status));
        }
        let Ok(answer) = serde_json::from_slice::<SettleResponse>(&resp.body) else {
            return SettleOutcome::Lost(format!("unreadable answer ({})", resp.status));
        };
        if !answer.success {
            let reason = answer.error_reason.as_deref().map(Reason::from_code);
            return SettleOutcome::Refused(reason.unwrap_or(Reason::UnexpectedSettleError));
        }
        if answer.transaction.is_empty() {
            return SettleOutcome::Lost("a success without a transaction".into());
        }
        SettleOutcome::Settled(Settlement {
            payment_ref: answer.transaction.clone(),
            response: answer,
        })
    }
}

impl<T: FacilitatorTransport> Settler for FacilitatorSettler<T> {
    fn settle<'a>(&'a self, req: SettleRequest<'a>) -> BoxFuture<'a, Result<Settlement, Reason>> {
        Box::pin(async move {
            // Verify first: it checks balance and on-chain nonce state, which
            // our offline check cannot, and a refused /settle may have cost gas.
            self.verify(req).await?;
            self.settle_only(req).await
        })
    }

    fn verify<'a>(&'a self, req: SettleRequest<'a>) -> BoxFuture<'a, Result<(), Reason>> {
        Box::pin(async move { FacilitatorSettler::verify(self, req).await.map(|_| ()) })
    }

    fn settle_ticket<'a>(&'a self, ticket: &'a SettleTicket) -> BoxFuture<'a, SettleOutcome> {
        Box::pin(self.settle_body(&ticket.body))
    }
}
