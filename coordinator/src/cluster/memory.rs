//! [`MemoryShared`]: the shared store as plain data, for the simulation and
//! unit tests (no clock: every call is given `now_ms`).

use super::{
    owner_after_write, tier_rank, Call, ClusterError, NodeId, SharedStore, Want, BUDGET_WINDOW_MS,
};
use crate::buggify::{self, Ownership};
use crate::core::trust::{Pairing, TrustEntry};
use crate::core::{Change, Job, Snapshot};
use protocol::api::{JobStatus, JobType};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::watch;
use uuid::Uuid;
use x402::NonceKey;

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
    /// Whether `node` may write every job of a batch: each is its own (or
    /// released earlier in the batch), and no payment bought another job.
    fn check_batch(&self, node: &str, changes: &[Change]) -> Result<(), ClusterError> {
        let mut released = BTreeSet::new();
        for change in changes {
            if let Change::Job(job) = change {
                // As PostgreSQL refuses U+0000 in text (the user id is a
                // text column): a data error, not an ownership conflict
                // (issue 29, finding 2).
                if job.submission.user_id.contains('\0') {
                    return Err(ClusterError::Refused(format!(
                        "job {}: U+0000 cannot be stored in text",
                        job.id
                    )));
                }
                if !self.writable(node, &job.id, &released) {
                    return Err(fenced(node, format!("job {} is not its own", job.id)));
                }
                if job.status == JobStatus::Pending {
                    released.insert(job.id);
                } else {
                    released.remove(&job.id);
                }
                let spent = job
                    .paid_with
                    .as_ref()
                    .and_then(|p| self.nonces.get(&p.nonce));
                if spent.is_some_and(|n| n.job.is_some_and(|other| other != job.id)) {
                    return Err(fenced(
                        node,
                        format!("job {}'s payment bought another job", job.id),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Writes one checked change of `node`'s batch; `true` if other nodes
    /// should look at the pool (a job went to it, or trust was written).
    fn apply(&mut self, node: &str, change: &Change) -> bool {
        let mut pooled = matches!(change, Change::Trust(_));
        match change {
            Change::Job(job) => {
                let owner = owner_after_write(job, node);
                pooled |= owner.is_none();
                buggify::ownership_noted(Ownership::Owned {
                    job: job.id,
                    owner: owner.clone(),
                });
                let cseq = match self.jobs.get(&job.id) {
                    Some(row) => row.cseq,
                    None => {
                        self.next_cseq += 1;
                        self.next_cseq
                    }
                };
                if let Some(paid) = &job.paid_with {
                    let reserved = self.nonces.get(&paid.nonce);
                    let nonce = Nonce {
                        by: node.to_owned(),
                        valid_before_s: reserved.map_or(0, |n| n.valid_before_s),
                        job: Some(job.id),
                    };
                    self.nonces.insert(paid.nonce, nonce);
                }
                let job = Arc::clone(job);
                self.jobs.insert(job.id, Row { job, owner, cseq });
            }
            Change::Pairing(p) => {
                // Never another user's code: two nodes may draw the same one.
                let theirs = self.pairings.get(&p.code);
                if theirs.is_none_or(|stored| stored.user_id == p.user_id) {
                    self.pairings.insert(p.code.clone(), p.clone());
                }
            }
            Change::Trust(e) => {
                self.trust_version += 1;
                let key = (e.user_id.clone(), e.provider_pubkey.clone());
                self.trust.insert(key, (self.trust_version, e.clone()));
            }
            // Recorded with the job that carries its `paid_with`.
            Change::NonceSpent(_) => {}
        }
        pooled
    }

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

/// Notes an orphan the age pass deletes for the harness, as the core notes
/// the rows of its own ledger (`buggify::result_deleted`): a row no live
/// node's pass reports, deleted by age. Its end as a ledger orders it: a
/// result's completion, a failure's creation (decision 0018). The pass's
/// time is known to the second, so the note errs early (stricter).
fn note_orphan_deleted(job: &Job, now_s: u64) {
    let result = job.status == JobStatus::Completed;
    let ended_ms = if result {
        job.completed_at_ms.unwrap_or(job.created_at_ms)
    } else {
        job.created_at_ms
    };
    buggify::result_deleted(buggify::DeletedResult {
        id: job.id,
        completed_ms: ended_ms,
        deleted_ms: i64::try_from(now_s.saturating_mul(1000)).unwrap_or(i64::MAX),
        ledger_bytes_before: 0,
        result,
        by_age: true,
    });
}

impl SharedStore for MemoryShared {
    fn join(&self, node: &str, now_ms: i64, lease_ms: i64) -> Call<'_, Snapshot> {
        self.run(node, |t| {
            if t.nodes.get(node).is_some_and(|&until| until >= now_ms) {
                return Err(ClusterError::NodeIdInUse(node.to_owned()));
            }
            t.nodes.insert(node.to_owned(), now_ms + lease_ms);
            buggify::ownership_noted(Ownership::Joined {
                node: node.to_owned(),
            });
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
            t.check_batch(node, changes)?;
            let mut pooled = false;
            for change in changes {
                pooled |= t.apply(node, change);
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
                buggify::ownership_noted(Ownership::Owned {
                    job: id,
                    owner: row.owner.clone(),
                });
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
                        buggify::ownership_noted(Ownership::Owned {
                            job: row.job.id,
                            owner: row.owner.clone(),
                        });
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

    fn purge(&self, ids: Vec<Uuid>, orphans_before_ms: Option<i64>, now_s: u64) -> Call<'_, u64> {
        let mut t = self.tables();
        let before = t.jobs.len();
        for id in ids {
            if t.jobs.get(&id).is_some_and(|r| r.job.status.is_terminal()) {
                t.jobs.remove(&id);
            }
        }
        let cut_ms = orphans_before_ms.unwrap_or(i64::MIN);
        let old = |r: &Row| r.job.status.is_terminal() && r.job.created_at_ms < cut_ms;
        for row in t.jobs.values().filter(|r| old(r)) {
            note_orphan_deleted(&row.job, now_s);
        }
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
