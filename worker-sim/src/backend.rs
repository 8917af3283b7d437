//! How a worker turns a payload into an output: [`SimBackend`] computes it
//! from the payload; [`OpenAiBackend`] asks an OpenAI-compatible chat
//! completions server (Ollama, vLLM, llama.cpp, the stubs of this crate)
//! through the `router` crate's OpenAI adapter, so workers and the router
//! share one client, one set of task prompts and one retry policy.

use protocol::api::{Payload, TaskType};
use router::hosted::prompts;
use router::{
    AdapterError, HttpTransport, OpenAiClient, ProviderSettings, ReqwestTransport, RetryPolicy,
};
use serde_json::Value;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use testkit::outputs;

pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    #[error("backend request failed: {0}")]
    Request(String),
    #[error("backend answered HTTP {status}: {body}")]
    Status { status: u16, body: String },
    #[error("backend answer unusable: {0}")]
    BadAnswer(String),
}

impl From<AdapterError> for BackendError {
    fn from(e: AdapterError) -> Self {
        match e {
            AdapterError::ProviderStatus { status, .. }
            | AdapterError::HttpStatus { status, .. } => BackendError::Status {
                status,
                body: e.to_string(),
            },
            AdapterError::ProviderMalformed { .. }
            | AdapterError::MalformedResponse { .. }
            | AdapterError::InvalidJsonOutput { .. } => BackendError::BadAnswer(e.to_string()),
            other => BackendError::Request(other.to_string()),
        }
    }
}

/// Executes one job.
pub trait Backend: Send + Sync {
    fn execute(&self, payload: &Payload) -> BoxFuture<Result<Value, BackendError>>;
}

/// Outputs from [`outputs::output_for`]; the latency is the worker's business.
#[derive(Debug, Clone, Copy, Default)]
pub struct SimBackend;

impl Backend for SimBackend {
    fn execute(&self, payload: &Payload) -> BoxFuture<Result<Value, BackendError>> {
        let output = outputs::output_for(payload);
        Box::pin(async move { Ok(output) })
    }
}

/// `max_tokens` of task prompts.
const TASK_MAX_TOKENS: u32 = 512;

/// Jobs run as chat completions at `{base_url}/v1/chat/completions` (the
/// base URL may end in `/v1` or not). TASK jobs use the router's prompt
/// templates and output parsing; 429 and 5xx are retried per the router's
/// [`RetryPolicy`], honouring `retry-after`.
#[derive(Debug, Clone)]
pub struct OpenAiBackend {
    client: OpenAiClient,
}

impl OpenAiBackend {
    /// Over real HTTP (reqwest). Without an API key requests go out without
    /// `Authorization`, as local servers expect.
    pub fn new(
        base_url: impl Into<String>,
        model: impl Into<String>,
        api_key: Option<String>,
    ) -> Self {
        Self::with_transport(
            Arc::new(ReqwestTransport::default()),
            base_url,
            model,
            api_key,
        )
    }

    /// Over any transport of the router, e.g. its in-process transport to a
    /// stub in the simulation.
    pub fn with_transport(
        transport: Arc<dyn HttpTransport>,
        base_url: impl Into<String>,
        model: impl Into<String>,
        api_key: Option<String>,
    ) -> Self {
        let mut settings = ProviderSettings::new(base_url, model);
        if let Some(key) = api_key {
            settings = settings.with_api_key(key);
        }
        Self {
            client: OpenAiClient::new(transport, settings).allow_missing_key(),
        }
    }

    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.client = self.client.with_retry(retry);
        self
    }
}

impl Backend for OpenAiBackend {
    fn execute(&self, payload: &Payload) -> BoxFuture<Result<Value, BackendError>> {
        let client = self.client.clone();
        let payload = payload.clone();
        Box::pin(async move {
            match payload {
                Payload::Llm { prompt, max_tokens } => {
                    let text = client.complete(&prompt, max_tokens).await?;
                    Ok(Value::String(text))
                }
                Payload::Task { task_type, input } => {
                    let chat = prompts::task_prompt(task_type, &input);
                    let answer = client
                        .chat(Some(chat.system), &chat.user, TASK_MAX_TOKENS)
                        .await?;
                    let output = prompts::task_output(task_type, &answer)?;
                    // A worker must return an object for extract_json, or the
                    // coordinator refuses the result as invalid_output.
                    if task_type == TaskType::ExtractJson && !output.is_object() {
                        return Err(BackendError::BadAnswer(
                            "extract_json answer is not a JSON object".into(),
                        ));
                    }
                    Ok(output)
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_the_key() {
        let b = OpenAiBackend::new("http://x/v1", "m", Some("sk-secret".into()));
        assert!(!format!("{b:?}").contains("sk-secret"));
    }

    #[test]
    fn adapter_errors_map_to_backend_errors() {
        let e: BackendError = AdapterError::InvalidJsonOutput {
            message: "x".into(),
        }
        .into();
        assert!(matches!(e, BackendError::BadAnswer(_)));
    }
}
