//! The seam of cluster mode: what several nodes of one coordinator share
//! (ARCHITECTURE.md, "Several nodes").
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
//! tests) and by `crate::pg::PgShared` (PostgreSQL). Both must agree on the
//! semantics the tests below pin.

use crate::core::{Change, Job};
use crate::store::Snapshot;
use crate::trust::{Pairing, TrustEntry};
use protocol::api::{JobStatus, JobType, PrivacyClass, Tier};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::watch;
use uuid::Uuid;
use x402::NonceKey;

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
    /// The store could not be reached or refused the call.
    #[error("shared store: {0}")]
    Unavailable(String),
}

/// What a node's idle workers can take now: the claim filter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Want {
    /// Job types with a free slot, for PUBLIC jobs.
    pub public: BTreeSet<JobType>,
    /// (user, job type) pairs an idle trusted worker can serve, for PRIVATE jobs.
    pub private: BTreeSet<(String, JobType)>,
    /// At most this many jobs (free slots, capped by the caller).
    pub max: usize,
}

impl Want {
    fn matches(&self, job: &Job) -> bool {
        let s = &job.submission;
        match s.privacy_class {
            PrivacyClass::Public => self.public.contains(&s.job_type),
            PrivacyClass::Private => self.private.contains(&(s.user_id.clone(), s.job_type)),
        }
    }
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
    /// Retention: deletes terminal jobs created before `created_before_ms`
    /// and payment nonces whose `validBefore` passed before `now_s` (a
    /// payment that old is refused as expired). Returns the jobs deleted.
    /// Budget windows that ended before `now_s` go too.
    fn purge(&self, created_before_ms: i64, now_s: u64) -> Call<'_, u64>;
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

/// The shared store as plain data: deterministic, no clock, no I/O.
#[derive(Debug)]
pub struct MemoryShared {
    inner: Mutex<Tables>,
    /// One channel per subscriber, in subscription order: a change is sent
    /// to each in that order, so the nodes wake in a fixed order (one
    /// shared `watch` wakes its receivers in an order of tokio's choosing,
    /// which the simulation must not depend on).
    pool_tx: Mutex<Vec<watch::Sender<u64>>>,
}

#[derive(Debug, Default)]
struct Tables {
    jobs: BTreeMap<Uuid, Row>,
    next_cseq: u64,
    nodes: BTreeMap<NodeId, i64>,
    /// Nodes whose calls fail as if the store were unreachable.
    cut: BTreeSet<NodeId>,
    pairings: BTreeMap<String, Pairing>,
    /// Trust entries by (user, key), with the version that last wrote them.
    trust: BTreeMap<(String, String), (u64, TrustEntry)>,
    trust_version: u64,
    nonces: BTreeMap<NonceKey, Nonce>,
    presence: BTreeMap<NodeId, BTreeSet<(String, JobType)>>,
    /// Taken from each budget, by (key, window start).
    budgets: BTreeMap<(String, i64), u64>,
    /// Each node's last batch written since it joined.
    last_batch: BTreeMap<NodeId, u64>,
    /// Nodes whose next write commits but answers as failed.
    lose_answer: BTreeSet<NodeId>,
}

#[derive(Debug, Clone)]
struct Nonce {
    /// The node that reserved it, whose death releases it unless spent.
    by: NodeId,
    valid_before_s: u64,
    /// The job it bought, once spent.
    job: Option<Uuid>,
}

#[derive(Debug, Clone)]
struct Row {
    job: Arc<Job>,
    owner: Option<NodeId>,
    /// Cluster commit order, given at the first write.
    cseq: u64,
}

impl Default for MemoryShared {
    fn default() -> Self {
        Self {
            inner: Mutex::new(Tables::default()),
            pool_tx: Mutex::default(),
        }
    }
}

impl MemoryShared {
    fn tables(&self) -> MutexGuard<'_, Tables> {
        // Every call checks before it changes anything, so a panic cannot
        // leave the tables half-written.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Cuts `node` from the store (a partition): its calls fail until
    /// [`MemoryShared::heal`]; its lease runs out meanwhile.
    pub fn cut(&self, node: &str) {
        self.tables().cut.insert(node.to_owned());
    }

