//! Job polls held open (`GET /v1/jobs/{id}?wait_ms=N`): registered under
//! the state lock with their read, woken by `flush` when an event changes
//! their job's status, bounded in total and per client. When the total is
//! reached, the heaviest client's oldest held poll is answered to make room
//! for a client holding fewer (issue 29, finding 9: ten addresses filled
//! the 10,000 places and everyone else's long polls returned at once).

use super::Coordinator;
use crate::core::{Change, Job};
use protocol::api::JobStatus;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use tokio::sync::oneshot;
use uuid::Uuid;

/// Job polls held open (`GET /v1/jobs/{id}?wait_ms=N`), woken by `flush`
/// when an event leaves their job in another status than they saw. Kept
/// under the state lock, so a poll registers in the same critical section
/// as its read and cannot miss a change.
#[derive(Default)]
pub(super) struct HeldPolls {
    /// Per job, in arrival order; woken in job id order, then arrival order.
    waiters: BTreeMap<Uuid, Vec<Waiter>>,
    /// Held polls alive, by arrival number: their client and job. A poll
    /// leaves when its [`HeldSlot`] drops, or when evicted for another
    /// client's (then its slot's drop finds it gone).
    live: BTreeMap<u64, (String, Uuid)>,
    /// Each client's live polls, oldest first.
    per_client: BTreeMap<String, BTreeSet<u64>>,
    next: u64,
}

pub(super) struct Waiter {
    /// The status the poll read; any other status wakes it.
    seen: JobStatus,
    wake: oneshot::Sender<()>,
    /// Its arrival number (a key of `live`).
    seq: u64,
}

/// What a poll with `wait_ms` gets when it arrives: see [`Coordinator::watch_job`].
pub enum Watch {
    /// No such job.
    Unknown,
    /// Answer with this now: the job is terminal, the coordinator is
    /// stopping, or the held-poll bound (total or per client) is reached.
    /// The job is shared, so its record is built after the lock is let go.
    Now(Arc<Job>),
    /// Wait on it, then read the job again.
    Held(HeldPoll),
}

/// A place among the held polls. Dropping it (answered, timed out, or the
/// client went away) gives the place back.
pub struct HeldPoll {
    // Declared first so it is dropped before `_slot` prunes closed waiters.
    woken: oneshot::Receiver<()>,
    /// Kept for its `Drop`, which gives the place back.
    _slot: HeldSlot,
}

pub(super) struct HeldSlot {
    coordinator: Coordinator,
    job: Uuid,
    seq: u64,
}

impl HeldPoll {
    /// Resolves when the job's status changes, the coordinator shuts down,
    /// or `wait_ms` passes (tokio time: virtual in the simulation).
    pub async fn wait(mut self, wait_ms: u64) {
        let wait = std::time::Duration::from_millis(wait_ms);
        // Woken or timed out: either way the caller reads the job as it is.
        let _ = tokio::time::timeout(wait, &mut self.woken).await;
    }
}

impl Drop for HeldSlot {
    fn drop(&mut self) {
        self.coordinator.release_hold(&self.job, self.seq);
    }
}

impl Coordinator {
    /// Reads a job for a poll that may wait (`wait_ms`), and registers the
    /// wait under the same lock, so no change between the read and the
    /// wait is missed.
    pub fn watch_job(&self, id: Uuid, client: &str) -> Watch {
        let mut guard = self.lock();
        let state = &mut *guard;
        let Some(job) = state.core.job_shared(&id) else {
            return Watch::Unknown;
        };
        match self.hold(&mut state.held, id, job.status, client) {
            Some(held) => Watch::Held(held),
            None => Watch::Now(job),
        }
    }

    /// Cluster mode: holds a poll of a job another node holds, last read
    /// from the shared store in status `seen`, under the same bounds as a
    /// held poll of a job held here; `None` if the poll is answered now.
    /// The remote watch (`node.rs`) wakes it when the store shows another
    /// status.
    pub fn watch_remote(&self, id: Uuid, seen: JobStatus, client: &str) -> Option<HeldPoll> {
        let mut state = self.lock();
        self.hold(&mut state.held, id, seen, client)
    }

    /// Registers a held poll of `id` seen in `seen`, if the poll may wait:
    /// the job is not terminal, the coordinator is not stopping, and the
    /// held-poll bounds (total, per client) have room.
    pub(super) fn hold(
        &self,
        held: &mut HeldPolls,
        id: Uuid,
        seen: JobStatus,
        client: &str,
    ) -> Option<HeldPoll> {
        let limits = &self.inner.config.limits;
        let client_held = held.held_by(client);
        if seen.is_terminal()
            || self.is_stopping()
            || client_held >= limits.held_polls_per_client_max
        {
            return None;
        }
        if held.live.len() >= limits.held_polls_max && !held.evict_for(client_held) {
            return None;
        }
        let (wake, woken) = oneshot::channel();
        let seq = held.next;
        held.next += 1;
        held.waiters
            .entry(id)
            .or_default()
            .push(Waiter { seen, wake, seq });
        held.live.insert(seq, (client.to_owned(), id));
        held.per_client
            .entry(client.to_owned())
            .or_default()
            .insert(seq);
        assert!(held.live.len() <= limits.held_polls_max);
        Some(HeldPoll {
            woken,
            _slot: HeldSlot {
                coordinator: self.clone(),
                job: id,
                seq,
            },
        })
    }

