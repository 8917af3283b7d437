//! Decision 0008 (a paid commit retried with the same payment), judged from
//! the paid commits steps sent and their answers (`world::paid_commits`),
//! per instance and payment, against the payment's first 201 (the job it
//! bought, with that body on that tier):
//!
//! - `payment_answered_other_submission`: a later commit with the same
//!   payment but another submission (another body, or another tier) was
//!   answered 201 with that job. The decision promises 402
//!   `nonce_already_used`: the job runs the first body, so the second
//!   client's prompt silently never runs (sabotage
//!   `paid-retry-ignores-submission`). Only bodies that are different
//!   submissions once parsed as the commit door parses them (user ids in
//!   normal form) count.
//! - `paid_retry_refused`: a later commit with the same payment, the same
//!   body (byte for byte) and the same tier was refused 402
//!   `nonce_already_used` though the job the payment bought is still held
//!   at the end (retention never deleted it: the decision's one exception).
//!   The client that lost the first 201 can then never learn the job it
//!   paid for (sabotage `restart-forgets-paid-index`: a restart that
//!   forgets which payment bought which job). Judged on one-node
//!   instances only: a cluster node cut from the shared store cannot look
//!   a job held by another node up, and answers the used nonce.
//!
//! Other refusals of a retry (an authorization past its window, an
//! instance down) are not judged: the decision does not reach them.

use super::safety::{SafetyKey, Violation};
use crate::world::paid_commits::PaidCommit;
use coordinator::api::validate;
use coordinator::config::Limits;
use protocol::api::JobSubmission;
use std::collections::{BTreeMap, BTreeSet};

/// The x402 reason of a payment whose nonce was used before.
const NONCE_USED: &str = "nonce_already_used";

/// What an instance holds at the end, as the keys need it.
pub struct Held {
    /// The ids of the jobs it holds.
    pub jobs: BTreeSet<String>,
    /// A single coordinator (`paid_retry_refused` judges only these).
    pub one_node: bool,
}

/// Judges every paid commit against the first one its payment bought a job
/// with on its instance; instances not in `held` are not judged.
pub fn check(commits: &[PaidCommit], held: &BTreeMap<String, Held>) -> Result<(), Violation> {
    let mut bought: BTreeMap<(&str, &str), &PaidCommit> = BTreeMap::new();
    for commit in commits {
        let Some(instance) = held.get(&commit.instance) else {
            continue;
        };
        let key = (commit.instance.as_str(), commit.payment.as_str());
        let Some(first) = bought.get(&key) else {
            if commit.status == Some(201) && commit.job_id.is_some() {
                bought.insert(key, commit);
            }
            continue;
        };
        if let Some(why) = judge(first, commit, instance) {
            return Err(why);
        }
    }
    Ok(())
}

/// Whether `later`, with the payment that bought `first`'s job, broke the
/// decision.
fn judge(first: &PaidCommit, later: &PaidCommit, instance: &Held) -> Option<Violation> {
    let job = first.job_id.as_deref()?;
    let violation = |invariant, what: String| {
        Some(Violation {
            invariant,
            message: format!(
                "{}: {what}; its payment bought job {job} with {} on {} (transcript line {})",
                later.instance,
                first.body,
                first.tier,
                first.line + 1
            ),
            line: Some(later.line),
        })
    };
    if later.status == Some(201) && later.job_id.as_deref() == Some(job) && differ(first, later) {
        return violation(
            SafetyKey::PaymentAnsweredOtherSubmission,
            format!(
                "a commit of {} on {} was answered 201 with job {job}, not 402 {NONCE_USED}",
                later.body, later.tier
            ),
        );
    }
    let used = (later.error.as_deref()).is_some_and(|e| e.contains(NONCE_USED));
    let same = first.tier == later.tier && first.body == later.body;
    if later.status == Some(402) && used && same && instance.one_node && instance.jobs.contains(job)
    {
        return violation(
            SafetyKey::PaidRetryRefused,
            format!(
                "a retry of the same commit with the same payment was refused 402 {}, not answered 201 with job {job}, which it still holds",
                later.error.as_deref().unwrap_or_default()
            ),
        );
    }
    None
}

