//! `trust_list_not_durable` (sabotage `repaired-key-keeps-old-paired-at`):
//! what `GET /v1/trust/list` answered is durable. A list is answered only
//! after the store holds what it read (`api/trust.rs` waits for
//! `durable()`), and pairings are never removed (no unpairing, no
//! retention of trust), so on a one-node SQLite instance the first list of
//! a user after a restart answers exactly what the last list before it
//! answered, unless a claim could have changed the user's trust in
//! between. Judged over the harness's log of pairing requests
//! (`world::trust_lists`): two lists of one query answered 200 by two
//! processes of the node (each list sent and answered by one process),
//! with no claim on the instance sent, answered or in flight from the
//! first list's sending to the second's answer, and no raw request to a
//! pairing door in between, must have equal bodies (the same keys with
//! the same `paired_at`).

use super::safety::{SafetyKey, Violation};
use crate::world::trust_lists::TrustUse;
use std::collections::{BTreeMap, BTreeSet};

/// The first list whose answer after a restart differs from the last one
/// before it, on the instances in `judged`.
pub fn check(
    uses: &[TrustUse],
    lines: &[String],
    judged: &BTreeSet<String>,
) -> Result<(), Violation> {
    let mut last: BTreeMap<(&str, &str), &TrustUse> = BTreeMap::new();
    let lists = (uses.iter()).filter(|u| {
        u.door == "list"
            && u.status == Some(200)
            && u.generations.0 == u.generations.1
            && judged.contains(&u.instance)
    });
    for list in lists {
        let key = (list.instance.as_str(), list.query.as_str());
        if let Some(before) = last.insert(key, list) {
            let restarted = before.generations.0 != list.generations.0;
            if restarted && quiet(uses, lines, before, list) && before.body != list.body {
                return Err(Violation {
                    invariant: SafetyKey::TrustListNotDurable,
                    message: format!(
                        "{}: GET /v1/trust/list?{} answered {} after a restart, but {} before it (transcript line {}), with no claim in between: what was answered was not what the store kept",
                        list.instance,
                        list.query,
                        list.body,
                        before.body,
                        before.answered_line + 1
                    ),
                    line: Some(list.answered_line),
                });
            }
        }
    }
    Ok(())
}

/// No claim on the instance and no raw request to a pairing door from
/// `before`'s sending to `after`'s answer (a claim in flight at either
/// end counts).
fn quiet(uses: &[TrustUse], lines: &[String], before: &TrustUse, after: &TrustUse) -> bool {
    let (from, to) = (before.sent_line, after.answered_line);
    let claimed = (uses.iter()).any(|u| {
        u.door == "claim"
            && u.instance == before.instance
            && u.sent_line <= to
            && u.answered_line >= from
    });
    let raw = format!("] {} > raw request ", before.instance);
    let raw_sent = (lines.get(from..=to).unwrap_or_default().iter())
        .any(|l| l.contains(&raw) && l.contains("/v1/trust/"));
    !claimed && !raw_sent
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(body: &str, generation: u64, lines: (usize, usize)) -> TrustUse {
        TrustUse {
            instance: "chain_a".into(),
            door: "list".into(),
            query: "user_id=u0".into(),
            status: Some(200),
            body: body.into(),
            generations: (generation, generation),
            sent_line: lines.0,
            answered_line: lines.1,
        }
    }

    fn claim(lines: (usize, usize)) -> TrustUse {
        TrustUse {
            door: "claim".into(),
            query: String::new(),
            body: "{}".into(),
            ..list("", 1, lines)
        }
    }

    fn judged() -> BTreeSet<String> {
        BTreeSet::from(["chain_a".to_owned()])
    }

    fn lines() -> Vec<String> {
        vec![String::new(); 20]
    }

    const NEW: &str = r#"{"providers":[{"paired_at":"T2","provider_pubkey":"k"}]}"#;
    const OLD: &str = r#"{"providers":[{"paired_at":"T1","provider_pubkey":"k"}]}"#;

    #[test]
    fn a_list_that_changes_across_a_restart_is_caught() {
        let uses = [list(NEW, 1, (2, 3)), list(OLD, 2, (6, 7))];
        let v = check(&uses, &lines(), &judged()).expect_err("changed");
        assert_eq!(v.invariant, SafetyKey::TrustListNotDurable);
        assert_eq!(v.line, Some(7));
        assert!(v.message.contains("T1"), "{}", v.message);
    }

    #[test]
    fn a_change_a_claim_or_one_process_explains_holds() {
        // The same answer across the restart.
        let same = [list(NEW, 1, (2, 3)), list(NEW, 2, (6, 7))];
        assert!(check(&same, &lines(), &judged()).is_ok());
        // One process: a claim may have changed it (it is not judged).
        let one = [list(OLD, 1, (2, 3)), list(NEW, 1, (6, 7))];
        assert!(check(&one, &lines(), &judged()).is_ok());
        // A claim in between, or in flight at the first list.
        for c in [(4, 5), (1, 2), (7, 9)] {
            let uses = [list(OLD, 1, (2, 3)), claim(c), list(NEW, 2, (6, 7))];
            assert!(check(&uses, &lines(), &judged()).is_ok(), "{c:?}");
        }
        // A claim before the first list's sending is not in between.
        let earlier = [claim((0, 1)), list(NEW, 1, (2, 3)), list(OLD, 2, (6, 7))];
        assert!(check(&earlier, &lines(), &judged()).is_err());
        // A raw request to a pairing door in between.
        let mut raw = lines();
        raw[4] = "[+1.000s] chain_a > raw request (from g) \"POST /v1/trust/claim\"".into();
        let uses = [list(NEW, 1, (2, 3)), list(OLD, 2, (6, 7))];
        assert!(check(&uses, &raw, &judged()).is_ok());
        // An instance not judged (several nodes, or memory).
        assert!(check(&uses, &lines(), &BTreeSet::new()).is_ok());
        // A list whose node restarted while it was on its way.
        let mut straddled = list(OLD, 2, (6, 7));
        straddled.generations = (1, 2);
        assert!(check(&[list(NEW, 1, (2, 3)), straddled], &lines(), &judged()).is_ok());
    }
}
