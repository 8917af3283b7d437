//! The node's store: every event's changes written behind to the shared
//! store, batched in event order, one transaction a batch.

use super::{ClusterSettings, Fence};
use crate::cluster::{ClusterError, NodeId, SharedStore};
use crate::core::Change;
use crate::store::{Snapshot, Store, StoreError};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::{watch, Notify};

/// Pause between attempts to write a batch the store could not take.
const WRITE_RETRY_MS: u64 = 50;

/// The node's store: write-behind into the shared store.
pub struct NodeStore {
    node: NodeId,
    shared: Arc<dyn SharedStore>,
    /// Pairings and trust from the join, for the core's restore.
    joined: Mutex<Option<Snapshot>>,
    /// Jobs the node still held under its id, recovered once the
    /// coordinator is a node (see [`NodeStore::take_held`]).
    held: Mutex<Vec<crate::core::Job>>,
    pending: Mutex<Pending>,
    wake: Notify,
    /// The count of `apply` calls whose changes are committed.
    written: watch::Sender<u64>,
    fenced: AtomicBool,
    fence: Fence,
    node_lease_ms: i64,
}

#[derive(Default)]
struct Pending {
    changes: Vec<Change>,
    /// `apply` calls so far.
    applied: u64,
}

impl NodeStore {
    /// Joins the cluster as `node` and starts its writer task.
    pub async fn join(
        shared: Arc<dyn SharedStore>,
        settings: &ClusterSettings,
        now_ms: i64,
        fence: Fence,
    ) -> Result<Arc<Self>, ClusterError> {
        let node = settings.node_id.clone();
        let mut snapshot = shared.join(&node, now_ms, settings.node_lease_ms).await?;
        let held = std::mem::take(&mut snapshot.jobs);
        let store = Arc::new(Self {
            node,
            shared,
            joined: Mutex::new(Some(snapshot)),
            held: Mutex::new(held),
            pending: Mutex::new(Pending::default()),
            wake: Notify::new(),
            written: watch::channel(0).0,
            fenced: AtomicBool::new(false),
            fence,
            node_lease_ms: settings.node_lease_ms,
        });
        tokio::spawn(store.clone().run_writer());
        Ok(store)
    }

    fn pending(&self) -> MutexGuard<'_, Pending> {
        // Appends and takes only: a panic cannot leave it half-changed.
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The jobs this node id still held when it joined (it restarted
    /// before its lease lapsed), for `Core::recover` once the coordinator
    /// is a node: recovered then, their requeues go to the pool.
    pub fn take_held(&self) -> Vec<crate::core::Job> {
        std::mem::take(&mut *self.held.lock().unwrap_or_else(|p| p.into_inner()))
    }

    pub fn is_fenced(&self) -> bool {
        self.fenced.load(Ordering::SeqCst)
    }

    /// Stops writing, as a killed process does (the simulation's crash):
    /// what was not committed is lost, and the fence does not run.
    pub fn halt(&self) {
        self.fenced.store(true, Ordering::SeqCst);
        self.written.send_modify(|_| {});
    }

    /// Stops the node: no flush succeeds any more, and the fence runs once.
    pub fn fence(&self, why: &ClusterError) {
        if !self.fenced.swap(true, Ordering::SeqCst) {
            tracing::error!(node = %self.node, error = %why, "node fenced: stopping");
            self.written.send_modify(|_| {});
            (self.fence)(why);
        }
    }

    /// Commits pending batches as they come, in order, one transaction
    /// each. A store that cannot be reached is retried until half the node
    /// lease has passed; then the node fences itself, since others are
    /// about to take its jobs.
    async fn run_writer(self: Arc<Self>) {
        let retries_max = (self.node_lease_ms / 2) as u64 / WRITE_RETRY_MS;
        loop {
            let (changes, applied) = {
                let mut p = self.pending();
                (std::mem::take(&mut p.changes), p.applied)
            };
            if changes.is_empty() {
                if applied > *self.written.borrow() {
                    self.written.send_replace(applied);
                }
                self.wake.notified().await;
                continue;
            }
            let mut retries = 0;
            loop {
                if self.is_fenced() {
                    return;
                }
                match self.shared.write(&self.node, applied, &changes).await {
                    Ok(()) => break,
                    Err(ClusterError::Unavailable(e)) if retries < retries_max => {
                        retries += 1;
                        tracing::warn!(error = %e, retries, "shared store write failed; retrying");
                        tokio::time::sleep(Duration::from_millis(WRITE_RETRY_MS)).await;
                    }
                    Err(e) => {
                        self.fence(&e);
                        return;
                    }
                }
            }
            self.written.send_replace(applied);
        }
    }
}

impl Store for NodeStore {
    fn apply(&self, changes: &[Change]) -> Result<(), StoreError> {
        if self.is_fenced() {
            return Err(StoreError(format!("node {} is fenced", self.node)));
        }
        let mut p = self.pending();
        p.changes.extend_from_slice(changes);
        p.applied += 1;
        drop(p);
        self.wake.notify_one();
        Ok(())
    }

    fn flush(&self) -> Pin<Box<dyn Future<Output = Result<(), StoreError>> + Send + '_>> {
        let target = self.pending().applied;
        let mut written = self.written.subscribe();
        Box::pin(async move {
            loop {
                if self.is_fenced() {
                    return Err(StoreError(format!("node {} is fenced", self.node)));
                }
                if *written.borrow_and_update() >= target {
                    return Ok(());
                }
                if written.changed().await.is_err() {
                    return Err(StoreError("the writer stopped".into()));
                }
            }
        })
    }

    fn load(&self) -> Result<Snapshot, StoreError> {
        let mut joined = self.joined.lock().unwrap_or_else(|p| p.into_inner());
        Ok(joined.take().unwrap_or_default())
    }
}
