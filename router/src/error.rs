//! Why an adapter failed, and the error of a job that no adapter could run.

use crate::route::{Chain, HostedProvider, Route};
use crate::transport::TransportError;
use protocol::money::Price;
use std::fmt;

/// The step of the decentralized flow that was under way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Quote,
    Commit,
    Poll,
    /// Cancelling a job the router gave up on.
    Cancel,
    /// Reading a job's events (`GET /v1/jobs/{id}/events`, a streaming call).
    Events,
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Stage::Quote => "quote",
            Stage::Commit => "commit",
            Stage::Poll => "poll",
            Stage::Cancel => "cancel",
            Stage::Events => "events",
        })
    }
}

/// Why one adapter could not produce a trusted result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdapterError {
    #[error("{stage}: {source}")]
    Transport {
        stage: Stage,
        #[source]
        source: TransportError,
    },
    #[error("{stage} answered HTTP {status}: {message}")]
    HttpStatus {
        stage: Stage,
        status: u16,
        message: String,
    },
    #[error("{stage} answer is malformed: {message}")]
    MalformedResponse { stage: Stage, message: String },
    #[error(
        "commit answered 402 payment required and no payment client is configured for {chain}"
    )]
    PaymentRequired { chain: Chain },
    #[error("payment client for {chain} could not pay: {reason}")]
    PaymentFailed { chain: Chain, reason: String },
    #[error("commit answered 402 again after paying: {message}")]
    PaymentRejected { message: String },
    /// The user signer could not sign the user's proof.
    #[error("cannot prove the user: {reason}")]
    UserProofFailed { reason: String },
    /// 401: the coordinator wants the user's proof (`code` is one of
    /// `protocol::user_proof::RefusalCode`); set `RouterConfig::user_signer`.
    #[error("commit answered 401 {code}: {message}")]
    UserProofRefused { code: String, message: String },
    #[error("no_trusted_worker: PRIVATE job {job_id} has no trusted worker of this user (422)")]
    NoTrustedWorker { job_id: String },
    #[error("job {job_id} failed: {reason}")]
    JobFailed { job_id: String, reason: String },
    /// The job did not finish in time; the router then cancelled it
    /// before moving on, so it is not paid for twice (`cancel`: how that went).
    #[error("job {job_id} not completed within {timeout_ms} ms ({cancel})")]
    PollTimeout {
        job_id: String,
        timeout_ms: u64,
        cancel: CancelOutcome,
    },
    #[error("receipt of job {job_id} is not trustworthy: {reason}")]
    InvalidReceipt { job_id: String, reason: String },
    #[error(
        "skipped: PRIVATE jobs are not sent to hosted providers (allow_private_hosted is off)"
    )]
    PrivateNotAllowed,
    #[error("no API key for {provider}: set {env_var}")]
    MissingApiKey {
        provider: HostedProvider,
        env_var: &'static str,
    },
    #[error("{provider} answered HTTP {status} after {attempts} attempt(s): {message}")]
    ProviderStatus {
        provider: HostedProvider,
        status: u16,
        attempts: u32,
        message: String,
    },
    #[error("{provider} request failed: {source}")]
    ProviderTransport {
        provider: HostedProvider,
        #[source]
        source: TransportError,
    },
    #[error("{provider} answer is malformed: {message}")]
    ProviderMalformed {
        provider: HostedProvider,
        message: String,
    },
    #[error("extract_json: model output is not JSON: {message}")]
    InvalidJsonOutput { message: String },
    #[error("{chain} quoted {quoted}, above the call's max_price {max}")]
    PriceAboveMax {
        chain: Chain,
        quoted: Price,
        max: Price,
    },
    #[error(
        "skipped: {chain}'s coordinator kept failing; cooling down for {remaining_ms} ms more"
    )]
    CoolingDown { chain: Chain, remaining_ms: u64 },
    /// A streaming call lost its job's events and could not get them back
    /// (reconnects ran out, or the stream broke a bound); the job was then
    /// cancelled as a timed-out one is (`cancel`: how that went).
    #[error("events of job {job_id} broke off: {message} ({cancel})")]
    StreamBroken {
        job_id: String,
        message: String,
        cancel: CancelOutcome,
    },
    /// The streamed deltas of a completed job do not join to its output:
    /// what the caller was shown is not what the receipt covers.
    #[error("the deltas of job {job_id} do not join to its output")]
    StreamMismatch { job_id: String },
    /// A stream went past one of the router's bounds (`StreamConfig`).
    #[error("the stream has more than {max} {what}")]
    StreamLimit { what: &'static str, max: u64 },
    /// A hosted provider's stream ended before its end marker.
    #[error("{provider} stream broke off: {message}")]
    ProviderStreamCut {
        provider: HostedProvider,
        message: String,
    },
    /// The caller dropped the stream; the job under way was cancelled.
    #[error("the caller dropped the stream")]
    StreamDropped,
}

impl AdapterError {
    /// Whether the coordinator itself failed (see `crate::breaker`), not
    /// what the caller asked for.
    pub fn is_coordinator_failure(&self) -> bool {
        match self {
            AdapterError::Transport { .. }
            | AdapterError::MalformedResponse { .. }
            | AdapterError::JobFailed { .. }
            | AdapterError::PollTimeout { .. }
            | AdapterError::InvalidReceipt { .. }
            | AdapterError::StreamBroken { .. }
            | AdapterError::StreamMismatch { .. }
            | AdapterError::StreamLimit { .. } => true,
            AdapterError::HttpStatus { status, .. } => *status >= 500 || *status == 429,
            _ => false,
        }
    }
}

/// What became of the cancel of a job the router gave up on (decision 0022).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelOutcome {
    /// 200: the job failed `cancelled`; a paid job is never charged.
    Cancelled,
    /// 409: the job had failed already (a completed one is used instead).
    AlreadyFailed,
    /// The cancel was not made or refused: the job may still run and, if
    /// paid, be charged (a coordinator without the endpoint answers 404/405).
    NotCancelled(Box<AdapterError>),
}

impl fmt::Display for CancelOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CancelOutcome::Cancelled => f.write_str("cancelled"),
            CancelOutcome::AlreadyFailed => f.write_str("it had failed already"),
            CancelOutcome::NotCancelled(e) => write!(f, "not cancelled: {e}"),
        }
    }
}

/// The error of `run_llm` / `run_task`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouterError {
    /// Every adapter was tried (or skipped, for PRIVATE jobs) in routing
    /// order; `failures` holds each one's reason in that order.
    #[error("all compute adapters failed: {}", list_failures(.failures))]
    AllAdaptersFailed {
        failures: Vec<(Route, AdapterError)>,
    },
}

impl RouterError {
    pub fn failures(&self) -> &[(Route, AdapterError)] {
        match self {
            RouterError::AllAdaptersFailed { failures } => failures,
        }
    }
}

fn list_failures(failures: &[(Route, AdapterError)]) -> String {
    failures
        .iter()
        .map(|(route, error)| format!("[{route}] {error}"))
        .collect::<Vec<_>>()
        .join("; ")
}
