//! Anthropic Messages (`provider_b`).

use super::retry::{send_with_retry, RetryPolicy};
use super::ProviderSettings;
use crate::error::AdapterError;
use crate::route::HostedProvider;
use crate::transport::{HttpRequest, HttpTransport};
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
        let request = HttpRequest::post_json(self.url(), &body)
            .header("x-api-key", key.expose())
            .header("anthropic-version", ANTHROPIC_VERSION);
        let response = send_with_retry(&*self.transport, PROVIDER, &self.retry, request).await?;
        let malformed = |message: String| AdapterError::ProviderMalformed {
            provider: PROVIDER,
            message,
        };
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
}
