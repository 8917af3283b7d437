//! `deltas_disagree_with_output`, across a restart (sabotage
//! `stream-generation-repeats-after-restart`). Decision 0023 numbers each
//! attempt's generation from the clock "so a cursor from an earlier
//! process never matches by chance", and a stream's buffer is lost with
//! its process. So a reader that resumes, after its instance restarted,
//! with an event id of the earlier process holding text of a generation
//! is never continued in it: the attempt it followed died with that
//! process, and it is told `restart` before it is shown any text. The
//! text checks cannot see such a splice: every simulated attempt of a job
//! makes the same output, so old bytes and new ones join to it anyway.
//!
//! Judged on one-node instances, over each later connection of a read
//! (`world::streams::Resume`) opened after a `restart` or
//! `graceful_restart` of its instance that came after the read's last
//! event. Generation 0 names an ended output whose attempt is not known
//! (its buffer gone); the store keeps that output, so it may be continued.

use super::safety::{SafetyKey, Violation};
use super::stream_gens::id_gen;
use crate::world::streams::{Resume, StreamRead};

/// Checks `read` against the transcript line numbers (0-based, in order)
/// at which its instance was restarted, if it has one node.
pub fn check(read: &StreamRead, restarts: &[usize]) -> Result<(), Violation> {
    if read.chat || restarts.is_empty() {
        return Ok(());
    }
    for (k, resume) in read.resumes.iter().enumerate() {
        let Some(gen) = held_gen(read, resume) else {
            continue;
        };
        let last_line = read.events[resume.events_before - 1].line;
        if !(restarts.iter()).any(|l| *l > last_line && *l < resume.line) {
            continue;
        }
        let until = (read.resumes.get(k + 1)).map_or(read.events.len(), |r| r.events_before);
        let after = read.events.get(resume.events_before..until).unwrap_or(&[]);
        for e in after {
            if e.event == "restart" {
                break;
            }
            if e.text().is_some_and(|t| !t.is_empty()) {
                let name = read.job.as_deref().unwrap_or("?");
                return Err(Violation {
                    invariant: SafetyKey::DeltasDisagreeWithOutput,
                    message: format!(
                        "a reader of job {name} ({}) resumed after its instance restarted, holding text of generation {gen} \
                         from the earlier process, and was shown {:?} (id {}) without a restart: another process's attempt continued its cursor",
                        read.client,
                        e.text().unwrap_or(""),
                        e.id.as_deref().unwrap_or("none")
                    ),
                    line: Some(e.line),
                });
            }
        }
    }
    Ok(())
}

/// The generation whose text the reader held when it opened `resume`
/// (its last event id's, other than 0), if it held any.
fn held_gen(read: &StreamRead, resume: &Resume) -> Option<u64> {
    let before = read.events.get(..resume.events_before)?;
    before.last()?;
    let (mut bytes, mut gen) = (read.from_bytes, read.from_gen);
    for e in before {
        if e.event == "restart" {
            (bytes, gen) = (0, None);
        }
        bytes += e.text().map_or(0, str::len);
        if let Some(at) = e.id.as_deref().and_then(id_gen) {
            gen = Some(at);
        }
    }
    gen.filter(|g| *g != 0 && bytes > 0)
}

/// The transcript lines (0-based) at which `instance` was restarted (a
/// crash and recovery, or a graceful stop and start): a new process.
pub fn restart_lines(lines: &[String], instance: &str) -> Vec<usize> {
    let restart = format!("harness instance {instance} restart");
    let graceful = format!("harness instance {instance} graceful_restart");
    (lines.iter().enumerate())
        .filter(|(_, line)| {
            let rest = line.split_once("] ").map_or("", |(_, rest)| rest);
            rest == restart || rest == graceful
        })
        .map(|(n, _)| n)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::world::streams::SseEvent;
    use serde_json::{json, Value};

    fn event(event: &str, id: &str, data: Value, line: usize) -> SseEvent {
        SseEvent {
            event: event.into(),
            id: (!id.is_empty()).then(|| id.to_owned()),
            data,
            line,
        }
    }

    /// A reader cut after `Hello ` of generation 7 (lines 1 and 2), its
    /// instance restarted at line 5, resumed at line 9 and shown `after`.
    fn resumed(after: Vec<SseEvent>) -> StreamRead {
        let mut events = vec![
            event("status", "7.0", json!({"status": "running"}), 1),
            event("delta", "7.6", json!({"text": "Hello "}), 2),
        ];
        events.extend(after);
        StreamRead {
            instance: "chain_a".into(),
            client: "reader".into(),
            job: Some("j".into()),
            events,
            resumes: vec![Resume {
                events_before: 2,
                line: 9,
            }],
            ..StreamRead::default()
        }
    }

    fn key(read: &StreamRead, restarts: &[usize]) -> Option<SafetyKey> {
        check(read, restarts).err().map(|v| v.invariant)
    }

    #[test]
    fn a_cursor_of_an_earlier_process_continued_without_a_restart_is_a_splice() {
        let spliced = resumed(vec![
            event("status", "7.6", json!({"status": "running"}), 10),
            event("delta", "7.11", json!({"text": "world"}), 11),
        ]);
        assert_eq!(
            key(&spliced, &[5]),
            Some(SafetyKey::DeltasDisagreeWithOutput)
        );
        // Told restart first, as promised.
        let told = resumed(vec![
            event("restart", "9000.0", json!({}), 10),
            event("delta", "9000.11", json!({"text": "Hello world"}), 11),
        ]);
        assert_eq!(key(&told, &[5]), None);
        // No restart between the cut and the resume (or before the cut,
        // or after the resume): the same process may continue it.
        assert_eq!(key(&spliced, &[]), None);
        assert_eq!(key(&spliced, &[0]), None);
        assert_eq!(key(&spliced, &[9]), None);
        // A cursor of generation 0 names the stored output: continued.
        let mut ended = spliced.clone();
        ended.events[0].id = Some("0.0".into());
        ended.events[1].id = Some("0.6".into());
        assert_eq!(key(&ended, &[5]), None);
        // A reader that held no text yet has nothing to splice.
        let mut empty = spliced;
        empty.events.remove(1);
        empty.resumes[0].events_before = 1;
        assert_eq!(key(&empty, &[5]), None);
    }

    #[test]
    fn restarts_are_found_by_their_control_lines() {
        let lines: Vec<String> = [
            "[+0.000s] harness instance chain_a restart",
            "[+0.100s] harness instance chain_b restart",
            "[+0.200s] harness instance chain_a graceful_restart",
            "[+0.300s] harness instance chain_a crash node 1 for 500 ms",
        ]
        .map(String::from)
        .into();
        assert_eq!(restart_lines(&lines, "chain_a"), [0, 2]);
    }
}
