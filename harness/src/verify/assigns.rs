//! `assign_lost`: a session delivers every frame the core queued for it, in
//! order, or ends. The coordinator promises (docs/security.md, accounted
//! memory) that a frame which would take a session's outbox past its bound
//! is not queued and the session is closed: its jobs go back to the queue
//! and nothing more reaches the worker on it. So a worker never reads, on
//! one session, a `cancel` for a lapsed lease (`lease_expired`) of a job
//! whose `assign` it never read on that session: the core believed the job
//! assigned to the session, so its assign was dropped while the session was
//! kept.
//!
//! A session is told from the worker's frames: it begins with the
//! `welcome` the worker reads once its key is proven. Not with the
//! worker's `hello`: a worker with the `malformed` fault sends a second
//! `hello` mid-session, which the coordinator answers `unexpected_frame`
//! and the session goes on (swarm seed 1824). A `not_assigned` refusal is not judged: it answers a
//! frame the worker sent, for a job whose assign an honest worker did
//! read, and it also follows a cancel that crossed the worker's result.

use super::safety::{SafetyKey, Violation};
use crate::spec::frames::{Direction, FrameRecord};
use std::collections::{BTreeMap, BTreeSet};

/// Checks every worker's frames.
pub fn check(frames: &[FrameRecord]) -> Result<(), Violation> {
    // Per worker: the jobs assigned on its current session.
    let mut assigned: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for record in frames {
        let frame = &record.frame;
        let kind = frame["type"].as_str().unwrap_or_default();
        let job = frame["job_id"].as_str().unwrap_or_default();
        let on_session = assigned.entry(record.worker.as_str()).or_default();
        match (record.direction, kind) {
            (Direction::Received, "welcome") => on_session.clear(),
            (Direction::Received, "assign") => {
                on_session.insert(job);
            }
            (Direction::Received, "cancel")
                if frame["reason"].as_str() == Some("lease_expired")
                    && !on_session.contains(job) =>
            {
                return Err(Violation {
                    invariant: SafetyKey::AssignLost,
                    message: format!(
                        "worker {} read a cancel (lease_expired) of job {job} whose assign it never read on that session",
                        record.worker
                    ),
                    line: Some(record.line.saturating_sub(1)),
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
    use serde_json::json;

    fn record(worker: &str, direction: Direction, frame: serde_json::Value) -> FrameRecord {
        FrameRecord {
            worker: worker.into(),
            direction,
            frame,
            line: 1,
        }
    }

    /// The start of a session: the worker reads its `welcome`.
    fn welcome(w: &str) -> FrameRecord {
        record(w, Direction::Received, json!({"type":"welcome"}))
    }

    fn assign(w: &str, job: &str) -> FrameRecord {
        record(
            w,
            Direction::Received,
            json!({"type":"assign","job_id":job}),
        )
    }

    fn cancel(w: &str, job: &str) -> FrameRecord {
        let frame = json!({"type":"cancel","job_id":job,"reason":"lease_expired"});
        record(w, Direction::Received, frame)
    }

    fn judge(frames: &[FrameRecord]) -> Option<&'static str> {
        check(frames).err().map(|v| v.invariant.as_str())
    }

    /// A lapsed lease of a job the worker read the assign of, on the same
    /// session, is kept; a cancel of one it never read is `assign_lost`.
    #[test]
    fn a_cancel_needs_the_assign_on_its_session() {
        let kept = [welcome("w1"), assign("w1", "j1"), cancel("w1", "j1")];
        assert_eq!(judge(&kept), None);
        let lost = [welcome("w1"), assign("w1", "j1"), cancel("w1", "j2")];
        assert_eq!(judge(&lost), Some("assign_lost"));
    }

    /// The assign counts on its own session and worker only: one read
    /// before a reconnect, or by another worker, does not excuse a cancel.
    #[test]
    fn an_assign_of_another_session_or_worker_does_not_count() {
        let earlier = [
            welcome("w1"),
            assign("w1", "j1"),
            welcome("w1"),
            cancel("w1", "j1"),
        ];
        assert_eq!(judge(&earlier), Some("assign_lost"));
        let other = [
            welcome("w1"),
            welcome("w2"),
            assign("w2", "j1"),
            cancel("w1", "j1"),
        ];
        assert_eq!(judge(&other), Some("assign_lost"));
    }

    /// A `hello` sent mid-session (the `malformed` fault) starts no
    /// session: the assign read before it still counts (seed 1824).
    #[test]
    fn a_malformed_hello_mid_session_keeps_the_session() {
        let hello = record("w1", Direction::Sent, json!({"type":"hello"}));
        let frames = [welcome("w1"), assign("w1", "j1"), hello, cancel("w1", "j1")];
        assert_eq!(judge(&frames), None);
    }

    /// Only a lease's lapse is judged: a cancel for another reason (a
    /// user's cancel) is not.
    #[test]
    fn only_lease_expired_cancels_are_judged() {
        let user = json!({"type":"cancel","job_id":"j9","reason":"cancelled"});
        let frames = [welcome("w1"), record("w1", Direction::Received, user)];
        assert_eq!(judge(&frames), None);
    }
}
