//! The decentralized adapter: quote, commit (paying on 402), poll, verify.
//! A streaming call reads the job's events instead of polling ([`events`]).

mod events;

use crate::config::{PollConfig, StreamConfig};
use crate::error::{AdapterError, CancelOutcome, Stage};
use crate::payment::{PaymentChallenge, PaymentClient};
use crate::route::Chain;
use crate::transport::{join_url, HttpRequest, HttpResponse, HttpTransport};
use crate::user::{path_and_query, UserSigner};
use protocol::api::{
    CommitResponse, JobStatus, JobSubmission, JobType, NoTrustedWorker, PrivacyClass, Quote, Tier,
};
use protocol::money::Price;
use protocol::receipt::Receipt;
use protocol::user_proof::ProofRequest;
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use uuid::Uuid;

/// A verified result of one coordinator.
#[derive(Debug, Clone, PartialEq)]
pub struct CoordinatorOutcome {
    pub job_id: Uuid,
    pub output: serde_json::Value,
    /// The quoted price, as the coordinator's `Price` prints it (`$0.010`).
    pub price: String,
    pub receipt: Receipt,
}

/// Runs jobs on one coordinator instance.
#[derive(Clone)]
pub struct CoordinatorClient {
    transport: Arc<dyn HttpTransport>,
    chain: Chain,
    base_url: String,
    payment: Option<Arc<dyn PaymentClient>>,
    poll: PollConfig,
    /// Proves the user on PRIVATE commits.
    user_signer: Option<Arc<dyn UserSigner>>,
    /// Bounds and reconnects of a streaming call.
    stream: StreamConfig,
}

impl std::fmt::Debug for CoordinatorClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoordinatorClient")
            .field("chain", &self.chain)
            .field("base_url", &self.base_url)
            .field("payment", &self.payment.is_some())
            .field("poll", &self.poll)
            .field("user_signer", &self.user_signer)
            .field("stream", &self.stream)
            .finish_non_exhaustive()
    }
}

/// A job record with the receipt left raw, so a malformed receipt is a
/// receipt failure rather than an unreadable record.
#[derive(Deserialize)]
struct RawJobRecord {
    id: Uuid,
    status: JobStatus,
    result: Option<serde_json::Value>,
    receipt: Option<serde_json::Value>,
}

impl CoordinatorClient {
    pub fn new(
        transport: Arc<dyn HttpTransport>,
        chain: Chain,
        base_url: impl Into<String>,
        payment: Option<Arc<dyn PaymentClient>>,
        poll: PollConfig,
    ) -> Self {
        Self {
            transport,
            chain,
            base_url: base_url.into(),
            payment,
            poll,
            user_signer: None,
            stream: StreamConfig::default(),
        }
    }

    /// Streams with these bounds and reconnects.
    pub fn with_stream(mut self, stream: StreamConfig) -> Self {
        self.stream = stream;
        self
    }

    /// Proves the user with `signer` on PRIVATE commits.
    pub fn with_user_signer(mut self, signer: Option<Arc<dyn UserSigner>>) -> Self {
        self.user_signer = signer;
        self
    }

    /// `request` with the user's proof when the job is PRIVATE and a
    /// signer is set (a fresh proof per request: each nonce is accepted
    /// once): PRIVATE commits and cancels.
    fn with_user_proof(
        &self,
        request: HttpRequest,
        submission: &JobSubmission,
    ) -> Result<HttpRequest, AdapterError> {
        let signer = match (&self.user_signer, submission.privacy_class) {
            (Some(signer), PrivacyClass::Private) => signer,
            _ => return Ok(request),
        };
        let proof = signer
            .proof_header(
                &submission.user_id,
                &ProofRequest {
                    method: request.method.as_str(),
                    path_and_query: path_and_query(&request.url),
                    body: &request.body,
                },
            )
            .map_err(|reason| AdapterError::UserProofFailed { reason })?;
        Ok(request.header(protocol::user_proof::HEADER, proof))
    }

    fn commit_request(
        &self,
        url: &str,
        body: &serde_json::Value,
        submission: &JobSubmission,
    ) -> Result<HttpRequest, AdapterError> {
        self.with_user_proof(HttpRequest::post_json(url, body), submission)
    }

