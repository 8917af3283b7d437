//! What a worker's result is checked against, and the check: the output's
//! shape and a receipt that verifies for this job, this worker and this
//! payment. Runs in the session, outside the core's lock, because
//! signature recovery is the most expensive step of a job.

use crate::core::FailureReason;
use protocol::api::{Payload, TaskType};
use protocol::signing::PublicKey;
use protocol::worker::ErrorCode;
use serde_json::Value;
use uuid::Uuid;

/// The shape of output a job type promises: text for LLM_INFER, summarize
/// and classify; an object or array for extract_json.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputShape {
    Text,
    Structured,
}

impl OutputShape {
    pub fn of(payload: &Payload) -> Self {
        match payload {
            Payload::Llm { .. }
            | Payload::Task {
                task_type: TaskType::Summarize | TaskType::Classify,
                ..
            } => OutputShape::Text,
            Payload::Task {
                task_type: TaskType::ExtractJson,
                ..
            } => OutputShape::Structured,
        }
    }

    /// Whether a worker's output has this shape.
    pub fn fits(self, output: &Value) -> bool {
        match self {
            OutputShape::Text => output.is_string(),
            OutputShape::Structured => output.is_object() || output.is_array(),
        }
    }
}

/// A job this session holds: what its result is checked against. Not the
/// whole assignment: the payload text stays with the core's job, so the
/// session keeps no second copy of it while the worker runs the job.
pub struct Held {
    pub shape: OutputShape,
    /// Goes into the receipt verbatim.
    pub payment_ref: Option<String>,
    /// The output deltas sent so far (decision 0023).
    pub deltas: super::deltas::Deltas,
}

