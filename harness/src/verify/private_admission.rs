//! `private_admitted_offline`: a PRIVATE job is accepted only while one of
//! its user's trusted workers that serves its job type is online; otherwise
//! the commit is refused 422 `no_trusted_worker` (the spec; decision 0003).
//! Held-out set 6, patch 4 ("private admission counts offline trusted
//! workers"): admission that asked only whether the user trusted any key
//! accepted PRIVATE commits while every trusted worker was away, and the jobs
//! waited until they failed `no_eligible_worker`; no key saw it.
//!
//! Judged over what one node's store holds at the end and the sessions the
//! coordinator noted (`coordinator::buggify::session_opened`), all on the
//! coordinator's clock. An unpaid job is admitted at the instant it is
//! created (`created_at_ms`, under the same lock as sessions register and
//! unregister), so a session of a trusted, capable key must span that
//! instant: opened at or before it, and not closed before it. Left out:
//! - paid jobs, admitted before settlement and created after it (a trusted
//!   worker may leave in between, and the job waits; `Core::commit`);
//! - refusal records (`failed` / `no_trusted_worker`, no payload);
//! - several-node instances, whose presence is the shared store's.
//!
//! Trust is the store's at the end, whenever each key was paired: pairings
//! are never revoked, but a pairing made again keeps only its latest time
//! (`paired_at_ms`), so the time cannot say whether a key was trusted at a
//! commit (the swarm's seed 57 pairs a key, commits, and pairs it again after
//! a restart). A key's job types are
//! those of every simulated worker with that key (a key shared with `key_of`
//! counts as serving what any of its workers serves), and a session of it on
//! any instance counts: both only widen what excuses a job.

use super::safety::{SafetyKey, Violation};
use coordinator::buggify::SessionSpan;
use coordinator::core::trust::TrustEntry;
use coordinator::core::{FailureReason, Job};
use protocol::api::{JobType, PrivacyClass};
use std::collections::{BTreeMap, BTreeSet};

/// What the check reads of one one-node instance.
pub struct Admitted<'a> {
    pub instance: &'a str,
    pub jobs: &'a [Job],
    pub trust: &'a [TrustEntry],
}

/// Checks every unpaid PRIVATE job of `admitted` against the sessions
/// online at its creation. `capable`: each worker key (lowercase) and the
/// job types its workers serve. Times on the coordinator's clock.
pub fn check(
    admitted: &Admitted<'_>,
    sessions: &[SessionSpan],
    capable: &BTreeMap<String, BTreeSet<JobType>>,
) -> Result<(), Violation> {
    let judged = (admitted.jobs.iter()).filter(|j| {
        j.submission.privacy_class == PrivacyClass::Private
            && j.payment_ref.is_none()
            && j.paid_with.is_none()
            && j.error != Some(FailureReason::NoTrustedWorker)
    });
    for job in judged {
        let at_ms = job.created_at_ms;
        let user = &job.submission.user_id;
        let job_type = job.submission.job_type;
        let trusted: BTreeSet<String> = (admitted.trust.iter())
            .filter(|t| t.user_id.eq_ignore_ascii_case(user))
            .map(|t| t.provider_pubkey.to_ascii_lowercase())
            .collect();
        let online = sessions.iter().any(|s| {
            let key = s.pubkey.to_ascii_lowercase();
            trusted.contains(&key)
                && capable.get(&key).is_some_and(|t| t.contains(&job_type))
                && s.opened_ms <= at_ms
                && s.closed_ms.is_none_or(|c| c >= at_ms)
        });
        if !online {
            return Err(Violation {
                invariant: SafetyKey::PrivateAdmittedOffline,
                message: format!(
                    "{}: PRIVATE {} job {} of {user} was accepted with none of the user's {} trusted worker(s) online to serve it",
                    admitted.instance,
                    job_type.as_str(),
                    job.id,
                    trusted.len()
                ),
                line: None,
            });
        }
    }
    Ok(())
}

