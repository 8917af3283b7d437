//! `/v1/quote`, `/v1/jobs/commit/{fast,cheap}` and `/v1/jobs/{id}`: quotes,
//! commits (with payments) and polls.

use super::error::ApiError;
use super::extract::{ClientAddr, CommitRequest, JobId, QueryMap};
use super::user_auth;
use super::validate;
use crate::config::Settlement;
use crate::core::{CommitError, PaidWith, Payment};
use crate::shell::{Coordinator, Watch};
use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use protocol::api::{CommitResponse, JobSubmission, JobType, Policy, PrivacyClass, Quote, Tier};
use uuid::Uuid;
use x402::NonceKey;

#[utoipa::path(get, path = "/v1/quote", tag = "jobs",
    params(
        ("job_type" = JobType, Query, description = "What the job is"),
        ("policy" = Option<Policy>, Query, description = "Default `AUTO`: FAST for LLM_INFER, CHEAP for TASK"),
    ),
    responses(
        (status = 200, description = "Price and endpoint for the job", body = Quote),
        (status = 400, response = crate::api::docs::BadRequest),
    ))]
pub(super) async fn quote(
    State(c): State<Coordinator>,
    QueryMap(q): QueryMap,
) -> Result<Json<Quote>, ApiError> {
    let job_type = q
        .get("job_type")
        .and_then(|s| JobType::parse(s))
        .ok_or_else(|| ApiError::BadRequest(validate::INVALID_JOB_TYPE.into()))?;
    let policy = match q.get("policy") {
        None => Policy::Auto,
        Some(p) => {
            Policy::parse(p).ok_or_else(|| ApiError::BadRequest(validate::INVALID_POLICY.into()))?
        }
    };
    let tier = policy.resolve(job_type);
    Ok(Json(Quote {
        price: c.config().prices.price(tier, job_type),
        endpoint: tier.commit_path().into(),
        policy_resolved: tier,
        network: c.config().network.clone(),
        expires_at: None,
    }))
}

#[utoipa::path(post, path = "/v1/jobs/commit/fast", tag = "jobs",
    request_body = crate::api::docs::SubmissionRequest,
    params(
        ("X-PAYMENT" = Option<String>, Header, description = "x402 v1 payment (base64 JSON); required when payments are on"),
        ("PAYMENT-SIGNATURE" = Option<String>, Header, description = "x402 v2 payment (base64 JSON), instead of X-PAYMENT"),
        ("X-User-Proof" = Option<String>, Header, description = crate::api::docs::USER_PROOF_HEADER),
    ),
    responses(
        (status = 201, description = "Job accepted", body = CommitResponse,
            headers(
                ("PAYMENT-RESPONSE" = String, description = "x402 v2 settlement (base64 JSON); paid commits with `--settlement at-commit` only (on completion nothing is settled yet: see the record's `payment_transaction`)"),
                ("X-PAYMENT-RESPONSE" = String, description = "x402 v1 settlement (base64 JSON); paid commits with `--settlement at-commit` only"),
            )),
        (status = 400, response = crate::api::docs::BadRequest),
        (status = 401, response = crate::api::docs::UserProofRequired),
        (status = 402, response = crate::api::docs::PaymentRequired),
        (status = 413, response = crate::api::docs::PayloadTooLarge),
        (status = 415, response = crate::api::docs::UnsupportedMediaType),
        (status = 422, response = crate::api::docs::NoTrustedWorkerAnswer),
        (status = 429, response = crate::api::docs::RateLimited),
        (status = 503, response = crate::api::docs::Unavailable),
    ))]
pub(super) async fn commit_fast(
    State(c): State<Coordinator>,
    ClientAddr(client): ClientAddr,
    request: CommitRequest,
) -> Result<Response, ApiError> {
    commit(c, Tier::Fast, &client, request).await
}

