//! `job_end_overdue`: every acknowledged job ends within a bound its
//! instance's configuration implies (docs/scenarios.md, "Safety").
//!
//! A job is pending at most `pending_timeout_ms` before it is assigned or
//! fails, and each attempt is held at most `lease_ms` before its result, its
//! reject or its lapsed lease ends it; a job gets at most `attempts_max`
//! attempts, and each requeue starts a new pending timeout. So a job ends by
//!
//! ```text
//! created_at + attempts_max × (pending_timeout_ms + lease_ms) + slack
//! ```
//!
//! where `slack` is one more `pending_timeout_ms + lease_ms`: the timer task
//! may wake late (BUGGIFY `timer_late`), a result is settled or stored after
//! its worker sent it. A job settled on completion may in addition wait for
//! its settlement until its authorization's `validBefore` (its timers are
//! capped by `validBefore` less the settle margin, decision 0021), so its
//! bound is at least `validBefore + slack`.
//!
//! Judged where the bound holds as stated: an instance with one node that
//! no step stopped, crashed, restarted or partitioned (a restart resumes a
//! held job without counting an attempt, and time passes while it is down),
//! for jobs no restart recovered. A completed job is judged by its
//! `completed_at_ms`; a failed one by the last answer that showed it
//! unfinished before an answer showed it failed (the store keeps no end
//! time for it: it ended somewhere between those two answers, so only the
//! earlier one proves it late); an unfinished one by the end of the run.

use super::safety::{SafetyKey, Violation};
use coordinator::config::Timing;
use coordinator::core::Job;
use protocol::api::JobStatus;
use std::collections::BTreeMap;

/// What the bound of one instance is computed from.
pub struct EndBound {
    pub timing: Timing,
    /// The clock reading of the transcript's `+0.000s`.
    pub epoch_ms: i64,
    /// The end of the run, on the same clock as the jobs' times.
    pub end_ms: i64,
    /// Timers fire on time: the run's fault points are off (`timer.late`
    /// fires them late on purpose).
    pub timers_exact: bool,
    /// Its held-poll bounds, in all and of one client
    /// (`limits.held_polls_max`, `limits.held_polls_per_client_max`),
    /// which `held_polls_over_cap` judges.
    pub held_caps: (usize, usize),
}

impl EndBound {
    /// One pending timeout and one lease: the most one attempt takes.
    fn cycle_ms(&self) -> i64 {
        self.timing.pending_timeout_ms.max(0) + self.timing.lease_ms.max(0)
    }

    /// The latest time `job` may end at.
    fn due_ms(&self, job: &Job) -> i64 {
        let attempts = i64::from(self.timing.attempts_max);
        let slack = self.cycle_ms();
        let due = job.created_at_ms + attempts * self.cycle_ms() + slack;
        let valid_before_ms = job
            .settle_ticket()
            .map(|t| i64::try_from(t.valid_before_seconds).unwrap_or(i64::MAX / 1000) * 1000);
        valid_before_ms.map_or(due, |v| due.max(v.saturating_add(slack)))
    }
}

/// Checks every job of `instance` whose bound holds as stated.
pub fn check(
    lines: &[String],
    instance: &str,
    jobs: &[Job],
    bound: &EndBound,
) -> Result<(), Violation> {
    if disturbed(lines, instance) {
        return Ok(());
    }
    let failed_at = failed_shown(lines, instance);
    for job in jobs.iter().filter(|j| j.recoveries == 0) {
        let id = job.id.to_string();
        let (ended_ms, line) = match job.status {
            JobStatus::Completed => (job.completed_at_ms.unwrap_or(bound.end_ms), None),
            JobStatus::Failed => match failed_at.get(&id) {
                Some(Shown {
                    unfinished: Some((at_ms, line)),
                    ..
                }) => (bound.epoch_ms + at_ms, Some(*line)),
                _ => continue,
            },
            _ => (bound.end_ms, None),
        };
        let due_ms = bound.due_ms(job);
        if ended_ms > due_ms {
            let late_ms = ended_ms - due_ms;
            return Err(Violation {
                invariant: SafetyKey::JobEndOverdue,
                message: format!(
                    "{instance}: job {id} ({}, {} attempt(s)) ended {late_ms} ms after its bound \
                     (created + {} × (pending {} ms + lease {} ms) + one more)",
                    job.status,
                    job.attempts,
                    bound.timing.attempts_max,
                    bound.timing.pending_timeout_ms,
                    bound.timing.lease_ms
                ),
                line,
            });
        }
    }
    Ok(())
}

/// Whether a step stopped, crashed, restarted or partitioned `instance`
/// (`harness instance chain_a crash ...`), or it crashed at an armed write.
fn disturbed(lines: &[String], instance: &str) -> bool {
    let controlled = format!("harness instance {instance} ");
    let crashed = format!("{instance} crashed");
    lines.iter().any(|line| {
        let rest = line.split_once("] ").map_or("", |(_, rest)| rest);
        rest.starts_with(&controlled) || rest.starts_with(&crashed)
    })
}

/// What the answers of `instance` showed of a job, up to the first answer
/// that showed it failed.
#[derive(Default)]
struct Shown {
    /// The last answer that showed it unfinished: time (ms after
    /// `+0.000s`) and line.
    unfinished: Option<(i64, usize)>,
    failed: bool,
}