/// `private_commit_unproven`: on an instance with user auth on and no
/// payments, a PRIVATE commit needs its user's proof (decision 0017: "On,
/// ... PRIVATE commits need the proof; otherwise 401"), so no user has more
/// PRIVATE jobs in the store at the end than the harness sent PRIVATE
/// commits signed with that user's own key (`proven`, by user id in
/// lowercase; any answer counts, a lost one too). Held-out set 7's
/// `private-commit-unproven-when-payments-are-off` took a commit without a
/// proof header for one proven by payment on an unpaid deployment: the
/// swarm's impostors all sent a proof, and the plain-name PRIVATE commits
/// of its workloads, answered 201, were judged by nothing.
pub fn check_proven(
    admitted: &Admitted<'_>,
    proven: &BTreeMap<String, usize>,
) -> Result<(), Violation> {
    let mut jobs: BTreeMap<String, usize> = BTreeMap::new();
    let private =
        (admitted.jobs.iter()).filter(|j| j.submission.privacy_class == PrivacyClass::Private);
    for job in private {
        *jobs
            .entry(job.submission.user_id.to_ascii_lowercase())
            .or_default() += 1;
    }
    for (user, n) in jobs {
        let signed = proven.get(&user).copied().unwrap_or(0);
        if n > signed {
            return Err(Violation {
                invariant: SafetyKey::PrivateCommitUnproven,
                message: format!(
                    "{}: {user} has {n} PRIVATE job(s), but only {signed} PRIVATE commit(s) carried the user's proof",
                    admitted.instance
                ),
                line: None,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use coordinator::buggify::SessionEnd;
    use serde_json::json;

    const KEY: &str = "0x02aa";

    /// A running unpaid TASK job of alice's, created at `created_at_ms`.
    fn job(private: bool, created_at_ms: i64, error: Option<&str>) -> Job {
        serde_json::from_value(json!({
            "id": "00000000-0000-4000-8000-000000000001",
            "submission": {
                "job_type": "TASK", "user_id": "alice",
                "payload": {"job_type": "TASK", "task_type": "classify", "input": "x"},
                "privacy_class": if private { "PRIVATE" } else { "PUBLIC" },
            },
            "tier": "FAST", "status": "running", "output": null, "error": error,
            "receipt": null, "created_at_ms": created_at_ms, "completed_at_ms": null,
            "attempts": 1, "payment_ref": null, "deadline_ms": 1, "seq": 1,
        }))
        .expect("a job")
    }

    fn span(opened_ms: i64, closed_ms: Option<i64>) -> SessionSpan {
        SessionSpan {
            pubkey: KEY.to_uppercase().replace("0X", "0x"),
            session: 1,
            opened_ms,
            closed_ms,
            end: closed_ms.map(|_| SessionEnd::ConnectionClosed),
        }
    }

    /// Alice paired KEY at 100 ms; the worker with KEY serves `types`.
    fn judge(jobs: &[Job], sessions: &[SessionSpan], types: &[JobType]) -> Option<&'static str> {
        let trust = [TrustEntry {
            user_id: "alice".into(),
            provider_pubkey: KEY.into(),
            paired_at_ms: 100,
        }];
        let admitted = Admitted {
            instance: "chain_a",
            jobs,
            trust: &trust,
        };
        let capable = BTreeMap::from([(KEY.to_owned(), types.iter().copied().collect())]);
        check(&admitted, sessions, &capable)
            .err()
            .map(|v| v.invariant.as_str())
    }

    /// Accepted at 1 s: a trusted TASK worker's session must span that
    /// instant, its edges included.
    #[test]
    fn a_private_job_is_accepted_only_while_a_trusted_capable_worker_is_online() {
        let task = [JobType::Task];
        let jobs = [job(true, 1_000, None)];
        assert_eq!(judge(&jobs, &[span(500, None)], &task), None);
        assert_eq!(judge(&jobs, &[span(1_000, Some(1_000))], &task), None);
        let offline = Some("private_admitted_offline");
        assert_eq!(judge(&jobs, &[], &task), offline);
        assert_eq!(judge(&jobs, &[span(500, Some(999))], &task), offline);
        assert_eq!(judge(&jobs, &[span(1_001, None)], &task), offline);
        assert_eq!(
            judge(&jobs, &[span(500, None)], &[JobType::LlmInfer]),
            offline
        );
        // Paired (again) after the commit: its time does not say when it
        // was first trusted, so it counts.
        assert_eq!(judge(&[job(true, 50, None)], &[span(0, None)], &task), None);
    }

    /// A user holds no more PRIVATE jobs than commits it signed (any
    /// answer); PUBLIC jobs need no proof.
    #[test]
    fn a_user_holds_no_more_private_jobs_than_commits_it_signed() {
        let judge = |jobs: &[Job], signed: usize| {
            let admitted = Admitted {
                instance: "chain_a",
                jobs,
                trust: &[],
            };
            let proven = BTreeMap::from([("alice".to_owned(), signed)]);
            check_proven(&admitted, &proven)
                .err()
                .map(|v| v.invariant.as_str())
        };
        let two = [job(true, 1, None), job(true, 2, None)];
        assert_eq!(judge(&two, 2), None);
        assert_eq!(judge(&two, 3), None, "a signed commit refused or lost");
        assert_eq!(judge(&two, 1), Some("private_commit_unproven"));
        assert_eq!(judge(&[job(false, 1, None)], 0), None);
    }

    /// PUBLIC jobs and refusal records are not judged.
    #[test]
    fn public_jobs_and_refusal_records_are_not_judged() {
        let task = [JobType::Task];
        assert_eq!(judge(&[job(false, 1_000, None)], &[], &task), None);
        let refused = job(true, 1_000, Some("no_trusted_worker"));
        assert_eq!(judge(&[refused], &[], &task), None);
    }
}