    pub fn heal(&self, node: &str) {
        self.tables().cut.remove(node);
    }

    /// Makes `node`'s next write commit but answer as if the store could
    /// not be reached (a connection lost after the commit).
    pub fn lose_next_answer(&self, node: &str) {
        self.tables().lose_answer.insert(node.to_owned());
    }

    /// Everything stored, whoever holds it: every job as last committed
    /// (in id order), pairings and trust, for the simulation's end-of-run
    /// checks.
    pub fn snapshot(&self) -> Snapshot {
        let t = self.tables();
        Snapshot {
            jobs: t.jobs.values().map(|r| (*r.job).clone()).collect(),
            pairings: t.pairings.values().cloned().collect(),
            trust: t.trust.values().map(|(_, e)| e.clone()).collect(),
        }
    }

    /// Tells every subscriber, in subscription order, that the pool changed.
    fn pool_changed_now(&self) {
        let subscribers = self.pool_tx.lock().unwrap_or_else(|p| p.into_inner());
        for tx in subscribers.iter() {
            tx.send_modify(|n| *n += 1);
        }
    }

    /// Who holds `id`: `Some(None)` for a job in the pool.
    pub fn owner(&self, id: Uuid) -> Option<Option<NodeId>> {
        self.tables().jobs.get(&id).map(|r| r.owner.clone())
    }

    fn run<T: Send + 'static>(
        &self,
        node: &str,
        call: impl FnOnce(&mut Tables) -> Result<T, ClusterError>,
    ) -> Call<'_, T> {
        let mut t = self.tables();
        let out = if t.cut.contains(node) {
            Err(ClusterError::Unavailable(format!("{node} is cut off")))
        } else {
            call(&mut t)
        };
        Box::pin(std::future::ready(out))
    }
}

fn fenced(node: &str, why: String) -> ClusterError {
    ClusterError::Fenced {
        node: node.to_owned(),
        why,
    }
}

impl Tables {
    /// Whether `node` may write `job` now: a new job, one it holds, or one
    /// in the pool it released itself earlier in this batch.
    fn writable(&self, node: &str, id: &Uuid, released: &BTreeSet<Uuid>) -> bool {
        match self.jobs.get(id) {
            None => true,
            Some(row) => row.owner.as_deref() == Some(node) || released.contains(id),
        }
    }

    /// Drops the reservations `node` left unspent: it died (or restarted)
    /// before settling them, so no job was promised.
    fn release_reserved_by(&mut self, node: &str) {
        self.nonces.retain(|_, n| n.job.is_some() || n.by != node);
    }

    fn held_by(&self, node: &str) -> Vec<Job> {
        let held = self
            .jobs
            .values()
            .filter(|r| r.owner.as_deref() == Some(node));
        held.filter(|r| !r.job.status.is_terminal())
            .map(|r| (*r.job).clone())
            .collect()
    }
}

