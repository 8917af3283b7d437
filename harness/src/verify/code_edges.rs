//! `expiry_off_edge`, extended to pairing codes (sabotage
//! `pairing-code-claimable-at-expiry`): a code can be claimed until its
//! `expires_at` and not from that instant on (spec: a code is valid for one
//! hour; `core/trust.rs` refuses a claim at `now >= expires_at`). Judged
//! over the transcript, by the times the harness logged: a claim *sent* at
//! or after the `expires_at` its create was answered with, and answered 200
//! with a pairing, was taken late (the coordinator read its clock no
//! earlier than the request was sent); one *answered* `expired` before that
//! instant was refused early (it read its clock no later than the answer
//! came). Both clocks are the simulation's one clock, in ms, so neither
//! side can be a matter of rounding.

use super::edges::stamp_ms;
use super::safety::{SafetyKey, Violation};
use serde_json::Value;
use std::collections::BTreeMap;

/// The marker an edge claim (`pair` with `claim_edge_ms`) logs (as
/// `harness`) before its claim.
pub const EDGE_CLAIM: &str = "edge claim of ";

const CLAIM: &str = "> POST /v1/trust/claim ";

/// The first claim taken at or after its code's expiry, or refused
/// `expired` before it.
pub fn check(lines: &[String], epoch_ms: i64) -> Result<(), Violation> {
    // Per instance and code (lowercase): its `expires_at`, in ms.
    let mut expiries: BTreeMap<(&str, String), i64> = BTreeMap::new();
    // Per actor: the code of its claim awaiting an answer, and when sent.
    let mut asked: BTreeMap<&str, (String, i64)> = BTreeMap::new();
    // Per actor: requests sent and not yet answered (a claim sent while
    // another is in flight is not judged: whose answer comes is unknown).
    let mut open: BTreeMap<&str, u32> = BTreeMap::new();
    for (n, line) in lines.iter().enumerate() {
        let Some((stamp, rest)) = line.split_once("] ") else {
            continue;
        };
        let Some((actor, rest)) = rest.split_once(' ') else {
            continue;
        };
        let at_ms = epoch_ms + stamp_ms(stamp);
        // Nodes of one instance (`chain_a-1`) share its codes.
        let instance = actor.split('-').next().unwrap_or(actor);
        if let Some(request) = rest.strip_prefix("> ") {
            let before = open.get(actor).copied().unwrap_or(0);
            open.insert(actor, before + 1);
            match claimed_code(request).filter(|_| before == 0) {
                Some(code) => asked.insert(actor, (code, at_ms)),
                None => asked.remove(actor),
            };
            continue;
        }
        let Some(answer) = rest.strip_prefix("< ") else {
            continue;
        };
        open.entry(actor).and_modify(|n| *n = n.saturating_sub(1));
        let (status, body) = answer.split_once(' ').unwrap_or((answer, ""));
        let body: Value = serde_json::from_str(body).unwrap_or(Value::Null);
        if let Some((code, expires_ms)) = created(status, &body) {
            expiries.insert((instance, code), expires_ms);
            continue;
        }
        let Some((code, sent_ms)) = asked.remove(actor) else {
            continue;
        };
        let Some(&expires_ms) = expiries.get(&(instance, code.clone())) else {
            continue;
        };
        let paired =
            status == "200" && body["user_id"].is_string() && body["paired_at"].is_string();
        let expired = body["error"] == "expired";
        let late = paired && sent_ms >= expires_ms;
        let early = expired && at_ms < expires_ms;
        if late || early {
            let (what, when) = match late {
                true => ("claimed", sent_ms),
                false => ("refused expired", at_ms),
            };
            return Err(Violation {
                invariant: SafetyKey::ExpiryOffEdge,
                message: format!(
                    "{instance}: pairing code {code} {what} at {} ms relative to its expires_at",
                    when - expires_ms
                ),
                line: Some(n),
            });
        }
    }
    Ok(())
}

/// The code a `POST /v1/trust/claim` request names, in lowercase (the
/// body is the first `{` on: a note or `(from CLIENT)` may come before).
fn claimed_code(request: &str) -> Option<String> {
    let rest = request.strip_prefix(&CLAIM[2..])?;
    let body: Value = serde_json::from_str(&rest[rest.find('{')?..]).ok()?;
    Some(body["pairing_code"].as_str()?.trim().to_ascii_lowercase())
}

