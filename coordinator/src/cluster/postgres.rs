//! The shared store on PostgreSQL (`--db postgres://…`): [`PgShared`]
//! implements [`SharedStore`] with the semantics `cluster.rs` pins on
//! `MemoryShared`, through conditional statements:
//!
//! - a job write is `INSERT … ON CONFLICT (id) DO UPDATE … WHERE
//!   jobs.owner = $node`: a row another node holds is not written, and the
//!   batch's transaction rolls back ([`ClusterError::Fenced`]);
//! - a claim is `UPDATE … WHERE id IN (SELECT … ORDER BY tier, cseq LIMIT n
//!   FOR UPDATE SKIP LOCKED)`: concurrent claimers take different rows;
//! - a payment's nonce is a row: reserving it is an insert that one caller
//!   wins, and its job takes it in the same transaction as the job's insert;
//! - a write that puts a job in the pool ends with `NOTIFY jobs_pending`,
//!   which every node `LISTEN`s to.
//!
//! Migrations are numbered steps in `schema_version`, applied at connect
//! under an advisory lock (several nodes may start at once); a newer schema
//! is refused. `--db-schema` puts the tables in their own PostgreSQL schema,
//! so several clusters (or test runs) can share one database.

use crate::cluster::{owner_after_write, tier_rank, Call, ClusterError, SharedStore, Want};
use crate::core::trust::{Pairing, TrustEntry};
use crate::core::Snapshot;
use crate::core::{Change, Job};
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use protocol::api::JobType;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use tokio::sync::watch;
use tokio_postgres::{NoTls, Statement, Transaction};
use uuid::Uuid;
use x402::NonceKey;

/// Connections each node keeps to the database.
const POOL_SIZE_MAX: usize = 16;

/// Schema migrations, applied in order; the position is the version.
const MIGRATIONS: &[&str] = &[
    // 1: jobs, nodes, pairings, trust, nonces, presence.
    "CREATE TABLE jobs (
        id TEXT PRIMARY KEY,
        cseq BIGSERIAL NOT NULL,
        owner TEXT,
        status TEXT NOT NULL,
        tier SMALLINT NOT NULL,
        job_type TEXT NOT NULL,
        private BOOLEAN NOT NULL,
        user_id TEXT NOT NULL,
        deadline_ms BIGINT,
        created_at_ms BIGINT NOT NULL,
        nonce TEXT,
        body TEXT NOT NULL
    );
    CREATE INDEX jobs_pool ON jobs (tier, cseq) WHERE owner IS NULL AND status = 'pending';
    CREATE INDEX jobs_owner ON jobs (owner) WHERE status IN ('pending', 'assigned', 'running');
    CREATE UNIQUE INDEX jobs_nonce ON jobs (nonce) WHERE nonce IS NOT NULL;
    CREATE TABLE nodes (
        node_id TEXT PRIMARY KEY,
        lease_until_ms BIGINT NOT NULL,
        started_at_ms BIGINT NOT NULL
    );
    CREATE TABLE pairings (code TEXT PRIMARY KEY, body TEXT NOT NULL);
    CREATE SEQUENCE trust_version;
    CREATE TABLE trust (
        user_id TEXT NOT NULL,
        pubkey TEXT NOT NULL,
        version BIGINT NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (user_id, pubkey)
    );
    CREATE TABLE nonces (
        key TEXT PRIMARY KEY,
        reserved_by TEXT NOT NULL,
        job TEXT,
        valid_before BIGINT NOT NULL
    );
    CREATE TABLE presence (
        node_id TEXT NOT NULL,
        pubkey TEXT NOT NULL,
        job_type TEXT NOT NULL,
        PRIMARY KEY (node_id, pubkey, job_type)
    );
    CREATE INDEX presence_key ON presence (pubkey);",
    // 2: cluster-wide rate-limit budgets, one row per key and window.
    "CREATE TABLE budgets (
        key TEXT NOT NULL,
        window_ms BIGINT NOT NULL,
        used BIGINT NOT NULL,
        PRIMARY KEY (key, window_ms)
    );",
    // 3: each node's last batch written, so a retried batch is not applied twice.
    "ALTER TABLE nodes ADD COLUMN last_batch BIGINT NOT NULL DEFAULT 0;",
    // 4: retention finds old terminal jobs without reading every row.
    "CREATE INDEX jobs_done_created ON jobs (created_at_ms) WHERE status IN ('completed', 'failed');",
];

