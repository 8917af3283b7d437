//! Strict validation of request bodies into typed submissions. Each refusal
//! names the field at fault; the messages are part of the API (spec 7).

use crate::config::Limits;
use protocol::api::{JobSubmission, JobType, Payload, PrivacyClass, TaskType};
use serde_json::{Map, Value};

pub const MISSING_COMMIT_FIELDS: &str = "Missing required fields: job_type, payload, user_id";
pub const INVALID_JOB_TYPE: &str = "job_type must be LLM_INFER or TASK";
pub const INVALID_POLICY: &str = "policy must be FAST, CHEAP or AUTO";
pub const KEY_SHAPE: &str = "provider_pubkey must be a compressed secp256k1 public key: 0x followed by 66 hex characters, starting 02 or 03";

/// Whether `key` has the shape of a compressed SEC1 key: `0x`, then 66 hex
/// characters of which the first byte is 02 or 03. A key of this shape may
/// still not be a point on the curve.
pub fn is_compressed_key_shape(key: &str) -> bool {
    let Some(hex) = key.strip_prefix("0x") else {
        return false;
    };
    hex.len() == 66
        && hex.bytes().all(|b| b.is_ascii_hexdigit())
        && (hex.starts_with("02") || hex.starts_with("03"))
}

/// Turns a commit body into a submission. Unknown top-level fields are
/// ignored so older coordinators accept newer clients' bodies.
pub fn submission(body: &Value, limits: &Limits) -> Result<JobSubmission, String> {
    let obj = body
        .as_object()
        .ok_or_else(|| MISSING_COMMIT_FIELDS.to_owned())?;
    if ["job_type", "payload", "user_id"]
        .iter()
        .any(|f| obj.get(*f).is_none_or(Value::is_null))
    {
        return Err(MISSING_COMMIT_FIELDS.into());
    }
    let job_type = obj["job_type"]
        .as_str()
        .and_then(JobType::parse)
        .ok_or_else(|| INVALID_JOB_TYPE.to_owned())?;
    let user_id = user_id(&obj["user_id"], limits)?;
    let payload = payload(&obj["payload"], job_type, limits)?;
    // An optional field is absent or has its type: `null` is neither, so it
    // is a 400 like any other wrong type (spec 4.3; ARCHITECTURE.md).
    let privacy_class = match obj.get("privacy_class") {
        None => PrivacyClass::Public,
        Some(v) => v
            .as_str()
            .and_then(PrivacyClass::parse)
            .ok_or("privacy_class must be PUBLIC or PRIVATE")?,
    };
    Ok(JobSubmission {
        job_type,
        user_id,
        payload,
        privacy_class,
    })
}

/// A user id: a non-empty string of bounded length.
pub fn user_id(v: &Value, limits: &Limits) -> Result<String, String> {
    match v.as_str() {
        Some(s) if !s.trim().is_empty() && s.chars().count() <= limits.user_id_chars_max => {
            Ok(s.to_owned())
        }
        _ => Err(format!(
            "user_id must be a non-empty string of at most {} characters",
            limits.user_id_chars_max
        )),
    }
}

fn payload(v: &Value, job_type: JobType, limits: &Limits) -> Result<Payload, String> {
    let p: &Map<String, Value> = v.as_object().ok_or("payload must be an object")?;
    if let Some(inner) = p.get("job_type") {
        if inner.as_str() != Some(job_type.as_str()) {
            return Err("payload.job_type must match job_type".into());
        }
    }
    match job_type {
        JobType::LlmInfer => {
            let prompt = match p.get("prompt").and_then(Value::as_str) {
                Some(s) if !s.trim().is_empty() => s.to_owned(),
                _ => return Err("payload.prompt must be a non-empty string".into()),
            };
            let max_tokens = match p.get("max_tokens") {
                None => limits.max_tokens_default,
                Some(v) => v
                    .as_u64()
                    .filter(|n| (1..=u64::from(limits.max_tokens_max)).contains(n))
                    .map(|n| n as u32)
                    .ok_or_else(|| {
                        format!(
                            "payload.max_tokens must be an integer from 1 to {}",
                            limits.max_tokens_max
                        )
                    })?,
            };
            Ok(Payload::Llm { prompt, max_tokens })
        }
        JobType::Task => {
            let task_type = p
                .get("task_type")
                .and_then(Value::as_str)
                .and_then(TaskType::parse)
                .ok_or("payload.task_type must be summarize, classify or extract_json")?;
            let input = p
                .get("input")
                .and_then(Value::as_str)
                .ok_or("payload.input must be a string")?
                .to_owned();
            Ok(Payload::Task { task_type, input })
        }
    }
}

