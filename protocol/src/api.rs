//! HTTP bodies of the coordinator API (spec sections 2 and 4).

use crate::money::Price;
use crate::receipt::Receipt;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Declares a string enum with its exact wire spelling, a parser and a printer.
macro_rules! wire_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        pub enum $name {
            $(#[serde(rename = $text)] $variant),+
        }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }

            pub fn parse(text: &str) -> Option<Self> {
                match text { $($text => Some($name::$variant),)+ _ => None }
            }
        }

        // By hand: utoipa's derive does not see a `rename` given through a
        // macro fragment and would document the Rust variant names.
        #[cfg(feature = "openapi")]
        impl utoipa::PartialSchema for $name {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                utoipa::openapi::ObjectBuilder::new()
                    .schema_type(utoipa::openapi::schema::Type::String)
                    .enum_values(Some([$($text),+]))
                    .into()
            }
        }

        #[cfg(feature = "openapi")]
        impl utoipa::ToSchema for $name {
            fn name() -> std::borrow::Cow<'static, str> {
                std::borrow::Cow::Borrowed(stringify!($name))
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

wire_enum!(JobType { LlmInfer => "LLM_INFER", Task => "TASK" });
wire_enum!(
    /// The policy a caller asks for; `AUTO` resolves per job type.
    Policy { Fast => "FAST", Cheap => "CHEAP", Auto => "AUTO" }
);
wire_enum!(
    /// A resolved pricing tier; each has its commit endpoint.
    Tier { Fast => "FAST", Cheap => "CHEAP" }
);
wire_enum!(PrivacyClass { Public => "PUBLIC", Private => "PRIVATE" });
wire_enum!(TaskType { Summarize => "summarize", Classify => "classify", ExtractJson => "extract_json" });
wire_enum!(JobStatus {
    Pending => "pending",
    Assigned => "assigned",
    Running => "running",
    Completed => "completed",
    Failed => "failed",
});

impl Policy {
    /// AUTO is FAST for LLM_INFER and CHEAP for TASK.
    pub fn resolve(self, job_type: JobType) -> Tier {
        match (self, job_type) {
            (Policy::Fast, _) | (Policy::Auto, JobType::LlmInfer) => Tier::Fast,
            (Policy::Cheap, _) | (Policy::Auto, JobType::Task) => Tier::Cheap,
        }
    }
}

impl Tier {
    pub fn commit_path(self) -> &'static str {
        match self {
            Tier::Fast => "/v1/jobs/commit/fast",
            Tier::Cheap => "/v1/jobs/commit/cheap",
        }
    }
}

impl JobStatus {
    pub fn is_terminal(self) -> bool {
        matches!(self, JobStatus::Completed | JobStatus::Failed)
    }
}

/// `GET /v1/health`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Health {
    pub status: String,
    pub workers_online: u64,
    pub network: String,
    pub timestamp: String,
}

/// `GET /v1/quote`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Quote {
    pub price: Price,
    pub endpoint: String,
    pub policy_resolved: Tier,
    pub network: String,
    /// Always null; reserved for dynamic pricing.
    pub expires_at: Option<String>,
}

/// A validated job payload. On the wire it is an object tagged by `job_type`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "job_type")]
pub enum Payload {
    #[serde(rename = "LLM_INFER")]
    Llm {
        prompt: String,
        max_tokens: u32,
        /// The model the client asked for (the OpenAI door's `model`), for
        /// workers that serve several; absent on the wire when not asked
        /// (decision 0023).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
    },
    #[serde(rename = "TASK")]
    Task { task_type: TaskType, input: String },
}

impl Payload {
    pub fn job_type(&self) -> JobType {
        match self {
            Payload::Llm { .. } => JobType::LlmInfer,
            Payload::Task { .. } => JobType::Task,
        }
    }
}

/// `POST /v1/jobs/commit/{tier}` body, after validation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSubmission {
    pub job_type: JobType,
    pub user_id: String,
    pub payload: Payload,
    pub privacy_class: PrivacyClass,
}

/// 201 of a commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CommitResponse {
    pub job_id: Uuid,
}

