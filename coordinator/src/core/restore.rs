//! The core's side of persistence: rebuilding the state from a store's
//! snapshot at start, and forgetting old terminal jobs (retention).
//!
//! Recovery rules (the process died with no worker connected afterwards):
//! - `assigned` / `running` jobs lost their worker because the coordinator
//!   stopped, not because the worker failed: the interrupted attempt is given
//!   back and the job is requeued with a fresh pending deadline. A job found
//!   held at more than `attempts_max` restarts fails `coordinator_restarted`
//!   instead, so a job that crashes the coordinator cannot loop forever.
//! - `pending` jobs keep their deadline and their order (commit order, `seq`);
//!   requeued jobs go ahead of them, as a requeue does at run time.
//! - Terminal jobs are kept as they are; the core holds the most recent
//!   (in commit order) as it does at run time (ended.rs).
//! - Pairing codes and trust entries come back as stored; an expired code
//!   stays expired, and codes past their retention are not restored.

use super::{Core, FailureReason, Job, TimerKind};
use crate::store::Snapshot;
use protocol::api::JobStatus;
use std::sync::Arc;
use uuid::Uuid;

impl Core {
    /// Rebuilds jobs, queues, timers and trust from `snapshot`. Call on a
    /// fresh core, before any worker registers. Jobs whose status changed
    /// here are left in the change buffer for the store.
    pub fn restore(&mut self, snapshot: Snapshot, now_ms: i64) {
        self.checked.whole_next();
        self.move_rng_past(&snapshot);
        let mut jobs = snapshot.jobs;
        jobs.sort_by_key(|j| j.seq);
        self.next_seq = self
            .next_seq
            .max(jobs.last().map_or(0, |j| j.seq.saturating_add(1)));
        let mut requeued: Vec<Uuid> = Vec::new();
        for mut job in jobs {
            // A memory store shares the core's jobs, bookkeeping included;
            // none of it survives a restart.
            job.worker = None;
            job.avoid = None;
            job.timer = None;
            job.queue_pos = None;
            let id = job.id;
            job.footprint_bytes = super::footprint_bytes(&job);
            if job.status.is_terminal() {
                self.kept_bytes += job.footprint_bytes;
            } else {
                self.queued_bytes += job.footprint_bytes;
            }
            if let Some(paid_with) = &job.paid_with {
                self.paid.insert(paid_with.nonce, (id, job.created_at_ms));
            }
            match job.status {
                JobStatus::Completed | JobStatus::Failed => {
                    self.jobs.insert(Arc::new(job));
                    self.job_ended(id);
                }
                JobStatus::Pending => {
                    let deadline_ms = job
                        .deadline_ms
                        .unwrap_or(now_ms + self.config.timing.pending_timeout_ms);
                    job.deadline_ms = Some(deadline_ms);
                    self.jobs.insert(Arc::new(job));
                    self.enqueue_restored(id, deadline_ms);
                }
                JobStatus::Assigned | JobStatus::Running => {
                    job.attempts = job.attempts.saturating_sub(1);
                    job.recoveries = job.recoveries.saturating_add(1);
                    self.jobs.insert(Arc::new(job));
                    requeued.push(id);
                }
            }
        }
        // Requeued jobs go to the head of their queues; pushing the newest
        // first keeps them in commit order there.
        let recoveries_max = self.config.timing.attempts_max;
        for id in requeued.into_iter().rev() {
            if self.jobs[&id].recoveries > recoveries_max {
                self.fail(id, FailureReason::CoordinatorRestarted);
            } else {
                self.place(id, None, true, now_ms);
            }
        }
        let retention_ms = self.config.timing.pairing_code_retention_ms;
        let pairings = snapshot
            .pairings
            .into_iter()
            .filter(|p| p.expires_at_ms + retention_ms > now_ms)
            .collect();
        self.trust
            .restore(pairings, snapshot.trust, retention_ms, now_ms);
    }

    /// A seeded RNG (tests, the simulation) would draw the same job ids and
    /// codes after every restart as before it. Moving to a stream chosen by
    /// the stored state keeps runs reproducible without repeating ids: any
    /// id that was stored changes the state, so the stream differs from the
    /// one that produced it. An empty store keeps the seed's own stream.
    fn move_rng_past(&mut self, snapshot: &Snapshot) {
        use std::hash::{Hash, Hasher};
        if snapshot.jobs.is_empty() && snapshot.pairings.is_empty() {
            return;
        }
        // SipHash with fixed keys: deterministic for a given build.
        #[allow(deprecated)]
        let mut h = std::hash::SipHasher::new();
        let mut ids: Vec<&Uuid> = snapshot.jobs.iter().map(|j| &j.id).collect();
        ids.sort_unstable();
        ids.hash(&mut h);
        let mut codes: Vec<&str> = snapshot.pairings.iter().map(|p| p.code.as_str()).collect();
        codes.sort_unstable();
        codes.hash(&mut h);
        self.rng.set_stream(h.finish());
    }

