//! `proof_accepted_twice` (sabotage `proof-nonce-forgotten-at-issue`):
//! a user proof's nonce is accepted once while the proof could be valid
//! (decision 0017: each (address, nonce) once within the ±300 s window; the
//! set is not persisted and is one per node, so a restart or another node
//! may accept it once more). Judged over the harness's log of proofs sent
//! to `trust/create` and `trust/list` (`world::proofs`), where an answer
//! 2xx means the proof was checked and its nonce accepted: no two requests
//! with one proof are answered 2xx by one process of one node. A request
//! whose node changed process between its sending and its answer is not
//! judged (which process answered is unknown).

use super::safety::{SafetyKey, Violation};
use crate::world::proofs::ProofUse;
use std::collections::{BTreeMap, BTreeSet};

/// The first proof answered 2xx a second time by the process that
/// accepted it, on the instances with user auth on (`judged`).
pub fn check(uses: &[ProofUse], judged: &BTreeSet<String>) -> Result<(), Violation> {
    // Per node and proof: the generation of the process that accepted it,
    // and the line of that answer.
    let mut accepted: BTreeMap<(&str, &str), (u64, usize)> = BTreeMap::new();
    for u in uses.iter().filter(|u| judged.contains(&u.instance)) {
        let (sent, answered) = u.generations;
        if sent != answered || !u.status.is_some_and(|s| (200..300).contains(&s)) {
            continue;
        }
        let key = (u.host.as_str(), u.header.as_str());
        match accepted.insert(key, (sent, u.line)) {
            Some((generation, first)) if generation == sent => {
                return Err(Violation {
                    invariant: SafetyKey::ProofAcceptedTwice,
                    message: format!(
                        "{}: one X-User-Proof answered {} twice by one process of {} (first at transcript line {}): a replay of a proof inside its window was accepted",
                        u.instance,
                        u.status.unwrap_or_default(),
                        u.host,
                        first + 1
                    ),
                    line: Some(u.line),
                });
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(header: &str, status: u16, generations: (u64, u64), line: usize) -> ProofUse {
        ProofUse {
            instance: "chain_a".into(),
            host: "chain-a.sim".into(),
            header: header.into(),
            status: Some(status),
            generations,
            line,
        }
    }

    fn judged() -> BTreeSet<String> {
        BTreeSet::from(["chain_a".to_owned()])
    }

    #[test]
    fn a_replay_refused_or_answered_by_another_process_holds() {
        let refused = [sent("p1", 201, (1, 1), 3), sent("p1", 401, (1, 1), 7)];
        assert!(check(&refused, &judged()).is_ok());
        // Another process (a restart between them) has its own nonce set.
        let restarted = [sent("p1", 201, (1, 1), 3), sent("p1", 201, (2, 2), 9)];
        assert!(check(&restarted, &judged()).is_ok());
        // A restart while it was on its way: which process answered is unknown.
        let straddled = [sent("p1", 201, (1, 1), 3), sent("p1", 201, (1, 2), 9)];
        assert!(check(&straddled, &judged()).is_ok());
        // Two proofs, each accepted once.
        let two = [sent("p1", 201, (1, 1), 3), sent("p2", 200, (1, 1), 5)];
        assert!(check(&two, &judged()).is_ok());
        // User auth off: no proof is read.
        let off = [sent("p1", 201, (1, 1), 3), sent("p1", 201, (1, 1), 7)];
        assert!(check(&off, &BTreeSet::new()).is_ok());
    }

    #[test]
    fn a_proof_accepted_twice_by_one_process_is_caught() {
        let uses = [
            sent("p1", 201, (1, 1), 3),
            sent("p1", 401, (1, 1), 5),
            sent("p1", 201, (1, 1), 8),
        ];
        let v = check(&uses, &judged()).expect_err("accepted twice");
        assert_eq!(v.invariant, SafetyKey::ProofAcceptedTwice);
        assert_eq!(v.line, Some(8));
        // Another node of the instance has its own set.
        let mut other = sent("p1", 201, (1, 1), 8);
        other.host = "chain-a-n1.sim".into();
        assert!(check(&[sent("p1", 201, (1, 1), 3), other], &judged()).is_ok());
    }
}
