//! The node's store: every event's changes written behind to the shared
//! store, batched in event order, one transaction a batch.

use super::{ClusterSettings, Fence};
use crate::cluster::{ClusterError, NodeId, SharedStore};
use crate::core::{Change, Job};
use crate::store::{latest_job, Snapshot, Store, StoreError};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::{oneshot, Notify};
use uuid::Uuid;

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
    written: Mutex<Written>,
    fenced: AtomicBool,
    fence: Fence,
    node_lease_ms: i64,
}

/// What is committed, and who waits for it.
#[derive(Default)]
struct Written {
    /// The count of `apply` calls whose changes are committed.
    upto: u64,
    /// `flush` calls waiting for `upto` to reach their target, in call
    /// order, answered in that order (`true`: committed; `false`: fenced),
    /// so the tasks they wake run in an order that does not depend on the
    /// runtime's internals (as the SQLite store's). A watch channel would
    /// wake them in the order of its randomly chosen notify shards.
    waiters: VecDeque<(u64, oneshot::Sender<bool>)>,
}

#[derive(Default)]
struct Pending {
    changes: Vec<Change>,
    /// The batch the writer took last, kept here until it takes the next
    /// (right after this one is written, with no wait between), so
    /// [`Store::job`] finds a version while the write is under way. An
    /// `Arc`, so a read scans it without holding this lock.
    writing: Arc<Vec<Change>>,
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
            written: Mutex::new(Written::default()),
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

    /// Whether the snapshot the core opens on ([`Store::load`]) holds jobs
    /// or pairings, so the core moves its RNG by them (see
    /// `server::node_rng`). Held jobs are recovered later, not loaded.
    pub fn restores_state(&self) -> bool {
        let joined = self.joined.lock().unwrap_or_else(|p| p.into_inner());
        joined
            .as_ref()
            .is_some_and(|s| !s.jobs.is_empty() || !s.pairings.is_empty())
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
        self.answer_waiters();
    }

