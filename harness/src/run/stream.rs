//! The `stream` step: reads server-sent events as they come (a job's
//! events, or a streamed chat completion), logging each (`sse <`) and
//! keeping the read in the world's stream log; optionally slow (`pause`),
//! cut (`cut_after`) and resumed from its last event id (`resume_after`),
//! or detached (read beside the steps).

use super::steps::Answer;
use crate::expr::matcher::{self, Vars};
use crate::spec::StreamCall;
use crate::world::streams::{Parsed, Resume, SseEvent, SseParser, StreamLog, StreamRead};
use crate::world::transcript::Transcript;
use crate::world::World;
use router::HttpRequest;
use serde_json::{json, Value};
use std::time::Duration;

/// Reopens a read at most this many times (a cut, a broken link or an
/// `end` event each spend one), so a reader of a job that never ends stops.
const RESUMES_MAX: u32 = 4;

/// What one read needs, owned, so a detached read runs beside the steps.
struct Reader {
    instance: String,
    transport: simnet::SimHttp,
    transcript: Transcript,
    log: StreamLog,
    url: String,
    path: String,
    /// The chat request's body (`POST`), or `None` for a job's events.
    chat: Option<Value>,
    client: Option<String>,
    last_id: Option<String>,
    cut_after: Option<u32>,
    resume_after: Option<Duration>,
    pause: Option<Duration>,
    /// Detached: its events are not logged (readers woken by one change
    /// run in an order tokio draws, which a transcript must not show).
    quiet: bool,
}

/// How one connection of a read ended.
enum Ending {
    /// The body ended (after the `job` event, or `[DONE]`).
    Done,
    /// The server said `end`, or the link broke: resumable.
    Cut(&'static str),
    /// Not 200, or no connection: the read is over.
    Refused,
}

pub(super) async fn run_stream(
    call: &StreamCall,
    world: &mut World,
    vars: &Vars,
) -> Result<Answer, String> {
    let reader = reader(call, world, vars)?;
    // Numbered now, in step order: a detached read's task may start after
    // another's at the same instant.
    let index = reader.start();
    if call.detach {
        let what = reader.chat.as_ref().map_or("GET", |_| "POST");
        let tag = reader_tag(index);
        world.transcript.log(
            &call.instance,
            format!("> {what} {} (stream{tag}, detached)", reader.path),
        );
        tokio::spawn(async move {
            let _ = reader.read(index).await;
        });
        return Ok(Answer::body(json!({"detached": true})));
    }
    Ok(reader.read(index).await)
}

fn reader(call: &StreamCall, world: &World, vars: &Vars) -> Result<Reader, String> {
    let transport = world
        .stream_client(call.client.as_deref())
        .ok_or("`stream` reads the simulated network; live runs cannot")?;
    let base = world.node_url(&call.instance, call.node.unwrap_or(0))?;
    let (path, chat) = match (&call.job, &call.chat) {
        (Some(job), None) => {
            let job = match job.as_str() {
                "latest" => world.acknowledged.latest(&call.instance),
                _ => Some(matcher::render_str(job, vars)?),
            };
            let job = job.unwrap_or_else(|| uuid::Uuid::nil().to_string());
            (format!("/v1/jobs/{job}/events"), None)
        }
        (None, Some(chat)) => {
            let mut body = matcher::render(chat, vars)?;
            body["stream"] = json!(true);
            ("/v1/chat/completions".to_owned(), Some(body))
        }
        _ => {
            return Err(
                "`stream` reads a `job`'s events or a `chat` completion: one of them".into(),
            )
        }
    };
    let last_id = match &call.last_event_id {
        Some(id) => Some(matcher::render_str(id, vars)?),
        None => None,
    };
    Ok(Reader {
        instance: call.instance.clone(),
        transport,
        transcript: world.transcript.clone(),
        log: world.streams.clone(),
        url: format!("{base}{path}"),
        path,
        chat,
        client: call.client.clone(),
        last_id,
        cut_after: call.cut_after,
        resume_after: call.resume_after.as_ref().map(|d| d.duration),
        pause: call.pause.as_ref().map(|d| d.duration),
        quiet: call.detach,
    })
}

impl Reader {
    /// Logs a line of the read, unless it is detached.
    fn note(&self, text: impl AsRef<str>) {
        if !self.quiet {
            self.transcript.log(&self.instance, text);
        }
    }

