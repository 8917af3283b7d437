//! Anthropic Messages (`provider_b`).

use super::retry::{send_with_retry, RetryPolicy};
use super::stream::{self, Opened};
use super::ProviderSettings;
use crate::error::AdapterError;
use crate::route::HostedProvider;
use crate::stream::TextSink;
use crate::transport::{HttpRequest, HttpResponse, HttpTransport};
use serde_json::json;
use std::sync::Arc;

const PROVIDER: HostedProvider = HostedProvider::ProviderB;

/// The Messages API version the request and answer shapes follow.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// Client of `POST {base}/v1/messages`.
///
/// Sends one user message and returns the concatenated `text` blocks of
/// `content`.
#[derive(Clone)]
pub struct AnthropicClient {
    transport: Arc<dyn HttpTransport>,
    settings: ProviderSettings,
    retry: RetryPolicy,
}

impl std::fmt::Debug for AnthropicClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnthropicClient")
            .field("settings", &self.settings)
            .field("retry", &self.retry)
            .finish_non_exhaustive()
    }
}

impl AnthropicClient {
    pub fn new(transport: Arc<dyn HttpTransport>, settings: ProviderSettings) -> Self {
        Self {
            transport,
            settings,
            retry: RetryPolicy::default(),
        }
    }

    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    pub fn settings(&self) -> &ProviderSettings {
        &self.settings
    }

    /// The full Messages URL.
    pub fn url(&self) -> String {
        self.settings.endpoint("/v1/messages")
    }

    /// Asks the model for a completion of `prompt`; returns its text.
    pub async fn complete(&self, prompt: &str, max_tokens: u32) -> Result<String, AdapterError> {
        self.chat(None, prompt, max_tokens).await
    }

    /// Like [`AnthropicClient::complete`], with `system` as the top-level
    /// system prompt.
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

    /// [`AnthropicClient::chat`] with `stream: true`: the text of each
    /// `content_block_delta` goes to `sink` as it comes; the text is
    /// returned after `message_stop`.
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
            match event.event.as_str() {
                "message_stop" => return Ok(sink.text().to_owned()),
                "error" => {
                    let data = events.json(&event)?;
                    let message = data.pointer("/error/message").and_then(|m| m.as_str());
                    let message = message.unwrap_or("no message");
                    return Err(malformed(format!("the stream failed: {message}")));
                }
                "content_block_delta" => {
                    let data = events.json(&event)?;
                    let delta = data.get("delta");
                    let is_text = delta.and_then(|d| d.get("type")).and_then(|t| t.as_str())
                        == Some("text_delta");
                    let text = delta.and_then(|d| d.get("text")).and_then(|t| t.as_str());
                    if let (true, Some(text)) = (is_text, text) {
                        sink.delta(text.to_owned()).await?;
                    }
                }
                // message_start, content_block_start/stop, message_delta, ping.
                _ => {}
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
        let Some(key) = self.settings.api_key.as_ref() else {
            return Err(AdapterError::MissingApiKey {
                provider: PROVIDER,
                env_var: PROVIDER.api_key_env(),
            });
        };
        let mut body = json!({
            "model": self.settings.model,
            "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": prompt}],
        });
        if let Some(system) = system {
            body["system"] = json!(system);
        }
        if stream {
            body["stream"] = json!(true);
        }
        Ok(HttpRequest::post_json(self.url(), &body)
            .header("x-api-key", key.expose())
            .header("anthropic-version", ANTHROPIC_VERSION))
    }
}

fn malformed(message: String) -> AdapterError {
    AdapterError::ProviderMalformed {
        provider: PROVIDER,
        message,
    }
}

/// The concatenated `text` blocks of a whole answer's `content`.
fn answer_text(response: &HttpResponse) -> Result<String, AdapterError> {
    let value: serde_json::Value = response
        .json()
        .map_err(|e| malformed(format!("not JSON: {e}")))?;
    let blocks = value
        .get("content")
        .and_then(|c| c.as_array())
        .ok_or_else(|| malformed("no content array".into()))?;
    let texts: Vec<&str> = blocks
        .iter()
        .filter(|b| b.get("type").and_then(|t| t.as_str()) == Some("text"))
        .filter_map(|b| b.get("text").and_then(|t| t.as_str()))
        .collect();
    if texts.is_empty() {
        return Err(malformed("content has no text block".into()));
    }
    Ok(texts.concat())
}
