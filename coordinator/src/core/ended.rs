//! Finished jobs in memory: the most recent `limits.finished_jobs_cached_max`
//! (256) stay in the core's job map, so a poll right after a job ends is
//! answered from memory; older ones leave it (the store keeps them, and the
//! shell reads a job the core no longer holds from there).
//!
//! The default is small on purpose: evicting a job frees its memory (about
//! nine allocations), and the older the job the colder that memory. At the
//! 5,000 jobs/s design throughput, 256 jobs are the last 50 ms: a held poll
//! (`wait_ms`, the router's default) reads the job the moment it ends, a
//! client backing off to 16 ms between polls (loadgen's default) still
//! reads memory, and a client polling every 500 ms reads the store (a few
//! µs by rowid; with 1,000 cached it did at full load too). Between a job's
//! end and its eviction the core touches about 1.5 KB a job; 1,000 jobs of
//! that outgrew this machine's 1 MiB L2 and made each eviction a dozen cache
//! misses (callgrind's cache model: 37 misses a `dispatch_core/64` cycle
//! with 1,000 cached, 20 with 256, 16 with 100; issue 14, round 8). Earlier
//! wall figures, one build: 10,000 cached 415k cycles/s, 1,000 530k, 100
//! 605k (benches/results/perf-round6-2026-11-24.md).
//!
//! Why: the map dispatch reads on every event then holds the live jobs and
//! a bounded tail, and memory no longer grows with every job ever finished
//! (before, a busy coordinator held up to `kept_bytes_max` of finished jobs
//! in memory, and each new job's memory was fresh pages).
//!
//! An evicted job still counts against `kept_bytes_max` (its bytes are on
//! disk) until retention deletes it: the ledger remembers its bytes by the
//! second it was created in, which is what retention cuts by. One entry per
//! second, not per job or millisecond: 24 h of retention is at most 86,400
//! entries (about 2 MiB) at any rate. A retention cut inside a second
//! leaves that second counted until a later pass cuts past it: the budget
//! errs towards refusing, by at most a second of jobs, for one pass.

use super::{Core, Job};
use std::collections::VecDeque;
use uuid::Uuid;

/// The finished jobs the core holds, oldest first, and what the evicted
/// ones still count.
#[derive(Debug, Default)]
pub(super) struct Ended {
    /// Terminal jobs in the job map, in the order they ended (restored
    /// ones in commit order, first).
    order: VecDeque<Uuid>,
    /// Evicted jobs by the second they were created in, oldest first, one
    /// entry per second: how many, and their bytes (`footprint_bytes`).
    evicted: VecDeque<Evicted>,
    /// Their bytes summed.
    evicted_bytes: usize,
}

#[derive(Debug, Clone, Copy)]
struct Evicted {
    created_s: i64,
    jobs: usize,
    bytes: usize,
}

impl Evicted {
    /// Whether every job counted here was created before `before_ms`.
    fn all_before(&self, before_ms: i64) -> bool {
        self.created_s.saturating_add(1).saturating_mul(1000) <= before_ms
    }
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

    /// The evicted jobs' bytes, oldest first, each with the retention cut
    /// that forgets them (the end of their second).
    pub fn evicted_by_cut(&self) -> impl Iterator<Item = (i64, usize)> + '_ {
        self.evicted.iter().map(|e| {
            let cut_ms = e.created_s.saturating_add(1).saturating_mul(1000);
            debug_assert!(e.all_before(cut_ms));
            (cut_ms, e.bytes)
        })
    }

    #[cfg(test)]
    pub fn order_mut_for_tests(&mut self) -> &mut VecDeque<Uuid> {
        &mut self.order
    }

    /// The ledger's entries summed, for the whole invariant check.
    pub fn evicted_bytes_summed(&self) -> usize {
        self.evicted.iter().map(|e| e.bytes).sum()
    }

    /// Counts an evicted job. Jobs mostly end in creation order, so the
    /// entry is nearly always the last one (no search).
    fn count(&mut self, created_at_ms: i64, bytes: usize) {
        let created_s = created_at_ms.div_euclid(1000);
        let at = match self.evicted.back() {
            Some(last) if last.created_s == created_s => Ok(self.evicted.len() - 1),
            Some(last) if last.created_s > created_s => self
                .evicted
                .binary_search_by_key(&created_s, |e| e.created_s),
            _ => Err(self.evicted.len()),
        };
        let i = at.unwrap_or_else(|i| {
            let fresh = Evicted {
                created_s,
                jobs: 0,
                bytes: 0,
            };
            self.evicted.insert(i, fresh);
            i
        });
        self.evicted[i].jobs += 1;
        self.evicted[i].bytes += bytes;
        self.evicted_bytes += bytes;
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
        self.ended.count(job.created_at_ms, job.footprint_bytes);
    }

    /// Retention: forgets the ended jobs created before `created_before_ms`,
    /// held or evicted (evicted ones by whole seconds; see the module doc):
    /// the caller has taken the held ones out of the job map already (see
    /// `forget_terminal_jobs`). Returns the evicted jobs forgotten and their
    /// bytes.
    pub(super) fn forget_ended(&mut self, created_before_ms: i64) -> (usize, usize) {
        let jobs = &self.jobs;
        self.ended.order.retain(|id| jobs.contains_key(id));
        let (mut jobs, mut bytes) = (0, 0);
        while let Some(oldest) = self.ended.evicted.front() {
            if !oldest.all_before(created_before_ms) {
                break;
            }
            jobs += oldest.jobs;
            bytes += oldest.bytes;
            self.ended.evicted.pop_front();
        }
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