    /// Records the read in the stream log; its index there.
    fn start(&self) -> Option<usize> {
        let job = self
            .path
            .strip_prefix("/v1/jobs/")
            .map(|p| p.trim_end_matches("/events").to_owned());
        self.log.start(StreamRead {
            instance: self.instance.clone(),
            client: self.client.clone().unwrap_or_else(|| "router".into()),
            job,
            chat: self.chat.is_some(),
            from_bytes: self.last_id.as_deref().map_or(0, id_bytes),
            from_gen: (self.last_id.as_deref()).and_then(crate::verify::stream_gens::id_gen),
            opened_ms: self.transcript.elapsed_ms(),
            ..StreamRead::default()
        })
    }

    /// Reads to the end (resuming as asked); the read as the step's answer.
    async fn read(mut self, index: Option<usize>) -> Answer {
        let mut events = Vec::new();
        let mut status = None;
        let mut resumes = 0;
        let ended = loop {
            let (got, ending) = self.connect(index, &mut events).await;
            status = status.or(got);
            let reason = match ending {
                Ending::Done => break "done",
                Ending::Refused => break "refused",
                Ending::Cut(reason) => reason,
            };
            match self.resume_after {
                // A chat is not resumed: sent again it would be another job.
                Some(wait) if resumes < RESUMES_MAX && self.chat.is_none() => {
                    resumes += 1;
                    tokio::time::sleep(wait).await;
                }
                _ => break reason,
            }
        };
        self.log
            .update(index, |r| r.ended_ms = Some(self.transcript.elapsed_ms()));
        let read = self.log.all().into_iter().nth(index.unwrap_or(usize::MAX));
        answer(status, &events, ended, read.as_ref())
    }

    /// One connection: opens it (from the last event id), reads events
    /// until the body ends, the cut or a break. The answer's status.
    async fn connect(
        &mut self,
        index: Option<usize>,
        events: &mut Vec<SseEvent>,
    ) -> (Option<u16>, Ending) {
        let mut request = match &self.chat {
            Some(body) => HttpRequest::post_json(self.url.clone(), body),
            None => HttpRequest::get(self.url.clone()),
        };
        let mut shown = String::new();
        if let Some(id) = &self.last_id {
            request.headers.push(("last-event-id".into(), id.clone()));
            shown = format!(" last-event-id {id}");
            if !events.is_empty() {
                let line = self.transcript.len();
                let resume = |r: &mut StreamRead| {
                    let events_before = r.events.len();
                    r.resumes.push(Resume {
                        events_before,
                        line,
                    });
                };
                self.log.update(index, resume);
            }
        }
        let from = self
            .client
            .as_ref()
            .map_or(String::new(), |c| format!(" (from {c})"));
        let body = self.chat.as_ref().map_or(String::new(), |b| {
            format!(
                " {}",
                String::from_utf8_lossy(&protocol::canonical::to_vec(b))
            )
        });
        let method = request.method.clone();
        self.note(format!(
            "> {method} {} (stream{}){from}{shown}{body}",
            self.path,
            reader_tag(index)
        ));
        let mut stream = match self.transport.open(request).await {
            Ok(stream) => stream,
            Err(e) => {
                self.note(format!("< transport error: {e}"));
                return (None, Ending::Refused);
            }
        };
        let status = Some(stream.status);
        if stream.status != 200 {
            let mut bytes = Vec::new();
            while let Some(Ok(chunk)) = stream.chunk().await {
                bytes.extend_from_slice(&chunk);
            }
            let text = String::from_utf8_lossy(&bytes);
            self.note(format!("< {} {text}", stream.status));
            return (status, Ending::Refused);
        }
        if let Some((_, job)) = stream.headers.iter().find(|(k, _)| k == "x-job-id") {
            let job = job.clone();
            self.log.update(index, |r| r.job = Some(job));
        }
        let tag = reader_tag(index);
        self.log.update(index, |r| r.connections += 1);
        self.note(format!("< 200 (stream{tag})"));
        let ending = self.events(&mut stream, index, events).await;
        (status, ending)
    }

