//! The safety keys over what stream readers were shown (`world::streams`):
//! - `deltas_disagree_with_output`: a reader keeps the text since its last
//!   `restart`. A reader shown the end of a completed job (its `job` event,
//!   or a chat's last chunk) holds exactly the job's output; a reader cut
//!   before it, of a job that completed on its only attempt (no restart
//!   of a worker's or the coordinator's between), holds a prefix of it.
//!   Event by event (`verify::stream_gens`): what it holds since its last
//!   `restart` is of one generation, and under the generation of the
//!   attempt that completed it is a start of the job's output.
//! - `private_delta_leak`: a job id is the capability to read its events
//!   (decision 0023), held by the client that committed the job; no reader
//!   is shown a PRIVATE job's output text unless it read that job by its id
//!   as its committer, and no reader is shown text for an id no job has.
//!   (That only the user's trusted workers make the text is
//!   `private_to_untrusted`, over the `assign` frames.)
//! - `output_before_settlement`, for streams: a paid job settled on
//!   completion shows its readers no text before its payment settled
//!   (decision 0021, `api/events.rs`: the whole output comes in one delta
//!   at its end), so a reader of such a job is shown at most one text
//!   event since its last `restart`, and only of a job that completed.
//!   Judged on the instances whose settlements the harness sees (the
//!   simulation settles on completion); a chat read is not judged (its
//!   request paid already).

use super::safety::{SafetyKey, Violation};
use crate::world::streams::StreamRead;
use coordinator::core::Job;
use protocol::api::{JobStatus, PrivacyClass};
use std::collections::{BTreeMap, BTreeSet};

/// Checks every read; the violation seen earliest in the transcript.
pub fn check(
    reads: &[StreamRead],
    committers: &BTreeMap<String, String>,
    jobs: &BTreeMap<(&str, String), &Job>,
    settled_on_completion: &BTreeSet<&str>,
) -> Result<(), Violation> {
    let mut found: Vec<Violation> = Vec::new();
    for read in reads {
        let job = read
            .job
            .as_ref()
            .and_then(|id| jobs.get(&(read.instance.as_str(), id.clone())).copied());
        found.extend(check_output(read, job).err());
        // Event by event: a splice the end check cannot see.
        found.extend(super::stream_gens::check(read, job).err());
        found.extend(check_leak(read, job, committers).err());
        if settled_on_completion.contains(read.instance.as_str()) {
            found.extend(check_paid(read, job).err());
        }
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

/// `output_before_settlement` for one read of a paid job.
fn check_paid(read: &StreamRead, job: Option<&Job>) -> Result<(), Violation> {
    let Some(job) = job.filter(|j| j.paid_with.is_some() && !read.chat) else {
        return Ok(());
    };
    // A `restart` tells the reader to drop what it had (a resume across
    // a coordinator's restart is shown the whole output again).
    let since = (read.events.iter())
        .rposition(|e| e.event == "restart")
        .map_or(0, |i| i + 1);
    let mut texts = read.events[since..]
        .iter()
        .filter(|e| e.text().is_some_and(|t| !t.is_empty()));
    let Some(first) = texts.next() else {
        return Ok(());
    };
    let name = read.job.as_deref().unwrap_or("?");
    let shown = |what: &str| {
        Err(Violation {
            invariant: SafetyKey::OutputBeforeSettlement,
            message: format!(
                "a reader of paid job {name} ({}) was shown {what}",
                read.client
            ),
            line: Some(first.line),
        })
    };
    if job.status != JobStatus::Completed {
        return shown(&format!(
            "output text, and the job ended {}",
            job.status.as_str()
        ));
    }
    if let Some(second) = texts.next() {
        let texts = [first, second].map(|e| e.text().unwrap_or_default().to_owned());
        return shown(&format!(
            "output text in more than one delta ({texts:?}, ...): text before its settlement"
        ));
    }
    Ok(())
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
        let settled_on_completion = BTreeSet::from(["chain_a"]);
        (check(reads, &committers, &jobs, &settled_on_completion).err()).map(|v| v.invariant)
    }

    fn paid(mut job: Job) -> Job {
        job.paid_with = Some(Box::new(coordinator::core::PaidWith {
            nonce: x402::NonceKey {
                chain_id: 84532,
                asset: x402::Address::default(),
                from: x402::Address::default(),
                nonce: Default::default(),
            },
            response_header: String::new(),
            ticket: None,
        }));
        job
    }

    #[test]
    fn a_paid_jobs_reader_is_shown_its_output_once_at_its_end_and_never_for_a_failed_job() {
        let delta = |t: &str| ("delta", json!({ "text": t }));
        let end = (
            "job",
            json!({"status": "completed", "result": {"output": "a b"}}),
        );
        let done = paid(job(false, "completed", "a b", 1));
        let at_end = read("router", &[delta("a b"), end.clone()]);
        assert_eq!(verdict(&[at_end], &done, "router"), None);
        let streamed = read("router", &[delta("a "), delta("b"), end]);
        assert_eq!(
            verdict(&[streamed], &done, "router"),
            Some(SafetyKey::OutputBeforeSettlement)
        );
        // Resumed across a coordinator's restart: told to drop what it had.
        let resumed = read(
            "router",
            &[delta("a b"), ("restart", json!({})), delta("a b")],
        );
        assert_eq!(verdict(&[resumed], &done, "router"), None);
        let refused = paid(job(false, "failed", "", 1));
        let shown = read("router", &[delta("a ")]);
        assert_eq!(
            verdict(&[shown], &refused, "router"),
            Some(SafetyKey::OutputBeforeSettlement)
        );
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