/// Whether two commits are different submissions to the commit door:
/// another tier, or bodies that parse to different submissions (user ids
/// in normal form). A body that does not parse is not judged.
fn differ(a: &PaidCommit, b: &PaidCommit) -> bool {
    if a.tier != b.tier {
        return true;
    }
    match (submission(&a.body), submission(&b.body)) {
        (Some(x), Some(y)) => x != y,
        _ => false,
    }
}

/// A body as the commit door reads it, its user id in normal form.
fn submission(body: &serde_json::Value) -> Option<JobSubmission> {
    let mut s = validate::submission(body, &Limits::default()).ok()?;
    if let Some(normal) = protocol::user_proof::normalize_user_id(&s.user_id) {
        s.user_id = normal;
    }
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const JOB: &str = "00000000-0000-0000-0000-00000000000a";

    fn commit(input: &str, status: u16, error: Option<&str>, line: usize) -> PaidCommit {
        let body = json!({"job_type": "TASK", "user_id": "u1",
            "payload": {"task_type": "classify", "input": input}});
        PaidCommit {
            instance: "chain_a".into(),
            tier: "cheap".into(),
            body,
            payment: "p1".into(),
            status: Some(status),
            job_id: (status == 201).then(|| JOB.to_owned()),
            error: error.map(str::to_owned),
            line,
        }
    }

    fn held(one_node: bool, jobs: &[&str]) -> BTreeMap<String, Held> {
        let jobs = jobs.iter().map(|j| (*j).to_owned()).collect();
        BTreeMap::from([("chain_a".to_owned(), Held { jobs, one_node })])
    }

    fn key(commits: &[PaidCommit], held: &BTreeMap<String, Held>) -> Option<&'static str> {
        check(commits, held).err().map(|v| v.invariant.as_str())
    }

    const USED: Option<&str> = Some("invalid_exact_evm_nonce_already_used");

    /// A retry of the same body answered with the same job, and another
    /// body refused as a used payment: what decision 0008 promises.
    #[test]
    fn the_promised_answers_pass() {
        let commits = [
            commit("job 1", 201, None, 1),
            commit("job 1", 201, None, 5),
            commit("job 2", 402, USED, 9),
        ];
        assert_eq!(key(&commits, &held(true, &[JOB])), None);
    }

    /// Another prompt with the same payment answered with the first job.
    #[test]
    fn another_prompt_answered_with_the_bought_job_fails() {
        let commits = [commit("job 1", 201, None, 1), commit("job 2", 201, None, 5)];
        let found = check(&commits, &held(true, &[JOB])).unwrap_err();
        assert_eq!(
            found.invariant.as_str(),
            "payment_answered_other_submission"
        );
        assert_eq!(found.line, Some(5));
        let mut other_tier = commit("job 1", 201, None, 5);
        other_tier.tier = "fast".into();
        let commits = [commit("job 1", 201, None, 1), other_tier];
        assert_eq!(
            key(&commits, &held(false, &[JOB])),
            Some("payment_answered_other_submission")
        );
    }

    /// The same commit retried and refused as used while its job is held.
    #[test]
    fn a_retry_refused_while_its_job_is_held_fails() {
        let commits = [commit("job 1", 201, None, 1), commit("job 1", 402, USED, 5)];
        assert_eq!(
            key(&commits, &held(true, &[JOB])),
            Some("paid_retry_refused")
        );
    }

    /// Not judged: the job is gone (retention), the instance has several
    /// nodes, the refusal is for another reason, or no 201 came first.
    #[test]
    fn refusals_the_decision_allows_pass() {
        let retry = [commit("job 1", 201, None, 1), commit("job 1", 402, USED, 5)];
        assert_eq!(key(&retry, &held(true, &[])), None);
        assert_eq!(key(&retry, &held(false, &[JOB])), None);
        let expired = Some("invalid_exact_evm_payload_authorization_valid_before");
        let late = [
            commit("job 1", 201, None, 1),
            commit("job 1", 402, expired, 5),
        ];
        assert_eq!(key(&late, &held(true, &[JOB])), None);
        let refused_first = [commit("job 1", 503, None, 1), commit("job 1", 402, USED, 5)];
        assert_eq!(key(&refused_first, &held(true, &[JOB])), None);
    }
}
