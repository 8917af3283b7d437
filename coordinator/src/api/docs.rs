//! The API contract's own parts: an OpenAPI 3.1 document whose operations
//! come from the handlers' `#[utoipa::path]` annotations as the routes are
//! registered (`api::routes`), and whose body types are those of
//! `protocol::api`, so it cannot drift from the code.
//!
//! The types here exist only to describe what the code checks by hand: the
//! commit body as sent (validated field by field in `validate.rs`, so it has
//! no serde type of its own), the shared error answers, and the x402 402 body
//! (built by the `x402` crate).

use protocol::api::{
    ClaimPairing, Claimed, CommitResponse, CreatePairing, ErrorBody, Health, JobNotCancellable,
    JobRecord, JobStatus, JobType, NoTrustedWorker, PairingCode, Policy, PrivacyClass, Quote,
    TaskType, Tier, TrustList, TrustedProvider, UserProofRefused,
};
use protocol::receipt::Receipt;
use utoipa::{OpenApi, ToResponse, ToSchema};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Compute coordinator",
        version = "1",
        description = "Accepts compute jobs (LLM_INFER, TASK), hands them to connected workers and returns \
            results with a signed receipt. Commits may require an x402 payment (402). Every answer carries \
            an `x-request-id` header (the caller's, when it sent a well-formed one), also found on the \
            coordinator's log lines for that request.",
        license(name = "MIT OR Apache-2.0", identifier = "MIT OR Apache-2.0"),
    ),
    components(
        schemas(
            Health, Quote, Tier, Policy, JobType, TaskType, PrivacyClass, JobStatus,
            SubmissionRequest, LlmSubmission, TaskSubmission, LlmPayloadRequest, TaskPayloadRequest, CommitResponse, JobRecord,
            Receipt, ErrorBody, NoTrustedWorker, CreatePairing, PairingCode, ClaimPairing, Claimed,
            TrustedProvider, TrustList, PaymentRequiredBody, PaymentOption, UserProofRefused,
            JobNotCancellable,
        ),
        responses(
            BadRequest, NotFound, UnsupportedMediaType, PayloadTooLarge, RateLimited,
            Unavailable, PaymentRequired, NoTrustedWorkerAnswer, UserProofRequired,
            NotCancellableAnswer,
        ),
    ),
    tags(
        (name = "jobs", description = "Quotes, commits and polling"),
        (name = "trust", description = "Pairing users with their trusted workers"),
        (name = "service", description = "Health, this contract and the worker WebSocket"),
        (name = "openai", description = "The OpenAI-compatible door: chat completions as LLM_INFER jobs (decision 0023)"),
    ),
)]
pub struct ApiDoc;

/// A job submission as sent (spec 2.3): an `LLM_INFER` or a `TASK` job.
/// Unknown top-level fields are ignored; a field that is present must have
/// its type (`null` is refused, 400).
pub struct SubmissionRequest;

impl utoipa::PartialSchema for SubmissionRequest {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{OneOfBuilder, Ref, Schema};
        Schema::OneOf(
            OneOfBuilder::new()
                .item(Ref::from_schema_name("LlmSubmission"))
                .item(Ref::from_schema_name("TaskSubmission"))
                .description(Some("A job submission: an LLM_INFER or a TASK job"))
                .build(),
        )
        .into()
    }
}

impl ToSchema for SubmissionRequest {}

/// An `LLM_INFER` job as sent.
#[derive(ToSchema)]
#[schema(example = json!({
    "job_type": "LLM_INFER",
    "user_id": "user-1",
    "payload": {"job_type": "LLM_INFER", "prompt": "Say hello", "max_tokens": 64},
    "privacy_class": "PUBLIC"
}))]
pub struct LlmSubmission {
    #[schema(pattern = "^LLM_INFER$")]
    pub job_type: String,
    /// The requesting user; not blank.
    #[schema(min_length = 1, max_length = 256, pattern = r"\S")]
    pub user_id: String,
    pub payload: LlmPayloadRequest,
    /// Default `PUBLIC`. A `PRIVATE` job only goes to the user's trusted workers.
    #[schema(required = false)]
    pub privacy_class: PrivacyClass,
}

