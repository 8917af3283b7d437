//! The durable store: one embedded SQLite database (WAL journal,
//! `synchronous=FULL`) holding jobs, pairing codes, trust entries and used
//! payment nonces.
//!
//! Two commit modes share the same SQL:
//! - [`CommitMode::PerEvent`]: `apply` writes the event's changes in one
//!   transaction before it returns. No thread; used for `:memory:` (the
//!   simulation and tests) and as the baseline the benchmark compares with.
//! - [`CommitMode::Group`]: `apply` only appends the changes to an in-memory
//!   batch, in event order; one writer thread commits everything pending in
//!   one transaction (one fsync), and [`Store::flush`] resolves once the
//!   changes appended before the call are on disk. HTTP handlers await it
//!   before answering, so a client never sees an answer that a crash could
//!   take back, while many concurrent events share one fsync.
//!
//! `synchronous=FULL` in WAL mode fsyncs the WAL at every commit, so a
//! committed transaction survives a power loss, not only a process crash.
//!
//! Jobs are stored whole as JSON, with the columns recovery and retention
//! query (status, deadline, created time) beside it. Job rows are found by
//! rowid, not by an index on the (random) job id: see [`rows`].
//!
//! [`Store::job`] reads one job where its latest version is: the changes
//! not yet taken by the writer, newest first; then the batch the writer is
//! committing (kept visible until its transaction ends); then its row. On a
//! WAL database the row is read through a second, read-only connection, so
//! a read never waits for the writer's fsync.

mod nonces;
mod reads;
mod rows;
mod schema;
#[cfg(test)]
mod tests;
mod writer;

use crate::core::trust::{Pairing, TrustEntry};
use crate::core::{Change, Job};
use crate::metrics::StoreMetrics;
use crate::store::{latest_job, Snapshot, Store, StoreError};
use reads::{each_job, load_all, load_pairings, load_trust, read_job};
use rows::JobRows;
use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{params, Connection, OptionalExtension};
use schema::{journal_mode, migrate, open_reader, schema_version};
use std::collections::{HashSet, VecDeque};
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{
    Arc, Condvar, Mutex, MutexGuard, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard,
};
use tokio::sync::{oneshot, Notify};
use uuid::Uuid;
use writer::{lock, run_writer, run_writer_task, spends_nonce, SPEND_NONCE};
use x402::replay::{NonceKey, NonceState, NonceStore, NonceUsed};

#[derive(Debug, thiserror::Error)]
pub enum SqliteError {
    #[error("sqlite: {0}")]
    Sql(#[from] rusqlite::Error),
    #[error("record encoding: {0}")]
    Json(#[from] serde_json::Error),
    #[error("database schema version {found} is newer than this build knows ({known})")]
    SchemaTooNew { found: usize, known: usize },
    #[error("an earlier write failed; the store refuses further writes: {0}")]
    Failed(String),
}

impl From<SqliteError> for StoreError {
    fn from(e: SqliteError) -> Self {
        StoreError(e.to_string())
    }
}

/// When `apply`'s changes reach the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitMode {
    /// In `apply`, one transaction per event.
    PerEvent,
    /// On the writer, one transaction for all pending events; await `flush`.
    Group,
}

/// Where the group-commit writer runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriterRuntime {
    /// An OS thread: fsync blocks, and a dedicated writer keeps it off the
    /// async workers. A real process.
    Thread,
    /// A task of the current tokio runtime: the simulation, where the
    /// writer's batches and the flush waits interleave with every other
    /// task under the seeded schedule.
    Task,
}

/// A write the store makes, for [`SqliteStore::crash_after`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreWrite {
    NonceReserved,
    NonceSpent,
    NonceReleased,
    /// One group (or per-event) commit of jobs, pairings and trust.
    Commit,
}

/// What runs at an armed crash point (see [`SqliteStore::crash_after`]).
type CrashHook = Box<dyn FnOnce() + Send>;

pub struct SqliteStore {
    shared: Arc<Shared>,
    mode: CommitMode,
    writer: Option<Writer>,
}

enum Writer {
    Thread(std::thread::JoinHandle<()>),
    Task(tokio::task::JoinHandle<()>),
}

