//! The safety keys over what stream readers were shown (`world::streams`):
//! - `deltas_disagree_with_output`: a reader keeps the text since its last
//!   `restart`. A reader shown the end of a completed job (its `job` event,
//!   or a chat's last chunk) holds exactly the job's output; a reader cut
//!   before it, of a job that completed on its only attempt (no restart
//!   of a worker's or the coordinator's between), holds a prefix of it.
//! - `private_delta_leak`: a job id is the capability to read its events
//!   (decision 0023), held by the client that committed the job; no reader
//!   is shown a PRIVATE job's output text unless it read that job by its id
//!   as its committer, and no reader is shown text for an id no job has.
//!   (That only the user's trusted workers make the text is
//!   `private_to_untrusted`, over the `assign` frames.)

use super::safety::{SafetyKey, Violation};
use crate::world::streams::StreamRead;
use coordinator::core::Job;
use protocol::api::{JobStatus, PrivacyClass};
use std::collections::BTreeMap;

/// Checks every read; the violation seen earliest in the transcript.
pub fn check(
    reads: &[StreamRead],
    committers: &BTreeMap<String, String>,
    jobs: &BTreeMap<(&str, String), &Job>,
) -> Result<(), Violation> {
    let mut found: Vec<Violation> = Vec::new();
    for read in reads {
        let job = read
            .job
            .as_ref()
            .and_then(|id| jobs.get(&(read.instance.as_str(), id.clone())).copied());
        found.extend(check_output(read, job).err());
        found.extend(check_leak(read, job, committers).err());
    }
    match found
        .into_iter()
        .min_by_key(|v| v.line.unwrap_or(usize::MAX))
    {
        Some(v) => Err(v),
        None => Ok(()),
    }
}

/// `deltas_disagree_with_output` for one read.
fn check_output(read: &StreamRead, job: Option<&Job>) -> Result<(), Violation> {
    let joined = read.joined();
    let last_line = read.events.last().map(|e| e.line);
    let broken = |message: String| Violation {
        invariant: SafetyKey::DeltasDisagreeWithOutput,
        message,
        line: last_line,
    };
    let name = read.job.as_deref().unwrap_or("?");
    // What the end the reader was shown says the output is.
    let shown_end = read
        .events
        .iter()
        .rev()
        .find_map(|e| match e.event.as_str() {
            "job" if e.data["status"] == "completed" => {
                Some(e.data.pointer("/result/output").cloned())
            }
            "message" if e.data["choices"][0]["finish_reason"] == "stop" => Some(None),
            _ => None,
        });
    // A read resumed from an event id continues the text the reader had:
    // until a restart, it is shown the output after those bytes.
    let from = if read.restarted() { 0 } else { read.from_bytes };
    let after = |text: String| text.get(from..).map(str::to_owned).unwrap_or_default();
    let stored = job
        .filter(|j| j.status == JobStatus::Completed)
        .and_then(|j| j.output.as_ref()?.as_str().map(str::to_owned))
        .map(after);
    if let Some(shown) = shown_end {
        let shown = shown.and_then(|o| o.as_str().map(str::to_owned)).map(after);
        let want = shown.or(stored.clone());
        if let Some(want) = want.filter(|w| *w != joined) {
            return Err(broken(format!(
                "a reader of job {name} ({}) was shown it completed holding {joined:?}, not its output {want:?}",
                read.client
            )));
        }
        return Ok(());
    }
    let only_attempt = job.is_some_and(|j| j.attempts == 1 && j.recoveries == 0);
    match stored {
        Some(output) if only_attempt && !output.starts_with(&joined) => Err(broken(format!(
            "a reader of job {name} ({}) holds {joined:?}, not a start of the output {output:?} of its only attempt",
            read.client
        ))),
        _ => Ok(()),
    }
}