    /// Puts a restored pending job at the back of its queue with its own deadline.
    fn enqueue_restored(&mut self, id: Uuid, deadline_ms: i64) {
        self.enqueue(id, false);
        self.add_timer(deadline_ms, TimerKind::Pending, id);
    }

    /// Forgets terminal jobs created before `created_before_ms`, those in
    /// memory and those evicted from it (the store deletes its copies
    /// itself); returns how many. Terminal jobs have no queue entry or live
    /// timer, so nothing else refers to them.
    pub fn forget_terminal_jobs(&mut self, created_before_ms: i64) -> usize {
        // Jobs leave without a note: the next check looks at all.
        self.checked.whole_next();
        let before = self.jobs.len();
        let mut freed_bytes = 0;
        self.jobs.retain(|_, j: &mut Arc<Job>| {
            let keep = !(j.status.is_terminal() && j.created_at_ms < created_before_ms);
            if !keep {
                freed_bytes += j.footprint_bytes;
            }
            keep
        });
        let held = before - self.jobs.len();
        let (evicted, evicted_bytes) = self.forget_ended(created_before_ms);
        self.kept_bytes -= freed_bytes + evicted_bytes;
        // A paid job not in the map after that is evicted or forgotten.
        let jobs = &self.jobs;
        self.paid.retain(|_, &mut (id, created_at_ms)| {
            created_at_ms >= created_before_ms || jobs.contains_key(&id)
        });
        held + evicted
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use crate::core::{Change, Core, FailureReason};
    use crate::store::{MemoryStore, Snapshot, Store};
    use crate::trust::ClaimError;
    use protocol::api::{JobStatus, JobType, Tier};
    use protocol::receipt::ReceiptBody;
    use protocol::signing::Keypair;
    use rand::SeedableRng;
    use rand_chacha::ChaCha20Rng;
    use serde_json::json;
    use uuid::Uuid;

    const T0: i64 = 1_000_000;

    fn config() -> Config {
        Config::default()
    }

    fn core(config: &Config) -> Core {
        Core::new(config.clone(), ChaCha20Rng::seed_from_u64(7))
    }

    /// Runs `events` on a core and returns what a store would hold afterwards.
    fn snapshot_after(config: &Config, events: impl FnOnce(&mut Core)) -> Snapshot {
        let mut c = core(config);
        events(&mut c);
        let store = MemoryStore::default();
        store.apply(&c.take_changes()).unwrap();
        store.load().unwrap()
    }

    fn commit(c: &mut Core, now_ms: i64) -> Uuid {
        let body = json!({"job_type": "LLM_INFER", "user_id": "u",
            "payload": {"prompt": "hi", "max_tokens": 8}});
        let s = crate::validate::submission(&body, &c.config().limits).unwrap();
        c.commit(s, Tier::Fast, None, now_ms).unwrap()
    }

    fn key(seed: u64) -> Keypair {
        Keypair::generate(&mut ChaCha20Rng::seed_from_u64(seed))
    }

    fn complete(c: &mut Core, session: u64, id: Uuid, key: &Keypair, now_ms: i64) {
        let output = json!("done");
        let receipt = ReceiptBody::new(
            id,
            key.public_key_hex(),
            &output,
            "2026-11-21T10:00:01.000Z".into(),
            None,
        )
        .sign(key);
        c.complete(session, id, output, receipt, now_ms).unwrap();
    }

    #[test]
    fn held_jobs_are_requeued_with_the_attempt_given_back() {
        let config = config();
        let k = key(1);
        let (mut a, mut b) = (Uuid::nil(), Uuid::nil());
        let snap = snapshot_after(&config, |c| {
            let s = c
                .register(&k.public_key_hex(), vec![JobType::LlmInfer], 2, T0)
                .unwrap();
            a = commit(c, T0);
            b = commit(c, T0);
            c.accept(s, b).unwrap();
        });
        let statuses: Vec<_> = snap.jobs.iter().map(|j| j.status).collect();
        assert_eq!(statuses, [JobStatus::Assigned, JobStatus::Running]);

        let mut c = core(&config);
        c.restore(snap, T0 + 5_000);
        c.check_invariants(T0 + 5_000).unwrap();
        for id in [a, b] {
            let job = c.job(&id).unwrap();
            assert_eq!(job.status, JobStatus::Pending);
            assert_eq!(job.attempts, 0);
            assert_eq!(job.recoveries, 1);
            assert_eq!(
                job.deadline_ms,
                Some(T0 + 5_000 + config.timing.pending_timeout_ms)
            );
        }
        // The new status is handed to the store.
        assert_eq!(c.take_changes().len(), 2);
        // A worker that connects gets them, oldest first.
        let s = c
            .register(
                &key(2).public_key_hex(),
                vec![JobType::LlmInfer],
                1,
                T0 + 6_000,
            )
            .unwrap();
        assert_eq!(c.job(&a).unwrap().status, JobStatus::Assigned);
        assert_eq!(c.job(&a).unwrap().attempts, 1);
        assert_eq!(c.job(&b).unwrap().status, JobStatus::Pending);
        assert_eq!(c.job(&a).unwrap().worker, Some(s));
    }

    #[test]
    fn a_restart_does_not_spend_the_last_attempt() {
        // Issue 16 finding 12: a job held on its last attempt failed
        // `worker_disconnected` after a coordinator restart.
        let mut config = config();
        config.timing.attempts_max = 1;
        let k = key(1);
        let mut a = Uuid::nil();
        let snap = snapshot_after(&config, |c| {
            c.register(&k.public_key_hex(), vec![JobType::LlmInfer], 1, T0)
                .unwrap();
            a = commit(c, T0);
        });
        let mut c = core(&config);
        c.restore(snap, T0 + 1);
        c.check_invariants(T0 + 1).unwrap();
        let job = c.job(&a).unwrap();
        assert_eq!(job.status, JobStatus::Pending);
        assert_eq!(job.attempts, 0);
        assert_eq!(c.pending_jobs(), 1);
    }

    #[test]
    fn a_job_held_at_every_restart_fails_coordinator_restarted() {
        let mut config = config();
        config.timing.attempts_max = 2;
        let k = key(1);
        let mut a = Uuid::nil();
        let mut snap = snapshot_after(&config, |c| {
            c.register(&k.public_key_hex(), vec![JobType::LlmInfer], 1, T0)
                .unwrap();
            a = commit(c, T0);
        });
        // Each round: restart, the job is assigned again, the coordinator dies.
        for round in 1..=2 {
            let mut c = core(&config);
            c.restore(snap, T0 + round);
            assert_eq!(c.job(&a).unwrap().status, JobStatus::Pending);
            c.register(&k.public_key_hex(), vec![JobType::LlmInfer], 1, T0 + round)
                .unwrap();
            assert_eq!(c.job(&a).unwrap().status, JobStatus::Assigned);
            let store = MemoryStore::default();
            store.apply(&c.take_changes()).unwrap();
            snap = store.load().unwrap();
        }
        let mut c = core(&config);
        c.restore(snap, T0 + 10);
        let job = c.job(&a).unwrap();
        assert_eq!(job.status, JobStatus::Failed);
        assert_eq!(job.error, Some(FailureReason::CoordinatorRestarted));
        assert_eq!(
            job.record().result.unwrap()["error"],
            "coordinator_restarted"
        );
        assert_eq!(c.next_deadline_ms(), None);
    }

    #[test]
    fn pending_jobs_keep_order_and_deadline() {
        let config = config();
        let mut ids = Vec::new();
        let snap = snapshot_after(&config, |c| {
            for i in 0..3 {
                ids.push(commit(c, T0 + i));
            }
        });
        let mut c = core(&config);
        c.restore(snap, T0 + 10_000);
        c.check_invariants(T0 + 10_000).unwrap();
        assert_eq!(c.pending_jobs(), 3);
        for (i, id) in ids.iter().enumerate() {
            let job = c.job(id).unwrap();
            assert_eq!(job.status, JobStatus::Pending);
            assert_eq!(
                job.deadline_ms,
                Some(T0 + i as i64 + config.timing.pending_timeout_ms)
            );
        }
        assert!(c.take_changes().is_empty(), "pending jobs are unchanged");
        let s = c
            .register(
                &key(3).public_key_hex(),
                vec![JobType::LlmInfer],
                1,
                T0 + 10_000,
            )
            .unwrap();
        assert_eq!(c.job(&ids[0]).unwrap().worker, Some(s));
        // The others still fail at their original deadline.
        c.tick(T0 + 1 + config.timing.pending_timeout_ms);
        assert_eq!(c.job(&ids[1]).unwrap().status, JobStatus::Failed);
        assert_eq!(c.job(&ids[2]).unwrap().status, JobStatus::Pending);
    }

    #[test]
    fn pending_jobs_past_their_deadline_fail_on_the_first_tick() {
        let config = config();
        let mut a = Uuid::nil();
        let snap = snapshot_after(&config, |c| a = commit(c, T0));
        let mut c = core(&config);
        let later = T0 + config.timing.pending_timeout_ms + 1;
        c.restore(snap, later);
        c.check_invariants(later).unwrap();
        assert_eq!(
            c.next_deadline_ms(),
            Some(T0 + config.timing.pending_timeout_ms)
        );
        c.tick(later);
        let job = c.job(&a).unwrap();
        assert_eq!(job.status, JobStatus::Failed);
        assert_eq!(job.error, Some(FailureReason::NoEligibleWorker));
    }

    #[test]
    fn terminal_jobs_stay_and_seq_continues() {
        let config = config();
        let k = key(1);
        let mut done = Uuid::nil();
        let snap = snapshot_after(&config, |c| {
            let s = c
                .register(&k.public_key_hex(), vec![JobType::LlmInfer], 1, T0)
                .unwrap();
            done = commit(c, T0);
            complete(c, s, done, &k, T0 + 10);
        });
        let before = snap.jobs[0].clone();
        let max_seq = before.seq;
        let mut c = core(&config);
        c.restore(snap, T0 + 100);
        c.check_invariants(T0 + 100).unwrap();
        let persisted = |j: &crate::core::Job| serde_json::to_value(j).unwrap();
        assert_eq!(persisted(c.job(&done).unwrap()), persisted(&before));
        assert!(c.take_changes().is_empty());
        let next = commit(&mut c, T0 + 200);
        assert!(c.job(&next).unwrap().seq > max_seq);
        assert_ne!(next, done);
    }

    #[test]
    fn trust_and_pairings_come_back() {
        let config = config();
        let ttl = config.timing.pairing_code_ttl_ms;
        let (mut claimed, mut open, mut expired) = (String::new(), String::new(), String::new());
        let snap = snapshot_after(&config, |c| {
            claimed = c.create_pairing("alice", "ip", T0).unwrap().code;
            c.claim_pairing(&claimed, Ok("0xk1"), "ip", T0 + 1).unwrap();
            open = c.create_pairing("alice", "ip", T0 + 10 * ttl).unwrap().code;
            expired = c.create_pairing("bob", "ip", T0).unwrap().code;
        });
        assert_eq!(snap.pairings.len(), 3);
        assert_eq!(snap.trust.len(), 1);
        let mut c = core(&config);
        let now = T0 + 10 * ttl + 5;
        c.restore(snap, now);
        c.check_invariants(now).unwrap();
        let list = c.trusted_providers("alice");
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].provider_pubkey, "0xk1");
        assert_eq!(list[0].paired_at_ms, T0 + 1);
        assert_eq!(
            c.claim_pairing(&claimed, Ok("0xk2"), "ip", now),
            Err(ClaimError::AlreadyClaimed)
        );
        assert_eq!(
            c.claim_pairing(&expired, Ok("0xk2"), "ip", now),
            Err(ClaimError::Expired)
        );
        assert!(c.claim_pairing(&open, Ok("0xk3"), "ip", now).is_ok());
    }

    #[test]
    fn forgets_only_old_terminal_jobs() {
        let mut config = config();
        config.timing.attempts_max = 1;
        let mut ids = Vec::new();
        let snap = snapshot_after(&config, |c| {
            ids.push(commit(c, T0));
            ids.push(commit(c, T0 + 50_000));
        });
        let mut c = core(&config);
        c.restore(snap, T0 + 40_000);
        c.check_invariants(T0 + 40_000).unwrap();
        c.tick(T0 + 40_000);
        assert_eq!(c.job(&ids[0]).unwrap().status, JobStatus::Failed);
        assert!(matches!(c.take_changes().as_slice(), [Change::Job(_)]));
        assert_eq!(c.forget_terminal_jobs(T0 + 60_000), 1);
        assert!(c.job(&ids[0]).is_none());
        assert_eq!(c.job(&ids[1]).unwrap().status, JobStatus::Pending);
    }
}
