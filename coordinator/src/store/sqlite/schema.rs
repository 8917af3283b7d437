//! The schema and its migrations, the journal mode, and the read-only
//! connection a WAL database gets.

use super::*;

/// Schema steps, applied in order at open; `schema_version` records how many ran.
pub(super) const MIGRATIONS: &[&str] = &[
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

pub(super) fn schema_version(conn: &Connection) -> Result<usize, SqliteError> {
    let v: Option<i64> = conn
        .query_row("SELECT MAX(version) FROM schema_version", [], |r| r.get(0))
        .optional()?
        .flatten();
    Ok(v.unwrap_or(0) as usize)
}

/// Brings the schema up to date; each step and its version row commit together.
pub(super) fn migrate(conn: &Connection) -> Result<(), SqliteError> {
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

/// The journal mode `conn`'s database is in (`wal`, `memory`, ...).
pub(super) fn journal_mode(conn: &Connection) -> Result<String, SqliteError> {
    Ok(conn.query_row("PRAGMA journal_mode", [], |r| r.get(0))?)
}

/// The read-only connection for [`Store::job`] (see [`Shared::reader`]);
/// opened after `migrate`, so the schema is there.
pub(super) fn open_reader(path: &Path) -> Result<Connection, SqliteError> {
    use rusqlite::OpenFlags;
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
        | OpenFlags::SQLITE_OPEN_URI
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags)?;
    // A WAL reader waits only while a checkpoint resets the log.
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    Ok(conn)
}
