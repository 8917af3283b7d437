//! Where each job's row is: the store addresses job rows by SQLite rowid,
//! not through an index on the job id.
//!
//! Job ids are random UUIDs, so an index on them puts every new job on a
//! random page of that index: one more 4 KiB WAL frame written and synced
//! per new job, and most of a group commit's frames (schema step 2 dropped
//! it; `benches/results/perf-round5-commit-2026-11-24.md`). A new job's row
//! instead goes at the end of the table, beside the previous batch's rows,
//! and the store remembers its rowid here; a later version of the job
//! updates that row. The map is read from the table at open and follows
//! each transaction once it commits, so it always describes the database.

use crate::store::sqlite::SqliteError;
use rusqlite::{params, Connection, Transaction};
use rustc_hash::FxHashMap;
use uuid::Uuid;

/// A new job's row.
pub(super) const INSERT: &str =
    "INSERT INTO jobs (id, status, seq, deadline_ms, created_at_ms, body)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6)";

/// A later version of a job, in its row. The id is checked as well, so a
/// rowid that no longer holds this job changes nothing (and the job is
/// inserted instead).
pub(super) const UPDATE: &str = "UPDATE jobs SET status = ?1, seq = ?2, deadline_ms = ?3, body = ?4
     WHERE rowid = ?5 AND id = ?6";

/// A job's body from its row; the id is checked, as in `UPDATE`.
pub(super) const SELECT: &str = "SELECT body FROM jobs WHERE rowid = ?1 AND id = ?2";

/// One finished job retention forgot, by its row; the id is checked, as
/// in `UPDATE`.
const PURGE: &str =
    "DELETE FROM jobs WHERE rowid = ?1 AND id = ?2 AND status IN ('completed', 'failed')";

/// Job id to rowid, for every job row in the database. Ids are drawn by
/// the core's seeded RNG (never chosen by a client), so a fast unkeyed
/// hash is safe here.
#[derive(Debug, Default)]
pub(super) struct JobRows(FxHashMap<Uuid, i64>);

/// What one transaction did to the rows, applied to [`JobRows`] only once
/// it commits: a failed transaction leaves the map as the database is.
#[derive(Debug, Default)]
pub(super) struct RowChanges {
    inserted: Vec<(Uuid, i64)>,
    deleted: Vec<Uuid>,
}

impl JobRows {
    /// Reads every job row's id; a row whose id is not a UUID, or a second
    /// row of one id, is refused (the store never writes either).
    pub(super) fn read(conn: &Connection) -> Result<Self, SqliteError> {
        let mut rows = FxHashMap::default();
        let mut stmt = conn.prepare("SELECT rowid, id FROM jobs")?;
        let mut found = stmt.query([])?;
        while let Some(row) = found.next()? {
            let rowid: i64 = row.get(0)?;
            let text: String = row.get(1)?;
            let id = Uuid::parse_str(&text)
                .map_err(|e| SqliteError::Failed(format!("job row {rowid}: id {text:?}: {e}")))?;
            if rows.insert(id, rowid).is_some() {
                return Err(SqliteError::Failed(format!("job {id} is stored twice")));
            }
        }
        Ok(Self(rows))
    }

    /// The row holding job `id`, if there is one.
    pub(super) fn get(&self, id: &Uuid) -> Option<i64> {
        self.0.get(id).copied()
    }

    /// Takes in a committed transaction's changes: rows it inserted, then
    /// rows it deleted (a purge runs after the batch's writes).
    pub(super) fn committed(&mut self, changes: RowChanges) {
        for (id, rowid) in changes.inserted {
            self.0.insert(id, rowid);
        }
        for id in changes.deleted {
            self.0.remove(&id);
        }
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.0.len()
    }
}

impl RowChanges {
    /// Notes the row the transaction's last insert made, for job `id`.
    pub(super) fn inserted(&mut self, tx: &Transaction<'_>, id: Uuid) {
        self.inserted.push((id, tx.last_insert_rowid()));
    }
}

/// Deletes the jobs `ids` (retention forgot them), found by their rows:
/// in the map, or inserted by this very transaction.
pub(super) fn purge(
    tx: &Transaction<'_>,
    rows: &JobRows,
    ids: &[Uuid],
    changes: &mut RowChanges,
) -> Result<(), SqliteError> {
    let mut stmt = tx.prepare_cached(PURGE)?;
    let fresh: FxHashMap<Uuid, i64> = changes.inserted.iter().copied().collect();
    for id in ids {
        let Some(rowid) = fresh.get(id).copied().or_else(|| rows.get(id)) else {
            continue;
        };
        if stmt.execute(params![rowid, id.to_string()])? > 0 {
            changes.deleted.push(*id);
        }
    }
    Ok(())
}