    /// Reads the events of one connection.
    async fn events(
        &mut self,
        stream: &mut simnet::HttpStream,
        index: Option<usize>,
        events: &mut Vec<SseEvent>,
    ) -> Ending {
        let mut parser = SseParser::default();
        let mut count = 0;
        loop {
            let chunk = match stream.chunk().await {
                None => return Ending::Done,
                Some(Ok(chunk)) => chunk,
                Some(Err(e)) => {
                    let tag = reader_tag(index);
                    self.note(format!("sse{tag} broken: {e}"));
                    return Ending::Cut("broken");
                }
            };
            for parsed in parser.feed(&chunk) {
                let event = self.record(parsed, index);
                let is_end = event.event == "end";
                events.push(event);
                count += 1;
                if is_end {
                    return Ending::Cut("end");
                }
                if self.cut_after == Some(count) {
                    self.cut_after = None;
                    let tag = reader_tag(index);
                    self.note(format!("sse{tag} cut after {count} events"));
                    return Ending::Cut("cut");
                }
                if let Some(pause) = self.pause {
                    tokio::time::sleep(pause).await;
                }
            }
        }
    }
}

impl Reader {
    /// Logs an event and adds it to the read.
    fn record(&mut self, parsed: Parsed, index: Option<usize>) -> SseEvent {
        let data = serde_json::from_str(&parsed.data).unwrap_or(Value::String(parsed.data));
        let id = parsed
            .id
            .as_ref()
            .map_or(String::new(), |id| format!(" {id}"));
        let shown = String::from_utf8_lossy(&protocol::canonical::to_vec(&data)).into_owned();
        let line = self.transcript.len();
        let tag = reader_tag(index);
        self.note(format!("sse{tag} < {}{id} {shown}", parsed.event));
        let event = SseEvent {
            event: parsed.event,
            id: parsed.id,
            data,
            line,
        };
        if event.id.is_some() {
            self.last_id = event.id.clone();
        }
        let at_ms = self.transcript.elapsed_ms();
        let has_text = event.text().is_some_and(|t| !t.is_empty());
        self.log.update(index, |r| {
            if has_text && r.first_text_ms.is_none() {
                r.first_text_ms = Some(at_ms);
            }
            if r.events.len() < crate::world::streams::EVENTS_MAX {
                r.events.push(event.clone());
            }
        });
        event
    }
}

/// ` #N`: the read's number in the run (1-based), in its transcript lines.
fn reader_tag(index: Option<usize>) -> String {
    index.map_or(String::new(), |i| format!(" #{}", i + 1))
}

/// The bytes an event id `{generation}.{bytes}` names (0 if unreadable).
fn id_bytes(id: &str) -> usize {
    id.split_once('.')
        .and_then(|(_, b)| b.parse().ok())
        .unwrap_or(0)
}

/// The step's answer: the events, the text joined after the last
/// `restart`, and what the read measured.
fn answer(
    status: Option<u16>,
    events: &[SseEvent],
    ended: &str,
    read: Option<&StreamRead>,
) -> Answer {
    let listed: Vec<Value> = events
        .iter()
        .map(|e| json!({"event": e.event, "id": e.id, "data": e.data}))
        .collect();
    let read = read.cloned().unwrap_or_default();
    let ttft_ms = read.first_text_ms.map(|t| t - read.opened_ms);
    let total_ms = read.ended_ms.map(|t| t - read.opened_ms);
    let body = json!({
        "events": listed,
        "joined": read.joined(),
        "restarts": events.iter().filter(|e| e.event == "restart").count(),
        "last_id": events.iter().rev().find_map(|e| e.id.clone()),
        "last": events.last().map(|e| e.data.clone()),
        "ended": ended,
        "job": read.job,
        "ttft_ms": ttft_ms,
        "total_ms": total_ms,
    });
    Answer {
        status,
        headers: Vec::new(),
        body,
    }
}
