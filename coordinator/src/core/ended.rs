//! Finished jobs: the few held in memory, and the ledgers retention
//! deletes by (decision 0018, which refines 0010).
//!
//! **In memory.** The most recent `limits.finished_jobs_cached_max` (256)
//! stay in the core's job map, so a poll right after a job ends is answered
//! from memory; older ones leave it (the store keeps them, and the shell
//! reads a job the core no longer holds from there). The default is small
//! on purpose: at the 5,000 jobs/s design throughput, 256 jobs are the last
//! 50 ms, and 1,000 outgrew this machine's 1 MiB L2 and made each eviction
//! a dozen cache misses (callgrind, issue 14, round 8).
//!
//! **The ledgers.** Every kept finished job, held or evicted, has one entry
//! (id, end time, bytes) under its owner, the client address that
//! committed it, in one of two ledgers with budgets of their own:
//! - results (completed jobs, with an output), against `kept_bytes_max`;
//! - failures (failed and refused jobs, no output), against
//!   `failed_kept_bytes_max`: a flood of refused commits deletes failure
//!   records, never results.
//!
//! Past 90 % of a budget, retention takes the heaviest owner's oldest
//! entries first, down to 80 %, so a flood evicts its own jobs. In the
//! results ledger an entry younger than `kept_min_ms` is taken only from
//! an owner over its share (`kept_share_per_client_percent`): when the
//! budget is full of younger results of lighter owners, commits get 503
//! instead. Results are ordered by when they completed (a long job that
//! just finished is among the last to go), failures by when they were
//! created (a failed job stores no end time; it ends within the pending
//! timeout and its leases).
//!
//! Memory: an entry is 40 bytes, one per kept job; at the 1 GiB default and
//! the 1 KiB a job counts at least, about 40 MiB at most (the store's row
//! map holds one entry per job as well).

use super::{Core, Job};
use protocol::api::JobStatus;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use uuid::Uuid;

/// Share of a budget (per cent) above which retention deletes, whatever
/// the age (see `retention.rs` above the shell).
pub const KEPT_HIGH_WATER_PERCENT: usize = 90;
/// Share of a budget (per cent) such a deletion brings it down to: a tenth
/// of the budget a pass, so passes stay rare.
pub const KEPT_LOW_WATER_PERCENT: usize = 80;
/// Jobs one retention pass deletes at most (a pass a second): bounds the
/// lock hold and the store's statement; faster than jobs can end.
pub const PASS_JOBS_MAX: usize = 50_000;

/// The finished jobs the core holds, in the order they ended, and the
/// ledgers of every kept one.
#[derive(Debug, Default)]
pub(super) struct Ended {
    /// Terminal jobs in the job map, in the order they ended (restored
    /// ones in commit order, first).
    order: VecDeque<Uuid>,
    /// Bytes of kept jobs no longer in the job map.
    evicted_bytes: usize,
    results: Ledger,
    failures: Ledger,
}

/// Kept jobs by owner, each owner's oldest first.
#[derive(Debug, Default)]
pub(super) struct Ledger {
    owners: BTreeMap<String, OwnerKept>,
    bytes: usize,
}

#[derive(Debug, Default)]
struct OwnerKept {
    jobs: VecDeque<Kept>,
    bytes: usize,
}

/// One kept job, as retention sees it.
#[derive(Debug, Clone, Copy)]
pub struct Kept {
    pub id: Uuid,
    /// Results: completion time; failures: creation time.
    ended_ms: i64,
    created_ms: i64,
    bytes: usize,
}

impl Ledger {
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn owner_bytes(&self, owner: &str) -> usize {
        self.owners.get(owner).map_or(0, |o| o.bytes)
    }

    /// Every entry's bytes summed, for the whole invariant check.
    pub fn bytes_summed(&self) -> usize {
        self.owners
            .values()
            .flat_map(|o| &o.jobs)
            .map(|k| k.bytes)
            .sum()
    }

    /// Adds an entry; jobs nearly always end in order, so it is nearly
    /// always the owner's last (a restore may bring older ones later).
    fn add(&mut self, owner: &str, kept: Kept) {
        let o = match self.owners.get_mut(owner) {
            Some(o) => o,
            None => self.owners.entry(owner.to_owned()).or_default(),
        };
        let at = match o.jobs.back() {
            Some(last) if last.ended_ms > kept.ended_ms => {
                o.jobs.partition_point(|k| k.ended_ms <= kept.ended_ms)
            }
            _ => o.jobs.len(),
        };
        o.jobs.insert(at, kept);
        o.bytes += kept.bytes;
        self.bytes += kept.bytes;
    }

