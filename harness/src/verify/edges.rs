//! `expiry_off_edge`: a job no worker ever took fails by its pending
//! timeout at exactly `created_at + pending_timeout_ms` (or its payment's
//! deadline, below), not a millisecond before or after (docs/scenarios.md and scenarios/README.md, "Safety";
//! the pending timeout is the instance's `timing.pending_timeout_ms`).
//!
//! Every answer that showed such a job is judged by its time `t` against
//! the job's deadline `D`: `pending` at `t > D` expired late, `failed`
//! (`no_eligible_worker`) at `t < D` expired early. At `t = D` exactly a
//! plain poll races the coordinator's timer task (both wake in that
//! instant, in an order tokio's scheduler picks), so only a poll the
//! harness made sure came after the instant's timers (an edge poll, `poll`
//! with `edge_ms`, logged `edge poll of JOB`) is judged there.
//!
//! A job [`LEASE_WORKER`] held (its only attempt, on an instance whose
//! jobs get one) fails `worker_timeout` at exactly its assign's time plus
//! `lease_ms`: held before, failed at and after.
//!
//! A paid job's deadline is its payment's (`validBefore` less the settle
//! margin, failing `payment_expired`) where that comes first (decision
//! 0021). Judged where `D` is exact: a simulated one-node instance without
//! fault points (`timer.late` fires timers late on purpose), for jobs with
//! no attempt and no recovery (a requeue starts a new pending timeout at a
//! time the store does not keep), and only answers given before anything
//! stopped, crashed or restarted the instance after the job was created
//! (a coordinator that is down fires no timer; a `reboot` fault's lines do
//! not name their instance, so any counts).

use super::overdue::EndBound;
use super::safety::{SafetyKey, Violation};
use coordinator::core::{FailureReason, Job};
use protocol::api::JobStatus;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// The marker an edge poll logs (as `harness`) before its request.
pub const EDGE_POLL: &str = "edge poll of ";

/// The worker whose assignments `expiry_off_edge` judges at their lease's
/// end: one that accepts every job and never answers, and has no fault of
/// the network between it and its instance, so the time its transcript
/// shows an assign is the time the coordinator sent it (the swarm's
/// `edges` kind adds it; a scenario opts in by naming a worker so).
pub const LEASE_WORKER: &str = "edge_lease";

/// Checks the answers that showed `instance`'s never-taken jobs, and the
/// jobs [`LEASE_WORKER`] held.
pub fn check(
    lines: &[String],
    instance: &str,
    jobs: &[Job],
    bound: &EndBound,
) -> Result<(), Violation> {
    let mut deadlines = never_taken(jobs, bound);
    deadlines.extend(leased(lines, jobs, bound));
    if deadlines.is_empty() {
        return Ok(());
    }
    let answers = format!("{instance} < 200 ");
    let mut edges: BTreeSet<(String, i64)> = BTreeSet::new();
    let mut disturbed_ms: Vec<i64> = Vec::new();
    for (n, line) in lines.iter().enumerate() {
        let Some((stamp, rest)) = line.split_once("] ") else {
            continue;
        };
        let at_ms = bound.epoch_ms + stamp_ms(stamp);
        if disturbs(rest, instance) {
            disturbed_ms.push(at_ms);
            continue;
        }
        if let Some(job) = rest
            .strip_prefix("harness ")
            .and_then(|r| r.strip_prefix(EDGE_POLL))
        {
            edges.insert((job.split(' ').next().unwrap_or_default().to_owned(), at_ms));
            continue;
        }
        let Some(body) = rest.strip_prefix(&answers) else {
            continue;
        };
        let Ok(body) = serde_json::from_str::<Value>(body) else {
            continue;
        };
        let Some(id) = body["id"].as_str() else {
            continue;
        };
        let Some(&(created_ms, deadline_ms)) = deadlines.get(id) else {
            continue;
        };
        if disturbed_ms
            .iter()
            .any(|d| (created_ms..=at_ms).contains(d))
        {
            continue;
        }
        let edge = edges.contains(&(id.to_owned(), at_ms));
        if let Some(off) = off_edge(&body, at_ms, deadline_ms, edge) {
            return Err(Violation {
                invariant: SafetyKey::ExpiryOffEdge,
                message: format!(
                    "{instance}: job {id} {off} (no worker took it: created + pending timeout \
                     {} ms, or validBefore less the settle margin of {} ms if earlier; \
                     {LEASE_WORKER} held it: its assign + lease {} ms)",
                    bound.timing.pending_timeout_ms,
                    bound.timing.settle_margin_ms,
                    bound.timing.lease_ms
                ),
                line: Some(n),
            });
        }
    }
    Ok(())
}

