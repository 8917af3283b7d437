//! `retry_after_refused` (sabotage `pairing-retry-after-rounds-down`):
//! a 429 of a per-client rate limit (docs/cluster.md: "Windows are fixed
//! minutes (`Retry-After` until the window ends)") tells the client how
//! long to wait; a client that waits exactly that and sends nothing else
//! to that door meanwhile is in a new window of its key, so it is not
//! refused 429 by that limit again.
//!
//! Judged from the notes of `http` steps with `retry_after = true`
//! (`run/retry_after.rs`): the 429's error, its `Retry-After` and the
//! retry's answer. A retry is judged when the first refusal was a
//! per-client one (its error says "from this address"; another client may
//! fill a per-user or global window meanwhile), on a one-node instance
//! (`judged`), with no restart, stop or crash of it between the notes,
//! exactly one request from that client to that door between them, sent
//! at least `Retry-After` seconds after the 429 (the limiter read its clock
//! before the answer, so the window had ended by then). Such a retry
//! answered 429 with the same error is a breach. (A new key is refused
//! with that error too when `rate_limited_keys_max` keys, 100,000 by
//! default, have live windows; a retry's key has one, so it is not new.)

use super::edges::{disturbs, stamp_ms};
use super::safety::{SafetyKey, Violation};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// The note logged by the harness before it waits out a 429.
pub const WAITS: &str = "retry after 429 ";
/// The note logged after the retry's answer.
pub const RETRIED: &str = "retried after 429 ";
/// What a per-client limit's error says (`api/trust.rs`).
const PER_CLIENT: &str = "from this address";

/// A 429 being waited out.
struct Waiting {
    at_ms: i64,
    retry_after_s: Option<i64>,
    error: Value,
    disturbed: bool,
    /// Requests of that client to that door since, and when the first
    /// was sent.
    sent: u32,
    first_sent_ms: Option<i64>,
}

/// (instance, client, method, path) of a note.
type Door = (String, Option<String>, String, String);

fn door_of(note: &Value) -> Door {
    let s = |k: &str| note[k].as_str().unwrap_or_default().to_owned();
    let client = note["client"].as_str().map(str::to_owned);
    (s("instance"), client, s("method"), s("path"))
}

/// The first retry refused again by the limit it waited out.
pub fn check(lines: &[String], judged: &BTreeSet<String>) -> Result<(), Violation> {
    let mut waiting: BTreeMap<Door, Waiting> = BTreeMap::new();
    for (n, line) in lines.iter().enumerate() {
        let Some((stamp, rest)) = line.split_once("] ") else {
            continue;
        };
        let at_ms = stamp_ms(stamp);
        for ((instance, client, method, path), w) in &mut waiting {
            w.disturbed |= disturbs(rest, instance);
            if sent_to(rest, instance, client.as_deref(), method, path) {
                w.sent += 1;
                w.first_sent_ms.get_or_insert(at_ms);
            }
        }
        let Some(note) = rest.strip_prefix("harness ") else {
            continue;
        };
        if let Some(json) = note.strip_prefix(WAITS) {
            let note: Value = serde_json::from_str(json).unwrap_or(Value::Null);
            let w = Waiting {
                at_ms,
                retry_after_s: note["retry_after_s"].as_i64(),
                error: note["error"].clone(),
                disturbed: false,
                sent: 0,
                first_sent_ms: None,
            };
            waiting.insert(door_of(&note), w);
        } else if let Some(json) = note.strip_prefix(RETRIED) {
            let note: Value = serde_json::from_str(json).unwrap_or(Value::Null);
            let door = door_of(&note);
            let Some(w) = waiting.remove(&door) else {
                continue;
            };
            if judged.contains(&door.0) && refused_again(&w, &note) {
                return Err(Violation {
                    invariant: SafetyKey::RetryAfterRefused,
                    message: format!(
                        "{}: {} {} from {} waited the answered Retry-After of {} s after a 429 ({}) and was refused 429 again by the same limit: the Retry-After ended before the window did",
                        door.0,
                        door.2,
                        door.3,
                        door.1.as_deref().unwrap_or("the shared client"),
                        w.retry_after_s.unwrap_or_default(),
                        w.error
                    ),
                    line: Some(n),
                });
            }
        }
    }
    Ok(())
}