/// A `TASK` job as sent.
#[derive(ToSchema)]
#[schema(example = json!({
    "job_type": "TASK",
    "user_id": "user-1",
    "payload": {"task_type": "summarize", "input": "A long text."}
}))]
pub struct TaskSubmission {
    #[schema(pattern = "^TASK$")]
    pub job_type: String,
    /// The requesting user; not blank.
    #[schema(min_length = 1, max_length = 256, pattern = r"\S")]
    pub user_id: String,
    pub payload: TaskPayloadRequest,
    /// Default `PUBLIC`. A `PRIVATE` job only goes to the user's trusted workers.
    #[schema(required = false)]
    pub privacy_class: PrivacyClass,
}

/// The payload of an `LLM_INFER` job.
#[derive(ToSchema)]
#[schema(example = json!({"prompt": "Say hello", "max_tokens": 64}))]
pub struct LlmPayloadRequest {
    /// Must equal the submission's `job_type` when present.
    #[schema(required = false, pattern = "^LLM_INFER$")]
    pub job_type: String,
    /// Not blank.
    #[schema(min_length = 1, pattern = r"\S")]
    pub prompt: String,
    /// Default 256.
    #[schema(required = false, minimum = 1, maximum = 32768)]
    pub max_tokens: u32,
    /// The model asked for, passed to the worker (workers that serve one
    /// model ignore it); no control characters.
    #[schema(
        required = false,
        min_length = 1,
        max_length = 256,
        pattern = r"^[^\x00-\x1f\x7f-\x9f]+$"
    )]
    pub model: String,
}

/// The payload of a `TASK` job.
#[derive(ToSchema)]
#[schema(example = json!({"task_type": "summarize", "input": "A long text."}))]
pub struct TaskPayloadRequest {
    /// Must equal the submission's `job_type` when present.
    #[schema(required = false, pattern = "^TASK$")]
    pub job_type: String,
    pub task_type: TaskType,
    pub input: String,
}

/// One way to pay (x402 `exact`): the spec's fields plus x402 v1's.
#[derive(ToSchema)]
#[schema(example = json!({
    "x402Version": 1,
    "scheme": "exact",
    "price": "$0.010",
    "network": "base-sepolia",
    "payTo": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
    "asset": "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
    "maxAmountRequired": "10000",
    "amount": "10000",
    "resource": "http://localhost:8080/v1/jobs/commit/fast",
    "description": "FAST LLM_INFER compute job",
    "mimeType": "application/json",
    "maxTimeoutSeconds": 300,
    "extra": {"name": "USDC", "version": "2"}
}))]
pub struct PaymentOption {
    pub scheme: String,
    pub price: protocol::money::Price,
    /// The x402 v1 network name where one exists (`base-sepolia`), else CAIP-2.
    pub network: String,
    #[schema(rename = "payTo")]
    pub pay_to: String,
    pub asset: String,
    /// The price in the asset's atomic units.
    #[schema(rename = "maxAmountRequired")]
    pub max_amount_required: String,
    pub resource: String,
    #[schema(rename = "maxTimeoutSeconds")]
    pub max_timeout_seconds: u64,
}

/// The body of a 402: why, and how to pay (spec 4.3, x402 v1).
#[derive(ToSchema)]
pub struct PaymentRequiredBody {
    #[schema(rename = "x402Version")]
    pub x402_version: u8,
    /// `X-PAYMENT header is required`, or why the payment sent was refused.
    pub error: String,
    pub accepts: Vec<PaymentOption>,
}

/// Missing or invalid fields or parameters; for a claim, also the code's
/// state (`invalid_code`, `already_claimed`, `expired`).
#[derive(ToResponse)]
#[response(examples(
    ("missing fields" = (value = json!({"error": "Missing required fields: job_type, payload, user_id"}))),
    ("bad job type" = (value = json!({"error": "job_type must be LLM_INFER or TASK"}))),
    ("claim" = (value = json!({"error": "invalid_code"}))),
))]
pub struct BadRequest(pub ErrorBody);

