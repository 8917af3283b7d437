//! `bad_input_mishandled` (malformed and control-character input in every
//! field). Judged from what clients saw: every request a step sent
//! malformed on purpose (`malformed = true`, the swarm's `garbage` kind;
//! `world::malformed`) was answered 4xx, never 2xx and never 5xx, with the
//! API's JSON error: `{"error": "..."}`, a non-empty string (a refused user
//! proof adds `message`, a 402 x402's `accepts`), or on the
//! OpenAI-compatible door OpenAI's `{"error": {"message": ...}}`. A request
//! that got no answer (its instance was down) is not judged.
//!
//! And from what the instances hold: no job's user id, prompt, model or
//! input holds a control character the validators refuse (other than tab,
//! line feed and carriage return in free text), so no refused commit was
//! recorded as a job by another door.

use super::safety::{SafetyKey, Violation};
use crate::world::malformed::MalformedAnswer;
use coordinator::core::Job;
use protocol::api::Payload;

/// Judges the malformed requests' answers, then the jobs each instance
/// holds at the end (`jobs`: instance name and its jobs).
pub fn check<'a>(
    answers: &[MalformedAnswer],
    jobs: impl IntoIterator<Item = (&'a str, &'a [Job])>,
) -> Result<(), Violation> {
    for a in answers {
        if let Some(why) = mishandled(a) {
            return Err(Violation {
                invariant: SafetyKey::BadInputMishandled,
                message: format!("{}: malformed {} {why}", a.instance, a.request),
                line: Some(a.line),
            });
        }
    }
    for (instance, jobs) in jobs {
        if let Some((job, field)) = jobs.iter().find_map(|j| Some((j, stored_control(j)?))) {
            return Err(Violation {
                invariant: SafetyKey::BadInputMishandled,
                message: format!(
                    "{instance}: job {} holds a control character in its {field}, which every commit door refuses",
                    job.id
                ),
                line: None,
            });
        }
    }
    Ok(())
}

/// Why an answer to a malformed request breaks the promise, if it does.
fn mishandled(a: &MalformedAnswer) -> Option<String> {
    let status = a.status?;
    if !(400..500).contains(&status) {
        return Some(format!("was answered {status}, not a 4xx: {}", a.body));
    }
    let openai = a.request.contains(" /v1/chat/completions") && status != 402;
    let error = match openai {
        true => &a.body["error"]["message"],
        false => &a.body["error"],
    };
    match error.as_str() {
        Some(text) if !text.trim().is_empty() => None,
        _ => {
            let shape = match openai {
                true => r#"{"error": {"message": "..."}}"#,
                false => r#"{"error": "..."}"#,
            };
            Some(format!(
                "was answered {status} without the JSON error {shape}: {}",
                a.body
            ))
        }
    }
}

/// The field of `job` that holds a control character the commit doors
/// refuse, if one does.
fn stored_control(job: &Job) -> Option<&'static str> {
    let id_bad = |s: &str| s.chars().any(char::is_control);
    let text_bad = |s: &str| {
        s.chars()
            .any(|c| c.is_control() && !matches!(c, '\t' | '\n' | '\r'))
    };
    if id_bad(&job.submission.user_id) {
        return Some("user_id");
    }
    match &job.submission.payload {
        Payload::Llm { prompt, model, .. } => {
            if text_bad(prompt) {
                return Some("payload.prompt");
            }
            model
                .as_deref()
                .filter(|m| id_bad(m))
                .map(|_| "payload.model")
        }
        Payload::Task { input, .. } => text_bad(input).then_some("payload.input"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn answer(request: &str, status: Option<u16>, body: Value) -> MalformedAnswer {
        MalformedAnswer {
            instance: "chain_a".into(),
            request: request.into(),
            line: 7,
            status,
            body,
        }
    }

    fn judged(a: MalformedAnswer) -> Result<(), Violation> {
        check(&[a], std::iter::empty())
    }

    #[test]
    fn a_4xx_with_the_json_error_passes() {
        let commit = "POST /v1/jobs/commit/fast";
        assert!(judged(answer(
            commit,
            Some(400),
            json!({"error": "payload.prompt must"})
        ))
        .is_ok());
        let paid = json!({"error": "invalid_payload", "accepts": [], "x402Version": 1});
        assert!(judged(answer(commit, Some(402), paid)).is_ok());
        let openai = json!({"error": {"message": "not a chat completion request", "type": "t"}});
        assert!(judged(answer("POST /v1/chat/completions", Some(400), openai)).is_ok());
        // No answer (the instance was down) is not judged.
        assert!(judged(answer(commit, None, json!({"transport_error": "refused"}))).is_ok());
    }

    #[test]
    fn a_5xx_a_2xx_or_a_body_without_the_error_fails_at_its_line() {
        let poll = "GET /v1/jobs/x?wait_ms=abc";
        for (status, body) in [
            (500, json!({"error": "internal error"})),
            (503, json!({"error": "shutting down"})),
            (201, json!({"job_id": "j"})),
            (200, json!({"providers": []})),
            (400, json!({"non_json_body": "Invalid URL"})),
            (400, json!({"error": ""})),
            (404, json!({"error": {"message": "job not found"}})),
            (400, Value::Null),
        ] {
            let v = judged(answer(poll, Some(status), body.clone())).unwrap_err();
            assert_eq!(
                v.invariant,
                SafetyKey::BadInputMishandled,
                "{status} {body}"
            );
            assert_eq!(v.line, Some(7));
        }
        // The OpenAI door's errors are objects with a message.
        let flat = json!({"error": "not a chat completion request"});
        assert!(judged(answer("POST /v1/chat/completions", Some(400), flat)).is_err());
    }

    #[test]
    fn a_stored_control_character_fails() {
        let job = |user_id: &str, prompt: &str| -> Job {
            serde_json::from_value(json!({
                "id": "00000000-0000-0000-0000-000000000001",
                "submission": {
                    "job_type": "LLM_INFER", "user_id": user_id,
                    "payload": {"job_type": "LLM_INFER", "prompt": prompt, "max_tokens": 8},
                    "privacy_class": "PUBLIC",
                },
                "tier": "FAST", "status": "pending", "output": null, "error": null,
                "receipt": null, "created_at_ms": 0, "completed_at_ms": null,
                "attempts": 0, "payment_ref": null, "deadline_ms": 1, "seq": 1,
            }))
            .expect("a job")
        };
        let fine = [job("u0", "line\nnext\ttab")];
        assert!(check(&[], [("chain_a", &fine[..])]).is_ok());
        for (user, prompt) in [("u\u{1}", "p"), ("u", "h\u{0}i"), ("u", "\u{1b}[2J")] {
            let bad = [job(user, prompt)];
            let v = check(&[], [("chain_a", &bad[..])]).unwrap_err();
            assert_eq!(v.invariant, SafetyKey::BadInputMishandled);
        }
    }
}
