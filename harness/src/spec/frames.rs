//! Worker frames as data: the record of one frame a simulated worker sent
//! or received, and the patterns steps and temporal properties match
//! records with (`expect_frames`, `expect_calls`, `send_frame`).
//! The run's log of records is `FrameLog` (`world/frames.rs`).

use crate::expr::matcher::{self, Vars};
use serde::Deserialize;
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Coordinator to worker (`w <- {...}` in the transcript).
    Received,
    /// Worker to coordinator (`w -> {...}`).
    Sent,
}

impl Direction {
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Received => "received",
            Direction::Sent => "sent",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct FrameRecord {
    pub worker: String,
    pub direction: Direction,
    /// The frame as JSON; a frame that is not JSON is kept as a string.
    pub frame: Value,
    /// The transcript line (1-based) it was logged on, or the line before
    /// it when the worker's frames are not traced.
    pub line: usize,
}

/// Which frames: of a worker (any when absent), in a direction (both when
/// absent), whose JSON matches `frame` as an expected body does (subset,
/// matchers, templates).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FramePattern {
    pub worker: Option<String>,
    pub direction: Option<Direction>,
    #[serde(default = "any_frame")]
    pub frame: Value,
}

pub fn any_frame() -> Value {
    Value::Object(Default::default())
}

impl FramePattern {
    /// The pattern with its templates rendered.
    pub fn render(&self, vars: &Vars) -> Result<FramePattern, String> {
        Ok(FramePattern {
            worker: self.worker.clone(),
            direction: self.direction,
            frame: matcher::render(&self.frame, vars)?,
        })
    }

    /// Whether a record matches (templates already rendered).
    pub fn matches(&self, record: &FrameRecord) -> bool {
        self.worker.as_ref().is_none_or(|w| *w == record.worker)
            && self.direction.is_none_or(|d| d == record.direction)
            && matcher::mismatch(&self.frame, &record.frame, "$").is_none()
    }

    /// `w received {"type":"error"}`, for messages.
    pub fn describe(&self) -> String {
        format!(
            "{} {} {}",
            self.worker.as_deref().unwrap_or("any worker"),
            self.direction.map_or("sent or received", Direction::as_str),
            self.frame
        )
    }
}

/// `expect_frames = { worker = "w", direction = "received", frame = {...}, count = 1 }`:
/// the frames recorded so far that match; `count` exact, at least one when absent.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectFrames {
    pub worker: Option<String>,
    pub direction: Option<Direction>,
    #[serde(default = "any_frame")]
    pub frame: Value,
    pub count: Option<usize>,
}

impl ExpectFrames {
    pub fn pattern(&self) -> FramePattern {
        FramePattern {
            worker: self.worker.clone(),
            direction: self.direction,
            frame: self.frame.clone(),
        }
    }
}

/// `expect_calls = { stub = "provider_a", count = 3 }` or
/// `expect_calls = { facilitator = "chain_a", count = 1 }`: the calls
/// received so far, exactly.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectCalls {
    pub stub: Option<String>,
    /// The instance whose scripted facilitator is counted.
    pub facilitator: Option<String>,
    pub count: usize,
}

/// `send_frame = { worker = "w", frame = {...} }`: the worker sends the
/// frame (templates rendered) on its current session as it is. In a
/// `result` frame, `receipt = "signed"` is replaced by a receipt over the
/// frame's `job_id` and `output`, signed with the worker's key.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SendFrame {
    pub worker: String,
    pub frame: Value,
}
