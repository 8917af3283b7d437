//! The seam of cluster mode: what several nodes of one coordinator share
//! (docs/cluster.md).
//!
//! A job is either *held* by one node (its core has it, its worker session,
//! its lease timer) or *in the pool* (pending, owned by no node). Every job
//! write is conditional on ownership, so two nodes never both hold a job:
//! a write about a job another node now holds is refused whole
//! ([`ClusterError::Fenced`]) and the writer must stop. Nodes keep a lease;
//! once it lapses another node takes over the lapsed node's jobs, which then
//! go through the restart-recovery rules (the interrupted attempt is given
//! back, not spent).
//!
//! [`SharedStore`] is implemented by [`MemoryShared`] (plain code, no clock:
//! every call is given `now_ms`, so it runs inside the simulation and unit
//! tests) and by `postgres::PgShared` (PostgreSQL). Both must agree on the
//! semantics the tests below pin.

mod memory;
pub mod postgres;

pub use crate::core::Want;
pub use memory::MemoryShared;

use crate::core::trust::{Pairing, TrustEntry};
use crate::core::{Change, Job, Snapshot};
use protocol::api::{JobStatus, JobType, Tier};
use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use tokio::sync::{watch, Notify};
use uuid::Uuid;
use x402::NonceKey;

/// What a coordinator in cluster mode knows of its cluster.
pub struct ClusterLink {
    pub node: NodeId,
    pub shared: Arc<dyn SharedStore>,
    pub node_lease_ms: i64,
    /// Woken after an event that left a worker idle: the claim loop asks
    /// the pool if it may hold something.
    pub claim_wake: Notify,
    /// Woken when a worker registers or leaves: the presence task writes
    /// what is connected here.
    pub presence_wake: Notify,
}

/// The metrics text with the node's info series and the pool gauge added (before the
/// OpenMetrics `# EOF`), so every scrape names the node.
pub fn with_node_info(mut text: String, node: &str, pool_jobs: usize) -> String {
    let info = format!(
        "# HELP coordinator_node_info The node of a cluster this coordinator is.\n\
         # TYPE coordinator_node_info gauge\n\
         coordinator_node_info{{node=\"{node}\"}} 1\n\
         # HELP cluster_pool_jobs Pending jobs in the cluster's shared pool, as this node last counted them (read every claim interval).\n\
         # TYPE cluster_pool_jobs gauge\n\
         cluster_pool_jobs {pool_jobs}\n"
    );
    let at = text.rfind("# EOF").unwrap_or(text.len());
    text.insert_str(at, &info);
    text
}

pub type NodeId = String;

/// A future of a shared-store call.
pub type Call<'a, T> = Pin<Box<dyn Future<Output = Result<T, ClusterError>> + Send + 'a>>;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    /// This node no longer holds a job it wrote about, or its lease was
    /// taken over: another node may own its jobs, so it must stop.
    #[error("node {node} is fenced: {why}")]
    Fenced { node: NodeId, why: String },
    /// Another live node uses this node id.
    #[error("node id {0} is held by a live node")]
    NodeIdInUse(NodeId),
    /// The store could not be reached.
    #[error("shared store: {0}")]
    Unavailable(String),
    /// The store refused the data itself (a PostgreSQL data exception, such
    /// as U+0000 in text): the write fails, and nobody else owns anything
    /// because of it, so the node lives on (issue 29, finding 2).
    #[error("shared store refused the data: {0}")]
    Refused(String),
}

/// FAST before CHEAP in claim order.
pub fn tier_rank(tier: Tier) -> i16 {
    match tier {
        Tier::Fast => 0,
        Tier::Cheap => 1,
    }
}

/// Who holds a job once a node has written it: a pending job is in the
/// pool (a node's core never keeps one, see `Core::release_pending`),
/// anything else is the writer's.
pub fn owner_after_write(job: &Job, node: &str) -> Option<NodeId> {
    (job.status != JobStatus::Pending).then(|| node.to_owned())
}

