//! `rate_limit_exceeded` (sabotage `rate-window-allows-one-more`): the
//! per-minute limits of pairing hold exactly as the coordinator's limiter
//! counts them (`coordinator/src/core/rate.rs`): a fixed window per key
//! that opens at the key's first counted event when no window of it is
//! open, counts the events of the next 60,000 ms, and lets at most the
//! limit through in it. Per single-node instance, judged over the
//! transcript:
//!
//! - per client address, creates answered 201 (only a create that got its
//!   code is counted) within one window: at most
//!   `pairing_creates_per_client_per_minute_max`; and per user id, on an
//!   instance with user auth off (the id is the key exactly as sent), at
//!   most `pairing_creates_per_user_per_minute_max`;
//! - per client address, claims that reached the limiter and failed
//!   (a well-formed claim answered 400: unknown, claimed, expired code or a
//!   key off the curve; a claim refused before, 429s and 200s are not
//!   counted) within one window: at most
//!   `claim_failures_per_client_per_minute_max`.
//!
//! The windows are replayed from the times the harness logged, so an event
//! counts only where its time is exact (its request and answer in the same
//! millisecond: the coordinator read its clock between the two). An
//! instance stops being judged at anything that could count unseen or reset
//! its windows: a stop, crash or restart, an answer that is neither 2xx nor
//! 4xx (the limiter may have counted before a write failed), a counted
//! event answered later than it was sent, a raw request to a pairing door.

use super::edges::{disturbs, stamp_ms};
use super::safety::{SafetyKey, Violation};
use coordinator::api::validate::{is_compressed_key_shape, user_id_str};
use coordinator::config::Limits;
use coordinator::core::rate::WINDOW_MS;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// One instance's limits, and whether its user ids are keys as sent.
#[derive(Debug, Clone, Copy)]
pub struct RateLimits {
    pub creates_per_client: u32,
    pub creates_per_user: u32,
    pub claim_failures_per_client: u32,
    /// User auth off: the limiter keys creates by the `user_id` as sent.
    pub users_as_sent: bool,
}

/// A pairing request awaiting its answer.
struct Asked {
    client: String,
    /// A create's `user_id`; `None` for a claim.
    user: Option<String>,
    /// A claim that reaches the limiter (counted if refused).
    counted_claim: bool,
    at_ms: i64,
}

