//! The placement policy: which worker a job goes to, and which queued job a
//! worker takes next. The mechanics of placing (queues, timers, frames) are
//! the core's (`mod.rs`: `place`, `assign`, `fill`); the invariants
//! (`invariants.rs`) ask these same functions whether dispatch left a job
//! waiting that a free worker could take.

use super::{tier_of, Core, Job, QueueKey, SessionId, Worker};
use protocol::api::{JobType, PrivacyClass, Tier};
use uuid::Uuid;

/// Queued jobs a worker skips because it failed them (while another worker
/// could take them) before it takes the head anyway. Bounds the work of a
/// freed slot, and keeps a worker that fails everything from sitting idle
/// while work it may take waits behind its failures.
const AVOIDED_SCAN_MAX: usize = 8;

impl Core {
    /// The free eligible worker `id` goes to: the least loaded not among
    /// the sessions it avoids; one of those only when no eligible worker
    /// outside them is connected (busy counts: then the job waits).
    pub(super) fn pick_worker(&self, id: &Uuid) -> Option<SessionId> {
        let job = &self.jobs[id];
        let job_type = job.submission.job_type;
        let avoid = &job.avoid;
        // The least-loaded free candidate, and the least-loaded one the job
        // does not avoid. The avoid list is short, so the scan is too.
        let (first, second, preferred) = match job.submission.privacy_class {
            PrivacyClass::Public => {
                let mut idle = self.idle.get(&job_type).into_iter().flatten();
                let first = idle.next().copied();
                let second = idle.next().copied();
                let preferred = match (first, second) {
                    (Some((_, s)), _) if !avoid.contains(s) => first,
                    (_, Some((_, s))) if !avoid.contains(s) => second,
                    _ => idle
                        .take(super::AVOIDED_SESSIONS_MAX)
                        .find(|(_, s)| !avoid.contains(*s))
                        .copied(),
                };
                (first, second, preferred)
            }
            PrivacyClass::Private => {
                let mut free: Vec<(u32, SessionId)> = self
                    .trusted_sessions(&job.submission.user_id, job_type)
                    .filter_map(|s| {
                        let w = &self.workers[&s];
                        (w.load() < w.slots).then_some((w.load(), s))
                    })
                    .collect();
                free.sort_unstable();
                let preferred = free.iter().find(|(_, s)| !avoid.contains(*s)).copied();
                (free.first().copied(), free.get(1).copied(), preferred)
            }
        };
        let (_, first) = first?;
        if let Some((_, s)) = preferred {
            return Some(s);
        }
        if self.has_eligible_outside(job) {
            // A worker it does not avoid is busy: the job waits for it.
            return None;
        }
        // Every eligible worker failed it: as before the list, it avoids
        // only the last one while another could take it.
        match avoid.last() {
            Some(last) if last == first && self.has_other_eligible(job, last) => {
                second.map(|(_, s)| s)
            }
            _ => Some(first),
        }
    }

    /// Whether a worker other than `session` could ever take `job`. Busy counts.
    fn has_other_eligible(&self, job: &Job, session: SessionId) -> bool {
        self.workers
            .iter()
            .any(|(&other, w)| other != session && self.eligible(job, w))
    }

    /// Whether a worker the job does not avoid could ever take it. Busy counts.
    pub(super) fn has_eligible_outside(&self, job: &Job) -> bool {
        self.workers
            .iter()
            .any(|(&other, w)| !job.avoid.contains(other) && self.eligible(job, w))
    }

    /// Whether `worker` may hold `job`: it has the capability, and for a
    /// PRIVATE job the user trusts its key.
    pub(super) fn eligible(&self, job: &Job, worker: &Worker) -> bool {
        let s = &job.submission;
        worker.capabilities.contains(&s.job_type)
            && (s.privacy_class == PrivacyClass::Public
                || self.trust.trusts(&s.user_id, &worker.pubkey))
    }

    /// Sessions of connected workers the user trusts that serve `job_type`.
    pub(super) fn trusted_sessions<'a>(
        &'a self,
        user_id: &'a str,
        job_type: JobType,
    ) -> impl Iterator<Item = SessionId> + 'a {
        self.trust.keys_of(user_id).filter_map(move |key| {
            let session = *self.session_of.get(key)?;
            self.workers[&session]
                .capabilities
                .contains(&job_type)
                .then_some(session)
        })
    }

    /// The most urgent queued job `session` may take, with its rank (tier,
    /// then commit order): the best head over the queues it serves, without
    /// collecting their keys.
    pub(super) fn best_head(&self, session: SessionId) -> Option<((Tier, u64), Uuid)> {
        let worker = self.workers.get(&session)?;
        let mut best: Option<((Tier, u64), Uuid)> = None;
        let mut consider = |key: QueueKey| {
            if let Some(id) = self.queue_pick(&key, session) {
                let rank = ((tier_of(&key), self.jobs[&id].seq), id);
                if best.is_none_or(|b| rank < b) {
                    best = Some(rank);
                }
            }
        };
        for &job_type in &worker.capabilities {
            for tier in [Tier::Fast, Tier::Cheap] {
                consider(QueueKey::Public(tier, job_type));
                for user in self.trust.users_trusting(&worker.pubkey) {
                    consider(QueueKey::Private(tier, job_type, user.clone()));
                }
            }
        }
        best
    }

    /// The first job of a queue that `session` may take: not one this
    /// session failed while another worker could take it, unless more than
    /// `AVOIDED_SCAN_MAX` such jobs lead the queue (then the head).
    pub(super) fn queue_pick(&self, key: &QueueKey, session: SessionId) -> Option<Uuid> {
        let queue = self.queues.get(key)?;
        for id in queue.ids().take(AVOIDED_SCAN_MAX + 1) {
            let job = &self.jobs[id];
            let kept = if self.has_eligible_outside(job) {
                job.avoid.contains(session)
            } else {
                job.avoid.last() == Some(session) && self.has_other_eligible(job, session)
            };
            if !kept {
                return Some(*id);
            }
        }
        // Jobs behind the scanned ones may be for this worker; leaving its
        // slot idle while they wait would break the dispatch invariant.
        if queue.len() > AVOIDED_SCAN_MAX + 1 {
            return queue.ids().next().copied();
        }
        None
    }
}