    fn pop_oldest(&mut self, owner: &str) -> Option<Kept> {
        let o = self.owners.get_mut(owner)?;
        let kept = o.jobs.pop_front()?;
        o.bytes -= kept.bytes;
        self.bytes -= kept.bytes;
        if o.jobs.is_empty() {
            self.owners.remove(owner);
        }
        Some(kept)
    }

    /// The age cut: every entry that ended before `before_ms`.
    fn take_before(&mut self, before_ms: i64, out: &mut Vec<Kept>) {
        let owners: Vec<String> = self.owners.keys().cloned().collect();
        for owner in owners {
            while out.len() < PASS_JOBS_MAX
                && self.owners[&owner]
                    .jobs
                    .front()
                    .is_some_and(|k| k.ended_ms < before_ms)
            {
                out.extend(self.pop_oldest(&owner));
                if !self.owners.contains_key(&owner) {
                    break;
                }
            }
        }
    }

    /// The size cut: past [`KEPT_HIGH_WATER_PERCENT`] of `max`, the
    /// heaviest owner's oldest entries until [`KEPT_LOW_WATER_PERCENT`].
    /// An entry that ended at or after `young_from_ms` is taken only from
    /// an owner holding more than `share` bytes; an owner whose oldest is
    /// young and who is within its share is passed over (its later
    /// entries are younger still, and its bytes only go down).
    fn size_cut(&mut self, max: usize, share: usize, young_from_ms: i64, out: &mut Vec<Kept>) {
        if self.bytes <= percent_of(max, KEPT_HIGH_WATER_PERCENT) {
            return;
        }
        let low = percent_of(max, KEPT_LOW_WATER_PERCENT);
        // Ties by owner, so the order is the same in every run.
        let mut heaviest: BinaryHeap<(usize, String)> = self
            .owners
            .iter()
            .map(|(owner, o)| (o.bytes, owner.clone()))
            .collect();
        while self.bytes > low && out.len() < PASS_JOBS_MAX {
            let Some((bytes, owner)) = heaviest.pop() else {
                return;
            };
            let oldest = self.owners[&owner].jobs.front().expect("owners hold jobs");
            if bytes <= share && oldest.ended_ms >= young_from_ms {
                continue;
            }
            out.extend(self.pop_oldest(&owner));
            let left = self.owner_bytes(&owner);
            if left > 0 {
                heaviest.push((left, owner));
            }
        }
    }
}

/// `percent` per cent of `max`, without overflow.
pub fn percent_of(max: usize, percent: usize) -> usize {
    (max as u128 * percent as u128 / 100) as usize
}

/// What one retention pass deleted: the ids for the store, and how many
/// for each reason.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Forgotten {
    pub ids: Vec<Uuid>,
    pub by_age: usize,
    pub by_size: usize,
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

    pub fn results(&self) -> &Ledger {
        &self.results
    }

    pub fn failures(&self) -> &Ledger {
        &self.failures
    }

    #[cfg(test)]
    pub fn order_mut_for_tests(&mut self) -> &mut VecDeque<Uuid> {
        &mut self.order
    }
}

impl Core {
    /// Records that job `id` (in the map, terminal) just ended: enters it
    /// in its ledger, and evicts the oldest finished jobs beyond the cache.
    /// Call after the event's last change to the job (`job_changed`): the
    /// change keeps the job for the store.
    pub(super) fn job_ended(&mut self, id: Uuid) {
        let job = &self.jobs[&id];
        debug_assert!(job.status.is_terminal());
        let (owner, kept, completed) = kept_entry(job);
        let owner = owner.to_owned();
        match completed {
            true => self.ended.results.add(&owner, kept),
            false => self.ended.failures.add(&owner, kept),
        }
        self.ended.order.push_back(id);
        while self.ended.order.len() > self.config.limits.finished_jobs_cached_max {
            let oldest = self.ended.order.pop_front().expect("over the cap");
            let job = self
                .jobs
                .remove(&oldest)
                .expect("an ended job is in the map");
            assert!(job.status.is_terminal(), "job {oldest} evicted while live");
            self.ended.evicted_bytes += job.footprint_bytes;
        }
    }

