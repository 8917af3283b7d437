//! `poll_not_woken`: a held poll (`GET /v1/jobs/{id}?wait_ms=N`) answers
//! within one scheduling step of any change of its job's status, and at its
//! deadline otherwise (docs: scenarios/README.md, "Safety").
//!
//! A `poll` step with `hold_ms` logs its answer as `held poll (wait N ms)
//! < 200 after X ms {job}`. A terminal job is answered at once, so a poll
//! answered a finished job (completed or failed) saw it unfinished; had the
//! change woken it, it would have answered then, before its deadline. So an
//! answer of a finished job after the whole wait (`X >= N`) is a poll the
//! change did not wake. Judged on one-node instances: a poll of a job
//! another node holds is woken by the remote watch, which reads the shared
//! store at intervals.

use super::safety::{SafetyKey, Violation};

/// Checks the held polls `instance` answered.
pub fn check(lines: &[String], instance: &str) -> Result<(), Violation> {
    let prefix = format!("{instance} held poll (wait ");
    for (n, line) in lines.iter().enumerate() {
        let Some(rest) = line
            .split_once("] ")
            .and_then(|(_, rest)| rest.strip_prefix(&prefix))
        else {
            continue;
        };
        let Some((wait_ms, held_ms, body)) = parse(rest) else {
            continue;
        };
        let status = body["status"].as_str().unwrap_or_default();
        if held_ms >= wait_ms && matches!(status, "completed" | "failed") {
            let id = body["id"].as_str().unwrap_or_default();
            return Err(Violation {
                invariant: SafetyKey::PollNotWoken,
                message: format!(
                    "{instance}: a poll of job {id} held {held_ms} ms of its {wait_ms} ms \
                     was answered {status}: the job ended while it was held and did not wake it"
                ),
                line: Some(n),
            });
        }
    }
    Ok(())
}

/// `N ms) < 200 after X ms {json}` as (N, X, json).
fn parse(rest: &str) -> Option<(u64, u64, serde_json::Value)> {
    let (wait_ms, rest) = rest.split_once(" ms) < 200 after ")?;
    let (held_ms, body) = rest.split_once(" ms ")?;
    let body = serde_json::from_str(body).ok()?;
    Some((wait_ms.parse().ok()?, held_ms.parse().ok()?, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(line: &str) -> Option<SafetyKey> {
        check(&[line.to_owned()], "chain_a")
            .err()
            .map(|v| v.invariant)
    }

    #[test]
    fn a_poll_that_waited_its_whole_wait_for_a_finished_job_was_not_woken() {
        let held = |after: u64, status: &str| {
            format!(
                r#"[+9.000s] chain_a held poll (wait 5001 ms) < 200 after {after} ms {{"id":"j","status":"{status}"}}"#
            )
        };
        assert_eq!(key(&held(5001, "failed")), Some(SafetyKey::PollNotWoken));
        assert_eq!(key(&held(5001, "completed")), Some(SafetyKey::PollNotWoken));
        // Woken before its deadline, or still unfinished at it: as promised.
        assert_eq!(key(&held(4000, "failed")), None);
        assert_eq!(key(&held(5001, "pending")), None);
        // Another instance's poll, or one that failed in transit.
        assert_eq!(
            key(&held(5001, "failed").replace("chain_a", "chain_b")),
            None
        );
        assert_eq!(
            key("[+9.000s] chain_a held poll (wait 5001 ms) failed: reset"),
            None
        );
    }
}
