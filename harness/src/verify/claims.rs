//! `pairing_claimed_twice`: a pairing code is single-use (spec: a code can
//! be claimed once; a second claim answers `already_claimed`), so no code
//! of an instance is answered 200 by two `/v1/trust/claim` requests. Judged
//! over the transcript: each claim request an instance logged
//! (`chain_a > POST /v1/trust/claim {..}`) is paired with that actor's next
//! answer; one answered 200 with a pairing's shape (`user_id` and
//! `paired_at`) counts as a claim of its code.

use super::safety::{SafetyKey, Violation};
use serde_json::Value;
use std::collections::BTreeMap;

const CLAIM: &str = "> POST /v1/trust/claim ";

/// The first line that answered 200 to a second claim of one code.
pub fn check(lines: &[String]) -> Result<(), Violation> {
    // Per actor: the code of its claim awaiting an answer.
    let mut asked: BTreeMap<&str, String> = BTreeMap::new();
    // Per instance and code: the line of the claim answered 200.
    let mut claimed: BTreeMap<(&str, String), usize> = BTreeMap::new();
    for (n, line) in lines.iter().enumerate() {
        let Some((actor, rest)) = line.split_once("] ").and_then(|(_, r)| r.split_once(' ')) else {
            continue;
        };
        if let Some(body) = rest.strip_prefix(CLAIM) {
            let code = serde_json::from_str::<Value>(body).ok().and_then(|b| {
                let code = b["pairing_code"].as_str()?.trim().to_ascii_lowercase();
                Some(code)
            });
            match code {
                Some(code) => asked.insert(actor, code),
                None => asked.remove(actor),
            };
            continue;
        }
        let Some(answer) = rest.strip_prefix("< ") else {
            continue;
        };
        let Some(code) = asked.remove(actor) else {
            continue;
        };
        let Some(body) = answer.strip_prefix("200 ") else {
            continue;
        };
        let paired = serde_json::from_str::<Value>(body)
            .is_ok_and(|b| b["user_id"].is_string() && b["paired_at"].is_string());
        if !paired {
            continue;
        }
        // Nodes of one instance (`chain_a-1`) share its codes.
        let instance = actor.split('-').next().unwrap_or(actor);
        if let Some(first) = claimed.insert((instance, code.clone()), n) {
            return Err(Violation {
                invariant: SafetyKey::PairingClaimedTwice,
                message: format!(
                    "{instance} answered 200 to a second claim of pairing code {code} (first claimed at line {first})"
                ),
                line: Some(n),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(code: &str, key: &str, status: u16) -> Vec<String> {
        let answer = if status == 200 {
            r#"200 {"paired_at":"2026-11-21T10:00:00.001Z","user_id":"u0"}"#.to_owned()
        } else {
            format!(r#"{status} {{"error":"already_claimed"}}"#)
        };
        vec![
            format!(
                r#"[+0.001s] chain_a > POST /v1/trust/claim {{"pairing_code":"{code}","provider_pubkey":"{key}"}}"#
            ),
            format!("[+0.001s] chain_a < {answer}"),
        ]
    }

    #[test]
    fn a_code_claimed_once_and_refused_after_holds() {
        let lines = [
            claim("864bde", "0x02aa", 200),
            claim("864bde", "0x02bb", 400),
        ]
        .concat();
        assert!(check(&lines).is_ok());
        // Two codes, each claimed once.
        let lines = [
            claim("864bde", "0x02aa", 200),
            claim("11aa22", "0x02bb", 200),
        ]
        .concat();
        assert!(check(&lines).is_ok());
    }

    #[test]
    fn a_code_answered_200_to_two_claims_is_caught() {
        let lines = [
            claim("864bde", "0x02aa", 200),
            claim(" 864BDE", "0x02bb", 200),
        ]
        .concat();
        let v = check(&lines).expect_err("claimed twice");
        assert_eq!(v.invariant, SafetyKey::PairingClaimedTwice);
        assert_eq!(v.line, Some(3));
    }
}
