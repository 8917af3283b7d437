//! OpenAI-compatible Chat Completions (`provider_a`).

use super::retry::{send_with_retry, RetryPolicy};
use super::stream::{self, Opened};
use super::ProviderSettings;
use crate::error::AdapterError;
use crate::route::HostedProvider;
use crate::stream::TextSink;
use crate::transport::{HttpRequest, HttpResponse, HttpTransport};
use serde_json::json;
use std::sync::Arc;

const PROVIDER: HostedProvider = HostedProvider::ProviderA;

/// Client of `POST {base}/v1/chat/completions`.
///
/// Sends one user message and returns `choices[0].message.content`.
#[derive(Clone)]
pub struct OpenAiClient {
    transport: Arc<dyn HttpTransport>,
    settings: ProviderSettings,
    retry: RetryPolicy,
    require_api_key: bool,
}

impl std::fmt::Debug for OpenAiClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiClient")
            .field("settings", &self.settings)
            .field("retry", &self.retry)
            .field("require_api_key", &self.require_api_key)
            .finish_non_exhaustive()
    }
}

impl OpenAiClient {
    /// A client that refuses to send anything without an API key.
    pub fn new(transport: Arc<dyn HttpTransport>, settings: ProviderSettings) -> Self {
        Self {
            transport,
            settings,
            retry: RetryPolicy::default(),
            require_api_key: true,
        }
    }

    /// Lets requests go out without `Authorization` when no key is set, for
    /// local OpenAI-compatible servers (Ollama, vLLM) that need none.
    pub fn allow_missing_key(mut self) -> Self {
        self.require_api_key = false;
        self
    }

    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    pub fn settings(&self) -> &ProviderSettings {
        &self.settings
    }

    /// The full Chat Completions URL.
    pub fn url(&self) -> String {
        self.settings.endpoint("/v1/chat/completions")
    }

    /// Asks the model for a completion of `prompt`; returns its text.
    pub async fn complete(&self, prompt: &str, max_tokens: u32) -> Result<String, AdapterError> {
        self.chat(None, prompt, max_tokens).await
    }

    /// Like [`OpenAiClient::complete`], with `system` as a system message
    /// before the user message.
    pub async fn chat(
        &self,
        system: Option<&str>,
        prompt: &str,
        max_tokens: u32,
    ) -> Result<String, AdapterError> {
        let request = self.request(system, prompt, max_tokens, false)?;
        let response = send_with_retry(&*self.transport, PROVIDER, &self.retry, request).await?;
        answer_text(&response)
    }

    /// [`OpenAiClient::chat`] with `stream: true`: each content delta goes
    /// to `sink` as it comes; the text is returned after `data: [DONE]`.
    pub(crate) async fn chat_stream(
        &self,
        system: Option<&str>,
        prompt: &str,
        max_tokens: u32,
        sink: &mut TextSink,
    ) -> Result<String, AdapterError> {
        let request = self.request(system, prompt, max_tokens, true)?;
        let bytes_max = sink.limits().event_bytes_max;
        let opened = stream::open(&*self.transport, PROVIDER, &self.retry, request, bytes_max);
        let mut events = match opened.await? {
            Opened::Events(events) => events,
            Opened::Whole(response) => {
                sink.delta(answer_text(&response)?).await?;
                return Ok(sink.text().to_owned());
            }
        };
        loop {
            let event = events.next().await?;
            if event.data == "[DONE]" {
                return Ok(sink.text().to_owned());
            }
            let chunk = events.json(&event)?;
            if let Some(error) = chunk.get("error") {
                return Err(malformed(format!("the stream failed: {error}")));
            }
            let piece = chunk.pointer("/choices/0/delta/content");
            if let Some(piece) = piece.and_then(|c| c.as_str()) {
                sink.delta(piece.to_owned()).await?;
            }
        }
    }

    fn request(
        &self,
        system: Option<&str>,
        prompt: &str,
        max_tokens: u32,
        stream: bool,
    ) -> Result<HttpRequest, AdapterError> {
        let key = self.settings.api_key.as_ref();
        if key.is_none() && self.require_api_key {
            return Err(AdapterError::MissingApiKey {
                provider: PROVIDER,
                env_var: PROVIDER.api_key_env(),
            });
        }
        let mut messages = Vec::with_capacity(2);
        if let Some(system) = system {
            messages.push(json!({"role": "system", "content": system}));
        }
        messages.push(json!({"role": "user", "content": prompt}));
        let mut body = json!({
            "model": self.settings.model,
            "messages": messages,
            "max_tokens": max_tokens,
        });
        if stream {
            body["stream"] = json!(true);
        }
        let mut request = HttpRequest::post_json(self.url(), &body);
        if let Some(key) = key {
            request = request.header("authorization", format!("Bearer {}", key.expose()));
        }
        Ok(request)
    }
}

fn malformed(message: String) -> AdapterError {
    AdapterError::ProviderMalformed {
        provider: PROVIDER,
        message,
    }
}

/// `choices[0].message.content` of a whole answer.
fn answer_text(response: &HttpResponse) -> Result<String, AdapterError> {
    let value: serde_json::Value = response
        .json()
        .map_err(|e| malformed(format!("not JSON: {e}")))?;
    value
        .pointer("/choices/0/message/content")
        .and_then(|c| c.as_str())
        .map(str::to_owned)
        .ok_or_else(|| malformed("no string at choices[0].message.content".into()))
}
