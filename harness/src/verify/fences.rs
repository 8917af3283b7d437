//! `node_fenced_early`: a node of a several-node instance fences itself
//! only once it could not renew its lease for half of it (docs/cluster.md,
//! "Node death"), judged from the harness's own store cuts (`partition`
//! steps, logged `instance NAME partition node I for MS ms`) and the fence
//! lines, never from the node's own account of its renewals.
//!
//! Why the bound holds for an honest node: it renews every third of its
//! lease (`every`), each renewal at most `late` after it was due (BUGGIFY's
//! `cluster.lease.late`, an eighth of the lease; none without fault
//! points), so two attempts are never more than `gap = every + late`
//! apart, and a store the harness has not cut answers. Every attempt
//! between its last success and its fence failed, so all fell in cuts no
//! more than `gap` apart: one run of cuts, which began at most `gap` after
//! that success. The fence comes half a lease after that success at the
//! earliest (the store writer's retries, which also fence, last half a
//! lease from their first failure, inside the same run). So a node fenced
//! while cut is fenced at least `lease / 2 - gap` after its run of cuts
//! began; earlier, one failed renewal fenced a node that had renewed
//! recently. A fence outside every cut is `node_fenced_unprovoked`'s.

use super::safety::{line_ms, SafetyKey, Violation};
use std::collections::BTreeMap;

/// A cluster instance's node lease and how late a renewal may come.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeLease {
    /// `node_lease_ms`.
    pub lease_ms: i64,
    /// Whether the run's fault points are on (a renewal may then come an
    /// eighth of the lease late, `coordinator::node::tasks::run_lease`).
    pub late: bool,
}

impl NodeLease {
    /// The longest time between two renewal attempts of a live node.
    fn gap_ms(&self) -> i64 {
        let every = (self.lease_ms / 3).max(1);
        let late = if self.late {
            (self.lease_ms / 8).max(1)
        } else {
            0
        };
        every + late
    }

    /// How long after its run of cuts began a node may be fenced at the
    /// earliest.
    fn earliest_fence_ms(&self) -> i64 {
        self.lease_ms / 2 - self.gap_ms()
    }
}

/// A store cut of one node: from, to (ms after `+0.000s`) and its line.
type Cut = (i64, i64, usize);

/// Checks every fence of a node of an instance in `leases` (by instance
/// name) against the cuts before it.
pub fn check(lines: &[String], leases: &BTreeMap<String, NodeLease>) -> Result<(), Violation> {
    let mut cuts: BTreeMap<String, (NodeLease, Vec<Cut>)> = BTreeMap::new();
    for (n, line) in lines.iter().enumerate() {
        let Some((actor, rest)) = line.split_once("] ").and_then(|(_, r)| r.split_once(' ')) else {
            continue;
        };
        let at_ms = line_ms(line);
        if actor == "harness" {
            if let Some((instance, node, for_ms)) = parse_cut(rest) {
                if let Some(lease) = leases.get(instance) {
                    let entry = cuts.entry(format!("{instance}-{node}"));
                    let list = &mut entry.or_insert_with(|| (*lease, Vec::new())).1;
                    list.push((at_ms, at_ms.saturating_add(for_ms), n));
                }
            }
            continue;
        }
        if !rest.starts_with("fenced by the shared store") {
            continue;
        }
        let Some((lease, list)) = cuts.get(actor) else {
            continue;
        };
        if let Some(v) = early(actor, at_ms, n, *lease, list) {
            return Err(v);
        }
    }
    Ok(())
}

/// `instance NAME partition node I for MS ms`: the instance, node and MS.
fn parse_cut(rest: &str) -> Option<(&str, u32, i64)> {
    let words: Vec<&str> = rest.split(' ').collect();
    match words[..] {
        ["instance", name, "partition", "node", node, "for", ms, "ms"] => {
            Some((name, node.parse().ok()?, ms.parse().ok()?))
        }
        _ => None,
    }
}

