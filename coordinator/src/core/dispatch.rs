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
    pub(super) fn pick_worker(&self, id: &Uuid, avoid: Option<SessionId>) -> Option<SessionId> {
        let job = &self.jobs[id];
        let job_type = job.submission.job_type;
        // The best two candidates, least loaded first: the second is only
        // wanted when the first is `avoid`.
        let (first, second) = match job.submission.privacy_class {
            PrivacyClass::Public => {
                let mut idle = self.idle.get(&job_type).into_iter().flatten();
                (idle.next().copied(), idle.next().copied())
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
                (free.first().copied(), free.get(1).copied())
            }
        };
        let (_, first) = first?;
        // Only the first candidate is taken, so the (costlier) question of
        // another eligible worker only matters when `avoid` is first.
        if avoid == Some(first) && self.has_other_eligible(job, first) {
            return second.map(|(_, s)| s);
        }
        Some(first)
    }

    /// Whether a worker other than `session` could ever take `job`. Busy counts.
    pub(super) fn has_other_eligible(&self, job: &Job, session: SessionId) -> bool {
        self.workers
            .iter()
            .any(|(&other, w)| other != session && self.eligible(job, w))
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
            if job.avoid != Some(session) || !self.has_other_eligible(job, session) {
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
