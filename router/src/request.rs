//! What callers ask for and what they get back (spec 4.8).

use crate::error::AdapterError;
use crate::route::{Chain, Route};
use protocol::api::{Payload, Policy, PrivacyClass, TaskType, Tier};
use protocol::money::Price;
use protocol::receipt::Receipt;
use serde::{Deserialize, Serialize};

/// Arguments of [`crate::ComputeRouter::run_llm`].
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct LlmRequest {
    pub prompt: String,
    /// Defaults to [`crate::RouterConfig::default_max_tokens`].
    pub max_tokens: Option<u32>,
    /// Defaults to AUTO, which resolves to FAST.
    pub policy: Option<Policy>,
    /// Defaults to PUBLIC.
    pub privacy: Option<PrivacyClass>,
    pub user_id: String,
    /// Defaults to `chain_a`.
    pub chain_preference: Option<Chain>,
    /// A coordinator quoting more than this is not used (its route fails
    /// with `PriceAboveMax` and the next one is tried). None: any price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_price: Option<Price>,
}

impl LlmRequest {
    pub fn new(prompt: impl Into<String>, user_id: impl Into<String>) -> Self {
        Self {
            prompt: prompt.into(),
            user_id: user_id.into(),
            ..Self::default()
        }
    }
}

/// Arguments of [`crate::ComputeRouter::run_task`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskRequest {
    pub task_type: TaskType,
    pub input: String,
    /// Defaults to AUTO, which resolves to CHEAP.
    pub policy: Option<Policy>,
    /// Defaults to PUBLIC.
    pub privacy: Option<PrivacyClass>,
    pub user_id: String,
    /// Defaults to `chain_a`.
    pub chain_preference: Option<Chain>,
    /// As [`LlmRequest::max_price`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_price: Option<Price>,
}

impl TaskRequest {
    pub fn new(task_type: TaskType, input: impl Into<String>, user_id: impl Into<String>) -> Self {
        Self {
            task_type,
            input: input.into(),
            policy: None,
            privacy: None,
            user_id: user_id.into(),
            chain_preference: None,
            max_price: None,
        }
    }
}

/// A job's result and how it was obtained.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComputeResult {
    /// A string for LLM jobs and summarize/classify; parsed JSON for
    /// extract_json on hosted routes; whatever the worker produced on
    /// decentralized routes.
    pub output: serde_json::Value,
    pub route: Route,
    /// The quoted price (`$0.010`); null for hosted routes.
    pub price: Option<String>,
    /// From the call to the result, across every adapter tried.
    pub latency_ms: u64,
    /// The verified worker receipt; decentralized routes only.
    pub receipt: Option<Receipt>,
    /// Every route tried for this call, in order, the last the one that
    /// answered. In memory only (its errors are not data to store): a
    /// result read back has none.
    #[serde(skip)]
    pub attempts: Vec<Attempt>,
}

/// One route tried for a call and how it went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    pub route: Route,
    pub outcome: AttemptOutcome,
}

/// How one route of a call went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// Its answer is the call's result.
    Answered,
    /// It failed or was skipped, and the next route was tried. A
    /// coordinator job given up on at its timeout is
    /// [`AdapterError::PollTimeout`], whose `cancel` says whether it was
    /// cancelled before the next route ran.
    Failed(AdapterError),
}

/// A request with every default applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Job {
    pub payload: Payload,
    pub tier: Tier,
    pub privacy: PrivacyClass,
    pub user_id: String,
    pub chain: Chain,
    pub max_price: Option<Price>,
}

impl Job {
    pub fn from_llm(request: LlmRequest, default_max_tokens: u32) -> Self {
        let payload = Payload::Llm {
            prompt: request.prompt,
            max_tokens: request.max_tokens.unwrap_or(default_max_tokens),
            model: None,
        };
        Self::with_defaults(
            payload,
            request.policy,
            request.privacy,
            request.user_id,
            request.chain_preference,
        )
        .with_max_price(request.max_price)
    }

    pub fn from_task(request: TaskRequest) -> Self {
        let payload = Payload::Task {
            task_type: request.task_type,
            input: request.input,
        };
        Self::with_defaults(
            payload,
            request.policy,
            request.privacy,
            request.user_id,
            request.chain_preference,
        )
        .with_max_price(request.max_price)
    }

    fn with_max_price(self, max_price: Option<Price>) -> Self {
        Self { max_price, ..self }
    }

    fn with_defaults(
        payload: Payload,
        policy: Option<Policy>,
        privacy: Option<PrivacyClass>,
        user_id: String,
        chain: Option<Chain>,
    ) -> Self {
        let tier = policy.unwrap_or(Policy::Auto).resolve(payload.job_type());
        Self {
            payload,
            tier,
            privacy: privacy.unwrap_or(PrivacyClass::Public),
            user_id,
            chain: chain.unwrap_or_default(),
            max_price: None,
        }
    }
}
