//! `in_range_refused` (sabotage `worker-with-most-slots-refused`): a
//! request at the inclusive end of a documented range is served, not
//! refused as out of range. Judged on the worker the swarm's `range_edges`
//! kind adds ([`WORKER`]): it says hello with the largest slot count
//! docs/worker-protocol.md allows ("slots is 1 to 64"), on an address of
//! its own (no cap of the address can refuse it) and with a key of its own,
//! so no `invalid_hello` may ever answer it. (The other end, a held poll at
//! the largest `wait_ms`, is judged by `held_polls_over_cap`: a held poll
//! is answered with its job or 404.)

use super::safety::{SafetyKey, Violation};
use crate::spec::frames::{Direction, FrameRecord};

/// The worker the swarm's `range_edges` kind adds, saying hello with the
/// largest slot count (named here, where it is judged: the swarm imports
/// the verify layer, not the other way).
pub const WORKER: &str = "range-worker";

/// Checks the frames the range worker received.
pub fn check(frames: &[FrameRecord]) -> Result<(), Violation> {
    let refused = frames.iter().find(|record| {
        record.worker == WORKER
            && record.direction == Direction::Received
            && record.frame["type"] == "error"
            && record.frame["code"] == "invalid_hello"
    });
    match refused {
        None => Ok(()),
        Some(record) => Err(Violation {
            invariant: SafetyKey::InRangeRefused,
            message: format!(
                "worker {WORKER} said hello with the largest slot count the protocol allows and was refused: {}",
                record.frame
            ),
            line: Some(record.line),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn received(worker: &str, frame: serde_json::Value) -> FrameRecord {
        FrameRecord {
            worker: worker.into(),
            direction: Direction::Received,
            frame,
            line: 3,
        }
    }

    /// Only an `invalid_hello` to the range worker is judged.
    #[test]
    fn a_refused_hello_of_the_range_worker_is_seen() {
        let refusal = json!({"type": "error", "code": "invalid_hello", "message": "slots"});
        let welcome = json!({"type": "welcome"});
        let judge = |frames: &[FrameRecord]| check(frames).err().map(|v| v.invariant);
        assert_eq!(judge(&[received(WORKER, welcome)]), None);
        assert_eq!(judge(&[received("other", refusal.clone())]), None);
        let refused = [received(WORKER, refusal)];
        assert_eq!(judge(&refused), Some(SafetyKey::InRangeRefused));
    }
}