#[utoipa::path(post, path = "/v1/jobs/commit/cheap", tag = "jobs",
    request_body = crate::api::docs::SubmissionRequest,
    params(
        ("X-PAYMENT" = Option<String>, Header, description = "x402 v1 payment (base64 JSON); required when payments are on"),
        ("PAYMENT-SIGNATURE" = Option<String>, Header, description = "x402 v2 payment (base64 JSON), instead of X-PAYMENT"),
        ("X-User-Proof" = Option<String>, Header, description = crate::api::docs::USER_PROOF_HEADER),
    ),
    responses(
        (status = 201, description = "Job accepted", body = CommitResponse,
            headers(
                ("PAYMENT-RESPONSE" = String, description = "x402 v2 settlement (base64 JSON); paid commits with `--settlement at-commit` only (on completion nothing is settled yet: see the record's `payment_transaction`)"),
                ("X-PAYMENT-RESPONSE" = String, description = "x402 v1 settlement (base64 JSON); paid commits with `--settlement at-commit` only"),
            )),
        (status = 400, response = crate::api::docs::BadRequest),
        (status = 401, response = crate::api::docs::UserProofRequired),
        (status = 402, response = crate::api::docs::PaymentRequired),
        (status = 413, response = crate::api::docs::PayloadTooLarge),
        (status = 415, response = crate::api::docs::UnsupportedMediaType),
        (status = 422, response = crate::api::docs::NoTrustedWorkerAnswer),
        (status = 429, response = crate::api::docs::RateLimited),
        (status = 503, response = crate::api::docs::Unavailable),
    ))]
pub(super) async fn commit_cheap(
    State(c): State<Coordinator>,
    ClientAddr(client): ClientAddr,
    request: CommitRequest,
) -> Result<Response, ApiError> {
    commit(c, Tier::Cheap, &client, request).await
}

/// Validates (400, never charged), then with payments on: authorizes the
/// payment (402), decides admission once (422/503: the refusal is recorded
/// in the same event, nothing is charged, and the payment's nonce stays
/// reserved until it expires: one authorization buys at most one refusal),
/// settles (402 on failure, no job), and only then creates the job with the
/// settlement as its `payment_ref`, spending the nonce in the same write.
/// A retry of a payment that already bought this job gets the same 201.
/// The job is charged to `client`, its owner for the byte budgets
/// (decision 0018).
pub(super) async fn commit(
    c: Coordinator,
    tier: Tier,
    client: &str,
    request: CommitRequest,
) -> Result<Response, ApiError> {
    let CommitRequest {
        headers,
        submission,
        proof,
    } = request;
    let mut submission = submission.map_err(ApiError::BadRequest)?;
    let proof_by_payment = prove_private(&c, &proof, &mut submission)?;
    let job_type = submission.job_type;
    let Some(gate) = c.payments() else {
        // Cluster mode: the user's trusted worker may be on another node.
        let elsewhere = crate::node::trusted_elsewhere(&c, &submission).await;
        let committed = c.with(|core, now_ms| match elsewhere {
            true => core.commit_trusted_elsewhere(client, submission, tier, None, now_ms),
            false => core.commit_from(client, submission, tier, None, now_ms),
        });
        count_commit(&c, &committed, tier, job_type);
        return answer_commit(&c, committed, None).await;
    };
    let price = c.config().prices.price(tier, submission.job_type);
    let url = format!("{}{}", public_base_url(&c, &headers), tier.commit_path());
    let offer = gate.offer(
        price,
        &url,
        &format!("{tier} {} compute job", submission.job_type),
    );
    let now_seconds = u64::try_from(c.now_ms() / 1000).unwrap_or(0);
    let auth = match gate.authorize(&offer, &headers, now_seconds) {
        Ok(auth) => {
            c.metrics().payment_verified();
            auth
        }
        Err(refusal) => {
            if refusal.reason() == Some(&x402::Reason::NonceAlreadyUsed) {
                let key = gate.nonce_key(&offer, &headers, now_seconds);
                if let Some((job_id, response_header)) =
                    bought_with_nonce(&c, key, &submission, tier).await?
                {
                    return answer_commit(&c, Ok(job_id), Some(&response_header)).await;
                }
            }
            c.metrics().payment_refused(refusal.reason());
            return Err(ApiError::Payment(Box::new(refusal)));
        }
    };
    if proof_by_payment {
        paid_by_the_user(&c, &proof, gate, &auth, &submission.user_id)?;
    }
    // Cluster mode: the user's trusted worker may be on another node.
    let elsewhere = crate::node::trusted_elsewhere(&c, &submission).await;
    // One decision: a refusal is recorded here, under the same lock, and
    // admission is never asked again for this request.
    let admitted = c.with(|core, now_ms| match elsewhere {
        true => core.admit_trusted_elsewhere(client, &submission),
        false => core.admit_from(client, &submission, tier, now_ms),
    });
    if let Err(refused) = admitted {
        gate.refuse(auth);
        return answer_commit(&c, Err(refused), None).await;
    }
    // Admitted and not yet counted: the queued bytes' bound allows it
    // (`crate::resources`) until its job exists.
    let _paid = c.paid_commit();
    settle_and_commit(&c, gate, auth, client, submission, tier).await
}

