//! `GET /v1/jobs/{id}/events`: a job's server-sent events (decision 0023).
//! [`Feed`] turns the shell's view of a job (shell/streams.rs) into typed
//! items, the one source of both this endpoint's events and the streamed
//! chat completions (`openai.rs`): `status` when the job's status changes,
//! `delta` with output text, `restart` when an attempt the reader followed
//! died and the job runs again (drop what you had), then `job` with the
//! final record and its receipt, or `end` when the stream is cut (held
//! too long, coordinator stopping). Every event but `end` carries an id,
//! `{generation}.{bytes}`, which `Last-Event-ID` resumes from.

use super::error::ApiError;
use super::extract::ClientAddr;
use crate::shell::{Coordinator, Cursor, StreamView, StreamWatch};
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use protocol::api::{JobRecord, JobStatus};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;
use tokio::time::{sleep_until, Instant};
use uuid::Uuid;

/// One thing a job's reader is shown.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Item {
    Status {
        status: JobStatus,
        attempt: u32,
    },
    Delta(String),
    Restart,
    Job(Box<JobRecord>),
    /// The stream is cut; the reader may resume with its last event id.
    End(&'static str),
}

/// A reader of one job: its cursor and its place among held streams.
pub(super) struct Feed {
    c: Coordinator,
    id: Uuid,
    client: String,
    /// Where the reader is once everything queued is shown.
    cursor: Cursor,
    /// Where the reader is after the item it was last given: that item's
    /// event id. Items carry their own (a `status` queued before a delta
    /// is shown without its text, so its id must not count it: a reader
    /// cut after it and resuming from its id was never sent the text;
    /// swarm seed 3784).
    shown: Cursor,
    status: Option<JobStatus>,
    watch: Option<StreamWatch>,
    until: Instant,
    queue: VecDeque<(Item, Cursor)>,
    done: bool,
    /// A paid job settled on completion shows no delta before it is
    /// settled: its whole output comes once `completed` (decision 0021:
    /// a payer whose settlement fails gets no output, streamed or not).
    withhold_deltas: bool,
}

impl Feed {
    /// Opens a reader of job `id` at `cursor`: 404 for a job neither the
    /// core nor the store has; beyond the held-stream bounds, 503 when
    /// `bounded`, else a reader that looks at the job once a second (the
    /// OpenAI door, whose request already paid for its job: refusing it
    /// then would charge for nothing).
    pub(super) fn open(
        c: &Coordinator,
        id: Uuid,
        client: &str,
        cursor: Cursor,
        bounded: bool,
    ) -> Result<Self, ApiError> {
        let job = c.job(&id).map_err(ApiError::internal)?;
        let Some(job) = job else {
            return Err(ApiError::JobNotFound);
        };
        let withhold_deltas = job.paid_with.is_some()
            && c.config().settlement == crate::config::Settlement::OnCompletion;
        let watch = match c.watch_stream(id, client) {
            Ok(watch) => watch,
            Err(_) if !bounded => None,
            Err(e) => return Err(ApiError::Unavailable(e.to_string())),
        };
        let life = Duration::from_millis(c.config().limits.stream_ms_max);
        Ok(Self {
            c: c.clone(),
            id,
            client: client.to_owned(),
            cursor,
            shown: cursor,
            status: None,
            watch,
            until: Instant::now() + life,
            queue: VecDeque::new(),
            done: false,
            withhold_deltas,
        })
    }

    /// The event id of the item last given: what the reader has with it.
    pub(super) fn event_id(&self) -> String {
        format!("{}.{}", self.shown.gen, self.shown.bytes)
    }

    /// The next item, waiting for one; `None` after the last.
    pub(super) async fn next(&mut self) -> Option<Item> {
        loop {
            if let Some((item, shown)) = self.queue.pop_front() {
                // An end is shown only once it would survive a crash, as a
                // poll shows it (memory runs ahead of the disk).
                let terminal = matches!(&item, Item::Status { status, .. } if status.is_terminal());
                if terminal && self.c.durable().await.is_err() {
                    self.queue.clear();
                    self.cut("internal_error");
                    continue;
                }
                self.shown = shown;
                return Some(item);
            }
            if self.done {
                return None;
            }
            self.step().await;
        }
    }

    /// Queues what changed since the reader's cursor, or waits for a change.
    async fn step(&mut self) {
        match self.c.stream_view(self.id, self.cursor) {
            StreamView::Absent { gen } => match self.c.job(&self.id) {
                Ok(Some(job)) => self.ended(&job, gen),
                _ => self.cut("job_unknown"),
            },
            StreamView::Ended { job, gen } => self.ended(&job, gen),
            StreamView::Live {
                status,
                attempt,
                restart,
                text,
                cursor,
            } => {
                // Before the text: what the reader had of this attempt's
                // output (nothing after a restart; a reader from the start
                // has nothing of any).
                let had_bytes = if restart { 0 } else { self.cursor.bytes };
                let before = Cursor {
                    gen: cursor.gen,
                    bytes: had_bytes,
                };
                if restart && !self.withhold_deltas {
                    self.queue.push_back((Item::Restart, before));
                }
                // A withheld stream is shown no text before its end: its
                // cursor (and so its event ids) stays at what it was shown.
                if !self.withhold_deltas {
                    self.cursor = cursor;
                }
                if self.status != Some(status) || restart {
                    self.status = Some(status);
                    let before = if self.withhold_deltas {
                        self.cursor
                    } else {
                        before
                    };
                    self.queue
                        .push_back((Item::Status { status, attempt }, before));
                }
                if !text.is_empty() && !self.withhold_deltas {
                    self.queue.push_back((Item::Delta(text), self.cursor));
                }
                if self.queue.is_empty() {
                    self.wait().await;
                }
            }
        }
    }