/// Old terminal jobs retention deletes per statement, and statements per
/// pass (an age pass every `retention::AGE_INTERVAL_MS`; a size pass at
/// most every second, while the kept budget is over its high-water mark).
const PURGE_BATCH_MAX: i64 = 5_000;
const PURGE_BATCHES_MAX: usize = 100;

/// Any key for the advisory lock that serialises migrations.
const MIGRATION_LOCK: i64 = 0x636f_6f72_6469_6e61;

#[derive(Debug, thiserror::Error)]
pub enum PgError {
    #[error("invalid PostgreSQL URL: {0}")]
    Url(#[source] tokio_postgres::Error),
    #[error("invalid schema name {0:?}: letters, digits and _ only")]
    Schema(String),
    #[error("PostgreSQL: {0}{detail}", detail = detail(.0))]
    Db(#[from] tokio_postgres::Error),
    #[error("PostgreSQL pool: {0}")]
    Pool(String),
    #[error("database schema version {found} is newer than this build's {known}")]
    NewerSchema { found: i64, known: usize },
}

/// Several nodes' shared store on one PostgreSQL database.
pub struct PgShared {
    pool: Pool,
    pool_rx: watch::Receiver<u64>,
    /// The connection that `LISTEN`s; its messages are read by a task.
    _listener: tokio_postgres::Client,
}

/// What `tokio_postgres::Error` leaves out of its message: the server's
/// message of a database error (it shows only "db error"), else its cause
/// (it shows "error connecting to server", not why).
fn detail(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!(": {}", db.message());
    }
    std::error::Error::source(e)
        .map(|cause| format!(": {cause}"))
        .unwrap_or_default()
}

/// A failed call: [`ClusterError::Refused`] when PostgreSQL refused the
/// data (SQLSTATE class 22, data exception: U+0000 in text, a bad
/// encoding, a value out of range), else [`ClusterError::Unavailable`].
/// Never a fence: only a lost lease or a job owned elsewhere is one.
fn unavailable<E: std::fmt::Display + 'static>(e: E) -> ClusterError {
    let any: &dyn std::any::Any = &e;
    let pg: Option<&tokio_postgres::Error> = any.downcast_ref();
    let detail = pg.map(detail).unwrap_or_default();
    let refused = pg
        .and_then(|e| e.code())
        .is_some_and(|code| code.code().starts_with("22"));
    if refused {
        ClusterError::Refused(format!("{e}{detail}"))
    } else {
        ClusterError::Unavailable(format!("{e}{detail}"))
    }
}

fn fenced(node: &str, why: impl Into<String>) -> ClusterError {
    ClusterError::Fenced {
        node: node.to_owned(),
        why: why.into(),
    }
}

fn json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("plain data serialises")
}

/// A serde value's string form (`"llm_infer"` → `llm_infer`).
fn name<T: serde::Serialize>(value: &T) -> String {
    match serde_json::to_value(value).expect("plain data serialises") {
        serde_json::Value::String(s) => s,
        other => other.to_string(),
    }
}

fn parse_job(body: &str) -> Result<Job, ClusterError> {
    serde_json::from_str(body).map_err(|e| unavailable(format!("a stored job is unreadable: {e}")))
}

impl PgShared {
    /// Connects (a pool, and one listening connection), creates the schema
    /// if asked and applies the migrations.
    pub async fn connect(url: &str, schema: Option<&str>) -> Result<Arc<Self>, PgError> {
        let mut config: tokio_postgres::Config = url.parse().map_err(PgError::Url)?;
        if let Some(schema) = schema {
            if schema.is_empty()
                || !schema
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_')
            {
                return Err(PgError::Schema(schema.to_owned()));
            }
            let (client, connection) = config.connect(NoTls).await?;
            let conn = tokio::spawn(connection);
            // Under the migrations' lock: two nodes creating one schema at
            // once would otherwise race (a unique violation in the catalog).
            client
                .batch_execute(&format!(
                    "BEGIN; SELECT pg_advisory_xact_lock({MIGRATION_LOCK});
                     CREATE SCHEMA IF NOT EXISTS {schema}; COMMIT;"
                ))
                .await?;
            drop(client);
            let _ = conn.await;
            config.options(format!("-c search_path={schema}"));
        }
        let (listener, mut connection) = config.connect(NoTls).await?;
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE_MAX)
            .build()
            .map_err(|e| PgError::Pool(e.to_string()))?;
        migrate(&pool).await?;
        let (pool_tx, pool_rx) = watch::channel(0);
        // The listening connection: every notification counts up.
        tokio::spawn(async move {
            let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
            use futures_util::StreamExt;
            while let Some(message) = messages.next().await {
                match message {
                    Ok(tokio_postgres::AsyncMessage::Notification(_)) => {
                        pool_tx.send_modify(|n| *n += 1);
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::error!(error = %e, "the LISTEN connection failed; claims fall back to polling");
                        return;
                    }
                }
            }
        });
        listener.batch_execute("LISTEN jobs_pending").await?;
        Ok(Arc::new(Self {
            pool,
            pool_rx,
            _listener: listener,
        }))
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, ClusterError> {
        self.pool.get().await.map_err(unavailable)
    }
}