/// What every node shares. Every call names the calling node and is given
/// the time, so an implementation reads no clock.
pub trait SharedStore: Send + Sync + 'static {
    /// Starts (or renews the lapsed lease of) `node` until `now_ms +
    /// lease_ms`. Returns what it starts on: the jobs it still held under
    /// the same id (to recover), all pairings and trust entries.
    fn join(&self, node: &str, now_ms: i64, lease_ms: i64) -> Call<'_, Snapshot>;
    /// Extends the node's lease. Fenced once it has lapsed or was taken over.
    fn renew(&self, node: &str, now_ms: i64, lease_ms: i64) -> Call<'_, ()>;
    /// Writes one batch of a node's changes in one transaction, all or
    /// nothing: jobs (held, or pending and so back in the pool), spent
    /// nonces, pairings, trust. Fenced if any job in it is held by another
    /// node or sits in the pool without having been released by this batch.
    ///
    /// `batch` numbers the node's writes since it joined, from 1: a write
    /// of the batch the store last committed for the node is answered Ok
    /// and changes nothing (its answer was lost and the writer retried; a
    /// second apply would find the jobs it released to the pool not its
    /// own and fence the node for nothing).
    fn write(&self, node: &str, batch: u64, changes: &[Change]) -> Call<'_, ()>;
    /// Takes pool jobs `want` matches, and pool jobs whose pending deadline
    /// is due, FAST before CHEAP then commit order, at most `want.max`.
    fn claim(&self, node: &str, want: &Want, now_ms: i64) -> Call<'_, Vec<Job>>;
    /// Takes over the non-terminal jobs of every other node whose lease
    /// lapsed before `now_ms` (each node's in commit order), and forgets
    /// those nodes.
    fn take_over_lapsed(&self, node: &str, now_ms: i64) -> Call<'_, Vec<Job>>;
    /// A job as last committed, whoever holds it.
    fn job(&self, id: Uuid) -> Call<'_, Option<Job>>;
    /// The status of each of `ids` the store holds (those it does not are
    /// left out), for waking held polls.
    fn job_statuses(&self, ids: &[Uuid]) -> Call<'_, Vec<(Uuid, JobStatus)>>;
    /// The job a payment bought, if any.
    fn paid_job(&self, nonce: NonceKey) -> Call<'_, Option<Job>>;
    /// Reserves a payment's nonce for `node` until `valid_before_s` (Unix
    /// seconds): true if this call reserved it, false if it was already
    /// reserved or spent, by any node. The row is the cluster-wide lock.
    fn reserve_nonce(&self, node: &str, key: NonceKey, valid_before_s: u64) -> Call<'_, bool>;
    /// Forgets a reservation (settlement failed, or the job was refused for
    /// free). A spent nonce is never released.
    fn release_nonce(&self, node: &str, key: NonceKey) -> Call<'_, ()>;
    /// A pairing code as stored (`code` in lower case), whoever made it.
    fn pairing(&self, code: &str) -> Call<'_, Option<Pairing>>;
    /// Replaces the stored pairing `old` by `new` if it is still exactly
    /// `old`: a compare-and-set, so of two nodes claiming one code at once
    /// one wins. True if this call replaced it.
    fn swap_pairing(&self, node: &str, old: &Pairing, new: &Pairing) -> Call<'_, bool>;
    /// The trust entries of one user, whoever wrote them.
    fn trust_of(&self, user_id: &str) -> Call<'_, Vec<TrustEntry>>;
    /// Trust entries written after `version`, and the version they bring the
    /// caller to.
    fn trust_after(&self, version: u64) -> Call<'_, (Vec<TrustEntry>, u64)>;
    /// Replaces what `node` reports connected: (worker key, job type)
    /// pairs. PRIVATE admission and the health count read it.
    fn set_presence(&self, node: &str, workers: &BTreeSet<(String, JobType)>) -> Call<'_, ()>;
    /// Whether one of `keys` is connected to some node with `job_type`.
    fn present(&self, keys: &[String], job_type: JobType) -> Call<'_, bool>;
    /// Workers connected to any node (a key counts once per node).
    fn workers_online(&self) -> Call<'_, u64>;
    /// Retention: deletes the finished jobs `ids` (those this node's
    /// ledger forgot: never another node's), finished jobs created before
    /// `orphans_before_ms` (rows no live node's ledger counts any more:
    /// their node restarted), and payment nonces whose `validBefore`
    /// passed before `now_s` (a payment that old is refused as expired).
    /// Returns the jobs deleted. Budget windows that ended before `now_s`
    /// go too.
    fn purge(&self, ids: Vec<Uuid>, orphans_before_ms: Option<i64>, now_s: u64) -> Call<'_, u64>;
    /// Pending jobs in the pool (no owner): what `queue_len_max` bounds
    /// cluster-wide.
    fn pool_len(&self, node: &str) -> Call<'_, u64>;
    /// Takes one from the cluster-wide budget `key` in the window starting
    /// at `window_ms`: true if fewer than `max` were taken in that window
    /// (this one then counts), false if it is used up. The rate limits that
    /// must be global (pairing claims and creates) count here.
    fn take_budget(&self, node: &str, key: &str, window_ms: i64, max: u64) -> Call<'_, bool>;
    /// Gives one back to `key`'s window: what was taken did not count
    /// after all (a claim that succeeded, where only failures count).
    fn give_back_budget(&self, node: &str, key: &str, window_ms: i64) -> Call<'_, ()>;
    /// Counts up on every write that put a job in the pool or wrote trust;
    /// a node waits on it to claim and to learn trust (PostgreSQL: `LISTEN
    /// jobs_pending`).
    fn pool_changed(&self) -> watch::Receiver<u64>;
}

/// The length of a cluster-wide budget window ([`SharedStore::take_budget`]):
/// the rate limits that must be global are per minute.
pub const BUDGET_WINDOW_MS: i64 = 60_000;

#[cfg(test)]
mod tests;
