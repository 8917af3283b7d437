//! Why an adapter failed, and the error of a job that no adapter could run.

use crate::route::{Chain, HostedProvider, Route};
use crate::transport::TransportError;
use std::fmt;

/// The step of the decentralized flow that was under way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Quote,
    Commit,
    Poll,
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Stage::Quote => "quote",
            Stage::Commit => "commit",
            Stage::Poll => "poll",
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
    #[error("job {job_id} not completed within {timeout_ms} ms")]
    PollTimeout { job_id: String, timeout_ms: u64 },
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
