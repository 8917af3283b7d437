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

mod rows;

use crate::core::{Change, Job};
use crate::metrics::StoreMetrics;
use crate::store::{latest_job, Snapshot, Store, StoreError};
use crate::trust::{Pairing, TrustEntry};
use rows::{JobRows, RowChanges};
use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{params, Connection, OptionalExtension};
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
use x402::replay::{NonceKey, NonceState, NonceStore, NonceUsed};

/// Schema steps, applied in order at open; `schema_version` records how many ran.
const MIGRATIONS: &[&str] = &[
    // 1: jobs, pairing codes, trust entries, payment nonces.
    "CREATE TABLE jobs (
        id TEXT PRIMARY KEY,
        status TEXT NOT NULL,
        seq INTEGER NOT NULL,
        deadline_ms INTEGER,
        created_at_ms INTEGER NOT NULL,
        body TEXT NOT NULL
    );
    CREATE INDEX jobs_by_status ON jobs (status, deadline_ms);
    CREATE INDEX jobs_by_created ON jobs (created_at_ms);
    CREATE TABLE pairings (
        code TEXT PRIMARY KEY,
        user_id TEXT NOT NULL,
        expires_at_ms INTEGER NOT NULL,
        body TEXT NOT NULL
    );
    CREATE TABLE trust (
        user_id TEXT NOT NULL,
        provider_pubkey TEXT NOT NULL,
        paired_at_ms INTEGER NOT NULL,
        PRIMARY KEY (user_id, provider_pubkey)
    );
    CREATE TABLE payment_nonces (
        chain_id INTEGER NOT NULL,
        asset BLOB NOT NULL,
        payer BLOB NOT NULL,
        nonce BLOB NOT NULL,
        state TEXT NOT NULL,
        valid_before_s INTEGER NOT NULL,
        PRIMARY KEY (chain_id, asset, payer, nonce)
    );",
    // 2: job rows without the index on the id (a random UUID, so each new
    // job wrote one more random page); the store finds rows by rowid. And
    // without `jobs_by_status`, which no query used: one page less per
    // commit, two index writes less per status change.
    "CREATE TABLE jobs_by_rowid (
        id TEXT NOT NULL,
        status TEXT NOT NULL,
        seq INTEGER NOT NULL,
        deadline_ms INTEGER,
        created_at_ms INTEGER NOT NULL,
        body TEXT NOT NULL
    );
    INSERT INTO jobs_by_rowid (id, status, seq, deadline_ms, created_at_ms, body)
        SELECT id, status, seq, deadline_ms, created_at_ms, body FROM jobs ORDER BY seq;
    DROP TABLE jobs;
    ALTER TABLE jobs_by_rowid RENAME TO jobs;
    CREATE INDEX jobs_by_created ON jobs (created_at_ms);",
];

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
    /// Terminal jobs created before this time are to be deleted.
    purge_before_ms: Option<i64>,
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

    /// Deletes completed and failed jobs created before `before_ms` (the
    /// retention cut). Jobs reach a terminal state within minutes of their
    /// creation (pending timeout plus bounded leases), so creation time is
    /// the age that matters. Ordered after every change appended so far.
    pub fn purge_terminal_jobs(&self, before_ms: i64) -> Result<(), StoreError> {
        if self.shared.is_halted() {
            return Ok(());
        }
        match self.mode {
            CommitMode::PerEvent => Ok(self.shared.commit(&[], Some(before_ms))?),
            CommitMode::Group => {
                let mut pending = self.shared.pending();
                pending.purge_before_ms = Some(before_ms);
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
}

/// Marks a reserved payment nonce spent.
const SPEND_NONCE: &str = "UPDATE payment_nonces SET state = 'spent'
     WHERE chain_id = ?1 AND asset = ?2 AND payer = ?3 AND nonce = ?4";

/// Whether a batch spends a payment nonce (for [`StoreWrite::NonceSpent`]).
fn spends_nonce(changes: &[Change]) -> bool {
    changes.iter().any(|c| matches!(c, Change::NonceSpent(_)))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    fn conn(&self) -> MutexGuard<'_, Connection> {
        // Every use of the connection is a whole transaction or a single
        // statement; SQLite rolls back an unfinished one, so a panic
        // elsewhere leaves nothing half-written to recover from.
        lock(&self.conn)
    }

    fn pending(&self) -> MutexGuard<'_, Pending> {
        lock(&self.pending)
    }

    fn rows(&self) -> RwLockReadGuard<'_, JobRows> {
        self.rows.read().unwrap_or_else(|p| p.into_inner())
    }

    fn rows_mut(&self) -> RwLockWriteGuard<'_, JobRows> {
        // Changed only by `committed`, which cannot stop half-way.
        self.rows.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes `changes`, then the retention cut if any, in one transaction.
    fn commit(&self, changes: &[Change], purge_before_ms: Option<i64>) -> Result<(), SqliteError> {
        let mut conn = self.conn();
        let mut moved = RowChanges::default();
        let tx = conn.transaction()?;
        // A read lock: readers go on finding rows meanwhile; only this
        // thread, holding `conn`, ever changes the map.
        write_changes(&tx, &self.rows(), changes, &mut moved)?;
        if let Some(before_ms) = purge_before_ms {
            rows::purge(&tx, before_ms, &mut moved)?;
        }
        tx.commit()?;
        self.rows_mut().committed(moved);
        Ok(())
    }

    /// Job `id`'s latest version among the changes not committed yet: those
    /// appended since the writer's last take, newest first, then the batch
    /// it is committing. The order matters: a version only ever moves from
    /// `changes` to `committing` to the database, so a read that looks in
    /// that order cannot miss one that moves while it looks.
    fn unwritten_job(&self, id: &Uuid) -> Option<Arc<Job>> {
        let committing = {
            let pending = self.pending();
            if let Some(job) = latest_job(&pending.changes, id) {
                return Some(job);
            }
            pending.committing.clone()?
        };
        latest_job(&committing, id)
    }

    /// Job `id` as its row holds it; `None` without a row (never written,
    /// or deleted by retention).
    fn stored_job(&self, id: &Uuid) -> Result<Option<Job>, SqliteError> {
        let Some(rowid) = self.rows().get(id) else {
            return Ok(None);
        };
        // The map may be a commit ahead of a purge that deletes the row, or
        // behind a later insert reusing its rowid: the row's id is checked,
        // and a missing row reads as deleted.
        match &self.reader {
            Some(reader) => read_job(&lock(reader), rowid, id),
            None => read_job(&self.conn(), rowid, id),
        }
    }

    fn is_halted(&self) -> bool {
        self.halted.load(Ordering::SeqCst)
    }

    fn wake_writer(&self) {
        self.wake.notify_one();
        self.wake_task.notify_one();
    }

    fn halt(&self) {
        self.halted.store(true, Ordering::SeqCst);
        {
            let mut pending = self.pending();
            *pending = Pending::default();
            pending.closed = true;
        }
        lock(&self.durable).waiters.clear();
        self.wake_writer();
    }

    /// Called after each write: fires an armed crash of this kind.
    fn wrote(&self, write: StoreWrite) {
        let mut point = lock(&self.crash_point);
        if point.as_ref().is_some_and(|(kind, _)| *kind == write) {
            let (_, then) = point.take().expect("checked above");
            drop(point);
            self.halt();
            then();
        }
    }

    /// Records a commit's outcome and answers the flushes it satisfies.
    fn publish(&self, result: Result<u64, String>) {
        let mut d = lock(&self.durable);
        match result {
            Ok(upto) => d.upto = d.upto.max(upto),
            Err(e) => {
                d.error.get_or_insert(e);
            }
        }
        let (upto, error) = (d.upto, d.error.clone());
        let waiters = std::mem::take(&mut d.waiters);
        for (target, tx) in waiters {
            match &error {
                Some(e) => {
                    let _ = tx.send(Err(e.clone()));
                }
                None if target <= upto => {
                    let _ = tx.send(Ok(()));
                }
                None => d.waiters.push_back((target, tx)),
            }
        }
    }

    /// Commits everything pending in one transaction; `false` once closed.
    fn commit_pending(&self) -> bool {
        let (changes, purge_before_ms, upto, events) = {
            let mut pending = self.pending();
            if self.is_halted() {
                return false;
            }
            if pending.changes.is_empty() && pending.purge_before_ms.is_none() {
                return !pending.closed;
            }
            let events = pending.appended - pending.taken;
            pending.taken = pending.appended;
            let changes = Arc::new(std::mem::take(&mut pending.changes));
            pending.committing = Some(Arc::clone(&changes));
            (
                changes,
                pending.purge_before_ms.take(),
                pending.appended,
                events,
            )
        };
        // tokio's clock: monotonic on the writer thread (no runtime there),
        // virtual under the simulation, where the commit takes no time.
        let started = tokio::time::Instant::now();
        let result = self.commit(&changes, purge_before_ms);
        // The database answers for the batch now, and before the flushes
        // are answered: once `flush` resolves, reads come from the rows (a
        // purge in the batch has taken effect). A failed commit leaves the
        // rows older, for the instant until `publish` makes reads fail.
        self.pending().committing = None;
        match &result {
            Ok(()) => {
                if let Some(metrics) = self.metrics.get() {
                    metrics.flushed(events, started.elapsed());
                }
            }
            Err(e) => tracing::error!(error = %e, "group commit failed"),
        }
        self.publish(result.map(|()| upto).map_err(|e| e.to_string()));
        if spends_nonce(&changes) {
            self.wrote(StoreWrite::NonceSpent);
        }
        self.wrote(StoreWrite::Commit);
        true
    }

    fn has_work(&self) -> bool {
        let pending = self.pending();
        pending.closed || !pending.changes.is_empty() || pending.purge_before_ms.is_some()
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

/// The writer thread: commits all pending changes in one transaction,
/// publishes how far it got, and sleeps until more arrive.
fn run_writer(shared: &Shared) {
    loop {
        {
            let mut pending = shared.pending();
            while pending.changes.is_empty() && pending.purge_before_ms.is_none() && !pending.closed
            {
                pending.writer_waiting = true;
                pending = shared.wake.wait(pending).unwrap_or_else(|p| p.into_inner());
            }
            pending.writer_waiting = false;
        }
        if !shared.commit_pending() {
            return;
        }
    }
}

/// The writer as a task: the same commits, woken through a `Notify` (a
/// wake-up that comes while it commits is kept as a permit, never lost).
async fn run_writer_task(shared: Arc<Shared>) {
    loop {
        while !shared.has_work() {
            shared.wake_task.notified().await;
        }
        if !shared.commit_pending() {
            return;
        }
    }
}

fn schema_version(conn: &Connection) -> Result<usize, SqliteError> {
    let v: Option<i64> = conn
        .query_row("SELECT MAX(version) FROM schema_version", [], |r| r.get(0))
        .optional()?
        .flatten();
    Ok(v.unwrap_or(0) as usize)
}

/// Brings the schema up to date; each step and its version row commit together.
fn migrate(conn: &Connection) -> Result<(), SqliteError> {
    conn.execute_batch("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")?;
    let found = schema_version(conn)?;
    if found > MIGRATIONS.len() {
        return Err(SqliteError::SchemaTooNew {
            found,
            known: MIGRATIONS.len(),
        });
    }
    for (i, step) in MIGRATIONS.iter().enumerate().skip(found) {
        let tx = conn.unchecked_transaction()?;
        tx.execute_batch(step)?;
        tx.execute("INSERT INTO schema_version (version) VALUES (?1)", [i + 1])?;
        tx.commit()?;
    }
    Ok(())
}

/// Room for a typical job's JSON (a completed one with its receipt is
/// about 1 KiB); larger ones grow the buffer once.
const JOB_JSON_BYTES_INITIAL: usize = 2048;

/// Writes the latest version of each record in `changes`; a job goes to
/// its row (found in `rows`) or a new one (noted in `moved`).
fn write_changes(
    tx: &rusqlite::Transaction<'_>,
    rows: &JobRows,
    changes: &[Change],
    moved: &mut RowChanges,
) -> Result<(), SqliteError> {
    let mut insert_stmt = tx.prepare_cached(rows::INSERT)?;
    let mut update_stmt = tx.prepare_cached(rows::UPDATE)?;
    let mut pairing_stmt = tx.prepare_cached(
        "INSERT INTO pairings (code, user_id, expires_at_ms, body) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (code) DO UPDATE SET body = excluded.body",
    )?;
    let mut trust_stmt = tx.prepare_cached(
        "INSERT INTO trust (user_id, provider_pubkey, paired_at_ms) VALUES (?1, ?2, ?3)
         ON CONFLICT (user_id, provider_pubkey) DO UPDATE SET paired_at_ms = excluded.paired_at_ms",
    )?;
    let mut spend_stmt = tx.prepare_cached(SPEND_NONCE)?;
    // A batch often holds several versions of one record (a job committed,
    // assigned, accepted and completed between two commits); only the last
    // is written. Upserts of distinct keys commute, so the order is free.
    let mut seen: HashSet<Key<'_>> = HashSet::with_capacity(changes.len());
    // One buffer for every job's JSON in the batch: `to_string` would start
    // each at 128 bytes and grow it several times.
    let mut body = Vec::with_capacity(JOB_JSON_BYTES_INITIAL);
    let mut id = uuid::Uuid::encode_buffer();
    for change in changes.iter().rev() {
        if !seen.insert(Key::of(change)) {
            continue;
        }
        match change {
            Change::Job(job) => {
                body.clear();
                serde_json::to_writer(&mut body, &**job)?;
                // Bound as TEXT, as before; serde_json writes UTF-8 only,
                // so the bytes need no second check here.
                let text = ToSqlOutput::Borrowed(ValueRef::Text(&body));
                let id_text = &*job.id.hyphenated().encode_lower(&mut id);
                let updated = match rows.get(&job.id) {
                    Some(rowid) => update_stmt.execute(params![
                        job.status.as_str(),
                        job.seq as i64,
                        job.deadline_ms,
                        text,
                        rowid,
                        id_text,
                    ])?,
                    None => 0,
                };
                if updated == 0 {
                    insert_stmt.execute(params![
                        id_text,
                        job.status.as_str(),
                        job.seq as i64,
                        job.deadline_ms,
                        job.created_at_ms,
                        text,
                    ])?;
                    moved.inserted(tx, job.id);
                }
            }
            Change::Pairing(p) => {
                pairing_stmt.execute(params![
                    p.code,
                    p.user_id,
                    p.expires_at_ms,
                    serde_json::to_string(p)?
                ])?;
            }
            Change::Trust(e) => {
                trust_stmt.execute(params![e.user_id, e.provider_pubkey, e.paired_at_ms])?;
            }
            Change::NonceSpent(key) => {
                spend_stmt.execute(params![
                    key.chain_id as i64,
                    &key.asset.0[..],
                    &key.from.0[..],
                    &key.nonce.0[..]
                ])?;
            }
        }
    }
    Ok(())
}

/// The identity of a stored record.
#[derive(PartialEq, Eq, Hash)]
enum Key<'a> {
    Job(uuid::Uuid),
    Pairing(&'a str),
    Trust(&'a str, &'a str),
    Nonce(&'a NonceKey),
}

impl<'a> Key<'a> {
    fn of(change: &'a Change) -> Self {
        match change {
            Change::Job(job) => Key::Job(job.id),
            Change::Pairing(p) => Key::Pairing(&p.code),
            Change::Trust(e) => Key::Trust(&e.user_id, &e.provider_pubkey),
            Change::NonceSpent(key) => Key::Nonce(key),
        }
    }
}

/// The journal mode `conn`'s database is in (`wal`, `memory`, ...).
fn journal_mode(conn: &Connection) -> Result<String, SqliteError> {
    Ok(conn.query_row("PRAGMA journal_mode", [], |r| r.get(0))?)
}

/// The read-only connection for [`Store::job`] (see [`Shared::reader`]);
/// opened after `migrate`, so the schema is there.
fn open_reader(path: &Path) -> Result<Connection, SqliteError> {
    use rusqlite::OpenFlags;
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
        | OpenFlags::SQLITE_OPEN_URI
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags)?;
    // A WAL reader waits only while a checkpoint resets the log.
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    Ok(conn)
}

/// A job from the `body` column a query selected first: how every stored
/// job is read back, by `load_all` and by `read_job`.
fn job_of(row: &rusqlite::Row<'_>) -> Result<Job, SqliteError> {
    let body = row.get_ref(0)?;
    let text = body
        .as_str()
        .map_err(|e| rusqlite::Error::FromSqlConversionFailure(0, body.data_type(), Box::new(e)))?;
    Ok(serde_json::from_str(text)?)
}

/// Job `id` from row `rowid`; `None` if that row is gone or holds another job.
fn read_job(conn: &Connection, rowid: i64, id: &Uuid) -> Result<Option<Job>, SqliteError> {
    let mut stmt = conn.prepare_cached(rows::SELECT)?;
    let mut text = Uuid::encode_buffer();
    let id_text = &*id.hyphenated().encode_lower(&mut text);
    let mut found = stmt.query(params![rowid, id_text])?;
    found.next()?.map(job_of).transpose()
}

fn load_all(conn: &Connection) -> Result<Snapshot, SqliteError> {
    let mut jobs = Vec::new();
    each_job(conn, &mut |job| jobs.push(job))?;
    Ok(Snapshot {
        jobs,
        pairings: load_pairings(conn)?,
        trust: load_trust(conn)?,
    })
}

/// Every stored job, decoded one row at a time, in commit order.
fn each_job(conn: &Connection, job: &mut dyn FnMut(Job)) -> Result<(), SqliteError> {
    let mut stmt = conn.prepare("SELECT body FROM jobs ORDER BY seq")?;
    let mut rows = stmt.query([])?;
    while let Some(row) = rows.next()? {
        job(job_of(row)?);
    }
    Ok(())
}

fn load_pairings(conn: &Connection) -> Result<Vec<Pairing>, SqliteError> {
    let mut pairings = Vec::new();
    let mut stmt = conn.prepare("SELECT body FROM pairings ORDER BY code")?;
    for body in stmt.query_map([], |r| r.get::<_, String>(0))? {
        pairings.push(serde_json::from_str::<Pairing>(&body?)?);
    }
    Ok(pairings)
}

fn load_trust(conn: &Connection) -> Result<Vec<TrustEntry>, SqliteError> {
    let mut stmt = conn.prepare(
        "SELECT user_id, provider_pubkey, paired_at_ms FROM trust ORDER BY user_id, provider_pubkey",
    )?;
    let trust = stmt
        .query_map([], |r| {
            Ok(TrustEntry {
                user_id: r.get(0)?,
                provider_pubkey: r.get(1)?,
                paired_at_ms: r.get(2)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(trust)
}

impl Store for SqliteStore {
    fn apply(&self, changes: &[Change]) -> Result<(), StoreError> {
        if self.shared.is_halted() {
            // A killed process writes nothing; its memory is about to go.
            return Ok(());
        }
        match self.mode {
            CommitMode::PerEvent => {
                let written = self.shared.commit(changes, None);
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

/// Used payment nonces, on the same database. Each call is one statement in
/// autocommit mode, so it is durable (`synchronous=FULL`) when it returns: a
/// nonce marked used stays used across a crash. These calls block on the
/// disk; payments are one per commit and the fsync is short.
impl NonceStore for SqliteStore {
    fn check_and_mark(&self, key: NonceKey, valid_before: u64) -> Result<(), NonceUsed> {
        if self.shared.is_halted() {
            return Err(NonceUsed);
        }
        let conn = self.shared.conn();
        // The primary key makes this atomic: of two inserts of one key, one
        // changes nothing.
        let inserted = conn.execute(
            "INSERT INTO payment_nonces (chain_id, asset, payer, nonce, state, valid_before_s)
             VALUES (?1, ?2, ?3, ?4, 'reserved', ?5) ON CONFLICT DO NOTHING",
            params![
                key.chain_id as i64,
                &key.asset.0[..],
                &key.from.0[..],
                &key.nonce.0[..],
                valid_before.min(i64::MAX as u64) as i64
            ],
        );
        drop(conn);
        match inserted {
            Ok(1) => {
                self.shared.wrote(StoreWrite::NonceReserved);
                Ok(())
            }
            Ok(_) => Err(NonceUsed),
            Err(e) => {
                // Refusing is the safe answer when the store cannot record the nonce.
                tracing::error!(error = %e, "payment nonce store write failed");
                Err(NonceUsed)
            }
        }
    }

    fn mark_spent(&self, key: &NonceKey) {
        if self.shared.is_halted() {
            return;
        }
        let r = self.shared.conn().execute(
            SPEND_NONCE,
            params![
                key.chain_id as i64,
                &key.asset.0[..],
                &key.from.0[..],
                &key.nonce.0[..]
            ],
        );
        if let Err(e) = r {
            tracing::error!(error = %e, "payment nonce store write failed");
        }
        self.shared.wrote(StoreWrite::NonceSpent);
    }

    fn release(&self, key: &NonceKey) {
        if self.shared.is_halted() {
            return;
        }
        let r = self.shared.conn().execute(
            "DELETE FROM payment_nonces WHERE state = 'reserved'
             AND chain_id = ?1 AND asset = ?2 AND payer = ?3 AND nonce = ?4",
            params![
                key.chain_id as i64,
                &key.asset.0[..],
                &key.from.0[..],
                &key.nonce.0[..]
            ],
        );
        if let Err(e) = r {
            tracing::error!(error = %e, "payment nonce store write failed");
        }
        self.shared.wrote(StoreWrite::NonceReleased);
    }

    fn purge_expired(&self, now_seconds: u64) {
        let r = self.shared.conn().execute(
            "DELETE FROM payment_nonces WHERE valid_before_s < ?1",
            [now_seconds.min(i64::MAX as u64) as i64],
        );
        if let Err(e) = r {
            tracing::error!(error = %e, "payment nonce purge failed");
        }
    }

    fn state(&self, key: &NonceKey) -> Option<NonceState> {
        let state: Option<String> = self
            .shared
            .conn()
            .query_row(
                "SELECT state FROM payment_nonces
                 WHERE chain_id = ?1 AND asset = ?2 AND payer = ?3 AND nonce = ?4",
                params![
                    key.chain_id as i64,
                    &key.asset.0[..],
                    &key.from.0[..],
                    &key.nonce.0[..]
                ],
                |r| r.get(0),
            )
            .optional()
            .ok()
            .flatten();
        match state.as_deref() {
            Some("spent") => Some(NonceState::Spent),
            Some(_) => Some(NonceState::Reserved),
            None => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::core::Core;
    use protocol::api::{JobStatus, Tier};
    use rand::SeedableRng;
    use x402::evm::{Address, Bytes32};

    /// Changes from a real core: two jobs and a claimed pairing.
    fn changes() -> Vec<Change> {
        let mut core = Core::new(
            Config::default(),
            rand_chacha::ChaCha20Rng::seed_from_u64(1),
        );
        for user in ["a", "b"] {
            let body = serde_json::json!({"job_type": "TASK", "user_id": user,
                "payload": {"task_type": "summarize", "input": "x"}});
            let s = crate::validate::submission(&body, &core.config().limits).unwrap();
            let payment = crate::core::Payment {
                payment_ref: "pay-1".into(),
                paid_with: crate::core::PaidWith {
                    nonce: key(user.len() as u8),
                    response_header: "e30=".into(),
                },
            };
            core.commit(s, Tier::Cheap, Some(payment), 1_000).unwrap();
        }
        let code = core.create_pairing("a", "ip", 1_000).unwrap().code;
        core.claim_pairing(&code, Ok("0xkey"), "ip", 1_001).unwrap();
        core.take_changes()
    }

    fn sorted(mut s: Snapshot) -> Snapshot {
        s.jobs.sort_by_key(|j| j.seq);
        s
    }

    fn expected(changes: &[Change]) -> Snapshot {
        let m = crate::store::MemoryStore::default();
        m.apply(changes).unwrap();
        sorted(m.load().unwrap())
    }

    /// The persisted fields (the in-memory `epoch` is not stored).
    fn persisted(jobs: &[Job]) -> serde_json::Value {
        serde_json::to_value(jobs).unwrap()
    }

    fn assert_same(a: &Snapshot, b: &Snapshot) {
        assert_eq!(persisted(&a.jobs), persisted(&b.jobs));
        assert_eq!(a.pairings, b.pairings);
        assert_eq!(a.trust, b.trust);
    }

    #[test]
    fn round_trip_in_memory() {
        let store = SqliteStore::open(":memory:").unwrap();
        assert_eq!(store.mode(), CommitMode::PerEvent);
        let changes = changes();
        store.apply(&changes).unwrap();
        let loaded = sorted(store.load().unwrap());
        assert_eq!(loaded.jobs.len(), 2);
        assert_eq!(loaded.jobs[0].payment_ref.as_deref(), Some("pay-1"));
        assert_eq!(loaded.jobs[0].status, JobStatus::Pending);
        assert_same(&loaded, &expected(&changes));
    }

    #[test]
    fn later_versions_replace_earlier_ones() {
        let store = SqliteStore::open_in_memory().unwrap();
        let changes = changes();
        store.apply(&changes).unwrap();
        let Change::Job(job) = &changes[0] else {
            panic!("a job first")
        };
        let mut job = job.clone();
        let changed = Arc::make_mut(&mut job);
        changed.status = JobStatus::Failed;
        changed.deadline_ms = None;
        store.apply(&[Change::Job(job.clone())]).unwrap();
        let loaded = store.load().unwrap();
        assert_eq!(loaded.jobs.len(), 2);
        assert!(loaded
            .jobs
            .iter()
            .any(|j| persisted(std::slice::from_ref(j)) == persisted(&[(*job).clone()])));
    }

    #[test]
    fn migrations_are_idempotent() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.db");
        for _ in 0..3 {
            let store = SqliteStore::open(&path).unwrap();
            assert_eq!(store.schema_version().unwrap(), MIGRATIONS.len());
        }
        let conn = Connection::open(&path).unwrap();
        let rows: i64 = conn
            .query_row("SELECT COUNT(*) FROM schema_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows as usize, MIGRATIONS.len());
        let mode: String = conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
    }

    #[test]
    fn a_newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.db");
        drop(SqliteStore::open(&path).unwrap());
        Connection::open(&path)
            .unwrap()
            .execute("INSERT INTO schema_version (version) VALUES (99)", [])
            .unwrap();
        assert!(matches!(
            SqliteStore::open(&path),
            Err(SqliteError::SchemaTooNew { found: 99, .. })
        ));
    }

    #[tokio::test]
    async fn group_commit_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.db");
        let changes = changes();
        {
            let store = SqliteStore::open(&path).unwrap();
            assert_eq!(store.mode(), CommitMode::Group);
            for change in &changes {
                store.apply(std::slice::from_ref(change)).unwrap();
            }
            store.flush().await.unwrap();
            // Read through a second connection: committed, not just buffered.
            let other = SqliteStore::open_with(&path, CommitMode::PerEvent).unwrap();
            assert_same(&sorted(other.load().unwrap()), &expected(&changes));
            std::mem::forget(store); // like a crash: no orderly close
        }
        let store = SqliteStore::open(&path).unwrap();
        assert_same(&sorted(store.load().unwrap()), &expected(&changes));
        // And each job reads back by id: the row map was read at open.
        for job in jobs_in(&changes) {
            let read = store.job(&job.id).unwrap().expect("written before");
            assert_eq!(persisted(&[(*read).clone()]), persisted(&[(*job).clone()]));
        }
    }

    /// The writer thread is signalled only while it waits: an append after
    /// each commit (the writer asleep again) must still wake it, every time,
    /// and appends from several threads at once must all get committed.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_append_wakes_the_sleeping_writer() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(SqliteStore::open(dir.path().join("w.db")).unwrap());
        let changes = changes();
        let within = std::time::Duration::from_secs(10);
        for _ in 0..50 {
            store.apply(&changes[..1]).unwrap();
            tokio::time::timeout(within, store.flush())
                .await
                .expect("the writer woke")
                .unwrap();
        }
        // Real threads: appends racing the writer is the point here.
        #[allow(clippy::disallowed_methods)]
        let appenders: Vec<_> = (0..4)
            .map(|_| {
                let (store, changes) = (store.clone(), changes.clone());
                std::thread::spawn(move || {
                    for _ in 0..200 {
                        store.apply(&changes).unwrap();
                    }
                })
            })
            .collect();
        for appender in appenders {
            appender.join().unwrap();
        }
        tokio::time::timeout(within, store.flush())
            .await
            .expect("the writer woke")
            .unwrap();
        assert_eq!(lock(&store.shared.durable).upto, 50 + 4 * 200);
    }

    #[test]
    fn per_event_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.db");
        let changes = changes();
        let store = SqliteStore::open_with(&path, CommitMode::PerEvent).unwrap();
        store.apply(&changes).unwrap();
        drop(store);
        let store = SqliteStore::open_with(&path, CommitMode::PerEvent).unwrap();
        assert_same(&sorted(store.load().unwrap()), &expected(&changes));
    }

    #[tokio::test]
    async fn an_empty_apply_does_not_hold_up_flush() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("c.db")).unwrap();
        store.apply(&[]).unwrap();
        store.flush().await.unwrap();
    }

    #[tokio::test]
    async fn purge_deletes_old_terminal_jobs_only() {
        let store = SqliteStore::open_in_memory().unwrap();
        let changes = changes();
        store.apply(&changes).unwrap();
        let Change::Job(job) = &changes[0] else {
            panic!("a job first")
        };
        let mut done = job.clone();
        Arc::make_mut(&mut done).status = JobStatus::Completed;
        store.apply(&[Change::Job(done)]).unwrap();
        store.purge_terminal_jobs(1_001).unwrap();
        let loaded = store.load().unwrap();
        assert_eq!(loaded.jobs.len(), 1);
        assert_eq!(loaded.jobs[0].status, JobStatus::Pending);
    }

    #[tokio::test]
    async fn group_purge_is_ordered_after_earlier_changes() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("c.db")).unwrap();
        let changes = changes();
        store.apply(&changes).unwrap();
        let Change::Job(job) = &changes[0] else {
            panic!("a job first")
        };
        let mut done = job.clone();
        Arc::make_mut(&mut done).status = JobStatus::Failed;
        store.apply(&[Change::Job(done)]).unwrap();
        store.purge_terminal_jobs(1_001).unwrap();
        store.flush().await.unwrap();
        let loaded = store.load().unwrap();
        assert_eq!(loaded.jobs.len(), 1);
        assert_eq!(loaded.jobs[0].status, JobStatus::Pending);
        assert_eq!(loaded.pairings.len(), 1);
    }

    #[tokio::test]
    async fn a_failed_write_is_never_reported_durable() {
        let dir = tempfile::tempdir().unwrap();
        for store in [
            SqliteStore::open_in_memory().unwrap(),
            SqliteStore::open(dir.path().join("c.db")).unwrap(),
        ] {
            store.flush().await.unwrap();
            store
                .shared
                .conn()
                .execute_batch("DROP TABLE jobs")
                .unwrap();
            let applied = store.apply(&changes());
            assert_eq!(applied.is_err(), store.mode() == CommitMode::PerEvent);
            assert!(store.flush().await.is_err());
            // And it stays refused: later changes depend on the lost ones.
            let _ = store.apply(&changes()[..1]);
            assert!(store.flush().await.is_err());
        }
    }

    fn key(n: u8) -> NonceKey {
        NonceKey {
            chain_id: 84532,
            asset: Address([1; 20]),
            from: Address([2; 20]),
            nonce: Bytes32([n; 32]),
        }
    }

    #[test]
    fn used_nonces_stay_used_across_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.db");
        {
            let s = SqliteStore::open(&path).unwrap();
            assert_eq!(s.check_and_mark(key(1), 100), Ok(()));
            assert_eq!(s.check_and_mark(key(1), 100), Err(NonceUsed));
            s.mark_spent(&key(1));
            s.release(&key(1));
            assert_eq!(s.check_and_mark(key(2), 100), Ok(()));
            assert_eq!(s.check_and_mark(key(3), 100), Ok(()));
            s.release(&key(3));
            std::mem::forget(s);
        }
        let s = SqliteStore::open(&path).unwrap();
        assert_eq!(s.state(&key(1)), Some(NonceState::Spent));
        assert_eq!(s.check_and_mark(key(1), 100), Err(NonceUsed));
        assert_eq!(s.state(&key(2)), Some(NonceState::Reserved));
        assert_eq!(s.state(&key(3)), None);
        s.purge_expired(101);
        assert_eq!(s.state(&key(1)), None);
    }

    /// A version of `job` with another status.
    fn with_status(job: &Arc<Job>, status: JobStatus) -> Change {
        let mut job = job.clone();
        Arc::make_mut(&mut job).status = status;
        Change::Job(job)
    }

    fn job_rows(path: &Path) -> i64 {
        Connection::open(path)
            .unwrap()
            .query_row("SELECT COUNT(*) FROM jobs", [], |r| r.get(0))
            .unwrap()
    }

    /// Rows are found by rowid, so the map must survive a restart: a later
    /// version of a job written after reopening replaces its row, never
    /// adds a second one (load would then give the job twice).
    #[tokio::test]
    async fn a_reopened_store_updates_the_rows_it_wrote_before() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.db");
        let changes = changes();
        let Change::Job(job) = &changes[0] else {
            panic!("a job first")
        };
        SqliteStore::open(&path).unwrap().apply(&changes).unwrap();
        for status in [JobStatus::Assigned, JobStatus::Completed] {
            let store = SqliteStore::open(&path).unwrap();
            store.apply(&[with_status(job, status)]).unwrap();
            store.flush().await.unwrap();
        }
        assert_eq!(job_rows(&path), 2);
        let loaded = SqliteStore::open(&path).unwrap().load().unwrap();
        assert_eq!(loaded.jobs.len(), 2);
        let stored = loaded.jobs.iter().find(|j| j.id == job.id).unwrap();
        assert_eq!(stored.status, JobStatus::Completed);
    }

    /// A database written before schema step 2 (the id as primary key) is
    /// carried over whole, and its jobs are then updated in place.
    #[test]
    fn step_two_carries_over_the_jobs_of_step_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.db");
        let changes = changes();
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(
                "CREATE TABLE schema_version (version INTEGER NOT NULL);
                 INSERT INTO schema_version (version) VALUES (1);",
            )
            .unwrap();
            conn.execute_batch(MIGRATIONS[0]).unwrap();
            let mut stmt = conn
                .prepare(
                    "INSERT INTO jobs (id, status, seq, deadline_ms, created_at_ms, body)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )
                .unwrap();
            for change in &changes {
                if let Change::Job(j) = change {
                    stmt.execute(params![
                        j.id.to_string(),
                        j.status.as_str(),
                        j.seq as i64,
                        j.deadline_ms,
                        j.created_at_ms,
                        serde_json::to_string(&**j).unwrap()
                    ])
                    .unwrap();
                }
            }
        }
        let store = SqliteStore::open_with(&path, CommitMode::PerEvent).unwrap();
        assert_eq!(store.schema_version().unwrap(), MIGRATIONS.len());
        let jobs = |s: &SqliteStore| sorted(s.load().unwrap()).jobs;
        assert_eq!(
            persisted(&jobs(&store)),
            persisted(&expected(&changes).jobs)
        );
        let last = changes.iter().rev().find_map(|c| match c {
            Change::Job(j) => Some(j),
            _ => None,
        });
        let job = last.expect("jobs");
        store.apply(&[with_status(job, JobStatus::Failed)]).unwrap();
        assert_eq!(job_rows(&path), 2);
        let failed = jobs(&store).into_iter().find(|j| j.id == job.id).unwrap();
        assert_eq!(failed.status, JobStatus::Failed);
    }

    /// The rows a purge deletes leave the map; a failed transaction leaves
    /// it as the database is.
    #[test]
    fn the_row_map_follows_committed_transactions_only() {
        let store = SqliteStore::open_in_memory().unwrap();
        let changes = changes();
        store.apply(&changes).unwrap();
        assert_eq!(store.shared.rows().len(), 2);
        let Change::Job(job) = &changes[0] else {
            panic!("a job first")
        };
        store
            .apply(&[with_status(job, JobStatus::Completed)])
            .unwrap();
        store.purge_terminal_jobs(1_001).unwrap();
        assert_eq!(store.shared.rows().len(), 1);
        // Written again after its purge (as the upsert did), it is a new row.
        store.apply(&[with_status(job, JobStatus::Failed)]).unwrap();
        assert_eq!(store.shared.rows().len(), 2);
        assert_eq!(store.load().unwrap().jobs.len(), 2);

        let store = SqliteStore::open_in_memory().unwrap();
        store
            .shared
            .conn()
            .execute_batch(
                "CREATE TRIGGER no_jobs BEFORE INSERT ON jobs BEGIN SELECT RAISE(ABORT, 'no'); END",
            )
            .unwrap();
        assert!(store.apply(&changes).is_err());
        assert_eq!(store.shared.rows().len(), 0);
    }

    /// The jobs in `changes`, latest version of each, in first-seen order.
    fn jobs_in(changes: &[Change]) -> Vec<Arc<Job>> {
        let mut ids: Vec<Uuid> = Vec::new();
        for change in changes {
            if let Change::Job(job) = change {
                if !ids.contains(&job.id) {
                    ids.push(job.id);
                }
            }
        }
        ids.iter()
            .filter_map(|id| latest_job(changes, id))
            .collect()
    }

    /// Waits (on the writer thread, which runs on its own) until `done`.
    fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
        for _ in 0..10_000 {
            if done() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        panic!("waited 10 s for {what}");
    }

    /// The simulation's database (`memdb`) is not WAL: its reads go through
    /// the one connection, as the comment on `Shared::reader` says.
    #[tokio::test]
    async fn only_a_wal_database_gets_a_read_connection() {
        let memdb = SqliteStore::open_on("file:/store-job-memdb?vfs=memdb", WriterRuntime::Task);
        assert!(memdb.unwrap().shared.reader.is_none());
        assert!(SqliteStore::open_in_memory()
            .unwrap()
            .shared
            .reader
            .is_none());
        let dir = tempfile::tempdir().unwrap();
        let file = SqliteStore::open(dir.path().join("c.db")).unwrap();
        assert!(file.shared.reader.is_some());
    }

    /// A job read back from its row is what `load` gives back, for both
    /// commit modes; an id never stored reads as `None`.
    #[tokio::test]
    async fn a_committed_job_reads_as_load_gives_it() {
        let dir = tempfile::tempdir().unwrap();
        for store in [
            SqliteStore::open_in_memory().unwrap(),
            SqliteStore::open(dir.path().join("c.db")).unwrap(),
        ] {
            let changes = changes();
            store.apply(&changes).unwrap();
            store.flush().await.unwrap();
            {
                let pending = store.shared.pending();
                assert!(pending.changes.is_empty() && pending.committing.is_none());
            }
            let loaded = store.load().unwrap();
            assert_eq!(loaded.jobs.len(), 2);
            for (job, applied) in loaded.jobs.iter().zip(jobs_in(&changes)) {
                let read = store.job(&job.id).unwrap().expect("stored");
                assert!(!Arc::ptr_eq(&read, &applied), "decoded from its row");
                assert_eq!(
                    persisted(std::slice::from_ref(&*read)),
                    persisted(std::slice::from_ref(job))
                );
            }
            assert!(store.job(&Uuid::nil()).unwrap().is_none());
        }
    }

    /// No version is out of sight while the writer commits: the test holds
    /// the writer's connection, so the writer takes the first batch and
    /// waits with it; later versions stay pending. Reads find the batch
    /// being committed, then the newest pending version, and never wait for
    /// the writer's connection (they use the read connection).
    #[tokio::test]
    async fn versions_not_committed_yet_read_newest_first() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("c.db")).unwrap();
        assert!(store.shared.reader.is_some(), "a file is WAL");
        let changes = changes();
        let job = jobs_in(&changes).remove(0);
        let writer_conn = store.shared.conn();
        store.apply(&changes).unwrap();
        wait_for("the writer to take the batch", || {
            store.shared.pending().committing.is_some()
        });
        assert!(store.shared.pending().changes.is_empty());
        let read = store.job(&job.id).unwrap().expect("being committed");
        assert!(Arc::ptr_eq(&read, &job));

        let running = [JobStatus::Assigned, JobStatus::Running].map(|status| {
            let change = with_status(&job, status);
            store.apply(std::slice::from_ref(&change)).unwrap();
            change
        });
        let Change::Job(running) = &running[1] else {
            panic!("a job")
        };
        let read = store.job(&job.id).unwrap().expect("pending");
        assert!(Arc::ptr_eq(&read, running), "the latest version wins");

        drop(writer_conn);
        store.flush().await.unwrap();
        let read = store.job(&job.id).unwrap().expect("committed");
        assert!(!Arc::ptr_eq(&read, running));
        assert_eq!(read.status, JobStatus::Running);
    }

    /// A purge takes effect when its transaction commits: a version of a
    /// job it deletes still reads until then, `None` afterwards.
    #[tokio::test]
    async fn a_purged_job_reads_as_none() {
        let changes = changes();
        let job = jobs_in(&changes).remove(0);
        let other = jobs_in(&changes).remove(1);
        let done = with_status(&job, JobStatus::Completed);

        let store = SqliteStore::open_in_memory().unwrap();
        store.apply(&changes).unwrap();
        store.apply(std::slice::from_ref(&done)).unwrap();
        assert!(store.job(&job.id).unwrap().is_some());
        store.purge_terminal_jobs(1_001).unwrap();
        assert!(store.job(&job.id).unwrap().is_none());
        assert!(store.job(&other.id).unwrap().is_some());

        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("c.db")).unwrap();
        let writer_conn = store.shared.conn();
        store.apply(&changes).unwrap();
        store.apply(std::slice::from_ref(&done)).unwrap();
        store.purge_terminal_jobs(1_001).unwrap();
        let read = store.job(&job.id).unwrap().expect("not purged yet");
        assert_eq!(read.status, JobStatus::Completed);
        drop(writer_conn);
        store.flush().await.unwrap();
        assert!(store.job(&job.id).unwrap().is_none());
        assert_eq!(store.job(&other.id).unwrap().expect("kept").id, other.id);
    }

    /// A store that can no longer make anything durable says so rather
    /// than answer from memory that will never reach the disk.
    #[tokio::test]
    async fn a_halted_or_failed_store_answers_an_error() {
        let changes = changes();
        let id = jobs_in(&changes)[0].id;
        let store = SqliteStore::open_in_memory().unwrap();
        store.apply(&changes).unwrap();
        assert!(store.job(&id).unwrap().is_some());
        store.halt();
        assert!(store.job(&id).is_err());

        let store = SqliteStore::open_in_memory().unwrap();
        store.apply(&changes).unwrap();
        store
            .shared
            .conn()
            .execute_batch("DROP TABLE jobs")
            .unwrap();
        assert!(store.apply(&changes).is_err());
        assert!(store.job(&id).is_err());
    }
}
