//! Reading stored records back: the whole snapshot at open, one job by
//! its row.

use super::*;

/// A job from the `body` column a query selected first: how every stored
/// job is read back, by `load_all` and by `read_job`.
pub(super) fn job_of(row: &rusqlite::Row<'_>) -> Result<Job, SqliteError> {
    let body = row.get_ref(0)?;
    let text = body
        .as_str()
        .map_err(|e| rusqlite::Error::FromSqlConversionFailure(0, body.data_type(), Box::new(e)))?;
    Ok(serde_json::from_str(text)?)
}

/// Job `id` from row `rowid`; `None` if that row is gone or holds another job.
pub(super) fn read_job(
    conn: &Connection,
    rowid: i64,
    id: &Uuid,
) -> Result<Option<Job>, SqliteError> {
    let mut stmt = conn.prepare_cached(rows::SELECT)?;
    let mut text = Uuid::encode_buffer();
    let id_text = &*id.hyphenated().encode_lower(&mut text);
    let mut found = stmt.query(params![rowid, id_text])?;
    found.next()?.map(job_of).transpose()
}

pub(super) fn load_all(conn: &Connection) -> Result<Snapshot, SqliteError> {
    let mut jobs = Vec::new();
    each_job(conn, &mut |job| jobs.push(job))?;
    Ok(Snapshot {
        jobs,
        pairings: load_pairings(conn)?,
        trust: load_trust(conn)?,
    })
}

/// Every stored job, decoded one row at a time, in commit order.
pub(super) fn each_job(conn: &Connection, job: &mut dyn FnMut(Job)) -> Result<(), SqliteError> {
    let mut stmt = conn.prepare("SELECT body FROM jobs ORDER BY seq")?;
    let mut rows = stmt.query([])?;
    while let Some(row) = rows.next()? {
        job(job_of(row)?);
    }
    Ok(())
}

pub(super) fn load_pairings(conn: &Connection) -> Result<Vec<Pairing>, SqliteError> {
    let mut pairings = Vec::new();
    let mut stmt = conn.prepare("SELECT body FROM pairings ORDER BY code")?;
    for body in stmt.query_map([], |r| r.get::<_, String>(0))? {
        pairings.push(serde_json::from_str::<Pairing>(&body?)?);
    }
    Ok(pairings)
}

pub(super) fn load_trust(conn: &Connection) -> Result<Vec<TrustEntry>, SqliteError> {
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
