//! Finished jobs in memory: the most recent `limits.finished_jobs_cached_max`
//! (1,000) stay in the core's job map, so a poll right after a job ends is
//! answered from memory; older ones leave it (the store keeps them, and the
//! shell reads a job the core no longer holds from there).
//!
//! The default is small on purpose: evicting a job frees its memory (about
//! nine allocations), and the older the job the colder that memory. At the
//! 5,000 jobs/s design throughput, 1,000 jobs is the last 200 ms: a held
//! poll (`wait_ms`, the router's default) reads the job the moment it ends,
//! and a client polling every 500 ms at full load reads the store instead
//! (a few µs by rowid). `dispatch_core/64` with 10,000 cached ran at about
//! 415k cycles/s, with 1,000 at 530k, with 100 at 605k (benches/README.md).
//!
//! Why: the map dispatch reads on every event then holds the live jobs and
//! a bounded tail, and memory no longer grows with every job ever finished
//! (before, a busy coordinator held up to `kept_bytes_max` of finished jobs
//! in memory, and each new job's memory was fresh pages).
//!
//! An evicted job still counts against `kept_bytes_max` (its bytes are on
//! disk) until retention deletes it: the ledger remembers its bytes by
//! creation time, which is what retention cuts by.

use super::{Core, Job};
use std::collections::{BTreeMap, VecDeque};
use uuid::Uuid;

/// The finished jobs the core holds, oldest first, and what the evicted
/// ones still count.
#[derive(Debug, Default)]
pub(super) struct Ended {
    /// Terminal jobs in the job map, in the order they ended (restored
    /// ones in commit order, first).
    order: VecDeque<Uuid>,
    /// Evicted jobs by creation time: how many, and their bytes (see
    /// `footprint_bytes`). One entry per millisecond, not per job.
    evicted_by_created_ms: BTreeMap<i64, Evicted>,
    /// Their sum.
    evicted_bytes: usize,
}

#[derive(Debug, Clone, Copy, Default)]
struct Evicted {
    jobs: usize,
    bytes: usize,
}

impl Ended {
    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn ids(&self) -> impl Iterator<Item = &Uuid> {
        self.order.iter()
    }

    pub fn evicted_bytes(&self) -> usize {
        self.evicted_bytes
    }

    #[cfg(test)]
    pub fn order_mut_for_tests(&mut self) -> &mut VecDeque<Uuid> {
        &mut self.order
    }

    /// The ledger's entries summed, for the whole invariant check.
    pub fn evicted_bytes_summed(&self) -> usize {
        self.evicted_by_created_ms.values().map(|e| e.bytes).sum()
    }
}

impl Core {
    /// Records that job `id` (in the map, terminal) just ended, and evicts
    /// the oldest finished jobs beyond the cache. Call after the event's
    /// last change to the job (`job_changed`): the change keeps the job for
    /// the store.
    pub(super) fn job_ended(&mut self, id: Uuid) {
        debug_assert!(self.jobs.get(&id).is_some_and(|j| j.status.is_terminal()));
        self.ended.order.push_back(id);
        while self.ended.order.len() > self.config.limits.finished_jobs_cached_max {
            let oldest = self.ended.order.pop_front().expect("over the cap");
            self.evict(oldest);
        }
    }

    fn evict(&mut self, id: Uuid) {
        let job = self.jobs.remove(&id).expect("an ended job is in the map");
        assert!(job.status.is_terminal(), "job {id} evicted while live");
        let entry = self
            .ended
            .evicted_by_created_ms
            .entry(job.created_at_ms)
            .or_default();
        entry.jobs += 1;
        entry.bytes += job.footprint_bytes;
        self.ended.evicted_bytes += job.footprint_bytes;
    }

    /// Retention: forgets the ended jobs created before `created_before_ms`,
    /// held or evicted: the caller has taken the held ones out of the job
    /// map already (see `forget_terminal_jobs`). Returns the evicted jobs
    /// forgotten and their bytes.
    pub(super) fn forget_ended(&mut self, created_before_ms: i64) -> (usize, usize) {
        let jobs = &self.jobs;
        self.ended.order.retain(|id| jobs.contains_key(id));
        let kept = self
            .ended
            .evicted_by_created_ms
            .split_off(&created_before_ms);
        let old = std::mem::replace(&mut self.ended.evicted_by_created_ms, kept);
        let (jobs, bytes) = old
            .values()
            .fold((0, 0), |(j, b), e| (j + e.jobs, b + e.bytes));
        self.ended.evicted_bytes -= bytes;
        (jobs, bytes)
    }
}

/// Whether `job` is the one a retried payment bought: the same submission
/// on the same tier. Then the job's id and the `PAYMENT-RESPONSE` its 201
/// carried, to answer the retry with.
pub fn bought_with(
    job: &Job,
    submission: &protocol::api::JobSubmission,
    tier: protocol::api::Tier,
) -> Option<(Uuid, String)> {
    let paid_with = job.paid_with.as_ref()?;
    (*job.submission == *submission && job.tier == tier)
        .then(|| (job.id, paid_with.response_header.clone()))
}