struct Shared {
    /// The connection every write goes through.
    conn: Mutex<Connection>,
    /// Where each job's row is on `conn`'s database. Only a commit on
    /// `conn` changes it, while it holds that lock, so it always describes
    /// the database; apart from `conn` so a read ([`Shared::stored_job`])
    /// finds a row without waiting for the writer.
    rows: RwLock<JobRows>,
    /// A second, read-only connection for [`Store::job`], on a WAL database
    /// only. The writer holds `conn` through each commit's fsync (a few
    /// milliseconds on a disk, more under load), and a read through `conn`
    /// would wait for it and then hold up the next commit; WAL lets a
    /// reader see the last commit while the writer writes the next (p99
    /// 114 µs against 60 ms under commits, see
    /// `benches/results/store-job-read-2026-11-24.md`). A `:memory:`
    /// database (and the simulation's `memdb`) is not WAL and never fsyncs:
    /// reads there go through `conn`, which is also the only connection
    /// that sees a private `:memory:` database.
    reader: Option<Mutex<Connection>>,
    pending: Mutex<Pending>,
    /// Wakes the writer when changes are appended or the store closes.
    wake: Condvar,
    wake_task: Notify,
    durable: Mutex<Durable>,
    /// Set by `halt`: the process is dead, nothing more is written.
    halted: AtomicBool,
    /// A crash armed by `crash_after`.
    crash_point: Mutex<Option<(StoreWrite, CrashHook)>>,
    /// What a crash at the `store.writer.crash` fault point runs (the
    /// simulation's; see [`SqliteStore::on_buggify_crash`]).
    buggify_crash: Mutex<Option<CrashHook>>,
    /// Where group commits are recorded, once the coordinator gave it.
    metrics: OnceLock<StoreMetrics>,
}

#[derive(Default)]
struct Pending {
    changes: Vec<Change>,
    /// The batch the writer took from `changes` and is committing, until
    /// its transaction ends (and `rows` follows it): moved here under this
    /// lock, so a read finds each version here, in `changes` or in the
    /// database, never in between. An `Arc` so a read scans it without
    /// holding this lock (wrapping the `Vec` moves no change).
    committing: Option<Arc<Vec<Change>>>,
    /// Finished jobs retention forgot, to be deleted after `changes`.
    purge: Vec<Uuid>,
    /// `apply` calls so far; the sequence number of the latest one.
    appended: u64,
    /// `appended` when the writer last took the batch.
    taken: u64,
    closed: bool,
    /// The writer thread waits on `wake`: set by it, cleared by the `apply`
    /// that signals it. Closing and purging signal regardless.
    writer_waiting: bool,
}

#[derive(Default)]
struct Durable {
    /// Every `apply` up to this number is committed.
    upto: u64,
    /// Set once a commit fails; the store then refuses to claim durability.
    error: Option<String>,
    /// `flush` calls waiting for `upto` to reach their target, in call
    /// order; they are answered in that order, so the tasks they wake run
    /// in an order that does not depend on the runtime's internals.
    waiters: VecDeque<(u64, oneshot::Sender<Result<(), String>>)>,
}