/// A limiter's open windows: per scope and key, (start, count).
#[derive(Default)]
struct Windows(BTreeMap<(&'static str, String), (i64, u32)>);

impl Windows {
    /// Counts one event; the count of its window after it.
    fn add(&mut self, scope: &'static str, key: &str, at_ms: i64) -> u32 {
        let window = self.0.entry((scope, key.to_owned())).or_insert((at_ms, 0));
        if at_ms - window.0 >= WINDOW_MS {
            *window = (at_ms, 0);
        }
        window.1 += 1;
        window.1
    }
}

/// The replay of one transcript.
#[derive(Default)]
struct Replay<'a> {
    asked: BTreeMap<&'a str, Asked>,
    /// Per actor: requests sent and not yet answered.
    open: BTreeMap<&'a str, u32>,
    windows: BTreeMap<&'a str, Windows>,
    unjudged: BTreeSet<&'a str>,
}

/// The first counted event past its window's limit.
pub fn check(
    lines: &[String],
    epoch_ms: i64,
    instances: &BTreeMap<String, RateLimits>,
) -> Result<(), Violation> {
    let mut replay = Replay::default();
    for (n, line) in lines.iter().enumerate() {
        let Some((stamp, rest)) = line.split_once("] ") else {
            continue;
        };
        for name in instances.keys().filter(|i| disturbs(rest, i)) {
            replay.unjudged.insert(name);
        }
        let Some((actor, rest)) = rest.split_once(' ') else {
            continue;
        };
        let Some((instance, limits)) = instances.get_key_value(actor) else {
            continue;
        };
        if replay.unjudged.contains(actor) {
            continue;
        }
        let at_ms = epoch_ms + stamp_ms(stamp);
        if let Some(request) = rest.strip_prefix("> ") {
            replay.request(instance, request, at_ms);
        } else if let Some(answer) = rest.strip_prefix("< ") {
            replay
                .answer(instance, limits, answer, at_ms)
                .map_err(|message| Violation {
                    invariant: SafetyKey::RateLimitExceeded,
                    message,
                    line: Some(n),
                })?;
        }
    }
    Ok(())
}

impl<'a> Replay<'a> {
    fn request(&mut self, actor: &'a str, request: &str, at_ms: i64) {
        let before = self.open.get(actor).copied().unwrap_or(0);
        self.open.insert(actor, before + 1);
        let asked = asked_of(request, at_ms);
        // Another request in flight: which answer is whose is unknown.
        let crossed = before > 0 && (asked.is_some() || self.asked.contains_key(actor));
        let raw = request.starts_with("raw request ") && request.contains("/v1/trust/");
        if crossed || raw {
            self.unjudged.insert(actor);
        }
        match asked {
            Some(a) => self.asked.insert(actor, a),
            None => self.asked.remove(actor),
        };
    }

    /// Counts what the answer shows counted; the breach, if any.
    fn answer(
        &mut self,
        actor: &'a str,
        limits: &RateLimits,
        answer: &str,
        at_ms: i64,
    ) -> Result<(), String> {
        if let Some(n) = self.open.get_mut(actor) {
            *n = n.saturating_sub(1);
        }
        let Some(a) = self.asked.remove(actor) else {
            return Ok(());
        };
        let status = answer.split(' ').next().unwrap_or_default();
        let counted = match (status, &a.user) {
            ("201", Some(user)) => {
                let mut c = vec![(
                    "creates per client",
                    a.client.clone(),
                    limits.creates_per_client,
                )];
                if limits.users_as_sent {
                    c.push(("creates per user", user.clone(), limits.creates_per_user));
                }
                c
            }
            ("400", None) if a.counted_claim => {
                let max = limits.claim_failures_per_client;
                vec![("failed claims per client", a.client.clone(), max)]
            }
            (s, _) if s.len() == 3 && (s.starts_with('2') || s.starts_with('4')) => vec![],
            _ => {
                self.unjudged.insert(actor);
                return Ok(());
            }
        };
        if !counted.is_empty() && at_ms != a.at_ms {
            self.unjudged.insert(actor);
            return Ok(());
        }
        let counts = self.windows.entry(actor).or_default();
        for (scope, key, max) in counted {
            let count = counts.add(scope, &key, at_ms);
            if count > max {
                return Err(format!(
                    "{actor} let {count} {scope} through for {key:?} in one 60 s window (limit {max})"
                ));
            }
        }
        Ok(())
    }
}

/// A create or claim request (`POST PATH (from CLIENT) BODY`), or `None`.
fn asked_of(request: &str, at_ms: i64) -> Option<Asked> {
    let rest = request.strip_prefix("POST /v1/trust/")?;
    let (door, rest) = rest.split_once(' ')?;
    let (notes, body) = rest.split_at(rest.find('{').unwrap_or(rest.len()));
    let client = notes
        .split_once("(from ")
        .and_then(|(_, c)| c.split_once(')'))
        .map_or("", |(c, _)| c)
        .to_owned();
    let body: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    match door {
        "create" => Some(Asked {
            client,
            // The limiter's key: the id as the coordinator takes it (NFC).
            user: Some(user_id_str(body["user_id"].as_str()?, &Limits::default()).ok()?),
            counted_claim: false,
            at_ms,
        }),
        "claim" => {
            let code = body["pairing_code"].as_str();
            let key = body["provider_pubkey"].as_str();
            // As `api/trust.rs` refuses before the limiter: a code that is
            // no string or holds a control character, a key of another shape.
            let counted_claim = code.is_some_and(|c| !c.chars().any(char::is_control))
                && key.is_some_and(is_compressed_key_shape);
            Some(Asked {
                client,
                user: None,
                counted_claim,
                at_ms,
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "0x0279be667ef9dcbbac55a06295ce870b07029bfcdb2dce28d959f2815b16f81798";

    fn limits() -> BTreeMap<String, RateLimits> {
        let limits = RateLimits {
            creates_per_client: 10,
            creates_per_user: 5,
            claim_failures_per_client: 10,
            users_as_sent: true,
        };
        BTreeMap::from([("chain_a".to_owned(), limits)])
    }

    /// A create for `user` from `client` at `at` (seconds), answered
    /// `status` in the same instant.
    fn create(at: &str, client: &str, user: &str, status: u16) -> Vec<String> {
        let answer = match status {
            201 => {
                r#"201 {"expires_at":"2026-11-21T11:00:00.000Z","pairing_code":"aa"}"#.to_owned()
            }
            s => format!(r#"{s} {{"error":"x"}}"#),
        };
        vec![
            format!(
                r#"[+{at}s] chain_a > POST /v1/trust/create (from {client}) {{"user_id":"{user}"}}"#
            ),
            format!("[+{at}s] chain_a < {answer}"),
        ]
    }

    /// A claim of an unknown code from `client` at `at`, answered `status`.
    fn claim(at: &str, client: &str, code: &str, status: u16) -> Vec<String> {
        vec![
            format!(
                r#"[+{at}s] chain_a > POST /v1/trust/claim (from {client}) {{"pairing_code":"{code}","provider_pubkey":"{KEY}"}}"#
            ),
            format!(r#"[+{at}s] chain_a < {status} {{"error":"invalid_code"}}"#),
        ]
    }

    fn run(lines: &[Vec<String>]) -> Result<(), Violation> {
        check(&lines.concat(), 0, &limits())
    }

    /// `n` creates from `client`, for users of the burst's own, five at
    /// most each.
    fn creates(at: &str, client: &str, n: usize) -> Vec<Vec<String>> {
        (0..n)
            .map(|k| create(at, client, &format!("{client}{at}-{}", k / 5), 201))
            .collect()
    }

    #[test]
    fn the_limit_of_creates_per_client_holds_in_each_window() {
        assert!(run(&creates("1.000", "f", 10)).is_ok());
        // Other clients have windows of their own; refusals count nothing.
        let mut lines = creates("1.000", "f", 10);
        lines.extend(creates("1.000", "g", 10));
        lines.push(create("1.000", "f", "u9", 429));
        assert!(run(&lines).is_ok());
        // The window opens at the first counted create: 60 s later, a new one.
        let mut lines = creates("1.000", "f", 10);
        lines.extend(creates("61.000", "f", 10));
        assert!(run(&lines).is_ok());
        // Fixed, not sliding: 9 at 30 s and 10 at 61 s share no window.
        let mut lines = vec![create("1.000", "f", "a", 201)];
        lines.extend(creates("30.000", "f", 9));
        lines.extend(creates("61.000", "f", 10));
        assert!(run(&lines).is_ok());
    }

    #[test]
    fn an_eleventh_create_in_one_window_is_caught() {
        let mut lines = creates("1.000", "f", 10);
        lines.push(create("60.999", "f", "u9", 201));
        let v = run(&lines).expect_err("11 creates");
        assert_eq!(v.invariant, SafetyKey::RateLimitExceeded);
        assert_eq!(v.line, Some(21));
        assert!(v.message.contains("creates per client"), "{}", v.message);
    }

    #[test]
    fn a_sixth_create_for_one_user_is_caught_where_ids_are_keys() {
        let lines: Vec<_> = (0..6)
            .map(|k| create("1.000", &format!("c{k}"), "u0", 201))
            .collect();
        let v = run(&lines).expect_err("6 for u0");
        assert!(v.message.contains("creates per user"), "{}", v.message);
        let mut on = limits();
        on.get_mut("chain_a").expect("chain_a").users_as_sent = false;
        assert!(check(&lines.concat(), 0, &on).is_ok());
    }

    #[test]
    fn failed_claims_count_only_where_the_limiter_counts_them() {
        let ten: Vec<_> = (0..10)
            .map(|_| claim("1.000", "f", "abcdef", 400))
            .collect();
        assert!(run(&ten).is_ok());
        // 429s and a code refused before the limiter count nothing.
        let mut lines = ten.clone();
        lines.push(claim("1.000", "f", "abcdef", 429));
        lines.push(claim("1.000", "f", r"\u001b", 400));
        assert!(run(&lines).is_ok());
        let mut lines = ten;
        lines.push(claim("1.000", "f", "abcdef", 400));
        let v = run(&lines).expect_err("11 failed claims");
        assert!(
            v.message.contains("failed claims per client"),
            "{}",
            v.message
        );
    }

    #[test]
    fn an_instance_is_not_judged_past_what_could_count_unseen() {
        let restart = vec!["[+2.000s] harness instance chain_a restart".to_owned()];
        let failed = create("2.000", "f", "u9", 500);
        let mut late = create("2.000", "f", "u9", 201);
        late[1] = late[1].replace("+2.000s", "+2.500s");
        let mut lines = creates("1.000", "f", 5);
        lines.extend(creates("3.000", "f", 10));
        assert!(run(&lines).is_err(), "15 creates without a cut");
        // A request still in flight when a pairing request is sent.
        let detached =
            vec!["[+2.000s] chain_a > GET /v1/jobs/x/events (stream, detached)".to_owned()];
        for cut in [restart, failed, late, detached] {
            let mut lines = creates("1.000", "f", 5);
            lines.push(cut);
            lines.extend(creates("3.000", "f", 10));
            assert!(run(&lines).is_ok(), "{:?}", lines[5]);
        }
    }
}
