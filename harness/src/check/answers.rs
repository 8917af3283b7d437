//! `harness check` for what a step expects of its answer: capture paths
//! that can never select, keys the answer never has where its shape is known
//! (a job record, a quote), and the expected values the matcher checks read.

use crate::spec::{Action, Step};
use serde_json::Value;

/// The keys of a `GET /v1/jobs/{id}` answer (`protocol::api::JobRecord`).
pub const JOB_KEYS: [&str; 7] = [
    "id",
    "status",
    "result",
    "receipt",
    "created_at",
    "completed_at",
    "payment_transaction",
];
/// The keys of a receipt (`protocol::receipt::Receipt`).
pub const RECEIPT_KEYS: [&str; 6] = [
    "job_id",
    "provider_pubkey",
    "output_hash",
    "completed_at",
    "payment_ref",
    "signature",
];
/// The keys of a `GET /v1/quote` answer (`protocol::api::Quote`).
pub const QUOTE_KEYS: [&str; 5] = [
    "price",
    "endpoint",
    "policy_resolved",
    "network",
    "expires_at",
];

/// A capture path that can never select anything; and, where the answer's
/// shape is known (a job record, a quote), an expected
/// key or a captured path that the answer never has: a misspelt key under
/// `absent_or_null` would otherwise pass silently, and a capture would fail
/// only when it runs.
pub fn schema_problems(step: &Step) -> Vec<String> {
    let mut out: Vec<String> = step
        .capture
        .values()
        .filter_map(|path| crate::expr::matcher::path_problem(path))
        .collect();
    let Some(keys) = answer_keys(step) else {
        return out;
    };
    let mut key = |path: &str, name: &str, known: &[&str]| {
        if !known.contains(&name) {
            out.push(format!(
                "{path}.{name}: the answer has no such key (keys: {})",
                known.join(", ")
            ));
        }
    };
    if let Some(Value::Object(body)) = step.expect.as_ref().and_then(|e| e.body.as_ref()) {
        for (name, value) in body {
            key("expect.body $", name, keys);
            if let (true, Value::Object(receipt)) = (name == "receipt", value) {
                for sub in receipt.keys() {
                    key("expect.body $.receipt", sub, &RECEIPT_KEYS);
                }
            }
        }
    }
    for (var, path) in &step.capture {
        let mut segments = path.strip_prefix("$.").unwrap_or("").split(['.', '[']);
        let (Some(first), second) = (segments.next(), segments.next()) else {
            continue;
        };
        if first.is_empty() {
            continue;
        }
        key(&format!("capture {var} = \"{path}\": $"), first, keys);
        if let (true, Some(second)) = (first == "receipt", second) {
            key(
                &format!("capture {var} = \"{path}\": $.receipt"),
                second,
                &RECEIPT_KEYS,
            );
        }
    }
    out
}

/// The keys of the step's answer, when the step's shape makes them known:
/// `wait_until` (a job record), and a `GET` of a job or a quote expected to
/// answer 200.
fn answer_keys(step: &Step) -> Option<&'static [&'static str]> {
    match &step.action {
        Action::WaitUntil(_) => Some(&JOB_KEYS),
        Action::Http(call) if call.method.eq_ignore_ascii_case("GET") => {
            if step.expect.as_ref().and_then(|e| e.status) != Some(200) {
                return None;
            }
            let path = call.path.split('?').next().unwrap_or_default();
            if path == "/v1/quote" {
                Some(&QUOTE_KEYS)
            } else if path.starts_with("/v1/jobs/")
                && path.len() > "/v1/jobs/".len()
                && !path[9..].contains('/')
            {
                Some(&JOB_KEYS)
            } else {
                None
            }
        }
        _ => None,
    }
}

/// The expected values of a step, each with where it is, for the matcher checks.
pub fn expected_values(step: &Step) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    if let Some(expect) = &step.expect {
        if let Some(body) = &expect.body {
            out.push(("expect.body $".to_owned(), body.clone()));
        }
        for (name, value) in &expect.headers {
            out.push((
                format!("expect.headers.{name}"),
                Value::String(value.clone()),
            ));
        }
    }
    if let Action::ExpectFrames(expect) = &step.action {
        out.push(("expect_frames.frame $".to_owned(), expect.frame.clone()));
    }
    out
}