impl SqliteStore {
    /// Opens (or creates) the database at `path`, `:memory:` for a private
    /// in-memory one. Files use group commit on a writer thread, `:memory:`
    /// commits per event.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, SqliteError> {
        Self::open_on(path, WriterRuntime::Thread)
    }

    /// Like [`SqliteStore::open`], with the group-commit writer on `writer`.
    /// A SQLite URI works too: `file:/name?vfs=memdb` is an in-memory
    /// database that a later open in the same process finds again.
    pub fn open_on(path: impl AsRef<Path>, writer: WriterRuntime) -> Result<Self, SqliteError> {
        let mode = if path.as_ref() == Path::new(":memory:") {
            CommitMode::PerEvent
        } else {
            CommitMode::Group
        };
        Self::open_inner(path.as_ref(), mode, writer)
    }

    pub fn open_in_memory() -> Result<Self, SqliteError> {
        Self::open_with(":memory:", CommitMode::PerEvent)
    }

    /// With a chosen commit mode (group commit on a writer thread).
    pub fn open_with(path: impl AsRef<Path>, mode: CommitMode) -> Result<Self, SqliteError> {
        Self::open_inner(path.as_ref(), mode, WriterRuntime::Thread)
    }

    fn open_inner(
        path: &Path,
        mode: CommitMode,
        writer: WriterRuntime,
    ) -> Result<Self, SqliteError> {
        let conn = if path == Path::new(":memory:") {
            Connection::open_in_memory()?
        } else {
            Connection::open(path)?
        };
        // WAL: readers never block the writer, and a commit is one append
        // plus one fsync of the WAL. FULL: that fsync happens at every commit.
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        migrate(&conn)?;
        let rows = JobRows::read(&conn)?;
        let reader = match journal_mode(&conn)?.eq_ignore_ascii_case("wal") {
            true => Some(Mutex::new(open_reader(path)?)),
            false => None,
        };
        let shared = Arc::new(Shared {
            conn: Mutex::new(conn),
            rows: RwLock::new(rows),
            reader,
            pending: Mutex::new(Pending::default()),
            wake: Condvar::new(),
            wake_task: Notify::new(),
            durable: Mutex::new(Durable::default()),
            halted: AtomicBool::new(false),
            crash_point: Mutex::new(None),
            buggify_crash: Mutex::new(None),
            metrics: OnceLock::new(),
        });
        let writer = match (mode, writer) {
            (CommitMode::PerEvent, _) => None,
            (CommitMode::Group, WriterRuntime::Task) => {
                Some(Writer::Task(tokio::spawn(run_writer_task(shared.clone()))))
            }
            (CommitMode::Group, WriterRuntime::Thread) => {
                let shared = shared.clone();
                // The one OS thread of the coordinator (see `WriterRuntime`).
                #[allow(clippy::disallowed_methods)]
                let handle = std::thread::Builder::new()
                    .name("sqlite-writer".into())
                    .spawn(move || run_writer(&shared))
                    .map_err(|e| SqliteError::Failed(format!("cannot start the writer: {e}")))?;
                Some(Writer::Thread(handle))
            }
        };
        Ok(Self {
            shared,
            mode,
            writer,
        })
    }

    pub fn mode(&self) -> CommitMode {
        self.mode
    }

    /// Records every later group commit's duration and batch size in
    /// `metrics` (set once; a second call changes nothing).
    pub fn record_metrics(&self, metrics: StoreMetrics) {
        let _ = self.shared.metrics.set(metrics);
    }

    /// The schema version the database is at.
    pub fn schema_version(&self) -> Result<usize, SqliteError> {
        schema_version(&self.shared.conn())
    }

    /// Deletes the finished jobs `ids` (those retention forgot), ordered
    /// after every change appended so far.
    pub fn purge_jobs(&self, ids: Vec<Uuid>) -> Result<(), StoreError> {
        if self.shared.is_halted() || ids.is_empty() {
            return Ok(());
        }
        match self.mode {
            CommitMode::PerEvent => Ok(self.shared.commit(&[], &ids)?),
            CommitMode::Group => {
                let mut pending = self.shared.pending();
                pending.purge.extend(ids);
                pending.appended += 1;
                self.shared.wake_writer();
                Ok(())
            }
        }
    }

    /// Forgets the payment nonces left reserved: at start, no commit is in
    /// flight, so a reservation is one whose process died before the spend
    /// (which is written with the job it bought). The payer may retry. If a
    /// facilitator had settled it in that window, its retry fails to settle
    /// and the facilitator's records are the reconciliation source. Returns
    /// how many were released.
    pub fn release_reserved_nonces(&self) -> Result<usize, SqliteError> {
        Ok(self
            .shared
            .conn()
            .execute("DELETE FROM payment_nonces WHERE state = 'reserved'", [])?)
    }

    /// Stops the store as a killed process stops: what is not committed
    /// yet is dropped, nothing more is written, waiting flushes never
    /// succeed. For the simulation's crashes (and tests of recovery).
    pub fn halt(&self) {
        self.shared.halt();
        if let Some(Writer::Task(task)) = &self.writer {
            task.abort();
        }
    }

    /// Arms a crash: right after the next write of kind `write`, the store
    /// halts (as [`SqliteStore::halt`]) and runs `then` within the write,
    /// so the simulation can kill the rest of the process at exactly that
    /// point, e.g. between a payment's nonce and its job.
    pub fn crash_after(&self, write: StoreWrite, then: impl FnOnce() + Send + 'static) {
        *lock(&self.shared.crash_point) = Some((write, Box::new(then)));
    }

    /// What the writer runs, after halting the store, when the
    /// `store.writer.crash` fault point fires between two steps of its turn
    /// (`crate::buggify`; only in an armed simulation). As with
    /// [`SqliteStore::crash_after`], `then` kills the rest of the process.
    pub fn on_buggify_crash(&self, then: impl FnOnce() + Send + 'static) {
        *lock(&self.shared.buggify_crash) = Some(Box::new(then));
    }
}