/// The violation of a fence of `node` at `at_ms` (line `n`), if it came
/// before the earliest time its run of cuts allows. Cuts are in the
/// order they began.
fn early(node: &str, at_ms: i64, n: usize, lease: NodeLease, cuts: &[Cut]) -> Option<Violation> {
    let gap_ms = lease.gap_ms();
    // The run of cuts the fence fell in: walking back from the fence, cuts
    // that reach within `gap` of the run's start join it.
    let mut run: Option<(i64, usize)> = None;
    let mut covered_until = i64::MIN;
    for &(from, to, line) in cuts.iter().filter(|(from, _, _)| *from <= at_ms) {
        match run {
            Some(_) if from <= covered_until.saturating_add(gap_ms) => {}
            _ => run = Some((from, line)),
        }
        covered_until = covered_until.max(to);
    }
    let (start_ms, cut_line) = run?;
    if at_ms > covered_until {
        // Not cut when fenced: not this key's to judge.
        return None;
    }
    let earliest_ms = start_ms + lease.earliest_fence_ms();
    (at_ms < earliest_ms).then(|| Violation {
        invariant: SafetyKey::NodeFencedEarly,
        message: format!(
            "node {node} was fenced {} ms after the store was cut from it (transcript line {}), \
             before it could have gone half its lease of {} ms without a renewal \
             (renewals every {gap_ms} ms at the latest: not before {} ms)",
            at_ms - start_ms,
            cut_line + 1,
            lease.lease_ms,
            lease.earliest_fence_ms()
        ),
        line: Some(n),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leases(late: bool) -> BTreeMap<String, NodeLease> {
        [(
            "chain_a".to_owned(),
            NodeLease {
                lease_ms: 3_000,
                late,
            },
        )]
        .into()
    }

    fn lines(cuts: &[(&str, u64)], fence: &str) -> Vec<String> {
        let mut lines: Vec<String> = cuts
            .iter()
            .map(|(at, ms)| {
                format!("[+{at}] harness instance chain_a partition node 1 for {ms} ms")
            })
            .collect();
        lines.push(format!(
            "[+{fence}] chain_a-1 fenced by the shared store; crashed"
        ));
        lines
    }

    fn key(lines: &[String], late: bool) -> Option<SafetyKey> {
        check(lines, &leases(late)).err().map(|v| v.invariant)
    }

    #[test]
    fn a_node_fenced_soon_after_a_short_cut_began_was_fenced_early() {
        // Lease 3 s: renewals every 1 s, the fence at 1.5 s without one,
        // so never before 0.5 s into a cut (0.125 s with fault points).
        let early = lines(&[("1.000s", 300)], "1.200s");
        assert_eq!(key(&early, false), Some(SafetyKey::NodeFencedEarly));
        let later = lines(&[("1.000s", 3_000)], "1.500s");
        assert_eq!(key(&later, false), None);
        // With fault points a renewal may come late: 0.125 s is allowed.
        assert_eq!(key(&early, true), None);
        let very_early = lines(&[("1.000s", 300)], "1.100s");
        assert_eq!(key(&very_early, true), Some(SafetyKey::NodeFencedEarly));
        // Another node's cut, or a fence after the cut healed, or another
        // instance: not judged here.
        let mut other = lines(&[("1.000s", 300)], "1.200s");
        other[0] = other[0].replace("node 1", "node 2");
        assert_eq!(key(&other, false), None);
        let healed = lines(&[("1.000s", 100)], "1.200s");
        assert_eq!(key(&healed, false), None);
        assert_eq!(check(&early, &BTreeMap::new()), Ok(()));
    }

    #[test]
    fn cuts_closer_than_a_renewal_gap_are_one_run() {
        // Two cuts 0.4 s apart (less than the 1 s between renewals): a
        // node may have failed a renewal in each, so its run began with
        // the first.
        let close = lines(&[("1.000s", 200), ("1.600s", 900)], "1.700s");
        assert_eq!(key(&close, false), None);
        // 1.5 s apart: the second cut is a run of its own.
        let apart = lines(&[("1.000s", 200), ("2.700s", 900)], "2.800s");
        assert_eq!(key(&apart, false), Some(SafetyKey::NodeFencedEarly));
    }
}