    /// Quote (refused above `max_price`), commit, poll until done or timed
    /// out, verify the receipt.
    pub async fn run(
        &self,
        submission: &JobSubmission,
        tier: Tier,
        max_price: Option<Price>,
    ) -> Result<CoordinatorOutcome, AdapterError> {
        let (job_id, price) = self.quote_and_commit(submission, tier, max_price).await?;
        let timeout_ms = self.timeout_ms(submission.job_type);
        let deadline = Instant::now() + Duration::from_millis(timeout_ms);
        let polled =
            tokio::time::timeout_at(deadline, self.poll_until_done(job_id, deadline)).await;
        let (output, receipt) = match polled {
            Ok(done) => done?,
            // Given up on: cancelled before the caller moves on, so one
            // prompt is not paid for twice (decision 0022).
            Err(_) => match self.cancel(job_id, submission).await {
                Cancelled::Completed(done) => done?,
                Cancelled::Not(cancel) => {
                    return Err(AdapterError::PollTimeout {
                        job_id: job_id.to_string(),
                        timeout_ms,
                        cancel,
                    })
                }
            },
        };
        Ok(CoordinatorOutcome {
            job_id,
            output,
            price: price.to_string(),
            receipt,
        })
    }

    /// Quote (refused above `max_price`), then commit: the job and its price.
    async fn quote_and_commit(
        &self,
        submission: &JobSubmission,
        tier: Tier,
        max_price: Option<Price>,
    ) -> Result<(Uuid, Price), AdapterError> {
        let quote = self.quote(submission.job_type, tier).await?;
        if let Some(max) = max_price.filter(|max| quote.price > *max) {
            return Err(AdapterError::PriceAboveMax {
                chain: self.chain,
                quoted: quote.price,
                max,
            });
        }
        let commit_url = self.commit_url(&quote)?;
        let job_id = self.commit(&commit_url, submission).await?;
        Ok((job_id, quote.price))
    }

    fn timeout_ms(&self, job_type: JobType) -> u64 {
        match job_type {
            JobType::Task => self.poll.task_timeout_ms,
            JobType::LlmInfer => self.poll.llm_timeout_ms,
        }
    }

    /// Cancels a job the router gave up on (`POST /v1/jobs/{id}/cancel`,
    /// with the user's proof for a PRIVATE job). A job that completed
    /// meanwhile (409 with its record) is paid for already: its verified
    /// result is used rather than thrown away.
    async fn cancel(&self, job_id: Uuid, submission: &JobSubmission) -> Cancelled {
        let url = join_url(&self.base_url, &protocol::api::cancel_path(&job_id));
        let request = match self.with_user_proof(HttpRequest::post_empty(url), submission) {
            Ok(request) => request,
            Err(e) => return Cancelled::Not(CancelOutcome::NotCancelled(Box::new(e))),
        };
        let response = match self.send(Stage::Cancel, request).await {
            Ok(response) => response,
            Err(e) => return Cancelled::Not(CancelOutcome::NotCancelled(Box::new(e))),
        };
        let record = response.json::<RawJobRecord>().ok();
        match (response.status, record) {
            (200, _) => Cancelled::Not(CancelOutcome::Cancelled),
            (409, Some(record)) if record.id == job_id => match record.status {
                JobStatus::Completed => Cancelled::Completed(completed(job_id, record)),
                _ => Cancelled::Not(CancelOutcome::AlreadyFailed),
            },
            _ => Cancelled::Not(CancelOutcome::NotCancelled(Box::new(status_error(
                Stage::Cancel,
                &response,
            )))),
        }
    }

    async fn send(&self, stage: Stage, request: HttpRequest) -> Result<HttpResponse, AdapterError> {
        self.transport
            .send(request)
            .await
            .map_err(|source| AdapterError::Transport { stage, source })
    }

    async fn quote(&self, job_type: JobType, tier: Tier) -> Result<Quote, AdapterError> {
        // The router resolves AUTO itself (spec 4.8) and asks for that tier,
        // so the price it reports is the price of the tier it commits to.
        let url = join_url(
            &self.base_url,
            &format!("/v1/quote?job_type={job_type}&policy={tier}"),
        );
        let response = self.send(Stage::Quote, HttpRequest::get(url)).await?;
        if response.status != 200 {
            return Err(status_error(Stage::Quote, &response));
        }
        response
            .json()
            .map_err(|e| AdapterError::MalformedResponse {
                stage: Stage::Quote,
                message: e.to_string(),
            })
    }