/// The jobs no worker took that a pending timeout ends (or will), by id:
/// when each was created, and its pending deadline.
fn never_taken(jobs: &[Job], bound: &EndBound) -> BTreeMap<String, (i64, i64)> {
    jobs.iter()
        .filter(|j| j.attempts == 0 && j.recoveries == 0)
        .filter_map(|j| {
            let (deadline_ms, reason) = deadline(j, bound);
            let ended = j.status == JobStatus::Failed && j.error == Some(reason);
            let judged = j.status == JobStatus::Pending || ended;
            judged.then(|| (j.id.to_string(), (j.created_at_ms, deadline_ms)))
        })
        .collect()
}

/// The jobs [`LEASE_WORKER`] held on an instance whose jobs get one
/// attempt, and that failed `worker_timeout` there, by id: when each was
/// created, and when its lease ended (the assign's time plus `lease_ms`).
fn leased(lines: &[String], jobs: &[Job], bound: &EndBound) -> BTreeMap<String, (i64, i64)> {
    if bound.timing.attempts_max != 1 {
        return BTreeMap::new();
    }
    let timed_out: BTreeMap<String, i64> = (jobs.iter())
        .filter(|j| j.attempts == 1 && j.recoveries == 0 && j.status == JobStatus::Failed)
        .filter(|j| j.error == Some(FailureReason::WorkerTimeout) && j.settle_ticket().is_none())
        .map(|j| (j.id.to_string(), j.created_at_ms))
        .collect();
    let assigns = format!("{LEASE_WORKER} <- {{\"type\":\"assign\",\"job_id\":\"");
    let mut leased = BTreeMap::new();
    for line in lines {
        let Some((stamp, rest)) = line.split_once("] ") else {
            continue;
        };
        let Some(id) = rest.strip_prefix(&assigns).and_then(|r| r.get(..36)) else {
            continue;
        };
        if let Some(&created_ms) = timed_out.get(id) {
            let assigned_ms = bound.epoch_ms + stamp_ms(stamp);
            let end_ms = assigned_ms + bound.timing.lease_ms;
            leased.entry(id.to_owned()).or_insert((created_ms, end_ms));
        }
    }
    leased
}

/// When a job no worker takes fails, and why: at its pending deadline
/// (`no_eligible_worker`), or, for a paid job, at its payment's deadline
/// (`validBefore` less the settle margin, `payment_expired`) where that
/// comes first (decision 0021: a pending wait never outlives the payment).
fn deadline(job: &Job, bound: &EndBound) -> (i64, FailureReason) {
    let pending_ms = job.created_at_ms + bound.timing.pending_timeout_ms;
    let payment_ms = job.settle_ticket().map(|t| {
        let valid_before_ms =
            i64::try_from(t.valid_before_seconds).map_or(i64::MAX / 2, |s| s * 1000);
        valid_before_ms - bound.timing.settle_margin_ms
    });
    match payment_ms {
        Some(paid_ms) if paid_ms <= pending_ms => (paid_ms, FailureReason::PaymentExpired),
        _ => (pending_ms, FailureReason::NoEligibleWorker),
    }
}