/// A PRIVATE commit acts for its user: with user auth on, the user id
/// becomes its account's normal form and the caller proves it, by the
/// `X-User-Proof` header now or, when paying without one, by paying from
/// the account's address (`true`: checked once the payment is verified).
fn prove_private(
    c: &Coordinator,
    proof: &user_auth::ProofContext,
    submission: &mut JobSubmission,
) -> Result<bool, ApiError> {
    if submission.privacy_class != PrivacyClass::Private {
        return Ok(false);
    }
    submission.user_id = user_auth::normal_user_id(c, &submission.user_id)?;
    if c.config().user_auth == crate::config::UserAuth::Off {
        return Ok(false);
    }
    let by_payment = c.payments().is_some() && !proof.has_proof();
    if !by_payment {
        user_auth::prove_user(c, proof, &submission.user_id, None)?;
    }
    Ok(by_payment)
}

/// A PRIVATE commit without a proof header: proven when the verified
/// payer is the user's address; else 401, the payment's nonce released
/// (nothing was charged).
fn paid_by_the_user(
    c: &Coordinator,
    proof: &user_auth::ProofContext,
    gate: &x402::PaymentGate,
    auth: &x402::Authorized,
    user_id: &str,
) -> Result<(), ApiError> {
    let payer = auth.verified.as_ref().map(|v| v.from.0);
    user_auth::prove_user(c, proof, user_id, payer.as_ref())
        .map(|_| ())
        .inspect_err(|_| gate.cancel(auth))
}

/// Creates the job of an authorized payment, spending the nonce in the
/// same write: settled first (`--settlement at-commit`: 402 on failure, no
/// job; `payment_ref` the transaction), or verified with the facilitator
/// and settled once the job's result is checked (the default: decision
/// 0021; `payment_ref` names the authorization).
async fn settle_and_commit(
    c: &Coordinator,
    gate: &x402::PaymentGate,
    auth: x402::Authorized,
    client: &str,
    submission: JobSubmission,
    tier: Tier,
) -> Result<Response, ApiError> {
    let job_type = submission.job_type;
    let payment = match c.config().settlement {
        Settlement::AtCommit => settle_now(c, gate, auth).await?,
        Settlement::OnCompletion => settle_later(c, gate, auth).await?,
    };
    let response_header = payment.paid_with.response_header.clone();
    let committed =
        c.with(|core, now_ms| core.commit_from(client, submission, tier, Some(payment), now_ms));
    count_commit(c, &committed, tier, job_type);
    answer_commit(c, committed, Some(&response_header)).await
}

/// Settling on completion, at commit: the facilitator's `/verify` (402 on
/// a refusal, the nonce released), then the ticket the job keeps. Nothing
/// moves yet, so the 201 carries no `PAYMENT-RESPONSE`.
async fn settle_later(
    c: &Coordinator,
    gate: &x402::PaymentGate,
    auth: x402::Authorized,
) -> Result<Payment, ApiError> {
    gate.verify(&auth).await.map_err(|refusal| {
        c.metrics().payment_refused(refusal.reason());
        ApiError::Payment(Box::new(refusal))
    })?;
    let ticket = gate.ticket(&auth);
    Ok(Payment {
        payment_ref: ticket.payment_ref.clone(),
        paid_with: PaidWith {
            nonce: auth.nonce_key,
            response_header: String::new(),
            ticket: Some(Box::new(ticket)),
        },
    })
}

