//! The write path: one transaction per batch of changes (the latest
//! version of each record), the group-commit writer (a thread, or a task in
//! the simulation) and how it publishes what is durable.

use super::rows::{JobRows, RowChanges};
use super::*;
use crate::buggify::{self, Site};
use rusqlite::CachedStatement;

/// Marks a reserved payment nonce spent.
pub(super) const SPEND_NONCE: &str = "UPDATE payment_nonces SET state = 'spent'
     WHERE chain_id = ?1 AND asset = ?2 AND payer = ?3 AND nonce = ?4";

/// Whether a batch spends a payment nonce (for [`StoreWrite::NonceSpent`]).
pub(super) fn spends_nonce(changes: &[Change]) -> bool {
    changes.iter().any(|c| matches!(c, Change::NonceSpent(_)))
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    pub(super) fn conn(&self) -> MutexGuard<'_, Connection> {
        // Every use of the connection is a whole transaction or a single
        // statement; SQLite rolls back an unfinished one, so a panic
        // elsewhere leaves nothing half-written to recover from.
        lock(&self.conn)
    }

    pub(super) fn pending(&self) -> MutexGuard<'_, Pending> {
        lock(&self.pending)
    }

    pub(super) fn rows(&self) -> RwLockReadGuard<'_, JobRows> {
        self.rows.read().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn rows_mut(&self) -> RwLockWriteGuard<'_, JobRows> {
        // Changed only by `committed`, which cannot stop half-way.
        self.rows.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes `changes`, then deletes the jobs `purge`, in one transaction.
    pub(super) fn commit(&self, changes: &[Change], purge: &[Uuid]) -> Result<(), SqliteError> {
        let mut conn = self.conn();
        let mut moved = RowChanges::default();
        let tx = conn.transaction()?;
        // A read lock: readers go on finding rows meanwhile; only this
        // thread, holding `conn`, ever changes the map.
        write_changes(&tx, &self.rows(), changes, &mut moved)?;
        if !purge.is_empty() {
            // The map as this batch leaves it: a job written and purged in
            // one batch has its row from this transaction.
            let rows = self.rows();
            rows::purge(&tx, &rows, purge, &mut moved)?;
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
    pub(super) fn unwritten_job(&self, id: &Uuid) -> Option<Arc<Job>> {
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
    pub(super) fn stored_job(&self, id: &Uuid) -> Result<Option<Job>, SqliteError> {
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

    pub(super) fn is_halted(&self) -> bool {
        self.halted.load(Ordering::SeqCst)
    }

    pub(super) fn wake_writer(&self) {
        self.wake.notify_one();
        self.wake_task.notify_one();
    }

    pub(super) fn halt(&self) {
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
    pub(super) fn wrote(&self, write: StoreWrite) {
        let mut point = lock(&self.crash_point);
        if point.as_ref().is_some_and(|(kind, _)| *kind == write) {
            let (_, then) = point.take().expect("checked above");
            drop(point);
            self.halt();
            then();
        }
    }

    /// Records a commit's outcome and answers the flushes it satisfies.
    pub(super) fn publish(&self, result: Result<u64, String>) {
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
    /// The writer thread's turn: take, commit, answer.
    pub(super) fn commit_pending(&self) -> bool {
        match self.take() {
            Take::Closed => false,
            Take::Idle => true,
            Take::Batch(batch) => {
                let result = self.commit_batch(&batch);
                self.answer(&batch, result);
                true
            }
        }
    }

    /// The first step of a writer's turn: moves the pending changes to
    /// `committing`.
    pub(super) fn take(&self) -> Take {
        let mut pending = self.pending();
        if self.is_halted() {
            return Take::Closed;
        }
        if pending.changes.is_empty() && pending.purge.is_empty() {
            return if pending.closed {
                Take::Closed
            } else {
                Take::Idle
            };
        }
        let events = pending.appended - pending.taken;
        pending.taken = pending.appended;
        let changes = Arc::new(std::mem::take(&mut pending.changes));
        pending.committing = Some(Arc::clone(&changes));
        Take::Batch(Batch {
            changes,
            purge: std::mem::take(&mut pending.purge),
            upto: pending.appended,
            events,
        })
    }

    /// The second step: the batch's transaction.
    pub(super) fn commit_batch(&self, batch: &Batch) -> Result<(), SqliteError> {
        // tokio's clock: monotonic on the writer thread (no runtime there),
        // virtual under the simulation, where the commit takes no time.
        let started = tokio::time::Instant::now();
        let result = self.commit(&batch.changes, &batch.purge);
        // The database answers for the batch now, and before the flushes
        // are answered: once `flush` resolves, reads come from the rows (a
        // purge in the batch has taken effect). A failed commit leaves the
        // rows older, for the instant until `publish` makes reads fail.
        self.pending().committing = None;
        match &result {
            Ok(()) => {
                if let Some(metrics) = self.metrics.get() {
                    metrics.flushed(batch.events, started.elapsed());
                }
            }
            Err(e) => tracing::error!(error = %e, "group commit failed"),
        }
        result
    }

    /// The last step: answers the flushes the commit satisfied. Never before
    /// the commit: an answer is a promise that a crash keeps.
    pub(super) fn answer(&self, batch: &Batch, result: Result<(), SqliteError>) {
        self.publish(result.map(|()| batch.upto).map_err(|e| e.to_string()));
        if spends_nonce(&batch.changes) {
            self.wrote(StoreWrite::NonceSpent);
        }
        self.wrote(StoreWrite::Commit);
    }

    /// A window between two steps of the task writer's turn, where the
    /// simulation's fault points land (`crate::buggify`): other tasks run
    /// meanwhile, or the process dies here. `false` once dead.
    async fn between_steps(&self) -> bool {
        if buggify::fire(Site::StoreWriterYield) {
            tokio::task::yield_now().await;
        }
        let hook = lock(&self.buggify_crash).take_if(|_| buggify::fire(Site::StoreWriterCrash));
        match hook {
            Some(then) => {
                self.halt();
                then();
                false
            }
            None => !self.is_halted(),
        }
    }

    pub(super) fn has_work(&self) -> bool {
        let pending = self.pending();
        pending.closed || !pending.changes.is_empty() || !pending.purge.is_empty()
    }
}

/// The writer thread: commits all pending changes in one transaction,
/// publishes how far it got, and sleeps until more arrive.
pub(super) fn run_writer(shared: &Shared) {
    loop {
        {
            let mut pending = shared.pending();
            while pending.changes.is_empty() && pending.purge.is_empty() && !pending.closed {
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

/// The writer as a task: the same turn, woken through a `Notify` (a
/// wake-up that comes while it commits is kept as a permit, never lost),
/// with the simulation's fault points between its steps.
pub(super) async fn run_writer_task(shared: Arc<Shared>) {
    loop {
        while !shared.has_work() {
            shared.wake_task.notified().await;
        }
        let batch = match shared.take() {
            Take::Closed => return,
            Take::Idle => continue,
            Take::Batch(batch) => batch,
        };
        if !shared.between_steps().await {
            return;
        }
        buggify::stall(Site::StoreFlushSlow, 50).await;
        let result = shared.commit_batch(&batch);
        if !shared.between_steps().await {
            return;
        }
        shared.answer(&batch, result);
    }
}

/// What one writer's turn found.
pub(super) enum Take {
    /// Halted, or closed with nothing left: the writer ends.
    Closed,
    /// Nothing to commit (woken for nothing).
    Idle,
    Batch(Batch),
}

/// The changes one turn commits.
pub(super) struct Batch {
    changes: Arc<Vec<Change>>,
    purge: Vec<Uuid>,
    /// The appended count the commit makes durable.
    upto: u64,
    /// How many changes it holds (for the metrics).
    events: u64,
}

/// Room for a typical job's JSON (a completed one with its receipt is
/// about 1 KiB); larger ones grow the buffer once.
pub(super) const JOB_JSON_BYTES_INITIAL: usize = 2048;

/// Writes the latest version of each record in `changes`; a job goes to
/// its row (found in `rows`) or a new one (noted in `moved`).
pub(super) fn write_changes(
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
    for change in changes.iter().rev() {
        if !seen.insert(Key::of(change)) {
            continue;
        }
        match change {
            Change::Job(job) => {
                let statements = (&mut insert_stmt, &mut update_stmt);
                write_job(tx, statements, rows, job, &mut body, moved)?;
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

/// Writes a job's latest version to its row, or to a new row (noted in
/// `moved`) when it has none; `body` is the batch's JSON buffer.
fn write_job(
    tx: &rusqlite::Transaction<'_>,
    (insert_stmt, update_stmt): (&mut CachedStatement<'_>, &mut CachedStatement<'_>),
    rows: &JobRows,
    job: &Job,
    body: &mut Vec<u8>,
    moved: &mut RowChanges,
) -> Result<(), SqliteError> {
    body.clear();
    serde_json::to_writer(&mut *body, job)?;
    // Bound as TEXT, as before; serde_json writes UTF-8 only,
    // so the bytes need no second check here.
    let text = ToSqlOutput::Borrowed(ValueRef::Text(body));
    let mut id = uuid::Uuid::encode_buffer();
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
    Ok(())
}

/// The identity of a stored record.
#[derive(PartialEq, Eq, Hash)]
pub(super) enum Key<'a> {
    Job(uuid::Uuid),
    Pairing(&'a str),
    Trust(&'a str, &'a str),
    Nonce(&'a NonceKey),
}

impl<'a> Key<'a> {
    pub(super) fn of(change: &'a Change) -> Self {
        match change {
            Change::Job(job) => Key::Job(job.id),
            Change::Pairing(p) => Key::Pairing(&p.code),
            Change::Trust(e) => Key::Trust(&e.user_id, &e.provider_pubkey),
            Change::NonceSpent(key) => Key::Nonce(key),
        }
    }
}