/// `GET /v1/jobs/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobRecord {
    pub id: Uuid,
    pub status: JobStatus,
    /// `{"output": ...}` when completed, `{"error": "..."}` when failed.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub result: Option<serde_json::Value>,
    pub receipt: Option<Receipt>,
    pub created_at: String,
    pub completed_at: Option<String>,
    /// A paid job settled on completion: the settlement's transaction, once
    /// it exists (the receipt's `payment_ref` names the authorization, as
    /// the worker signs it before settlement). Absent otherwise. An
    /// extension of the spec's record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payment_transaction: Option<String>,
}

/// 409 of `POST /v1/jobs/{id}/cancel` for a job that can no longer be
/// cancelled (it ended): `error` is `job_not_cancellable`, the other
/// fields the job's record as a poll shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobNotCancellable {
    #[cfg_attr(feature = "openapi", schema(example = "job_not_cancellable"))]
    pub error: String,
    #[serde(flatten)]
    pub job: JobRecord,
}

/// The `error` of [`JobNotCancellable`].
pub const JOB_NOT_CANCELLABLE: &str = "job_not_cancellable";

/// The path that cancels job `id`.
pub fn cancel_path(id: &Uuid) -> String {
    format!("/v1/jobs/{id}/cancel")
}

/// Every error answer: `{"error": "..."}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorBody {
    pub error: String,
}

/// 422 of a PRIVATE commit with no trusted worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NoTrustedWorker {
    pub error: String,
    pub job_id: Uuid,
}

/// 401 of a request that acts for a user without that user's proof
/// (`protocol::user_proof`): `error` is one of the codes of
/// [`crate::user_proof::RefusalCode`], `message` says what is missing and
/// how to provide it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UserProofRefused {
    #[cfg_attr(feature = "openapi", schema(example = "user_proof_required"))]
    pub error: String,
    pub message: String,
}

/// `POST /v1/trust/create` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CreatePairing {
    #[cfg_attr(
        feature = "openapi",
        schema(min_length = 1, max_length = 256, pattern = r"\S")
    )]
    pub user_id: String,
    /// When given, only this worker key can claim the code (a claim for
    /// another key answers `invalid_code` and leaves the code claimable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(pattern = "^0x0[23][0-9a-fA-F]{64}$"))]
    pub provider_pubkey: Option<String>,
}

/// 201 of `POST /v1/trust/create`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PairingCode {
    pub pairing_code: String,
    pub expires_at: String,
}

/// `POST /v1/trust/claim` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ClaimPairing {
    /// Case-insensitive.
    #[cfg_attr(
        feature = "openapi",
        schema(pattern = "^[0-9a-fA-F]{6}$", example = "a1b2c3")
    )]
    pub pairing_code: String,
    /// A compressed secp256k1 public key.
    #[cfg_attr(
        feature = "openapi",
        schema(
            pattern = "^0x0[23][0-9a-fA-F]{64}$",
            example = "0x0279be667ef9dcbbac55a06295ce870b07029bfcdb2dce28d959f2815b16f81798"
        )
    )]
    pub provider_pubkey: String,
}

/// 200 of `POST /v1/trust/claim`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Claimed {
    pub user_id: String,
    pub paired_at: String,
}

/// One entry of `GET /v1/trust/list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TrustedProvider {
    pub provider_pubkey: String,
    pub paired_at: String,
}

/// `GET /v1/trust/list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TrustList {
    pub providers: Vec<TrustedProvider>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn enums_use_spec_spelling() {
        assert_eq!(
            serde_json::to_value(JobType::LlmInfer).unwrap(),
            json!("LLM_INFER")
        );
        assert_eq!(TaskType::parse("extract_json"), Some(TaskType::ExtractJson));
        assert_eq!(JobStatus::parse("running"), Some(JobStatus::Running));
        assert_eq!(Policy::parse("auto"), None);
    }

    #[test]
    fn auto_resolves_per_job_type() {
        assert_eq!(Policy::Auto.resolve(JobType::LlmInfer), Tier::Fast);
        assert_eq!(Policy::Auto.resolve(JobType::Task), Tier::Cheap);
        assert_eq!(Policy::Cheap.resolve(JobType::LlmInfer), Tier::Cheap);
        assert_eq!(Policy::Fast.resolve(JobType::Task), Tier::Fast);
    }

    #[test]
    fn payload_is_tagged_by_job_type() {
        let p = Payload::Task {
            task_type: TaskType::Classify,
            input: "x".into(),
        };
        assert_eq!(
            serde_json::to_value(&p).unwrap(),
            json!({"job_type": "TASK", "task_type": "classify", "input": "x"})
        );
    }
}
