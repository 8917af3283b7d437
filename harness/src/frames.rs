//! Worker frames as data: every frame a simulated worker sends or receives
//! is kept as a [`FrameRecord`] (worker, direction, parsed JSON, transcript
//! line) beside the transcript's text, so steps and end-of-run temporal
//! properties match frames structurally instead of re-parsing lines.
//!
//! Steps of this module:
//! - `expect_frames`: frames recorded so far that match a pattern, counted;
//! - `expect_calls`: calls a hosted-provider stub or a facilitator received;
//! - `send_frame`: a worker sends a frame chosen by the scenario, verbatim.

use crate::matcher::{self, Vars};
use crate::world::World;
use serde::Deserialize;
use serde_json::Value;
use std::sync::{Arc, Mutex};

/// Frames kept per run at most (a 1,000-job churn makes ~10,000). Beyond
/// it frames are no longer recorded and every frame assertion fails, since
/// it would judge part of the run.
pub const FRAMES_MAX: usize = 1_000_000;

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

/// Every frame of a run, in the order they happened; clones share it.
#[derive(Debug, Clone, Default)]
pub struct FrameLog {
    frames: Arc<Mutex<Frames>>,
}

#[derive(Debug, Default)]
struct Frames {
    records: Vec<FrameRecord>,
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
        frames.records.push(FrameRecord {
            worker: worker.to_owned(),
            direction,
            frame,
            line,
        });
    }

    /// Every frame of the run so far; an error once frames were dropped.
    pub fn all(&self) -> Result<Vec<FrameRecord>, String> {
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

fn any_frame() -> Value {
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

pub fn run_expect_frames(expect: &ExpectFrames, world: &World, vars: &Vars) -> Result<(), String> {
    let pattern = expect.pattern().render(vars)?;
    let found: Vec<FrameRecord> = world
        .frames
        .all()?
        .into_iter()
        .filter(|r| pattern.matches(r))
        .collect();
    let lines: Vec<String> = found.iter().map(|r| r.line.to_string()).collect();
    world.transcript.log(
        "harness",
        format!(
            "expect_frames {}: {} found{}",
            pattern.describe(),
            found.len(),
            match lines.len() {
                0 => String::new(),
                1 => format!(" (line {})", lines[0]),
                _ => format!(" (lines {})", lines.join(", ")),
            }
        ),
    );
    let ok = match expect.count {
        Some(n) => found.len() == n,
        None => !found.is_empty(),
    };
    if ok {
        return Ok(());
    }
    let want = expect
        .count
        .map_or("at least 1".to_owned(), |n| format!("exactly {n}"));
    let recent = recent_frames(world, &pattern);
    Err(format!(
        "expected {want} frame(s) where {}, found {}{recent}",
        pattern.describe(),
        found.len()
    ))
}

/// The last frames of the pattern's worker and direction, to show what did come.
fn recent_frames(world: &World, pattern: &FramePattern) -> String {
    const SHOWN_MAX: usize = 5;
    let near = FramePattern {
        frame: any_frame(),
        ..pattern.clone()
    };
    let frames: Vec<String> = world
        .frames
        .all()
        .unwrap_or_default()
        .into_iter()
        .filter(|r| near.matches(r))
        .map(|r| format!("line {}: {} {}", r.line, r.worker, r.frame))
        .collect();
    let skip = frames.len().saturating_sub(SHOWN_MAX);
    if frames.is_empty() {
        return String::new();
    }
    format!(
        "; the last such frames:\n    {}",
        frames[skip..].join("\n    ")
    )
}

pub fn run_expect_calls(expect: &ExpectCalls, world: &World) -> Result<(), String> {
    let (what, got) = match (&expect.stub, &expect.facilitator) {
        (Some(stub), None) => (
            format!("stub {stub}"),
            world
                .stubs
                .get(stub)
                .ok_or_else(|| format!("no stub {stub:?} (stubs: provider_a, provider_b)"))?
                .calls()
                .len(),
        ),
        (None, Some(instance)) => (
            format!("facilitator of {instance}"),
            world
                .instances
                .get(instance)
                .and_then(|i| i.facilitator.as_ref())
                .ok_or_else(|| format!("instance {instance:?} has no facilitator"))?
                .calls()
                .len(),
        ),
        _ => return Err("expect_calls names one of stub or facilitator".into()),
    };
    world
        .transcript
        .log("harness", format!("expect_calls {what}: {got} calls"));
    if got == expect.count {
        Ok(())
    } else {
        Err(format!(
            "{what} received {got} calls, expected {}",
            expect.count
        ))
    }
}

pub async fn run_send_frame(send: &SendFrame, world: &World, vars: &Vars) -> Result<(), String> {
    let mut frame = matcher::render(&send.frame, vars)?;
    if frame.get("receipt").and_then(Value::as_str) == Some("signed") {
        let receipt = world.sign_receipt(&send.worker, &frame)?;
        frame["receipt"] = receipt;
    }
    let text = String::from_utf8_lossy(&protocol::canonical::to_vec(&frame)).into_owned();
    world.transcript.log(
        "harness",
        format!("worker {} sends a scripted frame", send.worker),
    );
    world.send_scripted(&send.worker, text)?;
    // Let the worker send it and the coordinator answer before the next step.
    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
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
