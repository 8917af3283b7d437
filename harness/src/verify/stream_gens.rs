//! `deltas_disagree_with_output`, event by event. Decision 0023 promises:
//! each attempt's text is a generation of its own; every event but `end`
//! carries the reader's cursor `{generation}.{bytes}` as its id; a
//! `restart` tells a reader to drop what it had when the attempt it
//! followed died; and the deltas a reader keeps always join to the
//! completed job's output. The end check (`verify::streams`) sees only what
//! a reader holds at its `job` event, which the coordinator can mend after
//! a splice (a cursor past the end of the output is restarted), and not a
//! splice of two attempts whose text is the same (the simulation's workers
//! all make a job's one output). So, at every event of a job's events read:
//! - **one generation**: while the reader holds text since its last
//!   `restart` (or the bytes its `Last-Event-ID` named), every event id
//!   names that text's generation; text shown under another generation's
//!   id without a `restart` between is a splice of two attempts. That
//!   includes generation 0, the name of an ended output whose attempt the
//!   coordinator no longer knows (its buffer gone): it cannot tell that a
//!   cursor of another generation was of the attempt that completed, so
//!   it restarts the reader (decision 0023, "a reader that resumes after
//!   the buffer is gone too is still told restart").
//! - **a start of the output**: at every event whose id names the
//!   generation of the attempt that completed (the one its `job` event's
//!   id names), the text it holds since its last `restart` is a start of
//!   the job's output, not only at the end.

use super::safety::{SafetyKey, Violation};
use crate::world::streams::{SseEvent, StreamRead};
use coordinator::core::Job;
use protocol::api::JobStatus;

/// The generation an event id `{generation}.{bytes}` names.
pub fn id_gen(id: &str) -> Option<u64> {
    id.split_once('.')?.0.parse().ok()
}

/// Checks one read (a chat is not: its chunks carry no cursor).
pub fn check(read: &StreamRead, job: Option<&Job>) -> Result<(), Violation> {
    if read.chat {
        return Ok(());
    }
    let name = read.job.as_deref().unwrap_or("?");
    let broken = |e: &SseEvent, message: String| Violation {
        invariant: SafetyKey::DeltasDisagreeWithOutput,
        message: format!("a reader of job {name} ({}) {message}", read.client),
        line: Some(e.line),
    };
    let output = completed_output(read, job);
    let final_gen = (read.events.iter().rev())
        .find(|e| e.event == "job" && e.data["status"] == "completed")
        .and_then(|e| id_gen(e.id.as_deref()?));
    // What the reader holds: bytes it had before this read (its resumed
    // id's, unseen here), then the text it was shown since its last restart.
    let (mut had, mut gen, mut held) = (read.from_bytes, read.from_gen, String::new());
    for e in &read.events {
        if e.event == "restart" {
            (had, gen) = (0, None);
            held.clear();
        }
        held.push_str(e.text().unwrap_or(""));
        let Some(at) = e.id.as_deref().and_then(id_gen) else {
            continue;
        };
        let holds = had + held.len() > 0;
        if let Some(was) = gen.filter(|was| holds && *was != at) {
            // Generation 0 names an ended output whose attempt the
            // coordinator no longer knows: continuing another generation's
            // cursor in it is a splice unless that was the same attempt,
            // which nothing then tells (decision 0023: a restart).
            let what = match at {
                0 => "the ended output, whose attempt is no longer known: a splice unless it was the same one",
                _ => "another attempt's: a splice of two attempts' text",
            };
            return Err(broken(e, format!(
                "holding {held:?} of generation {was} was shown an event of generation {at} without a restart ({what})"
            )));
        }
        gen = holds.then_some(at);
        let (Some(output), true) = (output.as_deref(), final_gen == Some(at)) else {
            continue;
        };
        let after = output.get(had.min(output.len())..).unwrap_or("");
        if !after.starts_with(held.as_str()) {
            return Err(broken(e, format!(
                "holds {held:?} under the generation of the attempt that completed, not a start of its output {after:?}"
            )));
        }
    }
    Ok(())
}