async fn migrate(pool: &Pool) -> Result<(), PgError> {
    let mut client = pool.get().await.map_err(|e| PgError::Pool(e.to_string()))?;
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await?;
    tx.batch_execute("CREATE TABLE IF NOT EXISTS schema_version (version BIGINT NOT NULL)")
        .await?;
    let found: i64 = tx
        .query_one("SELECT COALESCE(MAX(version), 0) FROM schema_version", &[])
        .await?
        .get(0);
    if found > MIGRATIONS.len() as i64 {
        return Err(PgError::NewerSchema {
            found,
            known: MIGRATIONS.len(),
        });
    }
    for (i, step) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        tx.batch_execute(step).await?;
        let version = i as i64 + 1;
        tx.execute(
            "INSERT INTO schema_version (version) VALUES ($1)",
            &[&version],
        )
        .await?;
    }
    tx.commit().await?;
    Ok(())
}

/// The last version of each job in a batch, in order of first appearance
/// (new jobs get their commit order, `cseq`, in that order).
fn last_versions(changes: &[Change]) -> Vec<&Arc<Job>> {
    let mut order: Vec<Uuid> = Vec::new();
    let mut last: BTreeMap<Uuid, &Arc<Job>> = BTreeMap::new();
    for change in changes {
        if let Change::Job(job) = change {
            if last.insert(job.id, job).is_none() {
                order.push(job.id);
            }
        }
    }
    order.iter().map(|id| last[id]).collect()
}

const UPSERT_JOB: &str = "INSERT INTO jobs
    (id, owner, status, tier, job_type, private, user_id, deadline_ms, created_at_ms, nonce, body)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
    ON CONFLICT (id) DO UPDATE SET owner = EXCLUDED.owner, status = EXCLUDED.status,
        deadline_ms = EXCLUDED.deadline_ms, body = EXCLUDED.body
    WHERE jobs.owner = $12";

const SPEND_NONCE: &str = "INSERT INTO nonces (key, reserved_by, job, valid_before)
    VALUES ($1, $2, $3, 0)
    ON CONFLICT (key) DO UPDATE SET job = EXCLUDED.job
    WHERE nonces.job IS NULL OR nonces.job = EXCLUDED.job";

/// Records batch `batch` as the node's last, in its transaction: `false`
/// if it was already (committed before, its answer lost). A node whose row
/// is gone was taken over: fenced.
async fn begin_batch(tx: &Transaction<'_>, node: &str, batch: u64) -> Result<bool, ClusterError> {
    let batch = i64::try_from(batch).expect("batch numbers fit in i64");
    let alive = tx
        .query_opt(
            "SELECT last_batch FROM nodes WHERE node_id = $1 FOR NO KEY UPDATE",
            &[&node],
        )
        .await
        .map_err(unavailable)?;
    let Some(alive) = alive else {
        return Err(fenced(node, "its lease was taken over"));
    };
    if alive.get::<_, i64>(0) == batch {
        return Ok(false);
    }
    tx.execute(
        "UPDATE nodes SET last_batch = $2 WHERE node_id = $1",
        &[&node, &batch],
    )
    .await
    .map_err(unavailable)?;
    Ok(true)
}