/// No such job (a malformed id names none either).
#[derive(ToResponse)]
#[response(example = json!({"error": "job not found"}))]
pub struct NotFound(pub ErrorBody);

/// The body is not `application/json` (or `+json`).
#[derive(ToResponse)]
#[response(example = json!({"error": "Content-Type must be application/json"}))]
pub struct UnsupportedMediaType(pub ErrorBody);

/// The body is larger than the limit (256 KiB by default).
#[derive(ToResponse)]
#[response(example = json!({"error": "request body is larger than 262144 bytes"}))]
pub struct PayloadTooLarge(pub ErrorBody);

/// Too many attempts from this address or for this user; retry after
/// `Retry-After` seconds.
#[derive(ToResponse)]
#[response(
    headers(("Retry-After" = u64, description = "Seconds until the limit's window ends")),
    example = json!({"error": "too many pairing codes created from this address; retry later"})
)]
pub struct RateLimited(pub ErrorBody);

/// A bounded resource is full (job queue, live pairing codes,
/// handshakes) or the coordinator is stopping; retry later.
#[derive(ToResponse)]
#[response(example = json!({"error": "the job queue is full; retry later"}))]
pub struct Unavailable(pub ErrorBody);

/// Payment gating is on and no payment was sent, or the payment was
/// refused. Nothing was charged.
#[derive(ToResponse)]
#[response(headers((
    "PAYMENT-REQUIRED" = String,
    description = "Base64 of the x402 v2 PaymentRequired object (CAIP-2 network)"
)))]
pub struct PaymentRequired(pub PaymentRequiredBody);

/// A PRIVATE job and no trusted worker of the user online: the job is
/// recorded `failed` (`no_trusted_worker`) and can be polled.
#[derive(ToResponse)]
#[response(example = json!({
    "error": "no_trusted_worker",
    "job_id": "0b6c1f0e-9c53-4d5e-8a0f-2f5d4c3b2a19"
}))]
pub struct NoTrustedWorkerAnswer(pub NoTrustedWorker);

/// What the `X-User-Proof` header is, for every operation that reads it.
pub const USER_PROOF_HEADER: &str =
    "The user's proof (decision 0017), needed with `--user-auth on` \
    (the default) by trust/create, trust/list, PRIVATE commits and a PRIVATE job's cancel: base64 of the JSON object \
    `{user_id, issued_at_ms, nonce, signature}`, the signature an EIP-191 personal_sign by the \
    user id's account over the text `protocol::user_proof::message` builds from the user id, \
    method, path with query, body SHA-256, issue time (within 300 s of the coordinator's clock) \
    and nonce (16 to 64 hex, once per address). A paid PRIVATE commit may instead pay from \
    the user's address.";

/// `--user-auth on` (the default) and the request acts for a user without
/// that user's proof. `error` is `user_proof_required`,
/// `user_proof_invalid`, `user_proof_expired`, `user_proof_replayed` or
/// `user_id_not_provable`; `message` says what is missing and how to
/// provide it.
#[derive(ToResponse)]
#[response(examples(
    ("no proof" = (value = json!({"error": "user_proof_required",
        "message": "this request acts for 0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266 and needs that user's proof: an X-User-Proof header, ..."}))),
    ("a plain name" = (value = json!({"error": "user_id_not_provable",
        "message": "user_id \"alice\" is not an account, so no signature can prove it: ..."}))),
))]
pub struct UserProofRequired(pub UserProofRefused);

/// The job ended (`completed` or `failed`) before the cancel: nothing
/// changed. The body is the job's record, as a poll shows it, with
/// `error` set to `job_not_cancellable`.
#[derive(ToResponse)]
#[response(example = json!({
    "error": "job_not_cancellable",
    "id": "0b6c1f0e-9c53-4d5e-8a0f-2f5d4c3b2a19",
    "status": "completed",
    "result": {"output": {"text": "hello"}},
    "receipt": null,
    "created_at": "2026-11-27T20:00:00.000Z",
    "completed_at": "2026-11-27T20:00:01.000Z"
}))]
pub struct NotCancellableAnswer(pub JobNotCancellable);
