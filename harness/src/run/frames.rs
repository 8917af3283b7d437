//! The frame steps: `expect_frames` counts frames recorded so far that
//! match a pattern, `expect_calls` the calls a hosted-provider stub or a
//! facilitator received, `send_frame` has a worker send a frame chosen by
//! the scenario, verbatim.

use crate::expr::matcher::{self, Vars};
use crate::spec::frames::{
    any_frame, ExpectCalls, ExpectFrames, FramePattern, FrameRecord, SendFrame,
};
use crate::world::World;
use serde_json::Value;

pub fn run_expect_frames(expect: &ExpectFrames, world: &World, vars: &Vars) -> Result<(), String> {
    let pattern = expect.pattern().render(vars)?;
    let found: Vec<FrameRecord> = world
        .frames
        .all()?
        .iter()
        .filter(|r| pattern.matches(r))
        .cloned()
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
        .iter()
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
