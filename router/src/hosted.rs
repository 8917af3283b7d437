//! Hosted language-model providers, called directly with the caller's keys.
//!
//! - [`OpenAiClient`]: `provider_a`, OpenAI-compatible Chat Completions; also
//!   reused by worker-sim against local servers (Ollama, vLLM, llama.cpp).
//! - [`AnthropicClient`]: `provider_b`, Anthropic Messages.
//! - [`prompts`]: how TASK jobs become prompts and how answers become output.
//! - [`RetryPolicy`]: the bounded retry on 429 and 5xx both clients share.
//! - `stream`: opening a streamed answer (`stream: true`), which both share.

mod anthropic;
mod openai;
pub mod prompts;
mod retry;
mod stream;

pub use anthropic::{AnthropicClient, ANTHROPIC_VERSION};
pub use openai::OpenAiClient;
pub use retry::RetryPolicy;

use crate::config::ApiKey;

/// Key, base URL and model of one provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderSettings {
    pub api_key: Option<ApiKey>,
    /// With or without a trailing `/v1`: both `https://api.openai.com` and
    /// `https://api.openai.com/v1` (the `OPENAI_BASE_URL` convention) work.
    pub base_url: String,
    pub model: String,
}

impl ProviderSettings {
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            api_key: None,
            base_url: base_url.into(),
            model: model.into(),
        }
    }

    pub fn with_api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(ApiKey::new(key));
        self
    }

    /// `{root}{path}` where root is the base URL without trailing slashes
    /// and without a final `/v1`, and `path` starts with `/v1/`.
    pub fn endpoint(&self, path: &str) -> String {
        let base = self.base_url.trim_end_matches('/');
        let root = base.strip_suffix("/v1").unwrap_or(base);
        format!("{root}{path}")
    }
}

/// The provider's own error message (`{"error": {"message": ...}}` for both
/// OpenAI and Anthropic), else the start of the body.
fn provider_message(response: &crate::transport::HttpResponse) -> String {
    response
        .json::<serde_json::Value>()
        .ok()
        .and_then(|v| {
            let error = v.get("error")?;
            error
                .get("message")
                .and_then(|m| m.as_str())
                .or_else(|| error.as_str())
                .map(str::to_owned)
        })
        .unwrap_or_else(|| response.body_snippet(200))
}

#[cfg(test)]
mod tests {
    use super::ProviderSettings;

    #[test]
    fn base_url_with_or_without_v1() {
        for base in [
            "https://api.openai.com",
            "https://api.openai.com/",
            "https://api.openai.com/v1",
            "https://api.openai.com/v1/",
        ] {
            assert_eq!(
                ProviderSettings::new(base, "m").endpoint("/v1/chat/completions"),
                "https://api.openai.com/v1/chat/completions",
                "{base}"
            );
        }
        assert_eq!(
            ProviderSettings::new("http://127.0.0.1:11434/v1", "m")
                .endpoint("/v1/chat/completions"),
            "http://127.0.0.1:11434/v1/chat/completions"
        );
        assert_eq!(
            ProviderSettings::new("http://proxy.local/openai", "m")
                .endpoint("/v1/chat/completions"),
            "http://proxy.local/openai/v1/chat/completions"
        );
    }
}