    /// Retention: the jobs to delete now, forgotten here (the caller has
    /// the store delete the same ids). `age_before_ms`: the age cut, when
    /// one is due. Then each ledger's size cut (module doc).
    pub fn retention_pass(&mut self, now_ms: i64, age_before_ms: Option<i64>) -> Forgotten {
        let mut out = Vec::new();
        let limits = &self.config.limits;
        let (kept_max, failed_max) = (limits.kept_bytes_max, limits.failed_kept_bytes_max);
        let share = percent_of(kept_max, limits.kept_share_per_client_percent);
        let young_from_ms = now_ms.saturating_sub(limits.kept_min_ms);
        let failures_bytes_before = self.ended.failures.bytes();
        if let Some(before_ms) = age_before_ms {
            self.ended.failures.take_before(before_ms, &mut out);
        }
        let failed_by_age = out.len();
        // Failure records carry no result: any age, the heaviest first.
        self.ended
            .failures
            .size_cut(failed_max, 0, i64::MIN, &mut out);
        let results_from = out.len();
        let ledger_bytes_before = self.ended.results.bytes();
        if let Some(before_ms) = age_before_ms {
            self.ended.results.take_before(before_ms, &mut out);
        }
        let by_age = failed_by_age + out.len() - results_from;
        self.ended
            .results
            .size_cut(kept_max, share, young_from_ms, &mut out);
        let by_size = out.len() - by_age;
        let results_by_age = by_age - failed_by_age;
        for (i, kept) in out.iter().enumerate() {
            let result = i >= results_from;
            crate::buggify::result_deleted(crate::buggify::DeletedResult {
                id: kept.id,
                completed_ms: kept.ended_ms,
                deleted_ms: now_ms,
                ledger_bytes_before: match result {
                    true => ledger_bytes_before,
                    false => failures_bytes_before,
                },
                result,
                by_age: match result {
                    true => i < results_from + results_by_age,
                    false => i < failed_by_age,
                },
            });
        }
        self.forget_kept(&out);
        // Oldest first, for the store and the logs.
        out.sort_unstable_by_key(|k| (k.ended_ms, k.id));
        Forgotten {
            ids: out.into_iter().map(|k| k.id).collect(),
            by_age,
            by_size,
        }
    }

    /// Forgets jobs taken out of the ledgers: out of the job map if held,
    /// out of the evicted bytes if not, out of the paid index.
    fn forget_kept(&mut self, gone: &[Kept]) {
        if gone.is_empty() {
            return;
        }
        // Jobs leave without a note: the next check looks at all.
        self.checked.whole_next();
        let mut ids = rustc_hash::FxHashSet::default();
        for kept in gone {
            ids.insert(kept.id);
            if self.jobs.remove(&kept.id).is_none() {
                self.ended.evicted_bytes -= kept.bytes;
            }
            self.kept_bytes -= kept.bytes;
            let cut_ms = kept.created_ms.saturating_add(1);
            self.retention_cut_ms = self.retention_cut_ms.max(Some(cut_ms));
        }
        let jobs = &self.jobs;
        self.ended.order.retain(|id| jobs.contains_key(id));
        if !self.paid.is_empty() {
            self.paid.retain(|_, (id, _)| !ids.contains(id));
        }
    }
}

/// A terminal job's ledger entry: its owner, the entry, and whether it
/// goes to the results (an output) or the failures.
fn kept_entry(job: &Job) -> (&str, Kept, bool) {
    let completed = job.status == JobStatus::Completed;
    let ended_ms = match completed {
        true => job.completed_at_ms.unwrap_or(job.created_at_ms),
        false => job.created_at_ms,
    };
    let kept = Kept {
        id: job.id,
        ended_ms,
        created_ms: job.created_at_ms,
        bytes: job.footprint_bytes,
    };
    (&job.owner, kept, completed)
}

/// Whether `job` is the one a retried payment bought: the same submission
/// on the same tier (a finished job's payload by its digest). Then the
/// job's id and the `PAYMENT-RESPONSE` its 201 carried, to answer the
/// retry with.
pub fn bought_with(
    job: &Job,
    submission: &protocol::api::JobSubmission,
    tier: protocol::api::Tier,
) -> Option<(Uuid, String)> {
    let paid_with = job.paid_with.as_ref()?;
    (super::same_submission(job, submission) && job.tier == tier)
        .then(|| (job.id, paid_with.response_header.clone()))
}