    /// Only a path on this coordinator is accepted: a quote must not be able
    /// to send the job (and a payment) to another host.
    fn commit_url(&self, quote: &Quote) -> Result<String, AdapterError> {
        let endpoint = quote.endpoint.as_str();
        if !endpoint.starts_with('/') || endpoint.starts_with("//") {
            return Err(AdapterError::MalformedResponse {
                stage: Stage::Quote,
                message: format!("endpoint {endpoint:?} is not a path"),
            });
        }
        Ok(join_url(&self.base_url, endpoint))
    }

    async fn commit(&self, url: &str, submission: &JobSubmission) -> Result<Uuid, AdapterError> {
        let body = serde_json::to_value(submission).expect("a submission always serialises");
        let first = self.commit_request(url, &body, submission)?;
        let mut response = self.send(Stage::Commit, first).await?;
        if response.status == 402 {
            let Some(payment) = &self.payment else {
                return Err(AdapterError::PaymentRequired { chain: self.chain });
            };
            let challenge = PaymentChallenge {
                chain: self.chain,
                url: url.to_owned(),
                status: response.status,
                headers: response.headers.clone(),
                body: response.json().unwrap_or(serde_json::Value::Null),
            };
            let (name, value) = payment.payment_header(&challenge).map_err(|reason| {
                AdapterError::PaymentFailed {
                    chain: self.chain,
                    reason,
                }
            })?;
            // One paid retry only: a second 402 means the payment was refused,
            // and paying again could pay twice.
            let paid = self.commit_request(url, &body, submission)?;
            response = self.send(Stage::Commit, paid.header(name, value)).await?;
            if response.status == 402 {
                return Err(AdapterError::PaymentRejected {
                    message: error_message(&response),
                });
            }
        }
        match response.status {
            200 | 201 => response
                .json::<CommitResponse>()
                .map(|c| c.job_id)
                .map_err(|e| AdapterError::MalformedResponse {
                    stage: Stage::Commit,
                    message: e.to_string(),
                }),
            422 => match response.json::<NoTrustedWorker>() {
                Ok(body) if body.error == "no_trusted_worker" => {
                    Err(AdapterError::NoTrustedWorker {
                        job_id: body.job_id.to_string(),
                    })
                }
                _ => Err(status_error(Stage::Commit, &response)),
            },
            _ => Err(status_error(Stage::Commit, &response)),
        }
    }

    /// Polls until the job is terminal. Each poll is a long poll (held by
    /// the coordinator until the job changes status, up to the time left
    /// before `deadline`) until the coordinator shows it does not hold
    /// polls; from then on it polls every `poll_interval_ms`.
    async fn poll_until_done(
        &self,
        job_id: Uuid,
        deadline: Instant,
    ) -> Result<(serde_json::Value, Receipt), AdapterError> {
        let url = join_url(&self.base_url, &format!("/v1/jobs/{job_id}"));
        let malformed = |message: String| AdapterError::MalformedResponse {
            stage: Stage::Poll,
            message,
        };
        let mut mode = PollMode::new(self.poll.wait_ms_max);
        loop {
            let wait_ms = mode.wait_ms(deadline);
            let request_url = match wait_ms {
                0 => url.clone(),
                ms => format!("{url}?wait_ms={ms}"),
            };
            let sent_at = Instant::now();
            let response = self
                .send(Stage::Poll, HttpRequest::get(request_url))
                .await?;
            if wait_ms > 0 && response.status == 400 {
                // A coordinator whose wait bound is lower, or that refuses
                // unknown parameters: poll it the spec's way.
                mode = PollMode::Interval;
                continue;
            }
            if response.status != 200 {
                return Err(status_error(Stage::Poll, &response));
            }
            let record: RawJobRecord = response.json().map_err(|e| malformed(e.to_string()))?;
            if record.id != job_id {
                return Err(malformed(format!(
                    "asked for job {job_id}, got {}",
                    record.id
                )));
            }
            match record.status {
                JobStatus::Completed => return completed(job_id, record),
                JobStatus::Failed => return Err(failed(job_id, &record)),
                JobStatus::Pending | JobStatus::Assigned | JobStatus::Running => {
                    mode = mode.after(record.status, wait_ms, sent_at.elapsed());
                    // A wait of 0 (the deadline is due) is a plain poll too.
                    if mode == PollMode::Interval || wait_ms == 0 {
                        tokio::time::sleep(Duration::from_millis(self.poll.poll_interval_ms)).await;
                    }
                }
            }
        }
    }
}

