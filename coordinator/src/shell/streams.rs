//! The output deltas of running jobs and the streams that read them
//! (decision 0023): one buffer per job, the joined text of its current
//! attempt, which every reader of the job shares. A reader keeps only a
//! cursor (the buffer's generation and the bytes it has), so a slow reader
//! costs no memory: when it reads again it gets everything it missed as
//! one delta. A new attempt starts a new generation; a reader behind on an
//! old one is told to restart. Kept under the state lock, woken by `flush`
//! when an event changes a watched job, bounded in total and per client as
//! held polls are. Not the core's state: a buffer is lost with the process,
//! and the job's record, which the store keeps, is what a reader ends on.

use super::Coordinator;
use crate::core::{Change, Job, SessionId};
use protocol::api::JobStatus;
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::watch;
use uuid::Uuid;

#[derive(Default)]
pub(super) struct Streams {
    jobs: BTreeMap<Uuid, Buffer>,
    /// Held streams per client address, and in all.
    per_client: BTreeMap<String, usize>,
    total: usize,
    /// The last generation handed out (see [`Streams::fresh_gen`]).
    last_gen: u64,
}

/// One job's deltas, of the attempt `attempt` by `session`.
struct Buffer {
    gen: u64,
    attempt: u32,
    session: Option<SessionId>,
    text: String,
    /// The job ended: the buffer is kept (empty) only for its watchers.
    ended: bool,
    /// Once ended: the generation its output streamed in (its last
    /// attempt's), kept for readers of a job the core has forgotten.
    ended_gen: Option<u64>,
    watchers: usize,
    wake: watch::Sender<()>,
}

/// Where a reader is: the generation it reads and the bytes of it it has.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cursor {
    pub gen: u64,
    pub bytes: usize,
}

/// What a reader at a cursor is to be shown now.
pub enum StreamView {
    /// The job is not in memory: read the store (a finished job, or none).
    /// `gen` is the generation its output streamed in, when the job ended
    /// while this reader's buffer was kept (the core forgot it at its end).
    Absent { gen: Option<u64> },
    /// The job goes on: its status and attempt, whether the reader must
    /// drop what it had (`restart`), and the text after its cursor, which
    /// moves to `cursor`.
    Live {
        status: JobStatus,
        attempt: u32,
        restart: bool,
        text: String,
        cursor: Cursor,
    },
    /// The job ended; `gen` is the generation its last attempt streamed
    /// in, if it streamed.
    Ended { job: Arc<Job>, gen: Option<u64> },
}

/// Why a stream was not opened.
#[derive(Debug, thiserror::Error)]
#[error("too many job event streams are open{scope}; poll the job instead")]
pub struct StreamsFull {
    scope: &'static str,
}

/// A held stream's place; dropping it gives the place back.
pub struct StreamWatch {
    pub woken: watch::Receiver<()>,
    coordinator: Coordinator,
    job: Uuid,
    client: String,
}

impl Drop for StreamWatch {
    fn drop(&mut self) {
        let mut state = self.coordinator.lock();
        state.streams.release(&self.job, &self.client);
    }
}

impl Streams {
    /// A generation never handed out before, by this process or (the clock
    /// moving on) an earlier one: a resumed cursor never matches by chance.
    fn fresh_gen(&mut self, now_ms: i64) -> u64 {
        let from_clock = u64::try_from(now_ms).unwrap_or(0).saturating_mul(1000);
        self.last_gen = (self.last_gen + 1).max(from_clock);
        self.last_gen
    }

    fn buffer(&mut self, job: &Job, now_ms: i64) -> &mut Buffer {
        if !self.jobs.contains_key(&job.id) {
            let gen = self.fresh_gen(now_ms);
            let buffer = Buffer {
                gen,
                attempt: job.attempts,
                session: job.worker,
                text: String::new(),
                ended: false,
                ended_gen: None,
                watchers: 0,
                wake: watch::Sender::new(()),
            };
            self.jobs.insert(job.id, buffer);
        }
        self.jobs.get_mut(&job.id).expect("inserted above")
    }

    /// After an event: wakes the readers of every changed job they watch;
    /// a job back in the queue or on another attempt starts a generation.
    pub(super) fn observe(&mut self, changes: &[Change], now_ms: i64) {
        if self.jobs.is_empty() {
            return;
        }
        for change in changes {
            let Change::Job(job) = change else { continue };
            let Some(buffer) = self.jobs.get(&job.id) else {
                continue;
            };
            let other_attempt = buffer.attempt != job.attempts
                || buffer.session != job.worker
                || job.status == JobStatus::Pending;
            if job.status.is_terminal() {
                let buffer = self.jobs.get_mut(&job.id).expect("found above");
                buffer.ended = true;
                buffer.ended_gen = (buffer.attempt == job.attempts).then_some(buffer.gen);
                buffer.text = String::new();
                buffer.wake.send_replace(());
                if buffer.watchers == 0 {
                    self.jobs.remove(&job.id);
                }
                continue;
            }
            let gen = match other_attempt && !buffer.text.is_empty() {
                true => Some(self.fresh_gen(now_ms)),
                false => None,
            };
            let buffer = self.jobs.get_mut(&job.id).expect("found above");
            if let Some(gen) = gen {
                buffer.gen = gen;
                buffer.text.clear();
            }
            buffer.attempt = job.attempts;
            buffer.session = job.worker;
            buffer.wake.send_replace(());
        }
    }