impl Drop for SqliteStore {
    /// Commits what is pending and stops the writer.
    fn drop(&mut self) {
        self.shared.pending().closed = true;
        self.shared.wake_writer();
        match self.writer.take() {
            Some(Writer::Thread(writer)) => {
                let _ = writer.join();
            }
            // A task cannot be joined from `drop`: commit here what it has
            // not, unless the store was halted.
            Some(Writer::Task(task)) => {
                task.abort();
                self.shared.commit_pending();
            }
            None => {}
        }
    }
}

impl Store for SqliteStore {
    fn apply(&self, changes: &[Change]) -> Result<(), StoreError> {
        if self.shared.is_halted() {
            // A killed process writes nothing; its memory is about to go.
            return Ok(());
        }
        match self.mode {
            CommitMode::PerEvent => {
                let written = self.shared.commit(changes, &[]);
                // Memory now holds what the disk does not: on failure
                // `flush` must not claim durability from here on.
                let appended = {
                    let mut pending = self.shared.pending();
                    pending.appended += 1;
                    pending.appended
                };
                let outcome = match &written {
                    Ok(()) => Ok(appended),
                    Err(e) => Err(e.to_string()),
                };
                self.shared.publish(outcome);
                if spends_nonce(changes) {
                    self.shared.wrote(StoreWrite::NonceSpent);
                }
                self.shared.wrote(StoreWrite::Commit);
                Ok(written?)
            }
            // Nothing to wait for: the writer only wakes for changes.
            CommitMode::Group if changes.is_empty() => Ok(()),
            CommitMode::Group => {
                let mut pending = self.shared.pending();
                if pending.closed {
                    return Err(SqliteError::Failed("store closed".into()).into());
                }
                pending.changes.extend_from_slice(changes);
                pending.appended += 1;
                self.shared.wake_task.notify_one();
                // Signal the thread only when it waits (a futex call each
                // time otherwise, several per job), and after unlocking, so
                // it does not wake into a held lock.
                if std::mem::take(&mut pending.writer_waiting) {
                    drop(pending);
                    self.shared.wake.notify_one();
                }
                Ok(())
            }
        }
    }

    fn flush(&self) -> Pin<Box<dyn Future<Output = Result<(), StoreError>> + Send + '_>> {
        Box::pin(async move {
            let closed = || StoreError::from(SqliteError::Failed("store closed".into()));
            let target = self.shared.pending().appended;
            let answer = {
                let mut d = lock(&self.shared.durable);
                if let Some(e) = &d.error {
                    return Err(SqliteError::Failed(e.clone()).into());
                }
                if d.upto >= target {
                    return Ok(());
                }
                if self.shared.is_halted() {
                    return Err(closed());
                }
                let (tx, rx) = oneshot::channel();
                d.waiters.push_back((target, tx));
                rx
            };
            match answer.await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(SqliteError::Failed(e).into()),
                Err(_) => Err(closed()),
            }
        })
    }

    /// What is committed; called at start, before any `apply`.
    fn load(&self) -> Result<Snapshot, StoreError> {
        Ok(load_all(&self.shared.conn())?)
    }

    /// Decodes one row at a time (`load_all` collects them).
    fn load_into(
        &self,
        job: &mut dyn FnMut(Job),
    ) -> Result<(Vec<Pairing>, Vec<TrustEntry>), StoreError> {
        let conn = self.shared.conn();
        each_job(&conn, job)?;
        Ok((load_pairings(&conn)?, load_trust(&conn)?))
    }

    /// Looks where a version can be, newest first (see
    /// [`Shared::unwritten_job`]). A purge takes effect when its
    /// transaction commits: until then a version of a job it deletes, still
    /// pending or being committed, reads as that version; afterwards the
    /// job reads as `None`. A halted store (a dead process) or one whose
    /// commit failed answers an error, as its `flush` does: what it holds
    /// in memory will never be on disk.
    fn job(&self, id: &Uuid) -> Result<Option<Arc<Job>>, StoreError> {
        if self.shared.is_halted() {
            return Err(SqliteError::Failed("store halted".into()).into());
        }
        if let Some(e) = &lock(&self.shared.durable).error {
            return Err(SqliteError::Failed(e.clone()).into());
        }
        if let Some(job) = self.shared.unwritten_job(id) {
            return Ok(Some(job));
        }
        Ok(self.shared.stored_job(id)?.map(Arc::new))
    }
}