/// Writes the latest version of a job the node owns (the upsert refuses
/// one it does not: fenced) and spends its payment's nonce; `true` if the
/// job went to the pool.
async fn write_job(
    tx: &Transaction<'_>,
    (upsert, spend): (&Statement, &Statement),
    node: &str,
    job: &Job,
) -> Result<bool, ClusterError> {
    let owner = owner_after_write(job, node);
    let s = &job.submission;
    let private = s.privacy_class == protocol::api::PrivacyClass::Private;
    let nonce = job.paid_with.as_ref().map(|p| json(&p.nonce));
    let written = tx
        .execute(
            upsert,
            &[
                &job.id.to_string(),
                &owner,
                &name(&job.status),
                &tier_rank(job.tier),
                &name(&s.job_type),
                &private,
                &s.user_id,
                &job.deadline_ms,
                &job.created_at_ms,
                &nonce,
                &json(job),
                &node,
            ],
        )
        .await
        .map_err(|e| match e.as_db_error().and_then(|db| db.constraint()) {
            // Another job holds this payment: an ownership conflict, as the
            // spend below would find (a data error is not one).
            Some("jobs_nonce") => {
                fenced(node, format!("job {}'s payment bought another job", job.id))
            }
            _ => unavailable(e),
        })?;
    if written == 0 {
        return Err(fenced(node, format!("job {} is not its own", job.id)));
    }
    if let Some(nonce) = &nonce {
        let spent = tx
            .execute(spend, &[nonce, &node, &job.id.to_string()])
            .await
            .map_err(unavailable)?;
        if spent == 0 {
            let why = format!("job {}'s payment bought another job", job.id);
            return Err(fenced(node, why));
        }
    }
    Ok(owner.is_none())
}

/// Writes a pairing or a trust entry.
async fn write_record(tx: &Transaction<'_>, change: &Change) -> Result<(), ClusterError> {
    match change {
        Change::Pairing(p) => {
            tx.execute(
                // Never another user's code: two nodes may draw
                // the same one (see docs/cluster.md, "Pairing codes").
                "INSERT INTO pairings (code, body) VALUES ($1, $2)
                 ON CONFLICT (code) DO UPDATE SET body = EXCLUDED.body
                 WHERE pairings.body::jsonb ->> 'user_id' = $3",
                &[&p.code, &json(p), &p.user_id],
            )
            .await
            .map_err(unavailable)?;
        }
        Change::Trust(e) => {
            tx.execute(
                "INSERT INTO trust (user_id, pubkey, version, body)
                 VALUES ($1, $2, nextval('trust_version'), $3)
                 ON CONFLICT (user_id, pubkey) DO UPDATE
                 SET version = EXCLUDED.version, body = EXCLUDED.body",
                &[&e.user_id, &e.provider_pubkey, &json(e)],
            )
            .await
            .map_err(unavailable)?;
        }
        Change::Job(_) | Change::NonceSpent(_) => {}
    }
    Ok(())
}

