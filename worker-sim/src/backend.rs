//! How a worker turns a payload into an output: [`SimBackend`] computes it
//! from the payload; [`OpenAiBackend`] asks an OpenAI-compatible chat
//! completions server (Ollama, vLLM, llama.cpp, the stubs of this crate)
//! through the `router` crate's OpenAI adapter, so workers and the router
//! share one client, one set of task prompts and one retry policy.

use protocol::api::{Payload, TaskType};
use router::hosted::prompts;
use router::sse::{SseError, SseReader};
use router::{
    AdapterError, HttpTransport, OpenAiClient, ProviderSettings, ReqwestTransport, RetryPolicy,
    TransportError,
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

/// Where a streaming backend sends the pieces of a text output as they
/// come; they join to the output it returns.
pub type DeltaSink = tokio::sync::mpsc::UnboundedSender<String>;

/// Executes one job.
pub trait Backend: Send + Sync {
    fn execute(&self, payload: &Payload) -> BoxFuture<Result<Value, BackendError>>;

    /// Whether [`Backend::execute_streaming`] sends deltas as the output is
    /// made; if not, a streaming worker spreads the finished output over
    /// the job's latency itself.
    fn streams(&self) -> bool {
        false
    }

    /// As [`Backend::execute`], sending the text output's pieces to
    /// `deltas` as they come.
    fn execute_streaming(
        &self,
        payload: &Payload,
        deltas: DeltaSink,
    ) -> BoxFuture<Result<Value, BackendError>> {
        drop(deltas);
        self.execute(payload)
    }
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
    /// Set over real HTTP: LLM jobs stream from the server (`stream: true`).
    streaming: Option<Streaming>,
}

/// What a streamed chat completion needs: the router's client has no
/// streaming call, so this one reads the server's events itself.
#[derive(Clone)]
struct Streaming {
    http: reqwest::Client,
    settings: ProviderSettings,
}

impl std::fmt::Debug for Streaming {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Streaming").finish_non_exhaustive()
    }
}

impl OpenAiBackend {
    /// Over real HTTP (reqwest). Without an API key requests go out without
    /// `Authorization`, as local servers expect.
    pub fn new(
        base_url: impl Into<String>,
        model: impl Into<String>,
        api_key: Option<String>,
    ) -> Self {
        let mut settings = ProviderSettings::new(base_url, model);
        if let Some(key) = api_key {
            settings = settings.with_api_key(key);
        }
        Self {
            client: OpenAiClient::new(Arc::new(ReqwestTransport::default()), settings.clone())
                .allow_missing_key(),
            streaming: Some(Streaming {
                http: reqwest::Client::new(),
                settings,
            }),
        }
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
            streaming: None,
        }
    }

    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.client = self.client.with_retry(retry);
        self
    }
}

impl Backend for OpenAiBackend {
    fn streams(&self) -> bool {
        self.streaming.is_some()
    }

    fn execute_streaming(
        &self,
        payload: &Payload,
        deltas: DeltaSink,
    ) -> BoxFuture<Result<Value, BackendError>> {
        match (&self.streaming, payload) {
            (
                Some(streaming),
                Payload::Llm {
                    prompt,
                    max_tokens,
                    model,
                },
            ) => {
                let mut streaming = streaming.clone();
                if let Some(model) = model {
                    // The job's model, when its client named one (decision 0023).
                    streaming.settings.model = model.clone();
                }
                let (prompt, max_tokens) = (prompt.clone(), *max_tokens);
                Box::pin(async move { streaming.complete(&prompt, max_tokens, &deltas).await })
            }
            _ => self.execute(payload),
        }
    }

