//! Every frame a simulated worker sends or receives, kept as a
//! [`FrameRecord`] (worker, direction, parsed JSON, transcript line) beside
//! the transcript's text, so steps and end-of-run temporal properties match
//! frames structurally instead of re-parsing lines.

use crate::spec::frames::{Direction, FrameRecord};
use serde_json::Value;
use std::sync::{Arc, Mutex};

/// Frames kept per run at most (a 1,000-job churn makes ~10,000). Beyond
/// it frames are no longer recorded and every frame assertion fails, since
/// it would judge part of the run.
pub const FRAMES_MAX: usize = 1_000_000;

/// Every frame of a run, in the order they happened; clones share it.
#[derive(Debug, Clone, Default)]
pub struct FrameLog {
    frames: Arc<Mutex<Frames>>,
}

#[derive(Debug, Default)]
struct Frames {
    /// Shared with the snapshots [`FrameLog::all`] hands out (checks read
    /// every frame after each step; a deep copy each time was a measurable
    /// part of a swarm run). A record made while a snapshot is alive copies
    /// the list first, so a snapshot never changes.
    records: Arc<Vec<FrameRecord>>,
    /// Frames beyond [`FRAMES_MAX`], not recorded.
    dropped: u64,
}

impl FrameLog {
    pub fn record(&self, worker: &str, direction: Direction, text: &str, line: usize) {
        let mut frames = self.frames.lock().expect("frame log lock");
        if frames.records.len() >= FRAMES_MAX {
            frames.dropped += 1;
            return;
        }
        let frame = serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()));
        Arc::make_mut(&mut frames.records).push(FrameRecord {
            worker: worker.to_owned(),
            direction,
            frame,
            line,
        });
    }

    /// Every frame of the run so far; an error once frames were dropped.
    pub fn all(&self) -> Result<Arc<Vec<FrameRecord>>, String> {
        let frames = self.frames.lock().expect("frame log lock");
        if frames.dropped > 0 {
            return Err(format!(
                "more than {FRAMES_MAX} worker frames in the run: {} were not recorded, \
                 so frame assertions cannot judge it",
                frames.dropped
            ));
        }
        Ok(frames.records.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::frames::FramePattern;
    use serde_json::json;

    #[test]
    fn patterns_match_worker_direction_and_frame() {
        let log = FrameLog::default();
        log.record(
            "w",
            Direction::Received,
            r#"{"type":"error","code":"not_assigned"}"#,
            7,
        );
        log.record("v", Direction::Sent, "not json", 8);
        let records = log.all().unwrap();
        let p = |w: Option<&str>, d: Option<Direction>, f: Value| FramePattern {
            worker: w.map(str::to_owned),
            direction: d,
            frame: f,
        };
        assert!(p(
            Some("w"),
            Some(Direction::Received),
            json!({"type": "error"})
        )
        .matches(&records[0]));
        assert!(!p(Some("w"), Some(Direction::Sent), json!({})).matches(&records[0]));
        assert!(!p(None, None, json!({"code": "invalid_receipt"})).matches(&records[0]));
        assert!(p(Some("v"), None, json!("not json")).matches(&records[1]));
        assert_eq!(records[0].line, 7);
    }
}
