//! `POST /v1/jobs/{id}/cancel` (decision 0022): the job id is the
//! capability for a PUBLIC job; a PRIVATE job's cancel needs its user's
//! proof (`X-User-Proof`, with user auth on). The decision is the core's
//! (`core/cancel.rs`); this translates it.

use super::error::ApiError;
use super::user_auth::{self, ProofContext};
use crate::core::{cancellable, Job};
use crate::shell::Coordinator;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use protocol::api::PrivacyClass;
use std::sync::Arc;
use uuid::Uuid;

/// What a cancel of a job this node does not hold answers in cluster mode.
const HELD_ELSEWHERE: &str = "this job waits in the cluster's shared pool or is held by another \
    node; cancelling it there is not supported yet (decision 0022): retry once a node holds it, \
    or let it end";

/// Where the job to cancel was found.
enum Found {
    /// In this coordinator's core or store.
    Here(Arc<Job>),
    /// Cluster mode: only in the shared store (the pool, or another node's).
    Elsewhere(Box<Job>),
}

impl Found {
    fn job(&self) -> &Job {
        match self {
            Found::Here(job) => job,
            Found::Elsewhere(job) => job,
        }
    }
}

/// Cancels a job that has not ended: it fails `cancelled`, its worker is
/// told, a held poll of it answers at once; a paid job is never charged
/// for it. A job that ended answers 409 with its record.
#[utoipa::path(post, path = "/v1/jobs/{id}/cancel", tag = "jobs",
    params(
        ("id" = String, Path, description = "The job id a commit returned (a UUID)"),
        ("X-User-Proof" = Option<String>, Header, description = crate::api::docs::USER_PROOF_HEADER),
    ),
    responses(
        (status = 200, description = "Cancelled: the job's record, `failed` with error `cancelled`", body = protocol::api::JobRecord),
        (status = 401, response = crate::api::docs::UserProofRequired),
        (status = 404, response = crate::api::docs::NotFound),
        (status = 409, response = crate::api::docs::NotCancellableAnswer),
        (status = 503, response = crate::api::docs::Unavailable),
    ))]
pub(super) async fn cancel(
    State(c): State<Coordinator>,
    super::extract::JobId(id): super::extract::JobId,
    proof: ProofContext,
) -> Result<Response, ApiError> {
    let found = find(&c, id).await?.ok_or(ApiError::JobNotFound)?;
    let job = found.job();
    if job.submission.privacy_class == PrivacyClass::Private {
        user_auth::prove_user(&c, &proof, &job.submission.user_id, None)?;
    }
    let cancelled = match found {
        Found::Here(_) => c.with(|core, now_ms| core.cancel(id, now_ms).ok()),
        Found::Elsewhere(_) => None,
    };
    // Memory runs ahead of the disk: answer only what would survive a crash.
    c.durable().await.map_err(ApiError::internal)?;
    match cancelled {
        Some(job) => Ok(Json(job.record()).into_response()),
        // Refused: why is read again, as the job is now.
        None => Err(refusal(find(&c, id).await?)),
    }
}

/// The answer to a cancel the core refused or could not make.
fn refusal(found: Option<Found>) -> ApiError {
    match found {
        None => ApiError::JobNotFound,
        Some(found) if !cancellable(found.job().status) => {
            ApiError::NotCancellable(Box::new(found.job().record()))
        }
        Some(_) => ApiError::Unavailable(HELD_ELSEWHERE.into()),
    }
}

/// The job, from the core, the store, or (cluster mode) the shared store.
async fn find(c: &Coordinator, id: Uuid) -> Result<Option<Found>, ApiError> {
    let here = c.job(&id).map_err(|e| {
        tracing::error!(error = %e, job = %crate::shell::job_ref(&id), "reading a job from the store failed");
        ApiError::internal(e)
    })?;
    if let Some(job) = here {
        return Ok(Some(Found::Here(job)));
    }
    let shared = crate::node::shared_job(c, id).await.map_err(|e| {
        tracing::error!(error = %e, job = %crate::shell::job_ref(&id), "reading a job from the shared store failed");
        ApiError::internal(e)
    })?;
    Ok(shared.map(|job| Found::Elsewhere(Box::new(job))))
}
