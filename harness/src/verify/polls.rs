//! `poll_not_woken`: a held poll (`GET /v1/jobs/{id}?wait_ms=N`) answers
//! within one scheduling step of any change of its job's status, and at its
//! deadline otherwise (docs: scenarios/README.md, "Safety").
//!
//! A `poll` step with `hold_ms` records its answer in the held-poll log
//! (`world::held_polls`). A terminal job is answered at once, so a poll
//! answered a finished job (completed or failed) saw it unfinished; had the
//! change woken it, it would have answered then, before its deadline. So an
//! answer of a finished job after the whole wait (held `>= N` ms) is a poll
//! the change did not wake. And an answer of any job held longer than its
//! whole wait (`> N` ms, by the harness's clock from the request to the
//! answer, which the simulated network delivers in no time) came after its
//! deadline: a poll is answered at its deadline to the millisecond (the
//! `poll_deadlines` kind holds polls of jobs that cannot change, so they
//! are answered exactly then). That deadline is judged only where the
//! run's fault points are off: a held poll shows its job only once the
//! job's state is durable, and BUGGIFY's slow flushes and writer yields
//! stretch that wait by design (swarm seed 4396: 5 ms past a 503 ms wait).
//! Judged on one-node instances: a poll of a job
//! another node holds is woken by the remote watch, which reads the shared
//! store at intervals.

use super::safety::{SafetyKey, Violation};
use crate::world::held_polls::HeldAnswer;

/// Checks the held polls of `instance` (its answers, in sending order);
/// their deadlines to the millisecond only with `timers_exact` (no fault
/// points in the run).
pub fn check(answers: &[HeldAnswer], instance: &str, timers_exact: bool) -> Result<(), Violation> {
    for held in answers.iter().filter(|a| a.instance == instance) {
        let Some((held_ms, body)) = &held.answer else {
            continue;
        };
        let status = body["status"].as_str().unwrap_or_default();
        let id = body["id"].as_str().unwrap_or_default();
        if timers_exact && *held_ms > held.wait_ms {
            return Err(Violation {
                invariant: SafetyKey::PollNotWoken,
                message: format!(
                    "{instance}: a poll of job {id} with a wait of {} ms was answered {status} after {held_ms} ms: {} ms past its deadline",
                    held.wait_ms,
                    held_ms - held.wait_ms
                ),
                line: Some(held.line),
            });
        }
        if *held_ms >= held.wait_ms && matches!(status, "completed" | "failed") {
            return Err(Violation {
                invariant: SafetyKey::PollNotWoken,
                message: format!(
                    "{instance}: a poll of job {id} held {held_ms} ms of its {} ms \
                     was answered {status}: the job ended while it was held and did not wake it",
                    held.wait_ms
                ),
                line: Some(held.line),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key(held: HeldAnswer) -> Option<SafetyKey> {
        check(&[held], "chain_a", true).err().map(|v| v.invariant)
    }

    fn held(after: u64, status: &str) -> HeldAnswer {
        HeldAnswer {
            instance: "chain_a".into(),
            wait_ms: 5001,
            line: 7,
            answer: Some((after, json!({"id": "j", "status": status}))),
        }
    }

    #[test]
    fn a_poll_that_waited_its_whole_wait_for_a_finished_job_was_not_woken() {
        assert_eq!(key(held(5001, "failed")), Some(SafetyKey::PollNotWoken));
        assert_eq!(key(held(5001, "completed")), Some(SafetyKey::PollNotWoken));
        // Woken before its deadline, or still unfinished at it: as promised.
        assert_eq!(key(held(4000, "failed")), None);
        assert_eq!(key(held(5001, "pending")), None);
        // Answered a millisecond past its deadline, whatever the job was.
        assert_eq!(key(held(5002, "pending")), Some(SafetyKey::PollNotWoken));
        assert_eq!(key(held(5002, "running")), Some(SafetyKey::PollNotWoken));
        // With fault points on, the durability wait may stretch it (seed
        // 4396); a finished job after the whole wait is still not woken.
        let faulty = |h: HeldAnswer| check(&[h], "chain_a", false).err().map(|v| v.invariant);
        assert_eq!(faulty(held(5006, "pending")), None);
        assert_eq!(faulty(held(5006, "failed")), Some(SafetyKey::PollNotWoken));
        // Another instance's poll, or one whose connection was cut.
        let other = HeldAnswer {
            instance: "chain_b".into(),
            ..held(5001, "failed")
        };
        assert_eq!(key(other), None);
        let cut = HeldAnswer {
            answer: None,
            ..held(5001, "failed")
        };
        assert_eq!(key(cut), None);
    }
}