/// Whether a line (after its stamp) stops, crashes or restarts `instance`
/// (arming a crash at a write is not yet one: `crashed` follows), or is a
/// `reboot` fault's crash or restart of some instance.
pub(super) fn disturbs(rest: &str, instance: &str) -> bool {
    let controlled = rest
        .strip_prefix("harness instance ")
        .and_then(|r| r.strip_prefix(instance))
        .is_some_and(|r| r.starts_with(' ') && !r.starts_with(" crash_after "));
    let rebooted = rest.strip_prefix("harness fault ").is_some_and(|r| {
        r.ends_with(": crash") || r.ends_with(": restarted") || r.contains(": restart failed")
    });
    let crashed = rest
        .strip_prefix("harness ")
        .is_some_and(|r| r.starts_with(&format!("{instance} crashed")));
    controlled || rebooted || crashed
}

/// What is wrong with an answer `body` at `at_ms` for a job whose pending
/// deadline is `deadline_ms`, if anything.
fn off_edge(body: &Value, at_ms: i64, deadline_ms: i64, edge: bool) -> Option<String> {
    let late = at_ms > deadline_ms || (edge && at_ms == deadline_ms);
    match body["status"].as_str() {
        Some(status @ ("pending" | "assigned" | "running")) if late && at_ms == deadline_ms => {
            Some(format!(
                "was still {status} at its deadline, after the instant's timers ran"
            ))
        }
        Some(status @ ("pending" | "assigned" | "running")) if late => Some(format!(
            "was still {status} {} ms after its deadline",
            at_ms - deadline_ms
        )),
        Some("failed") if at_ms < deadline_ms => Some(format!(
            "had failed {} ms before its deadline",
            deadline_ms - at_ms
        )),
        _ => None,
    }
}

/// `+S.mmm` (or `[+S.mmm`) as ms.
pub(super) fn stamp_ms(stamp: &str) -> i64 {
    let stamp = stamp.trim_start_matches('[').trim_start_matches('+');
    let stamp = stamp.trim_end_matches('s');
    let Some((s, ms)) = stamp.split_once('.') else {
        return i64::MAX / 2;
    };
    match (s.parse::<i64>(), ms.parse::<i64>()) {
        (Ok(s), Ok(ms)) => s * 1000 + ms,
        _ => i64::MAX / 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_never_taken_job_fails_exactly_at_its_pending_deadline() {
        let failed = json!({"status": "failed", "result": {"error": "no_eligible_worker"}});
        let pending = json!({"status": "pending"});
        // Before the deadline: pending, never failed.
        assert_eq!(off_edge(&pending, 999, 1_000, true), None);
        assert!(off_edge(&failed, 999, 1_000, false).is_some());
        // At it: failed; pending only where the poll came after the
        // instant's timers (an edge poll).
        assert_eq!(off_edge(&failed, 1_000, 1_000, true), None);
        assert!(off_edge(&pending, 1_000, 1_000, true).is_some());
        assert_eq!(off_edge(&pending, 1_000, 1_000, false), None);
        // After it: failed, never pending.
        assert!(off_edge(&pending, 1_001, 1_000, false).is_some());
        assert_eq!(off_edge(&failed, 1_001, 1_000, false), None);
    }

    #[test]
    fn restarts_crashes_and_reboots_disturb_but_arming_a_crash_does_not() {
        assert!(disturbs("harness instance chain_a restart", "chain_a"));
        assert!(disturbs(
            "harness instance chain_a graceful_restart",
            "chain_a"
        ));
        assert!(disturbs(
            "harness chain_a crashed at its armed store write; restarting",
            "chain_a"
        ));
        assert!(disturbs("harness fault reboot0: crash", "chain_a"));
        assert!(disturbs("harness fault reboot0: restarted", "chain_b"));
        assert!(!disturbs(
            "harness instance chain_a crash_after commit",
            "chain_a"
        ));
        assert!(!disturbs("harness instance chain_b restart", "chain_a"));
        assert!(!disturbs("harness fault link0: w1 lost", "chain_a"));
    }

    #[test]
    fn stamps_read_as_ms() {
        assert_eq!(stamp_ms("[+29.952s"), 29_952);
        assert_eq!(stamp_ms("[+0.001s"), 1);
    }
}