    /// Waits for the job to change, the stream's time to end, or the
    /// coordinator to stop.
    async fn wait(&mut self) {
        if self.c.is_stopping() {
            return self.cut("shutting_down");
        }
        if self.watch.is_none() {
            self.watch = self.c.watch_stream(self.id, &self.client).ok().flatten();
        }
        let changed = async {
            match self.watch.as_mut() {
                Some(watch) => watch.woken.changed().await.is_ok(),
                // Not watchable here (another node's job): look again soon.
                None => {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    true
                }
            }
        };
        tokio::select! {
            biased;
            ok = changed => if !ok { self.watch = None },
            _ = sleep_until(self.until) => self.cut("stream_time_limit"),
        }
    }

    fn cut(&mut self, reason: &'static str) {
        // An end carries no id: the reader resumes from its last.
        self.queue.push_back((Item::End(reason), self.shown));
        self.done = true;
    }

    /// The last items of an ended job: the rest of its text output (from
    /// the start, after a `restart`, when the reader followed another
    /// attempt), its status and its record.
    fn ended(&mut self, job: &crate::core::Job, gen: Option<u64>) {
        let text = job
            .output
            .as_ref()
            .and_then(|o| o.as_str())
            .filter(|_| job.status == JobStatus::Completed);
        if let Some(text) = text {
            // The cursor is what the reader was shown (a withheld stream's
            // stays at the start until now). Generation 0 names this same
            // ended output (the ids given for a job whose buffer is gone,
            // or that did not stream): a reader resumes within it.
            let same_gen = gen == Some(self.cursor.gen) || (gen.is_none() && self.cursor.gen == 0);
            let same = same_gen && text.is_char_boundary(self.cursor.bytes);
            let gen = gen.unwrap_or(0);
            if !same && self.cursor.bytes > 0 {
                self.queue
                    .push_back((Item::Restart, Cursor { gen, bytes: 0 }));
            }
            let from = if same { self.cursor.bytes } else { 0 };
            self.cursor = Cursor {
                gen,
                bytes: text.len(),
            };
            if from < text.len() {
                let delta = Item::Delta(text[from..].to_owned());
                self.queue.push_back((delta, self.cursor));
            }
        }
        if self.status != Some(job.status) {
            self.status = Some(job.status);
            let attempt = job.attempts;
            let status = job.status;
            self.queue
                .push_back((Item::Status { status, attempt }, self.cursor));
        }
        let record = Item::Job(Box::new(job.record()));
        self.queue.push_back((record, self.cursor));
        self.done = true;
    }
}

/// The cursor a `Last-Event-ID` names (`{generation}.{bytes}`); from the
/// start when absent or unreadable.
fn resume_from(headers: &HeaderMap) -> Cursor {
    let id = headers.get("last-event-id").and_then(|v| v.to_str().ok());
    let parsed = id.and_then(|id| {
        let (gen, bytes) = id.split_once('.')?;
        Some(Cursor {
            gen: gen.parse().ok()?,
            bytes: bytes.parse().ok()?,
        })
    });
    parsed.unwrap_or_default()
}

/// An item as a server-sent event.
fn event(item: &Item, id: String) -> Event {
    let (name, data) = match item {
        Item::Status { status, attempt } => (
            "status",
            serde_json::json!({"status": status, "attempt": attempt}),
        ),
        Item::Delta(text) => ("delta", serde_json::json!({ "text": text })),
        Item::Restart => ("restart", serde_json::json!({})),
        Item::Job(record) => (
            "job",
            serde_json::to_value(record).expect("records serialise"),
        ),
        Item::End(reason) => {
            let data = serde_json::json!({ "reason": reason });
            return Event::default().event("end").data(data.to_string());
        }
    };
    Event::default().event(name).id(id).data(data.to_string())
}

/// `GET /v1/jobs/{id}/events`.
#[utoipa::path(get, path = "/v1/jobs/{id}/events", tag = "jobs",
    params(
        ("id" = String, Path, description = "The job id a commit returned (a UUID)"),
        ("Last-Event-ID" = Option<String>, Header, description = "Resume after this event (`{generation}.{bytes}`)"),
    ),
    responses(
        (status = 200, description = "Server-sent events: `status` {status, attempt}, `delta` {text}, \
            `restart` {} (drop the text so far: the attempt it came from died and the job runs again), \
            `job` (the final JobRecord with its receipt; the last event), or `end` {reason} when the \
            stream is cut (`stream_time_limit`, `shutting_down`): resume with `Last-Event-ID`. The \
            deltas of a completed job join to its output.", content_type = "text/event-stream", body = String),
        (status = 404, response = crate::api::docs::NotFound),
        (status = 503, response = crate::api::docs::Unavailable),
    ))]
pub(super) async fn events(
    State(c): State<Coordinator>,
    ClientAddr(client): ClientAddr,
    super::extract::JobId(id): super::extract::JobId,
    headers: HeaderMap,
) -> Result<Sse<impl futures_util::Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let feed = Feed::open(&c, id, &client, resume_from(&headers), true)?;
    let stream = futures_util::stream::unfold(feed, |mut feed| async move {
        let item = feed.next().await?;
        let event = event(&item, feed.event_id());
        Some((Ok(event), feed))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}
