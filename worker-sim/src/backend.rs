//! How a worker turns a payload into an output: [`SimBackend`] computes it
//! from the payload; [`OpenAiBackend`] asks an OpenAI-compatible chat
//! completions server (Ollama, vLLM, llama.cpp, the stubs of this crate).
//!
//! The OpenAI call here is deliberately minimal; it should be replaced by the
//! `router` crate's OpenAI adapter once that exists, so there is one client.

use crate::outputs;
use protocol::api::{Payload, TaskType};
use serde_json::{json, Value};
use std::future::Future;
use std::pin::Pin;

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

/// A chat completions client: `POST {base_url}/chat/completions`, where
/// `base_url` ends in `/v1` as OpenAI-compatible servers document it.
#[derive(Clone)]
pub struct OpenAiBackend {
    client: reqwest::Client,
    base_url: String,
    model: String,
    api_key: Option<String>,
}

impl std::fmt::Debug for OpenAiBackend {
    // The API key stays out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiBackend")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<set>"))
            .finish()
    }
}

/// Default `max_tokens` for task prompts.
const TASK_MAX_TOKENS: u32 = 512;

/// The prompts tasks become: (system, user).
pub fn task_prompt(task_type: TaskType, input: &str) -> (String, String) {
    let system = match task_type {
        TaskType::Summarize => {
            "Summarize the user's text in one or two sentences. Answer with the summary only."
                .to_owned()
        }
        TaskType::Classify => format!(
            "Classify the user's text with exactly one label from: {}. Answer with the label only.",
            outputs::LABELS.join(", ")
        ),
        TaskType::ExtractJson => "Extract the key facts of the user's text as one JSON object. \
             Answer with the JSON object only, no prose, no code fences."
            .to_owned(),
    };
    (system, input.to_owned())
}

/// The first `{...}` object in `text` (models like to wrap JSON in fences).
pub fn parse_json_object(text: &str) -> Option<Value> {
    let start = text.find('{')?;
    let end = text.rfind('}')?;
    if end < start {
        return None;
    }
    serde_json::from_str::<Value>(&text[start..=end])
        .ok()
        .filter(Value::is_object)
}

impl OpenAiBackend {
    pub fn new(
        base_url: impl Into<String>,
        model: impl Into<String>,
        api_key: Option<String>,
    ) -> Self {
        Self {
            client: reqwest::Client::new(),
            base_url: base_url.into().trim_end_matches('/').to_owned(),
            model: model.into(),
            api_key,
        }
    }

    async fn chat(
        client: reqwest::Client,
        url: String,
        api_key: Option<String>,
        body: Value,
    ) -> Result<String, BackendError> {
        let mut request = client.post(url).json(&body);
        if let Some(key) = api_key {
            request = request.bearer_auth(key);
        }
        let response = request
            .send()
            .await
            .map_err(|e| BackendError::Request(e.without_url().to_string()))?;
        let status = response.status();
        let text = response
            .text()
            .await
            .map_err(|e| BackendError::Request(e.without_url().to_string()))?;
        if !status.is_success() {
            return Err(BackendError::Status {
                status: status.as_u16(),
                body: text.chars().take(500).collect(),
            });
        }
        let value: Value = serde_json::from_str(&text)
            .map_err(|e| BackendError::BadAnswer(format!("not JSON: {e}")))?;
        value
            .pointer("/choices/0/message/content")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| BackendError::BadAnswer("no choices[0].message.content".into()))
    }
}

impl Backend for OpenAiBackend {
    fn execute(&self, payload: &Payload) -> BoxFuture<Result<Value, BackendError>> {
        let (messages, max_tokens, task) = match payload {
            Payload::Llm { prompt, max_tokens } => (
                json!([{"role": "user", "content": prompt}]),
                *max_tokens,
                None,
            ),
            Payload::Task { task_type, input } => {
                let (system, user) = task_prompt(*task_type, input);
                (
                    json!([
                        {"role": "system", "content": system},
                        {"role": "user", "content": user}
                    ]),
                    TASK_MAX_TOKENS,
                    Some(*task_type),
                )
            }
        };
        let body = json!({
            "model": self.model,
            "messages": messages,
            "max_tokens": max_tokens,
            "temperature": 0,
        });
        let client = self.client.clone();
        let url = format!("{}/chat/completions", self.base_url);
        let api_key = self.api_key.clone();
        Box::pin(async move {
            let content = Self::chat(client, url, api_key, body).await?;
            match task {
                None | Some(TaskType::Summarize) => Ok(Value::String(content.trim().to_owned())),
                Some(TaskType::Classify) => {
                    let label = content
                        .trim()
                        .lines()
                        .next()
                        .unwrap_or("")
                        .trim()
                        .trim_matches(|c: char| !c.is_alphanumeric() && c != '_')
                        .to_lowercase();
                    Ok(Value::String(label))
                }
                Some(TaskType::ExtractJson) => parse_json_object(&content)
                    .ok_or_else(|| BackendError::BadAnswer("no JSON object in the answer".into())),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_objects_are_found_in_fences() {
        assert_eq!(
            parse_json_object("```json\n{\"a\": 1}\n```"),
            Some(json!({"a": 1}))
        );
        assert_eq!(parse_json_object("[1, 2]"), None);
        assert_eq!(parse_json_object("} {"), None);
    }

    #[test]
    fn debug_hides_the_key() {
        let b = OpenAiBackend::new("http://x/v1", "m", Some("sk-secret".into()));
        assert!(!format!("{b:?}").contains("sk-secret"));
    }
}