    fn execute(&self, payload: &Payload) -> BoxFuture<Result<Value, BackendError>> {
        let client = self.client.clone();
        let payload = payload.clone();
        Box::pin(async move {
            match payload {
                Payload::Llm {
                    prompt, max_tokens, ..
                } => {
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

impl Streaming {
    /// A streamed chat completion: each content delta goes to `deltas` as
    /// it arrives; the output is their join. Not retried: a retry after a
    /// delta was forwarded would send the start twice.
    async fn complete(
        &self,
        prompt: &str,
        max_tokens: u32,
        deltas: &DeltaSink,
    ) -> Result<Value, BackendError> {
        let body = serde_json::json!({"model": self.settings.model, "max_tokens": max_tokens,
            "stream": true, "messages": [{"role": "user", "content": prompt}]});
        let mut request = self
            .http
            .post(self.settings.endpoint("/v1/chat/completions"))
            .json(&body);
        if let Some(key) = &self.settings.api_key {
            request = request.bearer_auth(key.expose());
        }
        let request_failed = |e: reqwest::Error| BackendError::Request(e.to_string());
        let response = request.send().await.map_err(request_failed)?;
        let status = response.status().as_u16();
        if !(200..300).contains(&status) {
            let body = response.text().await.unwrap_or_default();
            return Err(BackendError::Status { status, body });
        }
        let body = futures_util::stream::unfold(Some(response), |response| async move {
            let mut response = response?;
            match response.chunk().await {
                Ok(Some(chunk)) => Some((Ok(chunk.to_vec()), Some(response))),
                Ok(None) => None,
                Err(e) => Some((Err(TransportError::Other(e.to_string())), None)),
            }
        });
        let mut events = SseReader::new(Box::pin(body), STREAM_EVENT_BYTES_MAX);
        let mut output = String::new();
        loop {
            let event = match events.next().await {
                Ok(Some(event)) => event,
                Ok(None) => return Ok(Value::String(output)),
                Err(SseError::Transport(e)) => return Err(BackendError::Request(e.to_string())),
                Err(e) => return Err(BackendError::BadAnswer(format!("the stream: {e}"))),
            };
            if event.data == "[DONE]" {
                return Ok(Value::String(output));
            }
            let piece = content_of(&event.data)?;
            if output.len() + piece.len() > STREAM_OUTPUT_BYTES_MAX {
                return Err(BackendError::BadAnswer(format!(
                    "the stream's output is longer than {STREAM_OUTPUT_BYTES_MAX} bytes"
                )));
            }
            if !piece.is_empty() {
                output.push_str(&piece);
                let _ = deltas.send(piece);
            }
        }
    }
}

/// Longest line, or data of one event, of a server's stream: far above
/// any output a coordinator takes (256 KiB), so only a broken or hostile
/// server meets it, and it cannot make the worker buffer without end.
const STREAM_EVENT_BYTES_MAX: usize = 1024 * 1024;

/// Longest output a server's stream may add up to: the protocol's frame
/// (1 MiB) could not carry more, so the worker stops reading there rather
/// than buffering a server that never ends.
const STREAM_OUTPUT_BYTES_MAX: usize = 1024 * 1024;

/// The content of one `chat.completion.chunk` (empty when it has none).
fn content_of(data: &str) -> Result<String, BackendError> {
    let chunk: Value = serde_json::from_str(data)
        .map_err(|e| BackendError::BadAnswer(format!("a stream chunk is not JSON: {e}")))?;
    if let Some(error) = chunk.get("error") {
        return Err(BackendError::BadAnswer(format!(
            "the stream failed: {error}"
        )));
    }
    let content = &chunk["choices"][0]["delta"]["content"];
    Ok(content.as_str().unwrap_or("").to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_chunk_gives_its_content_or_its_error() {
        let chunk = "{\"choices\":[{\"delta\":{\"content\":\"He\"}}]}";
        assert_eq!(content_of(chunk).unwrap(), "He");
        assert_eq!(content_of("{\"choices\":[{\"delta\":{}}]}").unwrap(), "");
        assert!(content_of("{\"error\":{\"message\":\"x\"}}").is_err());
        assert!(content_of("{\"choi").is_err());
    }

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