    /// Cluster mode: the jobs held polls wait on that this node does not
    /// hold, in id order after `after`, at most `max`: what the remote
    /// watch reads.
    pub fn remote_watched(&self, after: Option<Uuid>, max: usize) -> Vec<Uuid> {
        use std::ops::Bound;
        let state = self.lock();
        let from = after.map_or(Bound::Unbounded, Bound::Excluded);
        let ids = state.held.waiters.range((from, Bound::Unbounded));
        ids.map(|(id, _)| *id)
            .filter(|id| state.core.job(id).is_none())
            .take(max)
            .collect()
    }

    /// Cluster mode: wakes the held polls of jobs another node holds whose
    /// status in the shared store is no longer the one they saw.
    pub fn wake_remote(&self, statuses: &[(Uuid, JobStatus)]) {
        let mut state = self.lock();
        for &(id, status) in statuses {
            state.held.wake(id, status);
        }
    }

    /// Held polls alive now (total, and of `client`).
    pub fn held_polls(&self, client: &str) -> (usize, usize) {
        let state = self.lock();
        (state.held.live.len(), state.held.held_by(client))
    }

    pub(super) fn release_hold(&self, job: &Uuid, seq: u64) {
        // Runs in `Drop`: a poisoned lock means the process is going down.
        let Ok(mut state) = self.inner.state.lock() else {
            return;
        };
        let held = &mut state.held;
        // Gone already if it was evicted for another client's poll.
        held.forget(seq);
        // A poll that timed out leaves its waiter behind; drop it now so
        // waiters stay bounded by the held polls alive.
        if let Some(list) = held.waiters.get_mut(job) {
            list.retain(|w| !w.wake.is_closed());
            if list.is_empty() {
                held.waiters.remove(job);
            }
        }
    }
}

impl HeldPolls {
    fn held_by(&self, client: &str) -> usize {
        self.per_client.get(client).map_or(0, BTreeSet::len)
    }

    /// Held polls alive, and the most one client holds (the accounted
    /// figures, `crate::resources`).
    pub(super) fn counts(&self) -> (usize, usize) {
        let heaviest = self.per_client.values().map(BTreeSet::len).max();
        (self.live.len(), heaviest.unwrap_or(0))
    }

    /// Takes a live poll out of the counts (its waiter stays until woken
    /// or pruned).
    fn forget(&mut self, seq: u64) -> Option<(String, Uuid)> {
        let (client, job) = self.live.remove(&seq)?;
        if let Some(set) = self.per_client.get_mut(&client) {
            set.remove(&seq);
            if set.is_empty() {
                self.per_client.remove(&client);
            }
        }
        Some((client, job))
    }

    /// Makes room for a poll of a client holding `newcomer_held` polls:
    /// answers the oldest poll of the client holding the most, if that is
    /// more than the newcomer would then hold (else the newcomer is among
    /// the heaviest, and is answered at once itself). Costs a pass over
    /// the clients holding polls.
    fn evict_for(&mut self, newcomer_held: usize) -> bool {
        let heaviest = self
            .per_client
            .iter()
            .max_by_key(|(_, set)| set.len())
            .map(|(client, set)| (client.clone(), set.len()));
        let Some((client, count)) = heaviest else {
            return false;
        };
        if count <= newcomer_held + 1 {
            return false;
        }
        crate::buggify::sometimes("a held poll was answered early to make room");
        let oldest = self.per_client[&client].first().copied();
        let Some((_, job)) = oldest.and_then(|seq| self.forget(seq).map(|f| (seq, f.1))) else {
            return false;
        };
        let seq = oldest.expect("found above");
        if let Some(list) = self.waiters.get_mut(&job) {
            if let Some(at) = list.iter().position(|w| w.seq == seq) {
                // Answered with the job as it is, as at its wait's end.
                let _ = list.remove(at).wake.send(());
            }
            if list.is_empty() {
                self.waiters.remove(&job);
            }
        }
        true
    }

    /// Whether any poll waits (most events find none, and skip the wake-up).
    pub(super) fn any_waiting(&self) -> bool {
        !self.waiters.is_empty()
    }

    /// Wakes every held poll (shutdown), in job id order, then arrival order.
    pub(super) fn wake_all(&mut self) {
        for (_, waiters) in std::mem::take(&mut self.waiters) {
            for waiter in waiters {
                let _ = waiter.wake.send(());
            }
        }
    }

    /// Wakes the polls of every job an event left in another status than
    /// the poll saw. Only a job's last record in `changes` counts: one
    /// event may requeue and reassign a job, which is no change to a poll.
    pub(super) fn wake_changed(&mut self, changes: &[Change]) {
        let mut last: BTreeMap<Uuid, JobStatus> = BTreeMap::new();
        for change in changes {
            if let Change::Job(job) = change {
                if self.waiters.contains_key(&job.id) {
                    last.insert(job.id, job.status);
                }
            }
        }
        for (id, status) in last {
            self.wake(id, status);
        }
    }

    /// Wakes the polls of `id` that saw another status than `status`.
    pub(super) fn wake(&mut self, id: Uuid, status: JobStatus) {
        let Some(list) = self.waiters.remove(&id) else {
            return;
        };
        let (wake, keep): (Vec<Waiter>, Vec<Waiter>) =
            list.into_iter().partition(|w| w.seen != status);
        for waiter in wake {
            // A closed receiver is a poll that already ended.
            let _ = waiter.wake.send(());
        }
        if !keep.is_empty() {
            self.waiters.insert(id, keep);
        }
    }
}