/// Names the listed fields missing (absent or null) from a JSON object body.
pub fn missing_fields(body: &Value, fields: &[&str]) -> Option<String> {
    let missing: Vec<&str> = fields
        .iter()
        .copied()
        .filter(|f| body.get(f).is_none_or(Value::is_null))
        .collect();
    (!missing.is_empty()).then(|| format!("Missing required fields: {}", missing.join(", ")))
}

/// Whether a worker's output has the shape its job type promises:
/// text for LLM_INFER, summarize and classify; an object or array for extract_json.
pub fn output_fits(payload: &Payload, output: &Value) -> bool {
    match payload {
        Payload::Llm { .. }
        | Payload::Task {
            task_type: TaskType::Summarize | TaskType::Classify,
            ..
        } => output.is_string(),
        Payload::Task {
            task_type: TaskType::ExtractJson,
            ..
        } => output.is_object() || output.is_array(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(body: Value) -> Result<JobSubmission, String> {
        submission(&body, &Limits::default())
    }

    #[test]
    fn accepts_both_payload_kinds_with_defaults() {
        let s =
            check(json!({"job_type":"LLM_INFER","user_id":"u","payload":{"prompt":"hi"}})).unwrap();
        assert_eq!(
            s.payload,
            Payload::Llm {
                prompt: "hi".into(),
                max_tokens: 256
            }
        );
        assert_eq!(s.privacy_class, PrivacyClass::Public);
        let s = check(
            json!({"job_type":"TASK","user_id":"u","privacy_class":"PRIVATE",
            "payload":{"job_type":"TASK","task_type":"classify","input":""}}),
        )
        .unwrap();
        assert_eq!(s.privacy_class, PrivacyClass::Private);
    }

    #[test]
    fn each_bad_field_is_named() {
        let cases = [
            (json!([]), MISSING_COMMIT_FIELDS),
            (
                json!({"job_type":"TASK","user_id":"u"}),
                MISSING_COMMIT_FIELDS,
            ),
            (
                json!({"job_type":"GPU","user_id":"u","payload":{}}),
                INVALID_JOB_TYPE,
            ),
            (
                json!({"job_type":"TASK","user_id":"","payload":{}}),
                "user_id must be",
            ),
            (
                json!({"job_type":"TASK","user_id":7,"payload":{}}),
                "user_id must be",
            ),
            (
                json!({"job_type":"TASK","user_id":"u","payload":"x"}),
                "payload must be an object",
            ),
            (
                json!({"job_type":"TASK","user_id":"u","payload":{"job_type":"LLM_INFER"}}),
                "payload.job_type",
            ),
            (
                json!({"job_type":"TASK","user_id":"u","payload":{"task_type":"poem","input":"x"}}),
                "payload.task_type",
            ),
            (
                json!({"job_type":"TASK","user_id":"u","payload":{"task_type":"summarize"}}),
                "payload.input",
            ),
            (
                json!({"job_type":"LLM_INFER","user_id":"u","payload":{"prompt":" "}}),
                "payload.prompt",
            ),
            (
                json!({"job_type":"LLM_INFER","user_id":"u","payload":{"prompt":"p","max_tokens":0}}),
                "payload.max_tokens",
            ),
            (
                json!({"job_type":"LLM_INFER","user_id":"u","payload":{"prompt":"p","max_tokens":40000}}),
                "payload.max_tokens",
            ),
            (
                json!({"job_type":"LLM_INFER","user_id":"u","payload":{"prompt":"p","max_tokens":1.5}}),
                "payload.max_tokens",
            ),
            (
                json!({"job_type":"LLM_INFER","user_id":"u","payload":{"prompt":"p"},"privacy_class":"SECRET"}),
                "privacy_class",
            ),
        ];
        for (body, expected) in cases {
            let err = check(body.clone()).unwrap_err();
            assert!(err.starts_with(expected), "{body} gave {err}");
        }
    }

    #[test]
    fn output_shapes() {
        let llm = Payload::Llm {
            prompt: "p".into(),
            max_tokens: 1,
        };
        assert!(output_fits(&llm, &json!("text")));
        assert!(!output_fits(&llm, &json!({"text": "x"})));
        let ej = Payload::Task {
            task_type: TaskType::ExtractJson,
            input: "i".into(),
        };
        assert!(output_fits(&ej, &json!({"a": 1})));
        assert!(!output_fits(&ej, &json!("a")));
    }
}
