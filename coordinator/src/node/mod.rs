//! One node of a cluster (docs/cluster.md): the shell
//! around a node's core that keeps it in step with the shared store.
//!
//! - [`NodeStore`] is the node's [`Store`](crate::store::Store): every event's changes are
//!   written behind, batched, in event order, one shared-store transaction
//!   a batch; `flush` waits for the batch holding the caller's changes.
//! - [`run_lease`] renews the node's lease and takes over lapsed nodes' jobs.
//! - [`run_claims`] learns trust other nodes wrote and claims pool jobs for
//!   idle workers, woken by the store's notifications, by a freed slot, and
//!   every [`CLAIM_INTERVAL_MS`].
//! - [`run_presence`] keeps the shared presence (who is connected here) for
//!   PRIVATE admission and the health count on every node.
//! - [`run_remote_watch`] wakes held polls of jobs other nodes hold, one
//!   batched status read a round.
//! - [`take_claim_budgets`] and [`take_create_budgets`] take from the
//!   cluster-wide rate budgets before a request counts against them.
//! - A node that loses a job or its lease *fences itself*: its store
//!   refuses every further flush (so no client or worker is told anything
//!   more) and the process is told to stop ([`Fence`]).
//!
//! Files: `store.rs` (the write-behind store), `tasks.rs` (lease, presence,
//! claims, remote watch, retention), `requests.rs` (what handlers ask of
//! the shared store), `nonces.rs` (the payment gate's nonce rows),
//! `logs.rs` (log lines naming the node).
//!
//! Time comes from the coordinator's injected clock; tokio time drives the
//! intervals, so the simulation can run nodes on its paused clock.

pub use crate::cluster::ClusterLink;
use crate::cluster::{ClusterError, NodeId};
use rand::RngCore;
use rand_chacha::ChaCha20Rng;
use std::sync::Arc;

mod logs;
mod nonces;
mod requests;
mod store;
mod tasks;

pub use logs::NodeLogs;
pub use nonces::SharedNonces;
pub use requests::{
    learn_trust_of, pairing_for_claim, pairing_is_ours, shared_job, shared_paid_job, shared_record,
    take_claim_budgets, take_create_budgets, trusted_elsewhere, workers_online, BudgetRefused,
    Budgets,
};
pub use store::NodeStore;
pub use tasks::{
    run_claims, run_lease, run_presence, run_remote_watch, run_retention, REMOTE_POLL_INTERVAL_MS,
    REMOTE_WATCH_BATCH_MAX,
};

/// Jobs one claim takes at most.
pub const CLAIM_BATCH_MAX: usize = 256;

/// Backstop for a lost notification, and how often due pool jobs are looked for.
pub const CLAIM_INTERVAL_MS: u64 = 1_000;

/// How long a node's lease lasts unrenewed (renewed every third of it).
pub const NODE_LEASE_MS: i64 = 10_000;

/// What makes a process one node of a cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterSettings {
    /// `postgres://…` (or `postgresql://…`).
    pub url: String,
    /// The PostgreSQL schema the tables live in (default: the URL's).
    pub schema: Option<String>,
    pub node_id: NodeId,
    pub node_lease_ms: i64,
}

/// Whether `db` names a PostgreSQL database (cluster mode).
pub fn is_postgres_url(db: &str) -> bool {
    db.starts_with("postgres://") || db.starts_with("postgresql://")
}

/// The default node id: `node-` and 8 hex digits from a stream of the
/// injected RNG of its own, so the node's ids and codes are drawn as they
/// would be without it. Unique per process in production (OS entropy),
/// reproducible in the simulation (seeded).
pub fn default_node_id(rng: &ChaCha20Rng) -> NodeId {
    let mut rng = rng.clone();
    rng.set_stream(0x6e6f_6465);
    format!("node-{:08x}", rng.next_u32())
}

/// What the node does once fenced: a process exits (another node owns its
/// jobs now); the simulation would crash the node.
pub type Fence = Arc<dyn Fn(&ClusterError) + Send + Sync>;
