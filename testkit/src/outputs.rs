//! Deterministic outputs derived from a job's payload only (never from the
//! worker's seed), so every simulated worker gives the same answer to the same
//! job and a transcript can predict it.

use protocol::api::{Payload, TaskType};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

/// Labels `classify` picks from.
pub const LABELS: &[&str] = &["positive", "negative", "neutral", "question", "other"];

/// Filler vocabulary of the simulated LLM.
const VOCABULARY: &[&str] = &[
    "the",
    "model",
    "considers",
    "this",
    "carefully",
    "and",
    "notes",
    "that",
    "a",
    "simulated",
    "answer",
    "follows",
    "from",
    "input",
    "with",
    "some",
    "detail",
    "about",
    "context",
    "result",
];

fn hash64(text: &str) -> u64 {
    let digest = Sha256::digest(text.as_bytes());
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&digest[..8]);
    u64::from_le_bytes(bytes)
}

/// The output a well-behaved worker returns for `payload`.
pub fn output_for(payload: &Payload) -> Value {
    match payload {
        Payload::Llm {
            prompt, max_tokens, ..
        } => Value::String(llm_text(prompt, *max_tokens)),
        Payload::Task { task_type, input } => task_output(*task_type, input),
    }
}

pub fn task_output(task_type: TaskType, input: &str) -> Value {
    match task_type {
        TaskType::Summarize => Value::String(summarize(input)),
        TaskType::Classify => Value::String(classify(input).to_owned()),
        TaskType::ExtractJson => extract_json(input),
    }
}

/// An answer that echoes the start of the prompt and fills up with words
/// picked by the prompt's hash; at most `max_tokens` words (a word is at least
/// one token, so this stays under the limit).
pub fn llm_text(prompt: &str, max_tokens: u32) -> String {
    let budget = (max_tokens as usize).clamp(1, 64);
    let mut words: Vec<&str> = vec!["Simulated", "answer:"];
    words.extend(prompt.split_whitespace().take(8));
    let mut h = hash64(prompt);
    let target = budget.min(words.len() + 8 + (h % 16) as usize);
    while words.len() < target {
        words.push(VOCABULARY[(h % VOCABULARY.len() as u64) as usize]);
        h = h.rotate_left(7) ^ 0x9e37_79b9_7f4a_7c15;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    words.truncate(budget);
    let mut text = words.join(" ");
    text.push('.');
    text
}

/// The first sentence, cut to 30 words.
pub fn summarize(input: &str) -> String {
    let trimmed = input.trim();
    let end = trimmed
        .find(['.', '!', '?', '\n'])
        .map(|i| i + 1)
        .unwrap_or(trimmed.len());
    let sentence = trimmed[..end].trim_end_matches('\n');
    sentence
        .split_whitespace()
        .take(30)
        .collect::<Vec<_>>()
        .join(" ")
}

/// A label from [`LABELS`] chosen by the input's hash.
pub fn classify(input: &str) -> &'static str {
    LABELS[(hash64(input) % LABELS.len() as u64) as usize]
}

/// `key: value` / `key=value` pairs (split on newlines, `,` and `;`) become
/// fields, numbers and booleans typed; without any pair the object describes
/// the text.
pub fn extract_json(input: &str) -> Value {
    let mut fields = Map::new();
    for part in input.split(['\n', ',', ';']) {
        let Some((key, value)) = part.split_once(':').or_else(|| part.split_once('=')) else {
            continue;
        };
        let key = key.trim().to_lowercase().replace(' ', "_");
        if key.is_empty() || key.len() > 64 {
            continue;
        }
        let value = value.trim();
        let typed = if let Ok(n) = value.parse::<i64>() {
            json!(n)
        } else if let Ok(b) = value.parse::<bool>() {
            json!(b)
        } else {
            json!(value)
        };
        fields.insert(key, typed);
    }
    if fields.is_empty() {
        let words = input.split_whitespace().count();
        json!({ "text": input.trim(), "word_count": words })
    } else {
        Value::Object(fields)
    }
}

/// An output of the wrong shape for `payload` (a number where a string or
/// an object is due), for the `invalid_output` fault.
pub fn invalid_output_for(payload: &Payload) -> Value {
    match payload {
        Payload::Task {
            task_type: TaskType::ExtractJson,
            ..
        } => json!("not an object"),
        _ => json!(42),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_per_job_type() {
        let llm = output_for(&Payload::Llm {
            prompt: "Tell me about the sea".into(),
            max_tokens: 10,
            model: None,
        });
        let text = llm.as_str().unwrap();
        assert!(text.starts_with("Simulated answer: Tell me about the sea"));
        assert!(text.split_whitespace().count() <= 10);

        assert_eq!(summarize("First one here. Second one."), "First one here.");
        assert_eq!(summarize("no end"), "no end");
        assert!(LABELS.contains(&classify("hello")));
        assert_eq!(classify("hello"), classify("hello"));

        assert_eq!(
            extract_json("name: Ada, age=36; admin: true"),
            json!({"name": "Ada", "age": 36, "admin": true})
        );
        assert_eq!(
            extract_json("just words here"),
            json!({"text": "just words here", "word_count": 3})
        );
    }

    #[test]
    fn tiny_budget() {
        assert_eq!(llm_text("hi", 1), "Simulated.");
        assert_eq!(llm_text("", 0), "Simulated.");
    }
}
