//! Job polls held open (`GET /v1/jobs/{id}?wait_ms=N`): registered under
//! the state lock with their read, woken by `flush` when an event changes
//! their job's status, bounded in total and per client.

use super::Coordinator;
use crate::core::{Change, Job};
use protocol::api::JobStatus;
use std::collections::BTreeMap;
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
    /// Held polls alive, counted by their [`HeldSlot`]s.
    total: usize,
    per_client: BTreeMap<String, usize>,
}

pub(super) struct Waiter {
    /// The status the poll read; any other status wakes it.
    seen: JobStatus,
    wake: oneshot::Sender<()>,
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
    client: String,
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
        self.coordinator.release_hold(&self.job, &self.client);
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
        let client_held = held.per_client.get(client).copied().unwrap_or(0);
        if seen.is_terminal()
            || self.is_stopping()
            || held.total >= limits.held_polls_max
            || client_held >= limits.held_polls_per_client_max
        {
            return None;
        }
        let (wake, woken) = oneshot::channel();
        held.waiters
            .entry(id)
            .or_default()
            .push(Waiter { seen, wake });
        held.total += 1;
        *held.per_client.entry(client.to_owned()).or_default() += 1;
        assert!(held.total <= limits.held_polls_max);
        Some(HeldPoll {
            woken,
            _slot: HeldSlot {
                coordinator: self.clone(),
                job: id,
                client: client.to_owned(),
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
        let of_client = state.held.per_client.get(client).copied().unwrap_or(0);
        (state.held.total, of_client)
    }

    pub(super) fn release_hold(&self, job: &Uuid, client: &str) {
        // Runs in `Drop`: a poisoned lock means the process is going down.
        let Ok(mut state) = self.inner.state.lock() else {
            return;
        };
        let held = &mut state.held;
        assert!(held.total > 0, "a held poll released twice");
        held.total -= 1;
        match held.per_client.get_mut(client) {
            Some(1) => {
                held.per_client.remove(client);
            }
            Some(n) => *n -= 1,
            None => unreachable!("a held poll of an uncounted client"),
        }
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