    /// Stops the node: no flush succeeds any more, and the fence runs once.
    pub fn fence(&self, why: &ClusterError) {
        if !self.fenced.swap(true, Ordering::SeqCst) {
            tracing::error!(node = %self.node, error = %why, "node fenced: stopping");
            crate::buggify::ownership_noted(crate::buggify::Ownership::Fenced {
                node: self.node.clone(),
            });
            self.answer_waiters();
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
                p.writing = Arc::new(std::mem::take(&mut p.changes));
                (Arc::clone(&p.writing), p.applied)
            };
            if changes.is_empty() {
                self.committed(applied);
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
                    Err(ClusterError::Refused(why)) => {
                        // The batch is not written; its waiters hear so
                        // and the node goes on with the next one.
                        tracing::error!(node = %self.node, error = %why, "shared store refused a batch");
                        self.refused(applied);
                        break;
                    }
                    Err(e) => {
                        self.fence(&e);
                        return;
                    }
                }
            }
            self.committed(applied);
        }
    }

    fn written(&self) -> MutexGuard<'_, Written> {
        // Plain assignments and queue moves: a panic leaves it whole.
        self.written.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Answers the waiters of a batch the store refused with an error (as
    /// [`Self::committed`] then records it, it is not waited for again).
    fn refused(&self, applied: u64) {
        let mut w = self.written();
        while w
            .waiters
            .front()
            .is_some_and(|&(target, _)| target <= applied)
        {
            let (_, tx) = w.waiters.pop_front().expect("a front waiter");
            let _ = tx.send(false);
        }
    }

    /// Records that the first `applied` calls' changes are committed.
    fn committed(&self, applied: u64) {
        let mut w = self.written();
        if applied > w.upto {
            w.upto = applied;
        }
        drop(w);
        self.answer_waiters();
    }

    /// Answers, in call order, the waiters whose changes are committed,
    /// and every waiter once the node is fenced.
    fn answer_waiters(&self) {
        let mut w = self.written();
        let fenced = self.is_fenced();
        while let Some(&(target, _)) = w.waiters.front() {
            if !fenced && target > w.upto {
                break;
            }
            let (_, tx) = w.waiters.pop_front().expect("a front waiter");
            let _ = tx.send(!fenced);
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
        Box::pin(async move {
            let fenced = || {
                StoreError(format!(
                    "node {}: the shared store did not commit the change (refused, or fenced)",
                    self.node
                ))
            };
            let answer = {
                // Fencing sets the flag before it answers the waiters
                // under this lock: a waiter queued here is answered.
                let mut w = self.written();
                if self.is_fenced() {
                    return Err(fenced());
                }
                if w.upto >= target {
                    return Ok(());
                }
                let (tx, rx) = oneshot::channel();
                w.waiters.push_back((target, tx));
                rx
            };
            match answer.await {
                Ok(true) => Ok(()),
                Ok(false) | Err(_) => Err(fenced()),
            }
        })
    }

    fn load(&self) -> Result<Snapshot, StoreError> {
        let mut joined = self.joined.lock().unwrap_or_else(|p| p.into_inner());
        Ok(joined.take().unwrap_or_default())
    }

    /// Only what this node has not written yet: the changes appended since
    /// the writer's last take, newest first, then the batch it is writing.
    /// `None` otherwise; the caller then reads the shared store (as
    /// `node::shared_record` does), which every other node writes too. A
    /// fenced node answers an error, as its `flush` does.
    fn job(&self, id: &Uuid) -> Result<Option<Arc<Job>>, StoreError> {
        if self.is_fenced() {
            return Err(StoreError(format!("node {} is fenced", self.node)));
        }
        let writing = {
            let p = self.pending();
            if let Some(job) = latest_job(&p.changes, id) {
                return Ok(Some(job));
            }
            Arc::clone(&p.writing)
        };
        Ok(latest_job(&writing, id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::MemoryShared;
    use protocol::api::JobStatus;

    /// A version the writer is still trying to write, and a later one it
    /// has not taken yet, are both read here; once written, the node has
    /// nothing of its own and the shared store answers.
    /// Node `n1` joined to `shared`, `fence` run if it is fenced.
    async fn joined(shared: &Arc<MemoryShared>, fence: Fence) -> Arc<NodeStore> {
        let settings = ClusterSettings {
            url: String::new(),
            schema: None,
            node_id: "n1".into(),
            node_lease_ms: 60_000,
        };
        NodeStore::join(shared.clone(), &settings, 0, fence)
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn unwritten_versions_read_newest_first() {
        let shared = Arc::new(MemoryShared::default());
        let store = joined(&shared, Arc::new(|_: &ClusterError| {})).await;
        // Held by this node (a pending job would go to the pool, and a
        // later version of it from here would fence the node).
        let (mut job, _) = crate::store::tests::committed();
        Arc::make_mut(&mut job).status = JobStatus::Assigned;
        assert!(store.job(&job.id).unwrap().is_none());

        shared.cut("n1");
        store.apply(&[Change::Job(Arc::clone(&job))]).unwrap();
        for _ in 0..100 {
            if store.pending().changes.is_empty() {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert!(store.pending().changes.is_empty(), "the writer took it");
        let read = store.job(&job.id).unwrap().expect("being written");
        assert!(Arc::ptr_eq(&read, &job));

        let mut running = Arc::clone(&job);
        Arc::make_mut(&mut running).status = JobStatus::Running;
        store.apply(&[Change::Job(Arc::clone(&running))]).unwrap();
        let read = store.job(&job.id).unwrap().expect("pending");
        assert!(Arc::ptr_eq(&read, &running), "the latest version wins");

        shared.heal("n1");
        store.flush().await.unwrap();
        assert!(store.job(&job.id).unwrap().is_none());
        let written = shared.job(job.id).await.unwrap().expect("written");
        assert_eq!(written.status, JobStatus::Running);
        assert!(store.job(&Uuid::nil()).unwrap().is_none());
    }

    /// Issue 29, finding 2: a batch the store refuses for its data (U+0000,
    /// which PostgreSQL takes in no text) fails its own waiters, and the
    /// node lives on: it is not fenced, and its next batch commits. Before
    /// the fix any write error fenced the node, so one request stopped it.
    #[tokio::test]
    async fn a_refused_batch_fails_its_waiters_and_the_node_lives_on() {
        let shared = Arc::new(MemoryShared::default());
        let fenced = Arc::new(AtomicBool::new(false));
        let seen = fenced.clone();
        let fence: Fence = Arc::new(move |_: &ClusterError| seen.store(true, Ordering::SeqCst));
        let store = joined(&shared, fence).await;
        let (mut bad, _) = crate::store::tests::committed();
        Arc::make_mut(&mut Arc::make_mut(&mut bad).submission).user_id = "a\u{0}b".into();
        store.apply(&[Change::Job(bad)]).unwrap();
        assert!(
            store.flush().await.is_err(),
            "the refused batch's waiter hears so"
        );
        assert!(!store.is_fenced() && !fenced.load(Ordering::SeqCst));

        let (mut good, _) = crate::store::tests::committed();
        Arc::make_mut(&mut good).id = Uuid::from_u128(7);
        store.apply(&[Change::Job(Arc::clone(&good))]).unwrap();
        store.flush().await.expect("the next batch commits");
        assert!(shared.job(good.id).await.unwrap().is_some());
    }
}