/// A create's 201: its code and `expires_at`, in ms.
fn created(status: &str, body: &Value) -> Option<(String, i64)> {
    if status != "201" {
        return None;
    }
    let code = body["pairing_code"].as_str()?.trim().to_ascii_lowercase();
    let expires_ms = protocol::time::parse_ms(body["expires_at"].as_str()?)?;
    Some((code, expires_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-11-21T10:00:00.000Z.
    const EPOCH_MS: i64 = 1_795_255_200_000;

    /// A code created at +0.001s that expires at +3.001s, then a claim
    /// sent at `sent` (seconds, as the transcript shows them) answered
    /// `answer` in the same instant.
    fn claim_at(sent: &str, answer: &str) -> Vec<String> {
        vec![
            r#"[+0.001s] chain_a > POST /v1/trust/create {"user_id":"u0"}"#.to_owned(),
            r#"[+0.001s] chain_a < 201 {"expires_at":"2026-11-21T10:00:03.001Z","pairing_code":"5D252C"}"#.to_owned(),
            format!("[+{sent}s] harness {EDGE_CLAIM}5d252c at its expiry"),
            format!(r#"[+{sent}s] chain_a > POST /v1/trust/claim {{"pairing_code":"5d252c","provider_pubkey":"0x02aa"}}"#),
            format!("[+{sent}s] chain_a < {answer}"),
        ]
    }

    const PAIRED: &str = r#"200 {"paired_at":"2026-11-21T10:00:03.000Z","user_id":"u0"}"#;
    const EXPIRED: &str = r#"400 {"error":"expired"}"#;

    #[test]
    fn the_epoch_constant_is_the_default_epoch() {
        assert_eq!(
            protocol::time::parse_ms("2026-11-21T10:00:00.000Z"),
            Some(EPOCH_MS)
        );
    }

    #[test]
    fn claims_before_the_expiry_pair_and_at_or_after_it_are_refused() {
        for (sent, answer) in [("3.000", PAIRED), ("3.001", EXPIRED), ("3.002", EXPIRED)] {
            assert!(check(&claim_at(sent, answer), EPOCH_MS).is_ok(), "{sent}");
        }
        // Other refusals, and claims of codes no create showed, judge nothing.
        let refused = r#"400 {"error":"already_claimed"}"#;
        assert!(check(&claim_at("3.000", refused), EPOCH_MS).is_ok());
        assert!(check(&claim_at("9.000", PAIRED)[2..], EPOCH_MS).is_ok());
    }

    #[test]
    fn a_claim_paired_at_its_expiry_is_caught() {
        for sent in ["3.001", "3.002"] {
            let v = check(&claim_at(sent, PAIRED), EPOCH_MS).expect_err(sent);
            assert_eq!(v.invariant, SafetyKey::ExpiryOffEdge);
            assert_eq!(v.line, Some(4));
            assert!(v.message.contains("claimed at"), "{}", v.message);
        }
    }

    #[test]
    fn a_claim_refused_expired_before_its_expiry_is_caught() {
        let v = check(&claim_at("3.000", EXPIRED), EPOCH_MS).expect_err("early");
        assert_eq!(v.invariant, SafetyKey::ExpiryOffEdge);
        assert!(
            v.message.contains("refused expired at -1 ms"),
            "{}",
            v.message
        );
    }

    #[test]
    fn a_claim_sent_before_the_expiry_and_answered_after_it_is_no_breach() {
        // Sent in time, answered (paired) once the clock moved on: the
        // coordinator may have read its clock at the request.
        let mut lines = claim_at("3.000", PAIRED);
        lines[4] = format!("[+3.005s] chain_a < {PAIRED}");
        assert!(check(&lines, EPOCH_MS).is_ok());
        // Another request of the same actor in between drops the claim,
        // and a claim sent while another request is in flight is not judged.
        let mut lines = claim_at("3.001", PAIRED);
        lines.insert(4, "[+3.001s] chain_a > GET /v1/health ".to_owned());
        assert!(check(&lines, EPOCH_MS).is_ok());
        let mut lines = claim_at("3.001", PAIRED);
        lines.insert(
            2,
            "[+3.001s] chain_a > GET /v1/jobs/x/events (stream)".to_owned(),
        );
        assert!(check(&lines, EPOCH_MS).is_ok());
    }
}