/// `--settlement at-commit`: settles now (402 on failure, no job).
async fn settle_now(
    c: &Coordinator,
    gate: &x402::PaymentGate,
    auth: x402::Authorized,
) -> Result<Payment, ApiError> {
    let paid = gate.settle_unspent(auth).await;
    c.metrics().payment_settled(paid.is_ok());
    let paid = paid.map_err(|refusal| {
        // A 402 like any other: counted by its reason too.
        c.metrics().payment_refused(refusal.reason());
        ApiError::Payment(Box::new(refusal))
    })?;
    Ok(Payment {
        payment_ref: paid.payment_ref().to_owned(),
        paid_with: PaidWith {
            nonce: paid.nonce_key,
            response_header: paid.settlement.payment_response_header(),
            ticket: None,
        },
    })
}

/// The job (and its `PAYMENT-RESPONSE`) a payment with nonce `key`
/// already bought with this very submission, if any: a retried commit gets
/// that job again.
async fn bought_with_nonce(
    c: &Coordinator,
    key: Option<NonceKey>,
    submission: &JobSubmission,
    tier: Tier,
) -> Result<Option<(Uuid, String)>, ApiError> {
    let mut bought = match key.and_then(|key| c.read(|core| core.paid_job_id(&key))) {
        Some(id) => {
            read_job(c, &id)?.and_then(|job| crate::core::bought_with(&job, submission, tier))
        }
        None => None,
    };
    if let (None, Some(key)) = (&bought, key) {
        // Cluster mode: the job may be held by another node.
        bought = crate::node::shared_paid_job(c, key, submission, tier).await;
    }
    Ok(bought)
}

fn count_commit(
    c: &Coordinator,
    committed: &Result<uuid::Uuid, CommitError>,
    tier: Tier,
    job_type: JobType,
) {
    if committed.is_ok() {
        c.metrics().job_committed(tier, job_type);
    }
}

/// The answer to a commit, once what it reports is durable: 201 with the
/// job id (and the payment's `PAYMENT-RESPONSE` when paid), or the refusal.
pub(super) async fn answer_commit(
    c: &Coordinator,
    committed: Result<uuid::Uuid, CommitError>,
    payment_response: Option<&str>,
) -> Result<Response, ApiError> {
    // The 201 promises the job exists, so it must survive a crash first.
    c.durable().await.map_err(ApiError::internal)?;
    match committed {
        Ok(job_id) => {
            let mut response =
                (StatusCode::CREATED, Json(CommitResponse { job_id })).into_response();
            // Empty: nothing was settled at commit (decision 0021).
            let payment_response = payment_response.filter(|v| !v.is_empty());
            if let Some(value) = payment_response.and_then(|v| HeaderValue::from_str(v).ok()) {
                for name in [x402::wire::PAYMENT_RESPONSE, x402::wire::X_PAYMENT_RESPONSE] {
                    if let Ok(name) = header::HeaderName::from_bytes(name.as_bytes()) {
                        response.headers_mut().insert(name, value.clone());
                    }
                }
            }
            Ok(response)
        }
        Err(CommitError::NoTrustedWorker(job_id)) => Err(ApiError::NoTrustedWorker(job_id)),
        Err(e @ (CommitError::QueueFull | CommitError::StorageFull)) => {
            Err(ApiError::Unavailable(e.to_string()))
        }
        Err(e @ CommitError::RateLimited { retry_after_ms }) => Err(ApiError::RateLimited {
            message: e.to_string(),
            retry_after_s: u64::try_from(retry_after_ms.max(0) + 999).unwrap_or(0) / 1000,
        }),
    }
}

/// The base URL clients reach us at, for the payment's `resource`: the
/// configured public URL, else `http://` + the Host header.
fn public_base_url(c: &Coordinator, headers: &HeaderMap) -> String {
    if let Some(url) = c.config().public_urls.first() {
        return url.trim_end_matches('/').to_owned();
    }
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| !h.is_empty() && h.len() <= 255)
        .unwrap_or("localhost");
    format!("http://{host}")
}

