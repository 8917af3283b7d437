//! Used payment nonces ([`NonceStore`]), on the same database as the jobs.

use super::*;

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
        let inserted = execute_cached(
            &conn,
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
        let r = execute_cached(
            &self.shared.conn(),
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
        let r = execute_cached(
            &self.shared.conn(),
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
        let r = execute_cached(
            &self.shared.conn(),
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

/// Runs `sql` through the connection's statement cache: a payment's three
/// nonce statements and the retention pass's purge are the same text every
/// time, and parsing them again was a measurable part of a commit.
fn execute_cached(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
) -> rusqlite::Result<usize> {
    conn.prepare_cached(sql)?.execute(params)
}
