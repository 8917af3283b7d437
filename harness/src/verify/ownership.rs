//! `node_acted_unowned`: in a several-node world a node acts only for jobs
//! it owns. docs/cluster.md: a node that could not renew its lease for half
//! of it fences itself, so it has stopped before its lease lapses and
//! another node can take its jobs over; a node's jobs are its own until
//! then. So no node queues an `assign` of a job the shared store names
//! another node the owner of, unless it fenced itself since it last joined.
//! Judged over the coordinator's own record
//! (`coordinator::buggify::ownership`): every owner change the shared store
//! made, every `assign` a node queued, every fence and join, in the order
//! they happened. A job the store has no row of yet (written after its
//! assign, in the node's next batch) or holds in the pool is not judged:
//! only another node's ownership is a contradiction.

use super::safety::{SafetyKey, Violation};
use coordinator::buggify::Ownership;
use std::collections::{BTreeMap, BTreeSet};
use uuid::Uuid;

/// The first `assign` a node queued for a job another node owned; its
/// time on the transcript's clock (`epoch_ms` is its `+0.000s`).
pub fn check(facts: &[Ownership], epoch_ms: i64) -> Result<(), Violation> {
    let mut owners: BTreeMap<Uuid, Option<&str>> = BTreeMap::new();
    let mut fenced: BTreeSet<&str> = BTreeSet::new();
    for fact in facts {
        match fact {
            Ownership::Owned { job, owner } => {
                owners.insert(*job, owner.as_deref());
            }
            Ownership::Fenced { node } => {
                fenced.insert(node);
            }
            Ownership::Joined { node } => {
                fenced.remove(node.as_str());
            }
            Ownership::Assigned { node, job, at_ms } => {
                let Some(Some(owner)) = owners.get(job) else {
                    continue;
                };
                if *owner != node.as_str() && !fenced.contains(node.as_str()) {
                    let ms = at_ms - epoch_ms;
                    let at = format!("+{}.{:03}s", ms / 1000, ms % 1000);
                    return Err(Violation {
                        invariant: SafetyKey::NodeActedUnowned,
                        message: format!(
                            "node {node} assigned job {job} at {at} while the shared store named node {owner} its owner"
                        ),
                        line: None,
                    });
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }
    fn owned(n: u128, owner: Option<&str>) -> Ownership {
        Ownership::Owned {
            job: job(n),
            owner: owner.map(str::to_owned),
        }
    }
    fn assigned(node: &str, n: u128) -> Ownership {
        Ownership::Assigned {
            node: node.into(),
            job: job(n),
            at_ms: 7_250,
        }
    }

    #[test]
    fn a_node_assigns_its_own_new_and_pooled_jobs() {
        let facts = [
            // Assigned before its first write; then written as its own.
            assigned("a", 1),
            owned(1, Some("a")),
            assigned("a", 1),
            // A pooled job is not another node's.
            owned(2, None),
            assigned("b", 2),
        ];
        assert_eq!(check(&facts, 0), Ok(()));
    }

    #[test]
    fn a_node_assigning_a_job_taken_over_breaks_the_key() {
        let facts = [owned(1, Some("a")), owned(1, Some("b")), assigned("a", 1)];
        let v = check(&facts, 0).expect_err("a's job was taken over by b");
        assert_eq!(v.invariant, SafetyKey::NodeActedUnowned);
        assert!(v.message.contains("node a assigned"), "{}", v.message);
        assert!(v.message.contains("at +7.250s"), "{}", v.message);
    }

    #[test]
    fn a_fenced_node_is_not_judged_until_it_joins_again() {
        let fenced = Ownership::Fenced { node: "a".into() };
        let joined = Ownership::Joined { node: "a".into() };
        let quiet = [owned(1, Some("b")), fenced.clone(), assigned("a", 1)];
        assert_eq!(check(&quiet, 0), Ok(()));
        let again = [owned(1, Some("b")), fenced, joined, assigned("a", 1)];
        assert!(check(&again, 0).is_err());
    }
}