/// Checks the result of job `job_id` against what it was assigned with:
/// output size (at most `output_bytes_max` as compact JSON, as the store
/// keeps it: decision 0018), output shape, and a receipt for this job, this worker's key and this
/// payment that verifies.
pub fn check_result(
    pubkey: &str,
    key: &PublicKey,
    job_id: Uuid,
    job: &Held,
    output: &serde_json::Value,
    receipt: &protocol::receipt::Receipt,
    output_bytes_max: usize,
) -> Result<(), (FailureReason, ErrorCode, String)> {
    if crate::core::json_len(output) > output_bytes_max {
        return Err((
            FailureReason::InvalidOutput,
            ErrorCode::InvalidOutput,
            format!("output is larger than {output_bytes_max} bytes as JSON"),
        ));
    }
    if !job.shape.fits(output) {
        return Err((
            FailureReason::InvalidOutput,
            ErrorCode::InvalidOutput,
            "output must be a string for LLM_INFER, summarize and classify, and an object or array for extract_json".into(),
        ));
    }
    if !job.deltas.join_to(output) {
        return Err((
            FailureReason::InvalidOutput,
            ErrorCode::InvalidOutput,
            "the job's deltas do not join to the result's output".into(),
        ));
    }
    let invalid = |message: String| {
        (
            FailureReason::InvalidReceipt,
            ErrorCode::InvalidReceipt,
            message,
        )
    };
    if receipt.job_id != job_id {
        return Err(invalid("receipt.job_id is not this job".into()));
    }
    if receipt.provider_pubkey.to_ascii_lowercase() != pubkey {
        return Err(invalid(
            "receipt.provider_pubkey is not this worker's key".into(),
        ));
    }
    if receipt.payment_ref != job.payment_ref {
        return Err(invalid(
            "receipt.payment_ref is not the job's payment_ref".into(),
        ));
    }
    if protocol::time::parse_ms(&receipt.completed_at).is_none() {
        return Err(invalid(
            "receipt.completed_at is not an ISO 8601 timestamp".into(),
        ));
    }
    // `pubkey` is the canonical text of `key`, so a receipt naming exactly
    // it needs no parse; any other spelling goes the long way, as before.
    let verified = if receipt.provider_pubkey == pubkey {
        receipt.verify_with_key(key, output)
    } else {
        receipt.verify(output)
    };
    verified.map_err(|e| invalid(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn output_shapes() {
        let llm = Payload::Llm {
            prompt: "p".into(),
            max_tokens: 1,
            model: None,
        };
        let text = OutputShape::of(&llm);
        assert!(text.fits(&json!("text")));
        assert!(!text.fits(&json!({"text": "x"})));
        let ej = Payload::Task {
            task_type: TaskType::ExtractJson,
            input: "i".into(),
        };
        let structured = OutputShape::of(&ej);
        assert!(structured.fits(&json!({"a": 1})));
        assert!(structured.fits(&json!([1])));
        assert!(!structured.fits(&json!("a")));
    }

    /// A paid job's receipt names exactly its payment: one that leaves the
    /// reference out is refused like one naming another payment (held-out
    /// sabotage `receipt-without-payment-ref-accepted-for-a-paid-job`,
    /// which no unit test saw), and the job's own reference is accepted.
    #[test]
    fn a_paid_jobs_receipt_without_its_payment_ref_is_invalid() {
        let keypair = protocol::signing::Keypair::from_secret_hex(&"07".repeat(32)).unwrap();
        let pubkey = keypair.public_key_hex();
        let key = protocol::signing::parse_public_key(&pubkey).unwrap();
        let held = Held {
            shape: OutputShape::Text,
            payment_ref: Some("x402:0x01".into()),
            deltas: Default::default(),
        };
        let output = json!("done");
        let signed = |payment_ref: Option<&str>| {
            protocol::receipt::ReceiptBody::new(
                Uuid::nil(),
                pubkey.clone(),
                &output,
                "2026-11-24T00:00:00.000Z".into(),
                payment_ref.map(str::to_owned),
            )
            .sign(&keypair)
        };
        let check =
            |receipt| check_result(&pubkey, &key, Uuid::nil(), &held, &output, &receipt, 500);
        for wrong in [None, Some("x402:0x02")] {
            let (reason, code, message) = check(signed(wrong)).unwrap_err();
            assert_eq!(
                (reason, code),
                (FailureReason::InvalidReceipt, ErrorCode::InvalidReceipt)
            );
            assert_eq!(message, "receipt.payment_ref is not the job's payment_ref");
        }
        assert!(check(signed(Some("x402:0x01"))).is_ok());
    }

    /// Issue 29: an output larger than `output_bytes_max` as JSON (escapes
    /// included) is refused before anything else is checked.
    #[test]
    fn an_output_over_the_limit_is_invalid() {
        let keypair = protocol::signing::Keypair::from_secret_hex(&"07".repeat(32)).unwrap();
        let pubkey = keypair.public_key_hex();
        let key = protocol::signing::parse_public_key(&pubkey).unwrap();
        let mut held = Held {
            shape: OutputShape::Text,
            payment_ref: None,
            deltas: Default::default(),
        };
        let receipt = protocol::receipt::Receipt {
            job_id: Uuid::nil(),
            provider_pubkey: pubkey.clone(),
            output_hash: "0x00".into(),
            completed_at: "2026-11-24T00:00:00.000Z".into(),
            payment_ref: None,
            signature: "0x00".into(),
        };
        // 100 control characters: 600 bytes as JSON, over a 500-byte limit.
        let output = json!("\u{1}".repeat(100));
        let refused = check_result(&pubkey, &key, Uuid::nil(), &held, &output, &receipt, 500);
        let (reason, code, _) = refused.unwrap_err();
        assert_eq!(
            (reason, code),
            (FailureReason::InvalidOutput, ErrorCode::InvalidOutput)
        );
        // Within the limit, the receipt is what fails here.
        let refused = check_result(&pubkey, &key, Uuid::nil(), &held, &output, &receipt, 700);
        assert_eq!(refused.unwrap_err().0, FailureReason::InvalidReceipt);
        // Issue 31: deltas that do not join to the output refuse it first.
        held.deltas.push(0, "other", 10, 700).unwrap();
        let refused = check_result(&pubkey, &key, Uuid::nil(), &held, &output, &receipt, 700);
        let (reason, _, message) = refused.unwrap_err();
        assert_eq!(reason, FailureReason::InvalidOutput);
        assert!(message.contains("deltas"), "{message}");
    }
}