impl SharedStore for PgShared {
    fn join(&self, node: &str, now_ms: i64, lease_ms: i64) -> Call<'_, Snapshot> {
        let node = node.to_owned();
        Box::pin(async move {
            let mut client = self.client().await?;
            let tx = client.transaction().await.map_err(unavailable)?;
            let held = tx
                .query_opt(
                    "SELECT lease_until_ms FROM nodes WHERE node_id = $1 FOR UPDATE",
                    &[&node],
                )
                .await
                .map_err(unavailable)?;
            if held.is_some_and(|row| row.get::<_, i64>(0) >= now_ms) {
                return Err(ClusterError::NodeIdInUse(node));
            }
            tx.execute(
                "INSERT INTO nodes (node_id, lease_until_ms, started_at_ms) VALUES ($1, $2, $3)
                 ON CONFLICT (node_id) DO UPDATE
                 SET lease_until_ms = $2, started_at_ms = $3, last_batch = 0",
                &[&node, &(now_ms + lease_ms), &now_ms],
            )
            .await
            .map_err(unavailable)?;
            tx.execute(
                "DELETE FROM nonces WHERE reserved_by = $1 AND job IS NULL",
                &[&node],
            )
            .await
            .map_err(unavailable)?;
            let mut snapshot = Snapshot::default();
            let rows = tx
                .query(
                    "SELECT body FROM jobs WHERE owner = $1
                     AND status IN ('pending', 'assigned', 'running')",
                    &[&node],
                )
                .await
                .map_err(unavailable)?;
            for row in rows {
                snapshot.jobs.push(parse_job(row.get(0))?);
            }
            let rows = tx
                .query("SELECT body FROM pairings", &[])
                .await
                .map_err(unavailable)?;
            for row in rows {
                let pairing: Pairing = serde_json::from_str(row.get(0)).map_err(unavailable)?;
                snapshot.pairings.push(pairing);
            }
            let rows = tx
                .query("SELECT body FROM trust ORDER BY version", &[])
                .await
                .map_err(unavailable)?;
            for row in rows {
                let entry: TrustEntry = serde_json::from_str(row.get(0)).map_err(unavailable)?;
                snapshot.trust.push(entry);
            }
            tx.commit().await.map_err(unavailable)?;
            Ok(snapshot)
        })
    }

    fn renew(&self, node: &str, now_ms: i64, lease_ms: i64) -> Call<'_, ()> {
        let node = node.to_owned();
        Box::pin(async move {
            let client = self.client().await?;
            let renewed = client
                .execute(
                    "UPDATE nodes SET lease_until_ms = $3 WHERE node_id = $1 AND lease_until_ms >= $2",
                    &[&node, &now_ms, &(now_ms + lease_ms)],
                )
                .await
                .map_err(unavailable)?;
            if renewed == 0 {
                return Err(fenced(&node, "its lease lapsed or was taken over"));
            }
            Ok(())
        })
    }

    fn write(&self, node: &str, batch: u64, changes: &[Change]) -> Call<'_, ()> {
        let node = node.to_owned();
        let jobs: Vec<Arc<Job>> = last_versions(changes).into_iter().cloned().collect();
        let others: Vec<Change> = changes
            .iter()
            .filter(|c| matches!(c, Change::Pairing(_) | Change::Trust(_)))
            .cloned()
            .collect();
        Box::pin(async move {
            let mut client = self.client().await?;
            let upsert = client
                .prepare_cached(UPSERT_JOB)
                .await
                .map_err(unavailable)?;
            let spend = client
                .prepare_cached(SPEND_NONCE)
                .await
                .map_err(unavailable)?;
            let tx = client.transaction().await.map_err(unavailable)?;
            if !begin_batch(&tx, &node, batch).await? {
                // Committed before; its answer was lost.
                return Ok(());
            }
            let mut pooled = false;
            for job in &jobs {
                pooled |= write_job(&tx, (&upsert, &spend), &node, job).await?;
            }
            for change in &others {
                write_record(&tx, change).await?;
            }
            // Trust written wakes the other nodes too: they learn it.
            pooled |= !others.iter().all(|c| matches!(c, Change::Pairing(_)));
            if pooled {
                tx.batch_execute("NOTIFY jobs_pending")
                    .await
                    .map_err(unavailable)?;
            }
            tx.commit().await.map_err(unavailable)
        })
    }

    fn claim(&self, node: &str, want: &Want, now_ms: i64) -> Call<'_, Vec<Job>> {
        let node = node.to_owned();
        let types: Vec<String> = want.public.iter().map(name).collect();
        let pairs: Vec<String> = want
            .private
            .iter()
            .map(|(user, t)| format!("{user}/{}", name(t)))
            .collect();
        let max = want.max as i64;
        Box::pin(async move {
            if max == 0 {
                return Ok(Vec::new());
            }
            let client = self.client().await?;
            let rows = client
                .query(
                    "UPDATE jobs SET owner = $1 WHERE id IN (
                        SELECT id FROM jobs WHERE owner IS NULL AND status = 'pending'
                        AND ((NOT private AND job_type = ANY($2))
                          OR (private AND (user_id || '/' || job_type) = ANY($3))
                          OR deadline_ms <= $4)
                        AND EXISTS (SELECT 1 FROM nodes WHERE node_id = $1)
                        ORDER BY tier, cseq LIMIT $5 FOR UPDATE SKIP LOCKED)
                     RETURNING tier, cseq, body",
                    &[&node, &types, &pairs, &now_ms, &max],
                )
                .await
                .map_err(unavailable)?;
            let mut claimed = Vec::with_capacity(rows.len());
            for row in rows {
                let rank: (i16, i64) = (row.get(0), row.get(1));
                claimed.push((rank, parse_job(row.get(2))?));
            }
            claimed.sort_by_key(|(rank, _)| *rank);
            Ok(claimed.into_iter().map(|(_, job)| job).collect())
        })
    }

    fn take_over_lapsed(&self, node: &str, now_ms: i64) -> Call<'_, Vec<Job>> {
        let node = node.to_owned();
        Box::pin(async move {
            let mut client = self.client().await?;
            let tx = client.transaction().await.map_err(unavailable)?;
            let alive = tx
                .query_opt("SELECT 1 FROM nodes WHERE node_id = $1", &[&node])
                .await
                .map_err(unavailable)?;
            if alive.is_none() {
                return Err(fenced(&node, "its lease was taken over"));
            }
            let lapsed = tx
                .query(
                    "SELECT node_id FROM nodes WHERE node_id <> $1 AND lease_until_ms < $2
                     ORDER BY node_id FOR UPDATE SKIP LOCKED",
                    &[&node, &now_ms],
                )
                .await
                .map_err(unavailable)?;
            let mut taken = Vec::new();
            for row in lapsed {
                let dead: String = row.get(0);
                let rows = tx
                    .query(
                        "UPDATE jobs SET owner = $1 WHERE owner = $2
                         AND status IN ('pending', 'assigned', 'running')
                         RETURNING cseq, body",
                        &[&node, &dead],
                    )
                    .await
                    .map_err(unavailable)?;
                let mut jobs = Vec::with_capacity(rows.len());
                for row in rows {
                    jobs.push((row.get::<_, i64>(0), parse_job(row.get(1))?));
                }
                jobs.sort_by_key(|(cseq, _)| *cseq);
                taken.extend(jobs.into_iter().map(|(_, job)| job));
                tx.execute(
                    "DELETE FROM nonces WHERE reserved_by = $1 AND job IS NULL",
                    &[&dead],
                )
                .await
                .map_err(unavailable)?;
                tx.execute("DELETE FROM presence WHERE node_id = $1", &[&dead])
                    .await
                    .map_err(unavailable)?;
                tx.execute("DELETE FROM nodes WHERE node_id = $1", &[&dead])
                    .await
                    .map_err(unavailable)?;
                tracing::warn!(dead = %dead, jobs = taken.len(), "took over a node whose lease lapsed");
            }
            tx.commit().await.map_err(unavailable)?;
            Ok(taken)
        })
    }

    fn job(&self, id: Uuid) -> Call<'_, Option<Job>> {
        Box::pin(async move {
            let client = self.client().await?;
            let row = client
                .query_opt("SELECT body FROM jobs WHERE id = $1", &[&id.to_string()])
                .await
                .map_err(unavailable)?;
            row.map(|row| parse_job(row.get(0))).transpose()
        })
    }

    fn job_statuses(&self, ids: &[Uuid]) -> Call<'_, Vec<(Uuid, protocol::api::JobStatus)>> {
        let ids: Vec<String> = ids.iter().map(Uuid::to_string).collect();
        Box::pin(async move {
            let client = self.client().await?;
            let rows = client
                .query("SELECT id, status FROM jobs WHERE id = ANY($1)", &[&ids])
                .await
                .map_err(unavailable)?;
            let mut statuses = Vec::with_capacity(rows.len());
            for row in rows {
                let id: String = row.get(0);
                let status: String = row.get(1);
                let id = Uuid::parse_str(&id).map_err(unavailable)?;
                let status = serde_json::from_value(serde_json::Value::String(status))
                    .map_err(|e| unavailable(format!("a stored job status is unreadable: {e}")))?;
                statuses.push((id, status));
            }
            Ok(statuses)
        })
    }

    fn paid_job(&self, nonce: NonceKey) -> Call<'_, Option<Job>> {
        Box::pin(async move {
            let client = self.client().await?;
            let row = client
                .query_opt("SELECT body FROM jobs WHERE nonce = $1", &[&json(&nonce)])
                .await
                .map_err(unavailable)?;
            row.map(|row| parse_job(row.get(0))).transpose()
        })
    }

    fn reserve_nonce(&self, node: &str, key: NonceKey, valid_before_s: u64) -> Call<'_, bool> {
        let node = node.to_owned();
        Box::pin(async move {
            let client = self.client().await?;
            let valid_before = i64::try_from(valid_before_s).unwrap_or(i64::MAX);
            let reserved = client
                .execute(
                    "INSERT INTO nonces (key, reserved_by, job, valid_before)
                     VALUES ($1, $2, NULL, $3) ON CONFLICT (key) DO NOTHING",
                    &[&json(&key), &node, &valid_before],
                )
                .await
                .map_err(unavailable)?;
            Ok(reserved == 1)
        })
    }

    fn release_nonce(&self, _node: &str, key: NonceKey) -> Call<'_, ()> {
        Box::pin(async move {
            let client = self.client().await?;
            client
                .execute(
                    "DELETE FROM nonces WHERE key = $1 AND job IS NULL",
                    &[&json(&key)],
                )
                .await
                .map_err(unavailable)?;
            Ok(())
        })
    }

    fn pairing(&self, code: &str) -> Call<'_, Option<Pairing>> {
        let code = code.to_owned();
        Box::pin(async move {
            let client = self.client().await?;
            let row = client
                .query_opt("SELECT body FROM pairings WHERE code = $1", &[&code])
                .await
                .map_err(unavailable)?;
            row.map(|row| serde_json::from_str(row.get(0)).map_err(unavailable))
                .transpose()
        })
    }

    fn swap_pairing(&self, _node: &str, old: &Pairing, new: &Pairing) -> Call<'_, bool> {
        let (code, old, new) = (old.code.clone(), json(old), json(new));
        Box::pin(async move {
            let client = self.client().await?;
            let swapped = client
                .execute(
                    "UPDATE pairings SET body = $3 WHERE code = $1 AND body = $2",
                    &[&code, &old, &new],
                )
                .await
                .map_err(unavailable)?;
            Ok(swapped == 1)
        })
    }

    fn trust_of(&self, user_id: &str) -> Call<'_, Vec<TrustEntry>> {
        let user_id = user_id.to_owned();
        Box::pin(async move {
            let client = self.client().await?;
            let rows = client
                .query("SELECT body FROM trust WHERE user_id = $1", &[&user_id])
                .await
                .map_err(unavailable)?;
            rows.iter()
                .map(|row| serde_json::from_str(row.get(0)).map_err(unavailable))
                .collect()
        })
    }

    fn trust_after(&self, version: u64) -> Call<'_, (Vec<TrustEntry>, u64)> {
        Box::pin(async move {
            let client = self.client().await?;
            let after = i64::try_from(version).unwrap_or(i64::MAX);
            let rows = client
                .query(
                    "SELECT version, body FROM trust WHERE version > $1 ORDER BY version",
                    &[&after],
                )
                .await
                .map_err(unavailable)?;
            let mut latest = version;
            let mut entries = Vec::with_capacity(rows.len());
            for row in rows {
                latest = latest.max(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0));
                entries.push(serde_json::from_str(row.get(1)).map_err(unavailable)?);
            }
            Ok((entries, latest))
        })
    }

    fn set_presence(&self, node: &str, workers: &BTreeSet<(String, JobType)>) -> Call<'_, ()> {
        let node = node.to_owned();
        let keys: Vec<String> = workers.iter().map(|(key, _)| key.clone()).collect();
        let types: Vec<String> = workers.iter().map(|(_, t)| name(t)).collect();
        Box::pin(async move {
            let mut client = self.client().await?;
            let tx = client.transaction().await.map_err(unavailable)?;
            tx.execute("DELETE FROM presence WHERE node_id = $1", &[&node])
                .await
                .map_err(unavailable)?;
            tx.execute(
                "INSERT INTO presence (node_id, pubkey, job_type)
                 SELECT $1, * FROM UNNEST($2::text[], $3::text[])",
                &[&node, &keys, &types],
            )
            .await
            .map_err(unavailable)?;
            tx.commit().await.map_err(unavailable)
        })
    }

    fn present(&self, keys: &[String], job_type: JobType) -> Call<'_, bool> {
        let keys = keys.to_vec();
        let job_type = name(&job_type);
        Box::pin(async move {
            let client = self.client().await?;
            let row = client
                .query_one(
                    "SELECT EXISTS (SELECT 1 FROM presence WHERE pubkey = ANY($1) AND job_type = $2)",
                    &[&keys, &job_type],
                )
                .await
                .map_err(unavailable)?;
            Ok(row.get(0))
        })
    }

    fn workers_online(&self) -> Call<'_, u64> {
        Box::pin(async move {
            let client = self.client().await?;
            let row = client
                .query_one(
                    "SELECT count(*) FROM (SELECT DISTINCT node_id, pubkey FROM presence) AS online",
                    &[],
                )
                .await
                .map_err(unavailable)?;
            Ok(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0))
        })
    }

    fn purge(&self, ids: Vec<Uuid>, orphans_before_ms: Option<i64>, now_s: u64) -> Call<'_, u64> {
        Box::pin(async move {
            let client = self.client().await?;
            let mut deleted = 0;
            // This node's forgotten jobs, by primary key, in batches.
            for batch in ids.chunks(PURGE_BATCH_MAX as usize) {
                let batch: Vec<String> = batch.iter().map(Uuid::to_string).collect();
                deleted += client
                    .execute(
                        "DELETE FROM jobs WHERE id = ANY($1) AND status IN ('completed', 'failed')",
                        &[&batch],
                    )
                    .await
                    .map_err(unavailable)?;
            }
            // Orphans in batches, each its own transaction, oldest first: a
            // large backlog is never one long statement holding its rows;
            // what one pass leaves, the next takes.
            let created_before_ms = orphans_before_ms.unwrap_or(i64::MIN);
            let batches = if orphans_before_ms.is_some() {
                PURGE_BATCHES_MAX
            } else {
                0
            };
            for _ in 0..batches {
                let batch = client
                    .execute(
                        "DELETE FROM jobs WHERE id IN (
                            SELECT id FROM jobs
                            WHERE status IN ('completed', 'failed') AND created_at_ms < $1
                            ORDER BY created_at_ms LIMIT $2)",
                        &[&created_before_ms, &PURGE_BATCH_MAX],
                    )
                    .await
                    .map_err(unavailable)?;
                deleted += batch;
                if batch < PURGE_BATCH_MAX as u64 {
                    break;
                }
            }
            let now_s = i64::try_from(now_s).unwrap_or(i64::MAX);
            client
                .execute("DELETE FROM nonces WHERE valid_before < $1", &[&now_s])
                .await
                .map_err(unavailable)?;
            let ended_ms = now_s.saturating_mul(1000) - crate::cluster::BUDGET_WINDOW_MS;
            client
                .execute("DELETE FROM budgets WHERE window_ms < $1", &[&ended_ms])
                .await
                .map_err(unavailable)?;
            Ok(deleted)
        })
    }

    fn pool_len(&self, _node: &str) -> Call<'_, u64> {
        Box::pin(async move {
            let client = self.client().await?;
            let row = client
                .query_one(
                    "SELECT count(*) FROM jobs WHERE owner IS NULL AND status = 'pending'",
                    &[],
                )
                .await
                .map_err(unavailable)?;
            Ok(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0))
        })
    }

    fn take_budget(&self, _node: &str, key: &str, window_ms: i64, max: u64) -> Call<'_, bool> {
        let key = key.to_owned();
        Box::pin(async move {
            if max == 0 {
                return Ok(false);
            }
            let client = self.client().await?;
            let max = i64::try_from(max).unwrap_or(i64::MAX);
            // One row per window: the insert or the guarded increment is
            // the cluster-wide decision.
            let taken = client
                .execute(
                    "INSERT INTO budgets (key, window_ms, used) VALUES ($1, $2, 1)
                     ON CONFLICT (key, window_ms) DO UPDATE SET used = budgets.used + 1
                     WHERE budgets.used < $3",
                    &[&key, &window_ms, &max],
                )
                .await
                .map_err(unavailable)?;
            Ok(taken == 1)
        })
    }

    fn give_back_budget(&self, _node: &str, key: &str, window_ms: i64) -> Call<'_, ()> {
        let key = key.to_owned();
        Box::pin(async move {
            let client = self.client().await?;
            client
                .execute(
                    "UPDATE budgets SET used = used - 1
                     WHERE key = $1 AND window_ms = $2 AND used > 0",
                    &[&key, &window_ms],
                )
                .await
                .map_err(unavailable)?;
            Ok(())
        })
    }

    fn pool_changed(&self) -> watch::Receiver<u64> {
        self.pool_rx.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::api::JobStatus;

    #[test]
    fn column_values_are_the_serde_names_the_queries_use() {
        assert_eq!(name(&JobStatus::Pending), "pending");
        assert_eq!(name(&JobStatus::Assigned), "assigned");
        assert_eq!(name(&protocol::api::JobType::LlmInfer), "LLM_INFER");
    }

    #[test]
    fn a_batch_writes_each_job_once_in_order_of_first_appearance() {
        let a = Arc::new(test_job(1));
        let b = Arc::new(test_job(2));
        let mut a2 = (*a).clone();
        a2.status = JobStatus::Assigned;
        let changes = [
            Change::Job(a.clone()),
            Change::Job(b.clone()),
            Change::Job(Arc::new(a2)),
        ];
        let last = last_versions(&changes);
        assert_eq!(last.len(), 2);
        assert_eq!((last[0].id, last[0].status), (a.id, JobStatus::Assigned));
        assert_eq!(last[1].id, b.id);
    }

    fn test_job(seed: u64) -> Job {
        use rand::SeedableRng;
        let mut core = crate::core::Core::new(
            crate::config::Config::default(),
            rand_chacha::ChaCha20Rng::seed_from_u64(seed),
        );
        let submission = protocol::api::JobSubmission {
            job_type: protocol::api::JobType::LlmInfer,
            user_id: "u".into(),
            payload: protocol::api::Payload::Llm {
                prompt: "hi".into(),
                max_tokens: 8,
                model: None,
            },
            privacy_class: protocol::api::PrivacyClass::Public,
        };
        let id = core
            .commit(submission, protocol::api::Tier::Fast, None, 0)
            .unwrap();
        core.job(&id).unwrap().clone()
    }
}