/// `private_delta_leak` for one read.
fn check_leak(
    read: &StreamRead,
    job: Option<&Job>,
    committers: &BTreeMap<String, String>,
) -> Result<(), Violation> {
    let Some(first) = read
        .events
        .iter()
        .find(|e| e.text().is_some_and(|t| !t.is_empty()))
    else {
        return Ok(());
    };
    let name = read.job.as_deref().unwrap_or("?");
    let leak = |message: String| Violation {
        invariant: SafetyKey::PrivateDeltaLeak,
        message,
        line: Some(first.line),
    };
    let Some(job) = job else {
        // Retention may have deleted a job a step was told exists, and a
        // chat's job too: only an id no one was given is judged.
        if read.chat || committers.contains_key(name) {
            return Ok(());
        }
        return Err(leak(format!(
            "{} read the events of {name}, which no job of {} has, and was shown output text",
            read.client, read.instance
        )));
    };
    if job.submission.privacy_class != PrivacyClass::Private {
        return Ok(());
    }
    match committers.get(name) {
        Some(committer) if *committer != read.client => Err(leak(format!(
            "{} was shown output text of PRIVATE job {name}, which {committer} committed",
            read.client
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::world::streams::SseEvent;
    use serde_json::{json, Value};

    const J1: &str = "00000000-0000-4000-8000-000000000001";

    fn job(private: bool, status: &str, output: &str, attempts: u32) -> Job {
        serde_json::from_value(json!({
            "id": J1,
            "submission": {
                "job_type": "LLM_INFER", "user_id": "alice",
                "payload": {"job_type": "LLM_INFER", "prompt": "p", "max_tokens": 8},
                "privacy_class": if private { "PRIVATE" } else { "PUBLIC" },
            },
            "tier": "FAST", "status": status, "output": output, "error": null,
            "receipt": null, "created_at_ms": 0, "completed_at_ms": null,
            "attempts": attempts, "payment_ref": null, "deadline_ms": null, "seq": 1,
        }))
        .expect("a job")
    }

    fn read(client: &str, events: &[(&str, Value)]) -> StreamRead {
        StreamRead {
            instance: "chain_a".into(),
            client: client.into(),
            job: Some(J1.into()),
            events: events
                .iter()
                .enumerate()
                .map(|(line, (event, data))| SseEvent {
                    event: (*event).into(),
                    id: None,
                    data: data.clone(),
                    line,
                })
                .collect(),
            ..StreamRead::default()
        }
    }

    fn verdict(reads: &[StreamRead], job: &Job, committer: &str) -> Option<SafetyKey> {
        let jobs = BTreeMap::from([(("chain_a", J1.to_owned()), job)]);
        let committers = BTreeMap::from([(J1.to_owned(), committer.to_owned())]);
        check(reads, &committers, &jobs).err().map(|v| v.invariant)
    }

    #[test]
    fn a_reader_shown_the_end_holds_exactly_the_output_after_its_last_restart() {
        let done = job(false, "completed", "a b c", 2);
        let end = (
            "job",
            json!({"status": "completed", "result": {"output": "a b c"}}),
        );
        let delta = |t: &str| ("delta", json!({ "text": t }));
        let restarted = read(
            "router",
            &[
                delta("x "),
                ("restart", json!({})),
                delta("a b c"),
                end.clone(),
            ],
        );
        assert_eq!(verdict(&[restarted], &done, "router"), None);
        // Without the restart the dead attempt's text is still held.
        let kept = read("router", &[delta("x "), delta("a b c"), end]);
        let key = verdict(&[kept], &done, "router");
        assert_eq!(key, Some(SafetyKey::DeltasDisagreeWithOutput));
    }

    #[test]
    fn a_cut_reader_of_the_only_attempt_holds_a_start_of_the_output() {
        let delta = |t: &str| ("delta", json!({ "text": t }));
        let start = read("router", &[delta("a ")]);
        assert_eq!(
            verdict(
                std::slice::from_ref(&start),
                &job(false, "completed", "a b", 1),
                "router"
            ),
            None
        );
        let wrong = read("router", &[delta("b ")]);
        let key = verdict(
            std::slice::from_ref(&wrong),
            &job(false, "completed", "a b", 1),
            "router",
        );
        assert_eq!(key, Some(SafetyKey::DeltasDisagreeWithOutput));
        // Another attempt may have made other text: not judged.
        assert_eq!(
            verdict(&[wrong], &job(false, "completed", "a b", 2), "router"),
            None
        );
    }

    #[test]
    fn only_the_committer_is_shown_a_private_jobs_text() {
        let shown = [("delta", json!({"text": "secret"}))];
        let private = job(true, "running", "", 1);
        assert_eq!(
            verdict(&[read("alice-app", &shown)], &private, "alice-app"),
            None
        );
        let key = verdict(&[read("snoop", &shown)], &private, "alice-app");
        assert_eq!(key, Some(SafetyKey::PrivateDeltaLeak));
        let public = job(false, "running", "", 1);
        assert_eq!(
            verdict(&[read("snoop", &shown)], &public, "alice-app"),
            None
        );
        // Text for an id no job has came from some other job.
        let mut stray = read("snoop", &shown);
        stray.job = Some("00000000-0000-4000-8000-00000000000f".into());
        let key = verdict(&[stray], &public, "alice-app");
        assert_eq!(key, Some(SafetyKey::PrivateDeltaLeak));
    }
}