/// What a cancel of an abandoned job came to.
enum Cancelled {
    /// It had completed meanwhile: its output and receipt, as a poll's.
    Completed(Result<(serde_json::Value, Receipt), AdapterError>),
    Not(CancelOutcome),
}

/// The output of a completed job and its receipt, verified against it.
fn completed(
    job_id: Uuid,
    record: RawJobRecord,
) -> Result<(serde_json::Value, Receipt), AdapterError> {
    let output = record
        .result
        .as_ref()
        .and_then(|r| r.get("output"))
        .cloned()
        .ok_or_else(|| AdapterError::MalformedResponse {
            stage: Stage::Poll,
            message: "completed job has no result.output".into(),
        })?;
    let receipt = verified_receipt(job_id, record.receipt, &output)?;
    Ok((output, receipt))
}

/// A failed job, with the coordinator's reason.
fn failed(job_id: Uuid, record: &RawJobRecord) -> AdapterError {
    let reason = record
        .result
        .as_ref()
        .and_then(|r| r.get("error"))
        .and_then(|e| e.as_str())
        .unwrap_or("no reason given")
        .to_owned();
    AdapterError::JobFailed {
        job_id: job_id.to_string(),
        reason,
    }
}

/// How the router polls one job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PollMode {
    /// Long polls of at most `wait_ms_max`; `seen` is the status of the
    /// last answer (a job starts `pending`).
    Held { wait_ms_max: u64, seen: JobStatus },
    /// Plain polls every `poll_interval_ms`.
    Interval,
}

impl PollMode {
    fn new(wait_ms_max: u64) -> Self {
        if wait_ms_max == 0 {
            return PollMode::Interval;
        }
        PollMode::Held {
            wait_ms_max,
            seen: JobStatus::Pending,
        }
    }

    /// The `wait_ms` of the next poll: what is left before `deadline`, at
    /// most the maximum; 0 for a plain poll.
    fn wait_ms(self, deadline: Instant) -> u64 {
        match self {
            PollMode::Interval => 0,
            PollMode::Held { wait_ms_max, .. } => {
                let left_ms = deadline
                    .saturating_duration_since(Instant::now())
                    .as_millis();
                u64::try_from(left_ms).unwrap_or(u64::MAX).min(wait_ms_max)
            }
        }
    }

    /// The mode after a non-terminal answer with `status` to a poll that
    /// asked to wait `wait_ms` and took `took`. A coordinator holding polls
    /// answers early only with a status other than the one the poll saw;
    /// one that ignores `wait_ms` answers at once with the same status.
    /// So an answer before half the wait with the status already seen
    /// means polls are not held (or not now: the coordinator's bound on
    /// held polls is reached, or it is stopping), and polling takes over.
    fn after(self, status: JobStatus, wait_ms: u64, took: Duration) -> Self {
        let PollMode::Held { wait_ms_max, seen } = self else {
            return self;
        };
        let early = took.as_millis() * 2 < u128::from(wait_ms);
        if early && status == seen {
            return PollMode::Interval;
        }
        PollMode::Held {
            wait_ms_max,
            seen: status,
        }
    }
}

/// The receipt of `job_id`, checked against `output` and its signer.
fn verified_receipt(
    job_id: Uuid,
    raw: Option<serde_json::Value>,
    output: &serde_json::Value,
) -> Result<Receipt, AdapterError> {
    let invalid = |reason: String| AdapterError::InvalidReceipt {
        job_id: job_id.to_string(),
        reason,
    };
    let raw = raw.ok_or_else(|| invalid("completed job has no receipt".into()))?;
    let receipt: Receipt =
        serde_json::from_value(raw).map_err(|e| invalid(format!("malformed: {e}")))?;
    if receipt.job_id != job_id {
        return Err(invalid(format!("receipt is for job {}", receipt.job_id)));
    }
    receipt.verify(output).map_err(|e| invalid(e.to_string()))?;
    Ok(receipt)
}

fn error_message(response: &HttpResponse) -> String {
    response
        .json::<serde_json::Value>()
        .ok()
        .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_owned))
        .unwrap_or_else(|| response.body_snippet(200))
}

fn status_error(stage: Stage, response: &HttpResponse) -> AdapterError {
    if response.status == 401 {
        if let Ok(refused) = response.json::<protocol::api::UserProofRefused>() {
            return AdapterError::UserProofRefused {
                code: refused.error,
                message: refused.message,
            };
        }
    }
    AdapterError::HttpStatus {
        stage,
        status: response.status,
        message: error_message(response),
    }
}
