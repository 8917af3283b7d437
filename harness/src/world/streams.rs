//! Every server-sent event stream a `stream` step read (a job's events or
//! a streamed chat completion), kept as data beside the transcript: the
//! safety keys `deltas_disagree_with_output` and `private_delta_leak`
//! judge what each reader was shown, and the run summary measures time
//! to first token from it. A read is updated as its events come, so a
//! detached reader still running at the end counts with what it saw.

use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Reads kept per run at most; beyond it reads are not recorded (and the
/// safety keys judge the ones that were).
pub const READS_MAX: usize = 10_000;
/// Events kept per read at most (a job has at most 4,096 deltas).
pub const EVENTS_MAX: usize = 10_000;

/// One server-sent event as a reader got it.
#[derive(Debug, Clone, PartialEq)]
pub struct SseEvent {
    /// `event:` (`message` when absent, as in the SSE standard).
    pub event: String,
    pub id: Option<String>,
    /// `data:` as JSON (a string when it is not JSON, e.g. `[DONE]`).
    pub data: Value,
    /// The transcript line that logged it (0-based).
    pub line: usize,
}

impl SseEvent {
    /// The output text the event carries: a job event's `delta`, or a chat
    /// chunk's `choices[0].delta.content`.
    pub fn text(&self) -> Option<&str> {
        match self.event.as_str() {
            "delta" => self.data["text"].as_str(),
            "message" => self.data["choices"][0]["delta"]["content"].as_str(),
            _ => None,
        }
    }
}

/// One reader's read, across its resumes.
#[derive(Debug, Clone, Default)]
pub struct StreamRead {
    pub instance: String,
    /// The reader's client name (its own address), `router` by default.
    pub client: String,
    /// The job it read: the path's id, or a chat's `x-job-id`.
    pub job: Option<String>,
    pub chat: bool,
    /// Opened with a `Last-Event-ID`: the output bytes the reader had
    /// already (its `{generation}.{bytes}`), which its text continues.
    pub from_bytes: usize,
    /// The generation that id named (`None` without one, or unreadable).
    pub from_gen: Option<u64>,
    /// Connections that answered 200 (a cut and resume makes two).
    pub connections: u32,
    pub events: Vec<SseEvent>,
    /// Each later connection, opened with the last event id it had.
    pub resumes: Vec<Resume>,
    /// When it opened, saw its first output text, and ended (ms of the
    /// transcript's time).
    pub opened_ms: i64,
    pub first_text_ms: Option<i64>,
    pub ended_ms: Option<i64>,
}

/// A read's later connection: how many of its events came before it, and
/// the transcript's length (its next line, 0-based) when it was opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resume {
    pub events_before: usize,
    pub line: usize,
}

impl StreamRead {
    /// Whether it was told `restart` (what it had before is dropped).
    pub fn restarted(&self) -> bool {
        self.events.iter().any(|e| e.event == "restart")
    }

    /// The text the reader holds: every text since its last `restart`.
    pub fn joined(&self) -> String {
        let mut text = String::new();
        for event in &self.events {
            if event.event == "restart" {
                text.clear();
            }
            text.push_str(event.text().unwrap_or(""));
        }
        text
    }
}

/// Every read of a run, and who committed each job a step was answered
/// 201 for (a job id is the capability to read its events: its committer
/// holds it); clones share them.
#[derive(Debug, Clone, Default)]
pub struct StreamLog {
    reads: Arc<Mutex<Vec<StreamRead>>>,
    committers: Arc<Mutex<BTreeMap<String, String>>>,
}

impl StreamLog {
    /// Records the client a step's 201 for `job_id` went to (`router`
    /// for the shared scenario client).
    pub fn record_committer(&self, status: u16, job_id: Option<&str>, client: Option<&str>) {
        if let (201, Some(id)) = (status, job_id) {
            let mut committers = self.committers.lock().expect("stream log lock");
            committers.insert(id.to_owned(), client.unwrap_or("router").to_owned());
        }
    }

    /// Job id → the client that committed it.
    pub fn committers(&self) -> BTreeMap<String, String> {
        self.committers.lock().expect("stream log lock").clone()
    }

    /// Starts a read; its index, `None` beyond [`READS_MAX`].
    pub fn start(&self, read: StreamRead) -> Option<usize> {
        let mut reads = self.reads.lock().expect("stream log lock");
        if reads.len() >= READS_MAX {
            return None;
        }
        reads.push(read);
        Some(reads.len() - 1)
    }

    /// Changes read `index` (if it was recorded).
    pub fn update(&self, index: Option<usize>, f: impl FnOnce(&mut StreamRead)) {
        let mut reads = self.reads.lock().expect("stream log lock");
        if let Some(read) = index.and_then(|i| reads.get_mut(i)) {
            f(read);
        }
    }

    pub fn all(&self) -> Vec<StreamRead> {
        self.reads.lock().expect("stream log lock").clone()
    }
}

/// Server-sent events from a body that arrives in pieces.
#[derive(Debug, Default)]
pub struct SseParser {
    buffer: String,
}

/// An event as parsed, before it is logged.
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    pub event: String,
    pub id: Option<String>,
    pub data: String,
}

impl SseParser {
    /// Feeds a piece of the body; the events it completed.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<Parsed> {
        self.buffer
            .push_str(&String::from_utf8_lossy(bytes).replace("\r\n", "\n"));
        let mut out = Vec::new();
        while let Some(end) = self.buffer.find("\n\n") {
            let block: String = self.buffer.drain(..end + 2).collect();
            let (mut event, mut id, mut data) = (None, None, Vec::new());
            for line in block.lines() {
                let (field, value) = line.split_once(':').unwrap_or((line, ""));
                let value = value.strip_prefix(' ').unwrap_or(value);
                match field {
                    "event" => event = Some(value.to_owned()),
                    "id" => id = Some(value.to_owned()),
                    "data" => data.push(value),
                    _ => {} // comments (keep-alives) and unknown fields
                }
            }
            if event.is_some() || !data.is_empty() {
                out.push(Parsed {
                    event: event.unwrap_or_else(|| "message".into()),
                    id,
                    data: data.join("\n"),
                });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn events_parse_across_pieces_and_join_after_the_last_restart() {
        let mut parser = SseParser::default();
        let mut got = parser.feed(b"event: delta\nid: 1.2\ndata: {\"text\":\"Hi\"}\n\nevent: res");
        got.extend(parser.feed(b"tart\nid: 2.0\ndata: {}\n\n: keep-alive\n\ndata: [DONE]\n\n"));
        assert_eq!(got.len(), 3);
        assert_eq!(got[1].event, "restart");
        assert_eq!(got[2].event, "message");
        let event = |event: &str, data: Value| SseEvent {
            event: event.into(),
            id: None,
            data,
            line: 0,
        };
        let read = StreamRead {
            events: vec![
                event("delta", json!({"text": "a"})),
                event("restart", json!({})),
                event("delta", json!({"text": "b "})),
                event("message", json!({"choices": [{"delta": {"content": "c"}}]})),
            ],
            ..StreamRead::default()
        };
        assert_eq!(read.joined(), "b c");
    }
}