impl SharedStore for MemoryShared {
    fn join(&self, node: &str, now_ms: i64, lease_ms: i64) -> Call<'_, Snapshot> {
        self.run(node, |t| {
            if t.nodes.get(node).is_some_and(|&until| until >= now_ms) {
                return Err(ClusterError::NodeIdInUse(node.to_owned()));
            }
            t.nodes.insert(node.to_owned(), now_ms + lease_ms);
            t.last_batch.remove(node);
            t.release_reserved_by(node);
            Ok(Snapshot {
                jobs: t.held_by(node),
                pairings: t.pairings.values().cloned().collect(),
                trust: t.trust.values().map(|(_, e)| e.clone()).collect(),
            })
        })
    }

    fn renew(&self, node: &str, now_ms: i64, lease_ms: i64) -> Call<'_, ()> {
        self.run(node, |t| match t.nodes.get_mut(node) {
            Some(until) if *until >= now_ms => {
                *until = now_ms + lease_ms;
                Ok(())
            }
            Some(_) => Err(fenced(node, "its lease lapsed".into())),
            None => Err(fenced(node, "its lease was taken over".into())),
        })
    }

    fn write(&self, node: &str, batch: u64, changes: &[Change]) -> Call<'_, ()> {
        self.run(node, |t| {
            if !t.nodes.contains_key(node) {
                return Err(fenced(node, "its lease was taken over".into()));
            }
            if t.last_batch.get(node) == Some(&batch) {
                return Ok(());
            }
            // Check the whole batch first: all or nothing.
            let mut released = BTreeSet::new();
            for change in changes {
                if let Change::Job(job) = change {
                    if !t.writable(node, &job.id, &released) {
                        return Err(fenced(node, format!("job {} is not its own", job.id)));
                    }
                    if job.status == JobStatus::Pending {
                        released.insert(job.id);
                    } else {
                        released.remove(&job.id);
                    }
                    let spent = job.paid_with.as_ref().and_then(|p| t.nonces.get(&p.nonce));
                    if spent.is_some_and(|n| n.job.is_some_and(|other| other != job.id)) {
                        return Err(fenced(
                            node,
                            format!("job {}'s payment bought another job", job.id),
                        ));
                    }
                }
            }
            let mut pooled = false;
            for change in changes {
                pooled |= matches!(change, Change::Trust(_));
                match change {
                    Change::Job(job) => {
                        let owner = owner_after_write(job, node);
                        pooled |= owner.is_none();
                        let cseq = match t.jobs.get(&job.id) {
                            Some(row) => row.cseq,
                            None => {
                                t.next_cseq += 1;
                                t.next_cseq
                            }
                        };
                        if let Some(paid) = &job.paid_with {
                            let reserved = t.nonces.get(&paid.nonce);
                            let nonce = Nonce {
                                by: node.to_owned(),
                                valid_before_s: reserved.map_or(0, |n| n.valid_before_s),
                                job: Some(job.id),
                            };
                            t.nonces.insert(paid.nonce, nonce);
                        }
                        let job = Arc::clone(job);
                        t.jobs.insert(job.id, Row { job, owner, cseq });
                    }
                    Change::Pairing(p) => {
                        // Never another user's code: two nodes may draw the same one.
                        let theirs = t.pairings.get(&p.code);
                        if theirs.is_none_or(|stored| stored.user_id == p.user_id) {
                            t.pairings.insert(p.code.clone(), p.clone());
                        }
                    }
                    Change::Trust(e) => {
                        t.trust_version += 1;
                        let key = (e.user_id.clone(), e.provider_pubkey.clone());
                        t.trust.insert(key, (t.trust_version, e.clone()));
                    }
                    // Recorded with the job that carries its `paid_with`.
                    Change::NonceSpent(_) => {}
                }
            }
            t.last_batch.insert(node.to_owned(), batch);
            if pooled {
                self.pool_changed_now();
            }
            if t.lose_answer.remove(node) {
                return Err(ClusterError::Unavailable(format!(
                    "{node}'s write committed, its answer lost"
                )));
            }
            Ok(())
        })
    }

    fn claim(&self, node: &str, want: &Want, now_ms: i64) -> Call<'_, Vec<Job>> {
        self.run(node, |t| {
            if !t.nodes.contains_key(node) {
                return Err(fenced(node, "its lease was taken over".into()));
            }
            let mut order: Vec<(i16, u64, Uuid)> = t
                .jobs
                .values()
                .filter(|r| r.owner.is_none() && r.job.status == JobStatus::Pending)
                .filter(|r| want.matches(&r.job) || r.job.deadline_ms.is_some_and(|d| d <= now_ms))
                .map(|r| (tier_rank(r.job.tier), r.cseq, r.job.id))
                .collect();
            order.sort_unstable();
            order.truncate(want.max);
            let mut claimed = Vec::with_capacity(order.len());
            for (_, _, id) in order {
                let row = t.jobs.get_mut(&id).expect("claimed row exists");
                row.owner = Some(node.to_owned());
                claimed.push((*row.job).clone());
            }
            Ok(claimed)
        })
    }

    fn take_over_lapsed(&self, node: &str, now_ms: i64) -> Call<'_, Vec<Job>> {
        self.run(node, |t| {
            if !t.nodes.contains_key(node) {
                return Err(fenced(node, "its lease was taken over".into()));
            }
            let lapsed: Vec<NodeId> = t
                .nodes
                .iter()
                .filter(|(n, &until)| n.as_str() != node && until < now_ms)
                .map(|(n, _)| n.clone())
                .collect();
            let mut taken = Vec::new();
            for dead in lapsed {
                t.nodes.remove(&dead);
                t.presence.remove(&dead);
                t.release_reserved_by(&dead);
                let mut theirs = Vec::new();
                for row in t.jobs.values_mut() {
                    if row.owner.as_deref() == Some(dead.as_str()) && !row.job.status.is_terminal()
                    {
                        row.owner = Some(node.to_owned());
                        theirs.push((row.cseq, (*row.job).clone()));
                    }
                }
                // In commit order, as PostgreSQL returns them.
                theirs.sort_by_key(|(cseq, _)| *cseq);
                taken.extend(theirs.into_iter().map(|(_, job)| job));
            }
            Ok(taken)
        })
    }

    fn job(&self, id: Uuid) -> Call<'_, Option<Job>> {
        let job = self.tables().jobs.get(&id).map(|r| (*r.job).clone());
        Box::pin(std::future::ready(Ok(job)))
    }

    fn job_statuses(&self, ids: &[Uuid]) -> Call<'_, Vec<(Uuid, JobStatus)>> {
        let t = self.tables();
        let statuses = ids
            .iter()
            .filter_map(|id| t.jobs.get(id).map(|r| (*id, r.job.status)))
            .collect();
        Box::pin(std::future::ready(Ok(statuses)))
    }

    fn paid_job(&self, nonce: NonceKey) -> Call<'_, Option<Job>> {
        let t = self.tables();
        let job = t.nonces.get(&nonce).and_then(|n| t.jobs.get(&n.job?));
        let job = job.map(|r| (*r.job).clone());
        Box::pin(std::future::ready(Ok(job)))
    }

    fn reserve_nonce(&self, node: &str, key: NonceKey, valid_before_s: u64) -> Call<'_, bool> {
        self.run(node, |t| {
            if t.nonces.contains_key(&key) {
                return Ok(false);
            }
            let by = node.to_owned();
            let nonce = Nonce {
                by,
                valid_before_s,
                job: None,
            };
            t.nonces.insert(key, nonce);
            Ok(true)
        })
    }

    fn release_nonce(&self, node: &str, key: NonceKey) -> Call<'_, ()> {
        self.run(node, |t| {
            if t.nonces.get(&key).is_some_and(|n| n.job.is_none()) {
                t.nonces.remove(&key);
            }
            Ok(())
        })
    }

    fn pairing(&self, code: &str) -> Call<'_, Option<Pairing>> {
        let pairing = self.tables().pairings.get(code).cloned();
        Box::pin(std::future::ready(Ok(pairing)))
    }

    fn swap_pairing(&self, node: &str, old: &Pairing, new: &Pairing) -> Call<'_, bool> {
        let (old, new) = (old.clone(), new.clone());
        self.run(node, |t| {
            if t.pairings.get(&old.code) != Some(&old) {
                return Ok(false);
            }
            t.pairings.insert(new.code.clone(), new);
            Ok(true)
        })
    }

    fn trust_of(&self, user_id: &str) -> Call<'_, Vec<TrustEntry>> {
        let t = self.tables();
        let of_user = t.trust.values().filter(|(_, e)| e.user_id == user_id);
        let entries = of_user.map(|(_, e)| e.clone()).collect();
        Box::pin(std::future::ready(Ok(entries)))
    }

    fn trust_after(&self, version: u64) -> Call<'_, (Vec<TrustEntry>, u64)> {
        let t = self.tables();
        let mut newer: Vec<(u64, TrustEntry)> = t
            .trust
            .values()
            .filter(|(v, _)| *v > version)
            .cloned()
            .collect();
        newer.sort_by_key(|(v, _)| *v);
        let entries = newer.into_iter().map(|(_, e)| e).collect();
        Box::pin(std::future::ready(Ok((entries, t.trust_version))))
    }

    fn set_presence(&self, node: &str, workers: &BTreeSet<(String, JobType)>) -> Call<'_, ()> {
        let workers = workers.clone();
        self.run(node, |t| {
            t.presence.insert(node.to_owned(), workers);
            Ok(())
        })
    }

    fn present(&self, keys: &[String], job_type: JobType) -> Call<'_, bool> {
        let t = self.tables();
        let mut all = t.presence.values().flatten();
        let present = all.any(|(key, t)| *t == job_type && keys.contains(key));
        Box::pin(std::future::ready(Ok(present)))
    }

    fn workers_online(&self) -> Call<'_, u64> {
        let t = self.tables();
        let mut count = 0u64;
        for workers in t.presence.values() {
            let keys: BTreeSet<&String> = workers.iter().map(|(key, _)| key).collect();
            count += keys.len() as u64;
        }
        Box::pin(std::future::ready(Ok(count)))
    }

    fn purge(&self, created_before_ms: i64, now_s: u64) -> Call<'_, u64> {
        let mut t = self.tables();
        let before = t.jobs.len();
        let old = |r: &Row| r.job.status.is_terminal() && r.job.created_at_ms < created_before_ms;
        t.jobs.retain(|_, r| !old(r));
        t.nonces.retain(|_, n| n.valid_before_s >= now_s);
        let now_ms = i64::try_from(now_s.saturating_mul(1000)).unwrap_or(i64::MAX);
        t.budgets
            .retain(|(_, window_ms), _| window_ms + BUDGET_WINDOW_MS >= now_ms);
        let deleted = (before - t.jobs.len()) as u64;
        Box::pin(std::future::ready(Ok(deleted)))
    }

    fn pool_len(&self, node: &str) -> Call<'_, u64> {
        self.run(node, |t| {
            let pool = t
                .jobs
                .values()
                .filter(|r| r.owner.is_none() && r.job.status == JobStatus::Pending);
            Ok(pool.count() as u64)
        })
    }

    fn take_budget(&self, node: &str, key: &str, window_ms: i64, max: u64) -> Call<'_, bool> {
        self.run(node, |t| {
            let used = t.budgets.entry((key.to_owned(), window_ms)).or_insert(0);
            let taken = *used < max;
            if taken {
                *used += 1;
            }
            Ok(taken)
        })
    }

    fn give_back_budget(&self, node: &str, key: &str, window_ms: i64) -> Call<'_, ()> {
        self.run(node, |t| {
            if let Some(used) = t.budgets.get_mut(&(key.to_owned(), window_ms)) {
                *used = used.saturating_sub(1);
            }
            Ok(())
        })
    }

    fn pool_changed(&self) -> watch::Receiver<u64> {
        let (tx, rx) = watch::channel(0);
        let mut subscribers = self.pool_tx.lock().unwrap_or_else(|p| p.into_inner());
        subscribers.retain(|tx| !tx.is_closed());
        subscribers.push(tx);
        rx
    }
}

#[cfg(test)]
mod tests;
