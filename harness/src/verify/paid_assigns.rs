//! `payment_bought_two_jobs`, over the work done (sabotage
//! `nonce-reservation-fails-open`): one payment buys one job (x402's replay
//! protection, docs/payments.md), so no two jobs are ever assigned to
//! workers with one payment reference (`payment_ref`, `x402:<nonce>` of
//! the authorization). The stored state alone cannot show this
//! (`check_store`): in a cluster, a node that took a replayed authorization
//! as new while cut from the shared store dispatches its job at once, and
//! the store's own check then refuses the job's write and fences the node,
//! so the second job is never stored and its commit is never answered 201;
//! but a worker was given its work. A job assigned again (a requeue, a
//! takeover) keeps its id, so it is one job.
//!
//! A job lost with its process before it was durable never existed: a job
//! is dispatched before its commit is on disk (decision 0007 holds back
//! only the answers), so a crash inside the store writer's turn can erase
//! a job a worker already read, with its payment's reservation; its commit
//! was never answered 201 and nobody was charged, so the payer may spend
//! the authorization again (swarm seed 2095: the same authorization sent
//! with another prompt right after the crash). So an earlier job that no
//! store holds at the end, that retention did not delete and whose commit
//! no client saw answered 201 does not count as bought. The cluster case
//! above is the other way round (the first job is stored, the second is
//! not), so it is still judged.

use super::safety::{SafetyKey, Violation};
use crate::spec::frames::{Direction, FrameRecord};
use std::collections::BTreeMap;

/// Checks the `assign` frames every worker read; `lost` says whether a
/// job was erased before it was durable (see the module's comment).
pub fn check(frames: &[FrameRecord], lost: &dyn Fn(&str) -> bool) -> Result<(), Violation> {
    // The first job assigned with each payment reference.
    let mut bought: BTreeMap<&str, &str> = BTreeMap::new();
    for record in frames {
        let frame = &record.frame;
        if record.direction != Direction::Received || frame["type"] != "assign" {
            continue;
        }
        let (Some(payment), Some(job)) = (frame["payment_ref"].as_str(), frame["job_id"].as_str())
        else {
            continue;
        };
        let first = *bought.entry(payment).or_insert(job);
        if first != job && lost(first) {
            bought.insert(payment, job);
            continue;
        }
        if first != job {
            return Err(Violation {
                invariant: SafetyKey::PaymentBoughtTwoJobs,
                message: format!(
                    "payment {payment} bought the work of jobs {first} and {job} (worker {} was assigned the second)",
                    record.worker
                ),
                line: Some(record.line.saturating_sub(1)),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn assign(worker: &str, job: &str, payment: Option<&str>) -> FrameRecord {
        FrameRecord {
            worker: worker.into(),
            direction: Direction::Received,
            frame: json!({"type": "assign", "job_id": job, "payment_ref": payment}),
            line: 3,
        }
    }

    fn judge(frames: &[FrameRecord]) -> Option<&'static str> {
        check(frames, &|_| false)
            .err()
            .map(|v| v.invariant.as_str())
    }

    /// A first job erased before it was durable frees its payment; a
    /// stored first job does not, nor does a lost second one.
    #[test]
    fn a_job_lost_before_it_was_durable_frees_its_payment() {
        let frames = [
            assign("w1", "j1", Some("x402:0xaa")),
            assign("w1", "j2", Some("x402:0xaa")),
        ];
        let lost_j1 = |job: &str| job == "j1";
        assert_eq!(check(&frames, &lost_j1).err(), None);
        let lost_j2 = |job: &str| job == "j2";
        let judged = check(&frames, &lost_j2).err().map(|v| v.invariant);
        assert_eq!(judged, Some(SafetyKey::PaymentBoughtTwoJobs));
        let third = [
            frames[0].clone(),
            frames[1].clone(),
            assign("w2", "j3", Some("x402:0xaa")),
        ];
        let judged = check(&third, &lost_j1).err().map(|v| v.invariant);
        assert_eq!(judged, Some(SafetyKey::PaymentBoughtTwoJobs));
    }

    /// One job assigned twice with its payment (a requeue to another
    /// worker) is one job bought; unpaid jobs name no payment.
    #[test]
    fn a_job_assigned_again_with_its_payment_is_one_job() {
        let frames = [
            assign("w1", "j1", Some("x402:0xaa")),
            assign("w2", "j1", Some("x402:0xaa")),
            assign("w1", "j2", None),
            assign("w2", "j3", None),
            assign("w2", "j4", Some("x402:0xbb")),
        ];
        assert_eq!(judge(&frames), None);
    }

    /// Two jobs assigned with one payment: it bought both.
    #[test]
    fn two_jobs_assigned_with_one_payment_break_the_key() {
        let frames = [
            assign("w1", "j1", Some("x402:0xaa")),
            assign("w2", "j2", Some("x402:0xaa")),
        ];
        assert_eq!(judge(&frames), Some("payment_bought_two_jobs"));
    }

    /// Frames the worker sent are not work it was given.
    #[test]
    fn only_assigns_read_count() {
        let mut sent = assign("w2", "j2", Some("x402:0xaa"));
        sent.direction = Direction::Sent;
        assert_eq!(judge(&[assign("w1", "j1", Some("x402:0xaa")), sent]), None);
    }
}