/// `GET /v1/jobs/{id}`, the spec's poll; with `?wait_ms=N` a long poll: a
/// job that is not terminal is answered when its status changes, the
/// coordinator shuts down, or N ms pass, whichever is first. Polls beyond
/// the held-poll bounds (total, per client) are answered at once.
#[utoipa::path(get, path = "/v1/jobs/{id}", tag = "jobs",
    params(
        ("id" = String, Path, description = "The job id a commit returned (a UUID)"),
        ("wait_ms" = Option<u64>, Query, description = "Long poll: hold the request until the job's \
            status changes, the coordinator shuts down, or this many milliseconds pass (0 to 30000 by \
            default, `--poll-wait-ms-max`). A terminal job is answered at once; polls beyond the \
            held-poll bounds are answered at once, never refused. Without it, the spec's poll."),
    ),
    responses(
        (status = 200, description = "The job", body = protocol::api::JobRecord),
        (status = 400, response = crate::api::docs::BadRequest),
        (status = 404, response = crate::api::docs::NotFound),
    ))]
pub(super) async fn poll(
    State(c): State<Coordinator>,
    ClientAddr(client): ClientAddr,
    JobId(id): JobId,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let wait_ms = wait_ms(query.as_deref(), c.config().limits.poll_wait_ms_max)?;
    // The job is read under the state lock and shared; its record (copies
    // of the output and receipt) is built after the lock is let go.
    let job = match wait_ms {
        None | Some(0) => None,
        Some(wait_ms) => match c.watch_job(id, &client) {
            Watch::Unknown => None,
            Watch::Now(job) => Some(job),
            Watch::Held(held) => {
                held.wait(wait_ms).await;
                None
            }
        },
    };
    // The core's job, else a finished job it no longer holds, from the store.
    let job = match job {
        Some(job) => Some(job),
        None => read_job(&c, &id)?,
    };
    let record = job.map(|job| job.record());
    // In cluster mode a job this node does not hold is read from the
    // shared store, committed, whoever holds it (a held poll waits there).
    let record = match record {
        Some(record) => Some(record),
        None => crate::node::shared_record(&c, id, wait_ms, &client)
            .await
            .map_err(|e| {
                tracing::error!(error = %e, job = %crate::shell::job_ref(&id), "reading a job from the shared store failed");
                ApiError::internal(e)
            })?,
    };
    // Memory runs ahead of the disk under group commit: show a state (a
    // `completed`, say) only once it would survive a crash.
    c.durable().await.map_err(ApiError::internal)?;
    record
        .map(|record| Json(record).into_response())
        .ok_or(ApiError::JobNotFound)
}

/// [`Coordinator::job`]: the core's job or the store's; a store that
/// cannot answer is a 500 (logged).
fn read_job(
    c: &Coordinator,
    id: &uuid::Uuid,
) -> Result<Option<std::sync::Arc<crate::core::Job>>, ApiError> {
    c.job(id).map_err(|e| {
        tracing::error!(error = %e, job = %crate::shell::job_ref(id), "reading a job from the store failed");
        ApiError::internal(e)
    })
}

/// The `wait_ms` of a job poll: absent, or one whole number of
/// milliseconds from 0 to `max_ms`. Other parameters are ignored, as the
/// spec's poll ignores its query.
fn wait_ms(query: Option<&str>, max_ms: u64) -> Result<Option<u64>, ApiError> {
    let invalid = || {
        ApiError::BadRequest(format!(
            "wait_ms must be a whole number of milliseconds from 0 to {max_ms}"
        ))
    };
    let Some(query) = query else {
        return Ok(None);
    };
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query)
        .map_err(|e| ApiError::BadRequest(format!("malformed query string: {e}")))?;
    let mut values = pairs.iter().filter(|(name, _)| name == "wait_ms");
    let Some((_, value)) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(ApiError::BadRequest("wait_ms given more than once".into()));
    }
    // `u64::from_str` takes a leading `+`; only digits are a number here.
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid());
    }
    match value.parse::<u64>() {
        Ok(ms) if ms <= max_ms => Ok(Some(ms)),
        _ => Err(invalid()),
    }
}