/// The completed job's output: what its `job` event showed, else the
/// record the run ended with.
fn completed_output(read: &StreamRead, job: Option<&Job>) -> Option<String> {
    let shown = (read.events.iter().rev())
        .find(|e| e.event == "job" && e.data["status"] == "completed")
        .and_then(|e| {
            e.data
                .pointer("/result/output")?
                .as_str()
                .map(str::to_owned)
        });
    shown.or_else(|| {
        job.filter(|j| j.status == JobStatus::Completed)
            .and_then(|j| j.output.as_ref()?.as_str().map(str::to_owned))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn read(events: &[(&str, &str, Value)]) -> StreamRead {
        StreamRead {
            instance: "chain_a".into(),
            client: "router".into(),
            job: Some("j".into()),
            events: (events.iter().enumerate())
                .map(|(line, (event, id, data))| SseEvent {
                    event: (*event).into(),
                    id: (!id.is_empty()).then(|| (*id).to_owned()),
                    data: data.clone(),
                    line,
                })
                .collect(),
            ..StreamRead::default()
        }
    }

    fn delta(id: &'static str, text: &str) -> (&'static str, &'static str, Value) {
        ("delta", id, json!({ "text": text }))
    }

    fn end(id: &'static str, output: &str) -> (&'static str, &'static str, Value) {
        let data = json!({"status": "completed", "result": {"output": output}});
        ("job", id, data)
    }

    fn key(read: &StreamRead) -> Option<SafetyKey> {
        check(read, None).err().map(|v| v.invariant)
    }

    #[test]
    fn text_of_another_generation_comes_only_after_a_restart() {
        let restart = ("restart", "7.0", json!({}));
        // Followed attempt 5, which died; told to restart, then attempt 7.
        let told = read(&[
            delta("5.4", "a b "),
            restart.clone(),
            delta("7.4", "a b "),
            delta("7.8", "c d "),
            end("7.8", "a b c d "),
        ]);
        assert_eq!(key(&told), None);
        // The same text, resumed within the completed attempt's output
        // at the dead attempt's offset: the text agrees, the splice not.
        let spliced = read(&[
            delta("5.4", "a b "),
            delta("7.8", "c d "),
            end("7.8", "a b c d "),
        ]);
        assert_eq!(key(&spliced), Some(SafetyKey::DeltasDisagreeWithOutput));
        // Holding nothing, a reader may be shown another generation.
        let empty = read(&[
            ("status", "5.0", json!({"status": "running"})),
            delta("7.8", "a b c d "),
            end("7.8", "a b c d "),
        ]);
        assert_eq!(key(&empty), None);
        // A read resumed from an id of attempt 5 holds its bytes.
        let mut resumed = read(&[delta("7.8", "c d "), end("7.8", "a b c d ")]);
        (resumed.from_bytes, resumed.from_gen) = (4, Some(5));
        assert_eq!(key(&resumed), Some(SafetyKey::DeltasDisagreeWithOutput));
        resumed.from_gen = Some(7);
        assert_eq!(key(&resumed), None);
    }

    #[test]
    fn under_the_completed_attempts_generation_a_reader_holds_a_start_of_the_output() {
        let restart = ("restart", "9.0", json!({}));
        // The dead attempt's text kept in the new generation's buffer,
        // mended at the end by a restart: caught before it.
        let kept = read(&[
            delta("8.4", "a b "),
            ("restart", "9.0", json!({})),
            delta("9.4", "a b "),
            delta("9.6", "a "),
            restart.clone(),
            delta("9.8", "a b c d "),
            end("9.8", "a b c d "),
        ]);
        assert_eq!(key(&kept), Some(SafetyKey::DeltasDisagreeWithOutput));
        let clean = read(&[
            delta("8.4", "x y "),
            restart,
            delta("9.2", "a "),
            delta("9.8", "b c d "),
            end("9.8", "a b c d "),
        ]);
        assert_eq!(key(&clean), None);
        // Another attempt's text (generation 8) is not judged against it.
        let cut = read(&[delta("8.4", "x y ")]);
        assert_eq!(key(&cut), None);
    }
}