/// What the answers of `instance` showed of each job: the last `pending`,
/// `assigned` or `running` before its first `failed`.
fn failed_shown(lines: &[String], instance: &str) -> BTreeMap<String, Shown> {
    let prefix = format!("{instance} < 200 ");
    let mut shown: BTreeMap<String, Shown> = BTreeMap::new();
    for (n, line) in lines.iter().enumerate() {
        let Some((stamp, rest)) = line.split_once("] ") else {
            continue;
        };
        let Some(body) = rest.strip_prefix(&prefix) else {
            continue;
        };
        let Ok(body) = serde_json::from_str::<serde_json::Value>(body) else {
            continue;
        };
        let (Some(id), Some(status)) = (body["id"].as_str(), body["status"].as_str()) else {
            continue;
        };
        let job = shown.entry(id.to_owned()).or_default();
        match status {
            _ if job.failed => {}
            "failed" => job.failed = true,
            "pending" | "assigned" | "running" => job.unfinished = Some((stamp_ms(stamp), n)),
            _ => {}
        }
    }
    shown
}

/// `[+S.mmm` as ms.
fn stamp_ms(stamp: &str) -> i64 {
    let Some((s, ms)) = stamp.trim_start_matches("[+").split_once('.') else {
        return 0;
    };
    let ms = ms.trim_end_matches('s');
    s.parse::<i64>().unwrap_or(0) * 1000 + ms.parse::<i64>().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const J1: &str = "00000000-0000-4000-8000-000000000001";

    fn job(status: &str, completed_at_ms: Option<i64>) -> Job {
        serde_json::from_value(json!({
            "id": J1,
            "submission": {
                "job_type": "TASK", "user_id": "u",
                "payload": {"job_type": "TASK", "task_type": "classify", "input": "x"},
                "privacy_class": "PUBLIC",
            },
            "tier": "FAST", "status": status, "output": null, "error": null,
            "receipt": null, "created_at_ms": 1_000, "completed_at_ms": completed_at_ms,
            "attempts": 1, "payment_ref": null, "deadline_ms": null, "seq": 1,
        }))
        .expect("a job")
    }

    /// pending 1 s, lease 2 s, 3 attempts: due 1 s + 3 × 3 s + 3 s = 13 s.
    fn bound(end_ms: i64) -> EndBound {
        let timing = Timing {
            pending_timeout_ms: 1_000,
            lease_ms: 2_000,
            attempts_max: 3,
            ..Timing::default()
        };
        EndBound {
            timing,
            epoch_ms: 0,
            end_ms,
            timers_exact: true,
            held_caps: (10_000, 1_000),
        }
    }

    fn key(lines: &[&str], jobs: &[Job], end_ms: i64) -> Option<SafetyKey> {
        let lines: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();
        check(&lines, "chain_a", jobs, &bound(end_ms))
            .err()
            .map(|v| v.invariant)
    }

    #[test]
    fn a_job_may_take_every_attempt_and_no_longer() {
        let late = Some(SafetyKey::JobEndOverdue);
        assert_eq!(key(&[], &[job("completed", Some(13_000))], 99_000), None);
        assert_eq!(key(&[], &[job("completed", Some(13_001))], 99_000), late);
        assert_eq!(key(&[], &[job("running", None)], 13_000), None);
        assert_eq!(key(&[], &[job("running", None)], 13_001), late);
    }

    #[test]
    fn a_failed_job_is_judged_by_the_last_answer_that_showed_it_unfinished() {
        let shown = |at: &str, status: &str| {
            format!(r#"[+{at}s] chain_a < 200 {{"id":"{J1}","status":"{status}"}}"#)
        };
        let failed_job = [job("failed", None)];
        let lines = [shown("13.000", "running"), shown("14.000", "failed")];
        assert_eq!(
            check(&lines, "chain_a", &failed_job, &bound(99_000)),
            Ok(())
        );
        let late = [
            shown("13.500", "running"),
            shown("14.000", "failed"),
            shown("15.000", "running"),
        ];
        let v = check(&late, "chain_a", &failed_job, &bound(99_000));
        assert_eq!(
            v.map_err(|v| (v.invariant, v.line)),
            Err((SafetyKey::JobEndOverdue, Some(0)))
        );
        // First shown failed long after its bound, never shown unfinished
        // after it: it may have failed in time (swarm seed 1911, a poll an
        // hour into a long-retention world), so it is not judged.
        let polled_late = [shown("1887.348", "failed")];
        assert_eq!(
            check(&polled_late, "chain_a", &failed_job, &bound(99_000)),
            Ok(())
        );
        assert_eq!(key(&[], &failed_job, 99_000), None);
    }

    #[test]
    fn an_instance_a_step_crashed_is_not_judged() {
        let crash = "[+2.000s] harness instance chain_a crash for 5000 ms";
        assert_eq!(key(&[crash], &[job("running", None)], 99_000), None);
        let other = "[+2.000s] harness instance chain_b crash for 5000 ms";
        assert!(key(&[other], &[job("running", None)], 99_000).is_some());
    }
}