/// Whether the retry, sent as the note says, was refused by the same
/// per-client limit.
fn refused_again(w: &Waiting, retried: &Value) -> bool {
    let Some(retry_after_s) = w.retry_after_s else {
        return false;
    };
    let waited = w
        .first_sent_ms
        .is_some_and(|sent| sent >= w.at_ms + retry_after_s * 1000);
    let per_client = w.error.as_str().is_some_and(|e| e.contains(PER_CLIENT));
    !w.disturbed
        && w.sent == 1
        && waited
        && per_client
        && retried["status"].as_u64() == Some(429)
        && retried["error"] == w.error
}

/// Whether `rest` is a request line of `client` (`None`: the shared
/// client) to `method path` of `instance`.
fn sent_to(rest: &str, instance: &str, client: Option<&str>, method: &str, path: &str) -> bool {
    let Some(request) = rest
        .strip_prefix(instance)
        .and_then(|r| r.strip_prefix(" > "))
        .and_then(|r| r.strip_prefix(method))
        .and_then(|r| r.strip_prefix(' '))
        .and_then(|r| r.strip_prefix(path))
    else {
        return false;
    };
    if !(request.is_empty() || request.starts_with(' ')) {
        return false;
    }
    match client {
        Some(c) => request.contains(&format!("(from {c})")),
        None => !request.contains("(from "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ERROR: &str = "too many pairing claims from this address; retry later";

    fn waits(at: &str, retry_after_s: u64, error: &str) -> String {
        format!(
            r#"[+{at}s] harness {WAITS}{{"client":"c","error":"{error}","instance":"chain_a","method":"POST","path":"/v1/trust/claim","retry_after_s":{retry_after_s}}}"#
        )
    }

    fn sent(at: &str) -> String {
        format!(r#"[+{at}s] chain_a > POST /v1/trust/claim (from c) {{"pairing_code":"ff0000"}}"#)
    }

    fn retried(at: &str, status: u16, error: &str) -> String {
        format!(
            r#"[+{at}s] harness {RETRIED}{{"client":"c","error":"{error}","instance":"chain_a","method":"POST","path":"/v1/trust/claim","status":{status},"waited_s":1}}"#
        )
    }

    fn judged() -> BTreeSet<String> {
        BTreeSet::from(["chain_a".to_owned()])
    }

    #[test]
    fn a_retry_refused_again_after_the_answered_wait_is_caught() {
        let lines = [
            waits("10.400", 49, ERROR),
            sent("59.400"),
            retried("59.400", 429, ERROR),
        ];
        let v = check(&lines, &judged()).expect_err("refused again");
        assert_eq!(v.invariant, SafetyKey::RetryAfterRefused);
        assert_eq!(v.line, Some(2));
    }

    #[test]
    fn a_retry_is_judged_only_where_the_wait_was_exact() {
        let ok = [
            waits("10.400", 50, ERROR),
            sent("60.400"),
            retried("60.400", 400, "invalid_code"),
        ];
        assert!(check(&ok, &judged()).is_ok());
        let everyone = "too many failed pairing claims on this coordinator; retry later";
        let cases: [Vec<String>; 5] = [
            // Another limit (all clients together) refused it.
            vec![
                waits("10.400", 49, everyone),
                sent("59.400"),
                retried("59.400", 429, everyone),
            ],
            // Sent sooner than told.
            vec![
                waits("10.400", 49, ERROR),
                sent("59.000"),
                retried("59.000", 429, ERROR),
            ],
            // Another request of the client meanwhile.
            vec![
                waits("10.400", 49, ERROR),
                sent("20.000"),
                sent("59.400"),
                retried("59.400", 429, ERROR),
            ],
            // A restart meanwhile.
            vec![
                waits("10.400", 49, ERROR),
                "[+20.000s] harness instance chain_a restart".into(),
                sent("59.400"),
                retried("59.400", 429, ERROR),
            ],
            // Refused by another limit's error.
            vec![
                waits("10.400", 49, ERROR),
                sent("59.400"),
                retried("59.400", 429, everyone),
            ],
        ];
        for lines in cases {
            assert!(check(&lines, &judged()).is_ok(), "{lines:?}");
        }
        let lines = [
            waits("10.400", 49, ERROR),
            sent("59.400"),
            retried("59.400", 429, ERROR),
        ];
        assert!(check(&lines, &BTreeSet::new()).is_ok(), "several nodes");
    }
}
