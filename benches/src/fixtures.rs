//! Inputs the benches share: submissions, keys, outputs and receipts.

use protocol::api::{JobSubmission, JobType, Payload, PrivacyClass, TaskType};
use protocol::receipt::{Receipt, ReceiptBody};
use protocol::signing::Keypair;
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use serde_json::{json, Value};
use uuid::Uuid;

/// 2026-11-21T10:00:00.000Z, the epoch the simulation's clocks start at.
pub const EPOCH_MS: i64 = 1_795_255_200_000;

pub fn keypair(seed: u64) -> Keypair {
    Keypair::generate(&mut ChaCha20Rng::seed_from_u64(seed))
}

/// A validated TASK/summarize submission, as the HTTP layer hands it to the core.
pub fn task_submission(user: &str) -> JobSubmission {
    JobSubmission {
        job_type: JobType::Task,
        user_id: user.to_owned(),
        payload: Payload::Task {
            task_type: TaskType::Summarize,
            input: "A long text that needs a short summary.".to_owned(),
        },
        privacy_class: PrivacyClass::Public,
    }
}

/// The HTTP body of the same job.
pub fn task_body(user: &str) -> Value {
    json!({"job_type": "TASK", "user_id": user,
           "payload": {"task_type": "summarize", "input": "A long text that needs a short summary."}})
}

/// The HTTP body of an LLM job.
pub fn llm_body(user: &str) -> Value {
    json!({"job_type": "LLM_INFER", "user_id": user,
           "payload": {"prompt": "Say hi", "max_tokens": 8}})
}

/// A JSON string output of about `bytes` bytes.
pub fn string_output(bytes: usize) -> Value {
    let word = "lorem ";
    Value::String(word.repeat(bytes.div_ceil(word.len())))
}

/// A nested JSON object of about `bytes` bytes with unsorted keys, to give
/// canonicalisation some sorting and escaping to do.
pub fn object_output(bytes: usize) -> Value {
    let mut items = serde_json::Map::new();
    let mut i = 0usize;
    let mut size = 2usize;
    while size < bytes {
        let key = format!("k{:05}_{}", (i * 7919) % 100_000, i);
        let value = json!({"z": i, "a": format!("v\u{e9}\"{i}"), "m": [1.5, true, null]});
        size += key.len() + value.to_string().len() + 4;
        items.insert(key, value);
        i += 1;
    }
    Value::Object(items)
}

/// A receipt for `job_id` over `output`, signed by `key`.
pub fn receipt(key: &Keypair, job_id: Uuid, output: &Value) -> Receipt {
    ReceiptBody::new(
        job_id,
        key.public_key_hex(),
        output,
        "2026-11-21T10:00:01.000Z".to_owned(),
        None,
    )
    .sign(key)
}