    fn release(&mut self, job: &Uuid, client: &str) {
        self.total -= 1;
        if let Some(held) = self.per_client.get_mut(client) {
            *held -= 1;
            if *held == 0 {
                self.per_client.remove(client);
            }
        }
        if let Some(buffer) = self.jobs.get_mut(job) {
            buffer.watchers -= 1;
            if buffer.watchers == 0 && (buffer.ended || buffer.text.is_empty()) {
                self.jobs.remove(job);
            }
        }
    }

    /// Wakes every reader: the coordinator is stopping.
    pub(super) fn wake_all(&self) {
        for buffer in self.jobs.values() {
            buffer.wake.send_replace(());
        }
    }
}

impl Coordinator {
    /// Appends a delta of `session`'s attempt at `job_id` to the job's
    /// buffer and wakes its readers; refused unless the session runs the
    /// job (accepted, not yet ended).
    pub fn push_delta(&self, session: SessionId, job_id: Uuid, text: &str) -> Result<(), String> {
        let now_ms = self.now_ms();
        let mut guard = self.lock();
        let state = &mut *guard;
        let job = state.core.job_shared(&job_id);
        let Some(job) = job.filter(|j| j.status == JobStatus::Running && j.worker == Some(session))
        else {
            return Err("a delta must come after the job's accept, from its worker".into());
        };
        let streams = &mut state.streams;
        let buffer = streams.buffer(&job, now_ms);
        if buffer.attempt != job.attempts || buffer.session != Some(session) {
            let stale = !buffer.text.is_empty();
            let gen = if stale { streams.fresh_gen(now_ms) } else { 0 };
            let buffer = streams.jobs.get_mut(&job_id).expect("made above");
            if stale {
                buffer.gen = gen;
                buffer.text.clear();
            }
            buffer.attempt = job.attempts;
            buffer.session = Some(session);
        }
        let buffer = streams.jobs.get_mut(&job_id).expect("made above");
        buffer.text.push_str(text);
        buffer.wake.send_replace(());
        Ok(())
    }

    /// Opens a held stream of job `id` for `client`: `Ok(None)` when the
    /// job is not in memory or already ended (the reader reads its record).
    pub fn watch_stream(&self, id: Uuid, client: &str) -> Result<Option<StreamWatch>, StreamsFull> {
        let limits = &self.inner.config.limits;
        let now_ms = self.now_ms();
        let mut guard = self.lock();
        let state = &mut *guard;
        let streams = &mut state.streams;
        if streams.total >= limits.held_streams_max {
            return Err(StreamsFull { scope: "" });
        }
        let held = streams.per_client.get(client).copied().unwrap_or(0);
        if held >= limits.held_streams_per_client_max {
            return Err(StreamsFull {
                scope: " for this client",
            });
        }
        let Some(job) = state.core.job_shared(&id) else {
            return Ok(None);
        };
        if job.status.is_terminal() && !streams.jobs.contains_key(&id) {
            return Ok(None);
        }
        let buffer = streams.buffer(&job, now_ms);
        buffer.watchers += 1;
        let woken = buffer.wake.subscribe();
        streams.total += 1;
        *streams.per_client.entry(client.to_owned()).or_default() += 1;
        Ok(Some(StreamWatch {
            woken,
            coordinator: self.clone(),
            job: id,
            client: client.to_owned(),
        }))
    }

    /// What a reader of job `id` at `cursor` is to be shown now.
    pub fn stream_view(&self, id: Uuid, cursor: Cursor) -> StreamView {
        let state = self.lock();
        let buffer = state.streams.jobs.get(&id);
        let Some(job) = state.core.job_shared(&id) else {
            let gen = buffer.and_then(|b| b.ended_gen);
            return StreamView::Absent { gen };
        };
        if job.status.is_terminal() {
            let gen = buffer.filter(|b| b.attempt == job.attempts).map(|b| b.gen);
            return StreamView::Ended { job, gen };
        }
        let (gen, text) = match buffer.filter(|b| b.attempt == job.attempts) {
            Some(b) => (b.gen, b.text.as_str()),
            None => (0, ""),
        };
        let same = cursor.gen == gen && text.is_char_boundary(cursor.bytes);
        let from = if same { cursor.bytes } else { 0 };
        StreamView::Live {
            status: job.status,
            attempt: job.attempts,
            restart: !same && cursor.bytes > 0,
            text: text[from..].to_owned(),
            cursor: Cursor {
                gen,
                bytes: text.len(),
            },
        }
    }
}
