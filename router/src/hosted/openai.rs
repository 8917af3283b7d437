//! OpenAI-compatible Chat Completions (`provider_a`).

use super::retry::{send_with_retry, RetryPolicy};
use super::ProviderSettings;
use crate::error::AdapterError;
use crate::route::HostedProvider;
use crate::transport::{HttpRequest, HttpTransport};
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
        let body = json!({
            "model": self.settings.model,
            "messages": messages,
            "max_tokens": max_tokens,
        });
        let mut request = HttpRequest::post_json(self.url(), &body);
        if let Some(key) = key {
            request = request.header("authorization", format!("Bearer {}", key.expose()));
        }
        let response = send_with_retry(&*self.transport, PROVIDER, &self.retry, request).await?;
        let malformed = |message: String| AdapterError::ProviderMalformed {
            provider: PROVIDER,
            message,
        };
        let value: serde_json::Value = response
            .json()
            .map_err(|e| malformed(format!("not JSON: {e}")))?;
        value
            .pointer("/choices/0/message/content")
            .and_then(|c| c.as_str())
            .map(str::to_owned)
            .ok_or_else(|| malformed("no string at choices[0].message.content".into()))
    }
}
