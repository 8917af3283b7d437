//! Dispatch without I/O: `workers` workers with `slots` slots each, all busy,
//! and `queue_depth` jobs waiting. One [`CoreRig::cycle`] completes the
//! oldest running job (its slot pulls the queue head: an assign), accepts
//! that new assignment and commits a fresh job to the tail of the queue, so
//! the queue stays exactly as deep. The receipt handed to `complete` is
//! signed once up front: the core trusts the session to have verified it.

use crate::fixtures;
use coordinator::config::Config;
use coordinator::core::{Core, Outbound, SessionId};
use coordinator::server::{self, Parts, Settings};
use coordinator::shell::OutboxRx;
use coordinator::{Coordinator, ManualClock};
use futures_util::FutureExt;
use protocol::api::{JobSubmission, JobType, Tier};
use protocol::receipt::Receipt;
use protocol::worker::CoordinatorFrame;
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use serde_json::Value;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use uuid::Uuid;

/// Jobs a rig may run before a bench rebuilds it outside the timed loop.
/// Finished jobs leave the core's memory past its cache, as in production,
/// so a rig no longer grows with the jobs it ran; the rebuild stays as a
/// bound on the rig's own counters.
pub const JOBS_BEFORE_REBUILD: usize = 300_000;

fn config() -> Config {
    let mut config = Config::default();
    config.limits.queue_len_max = usize::MAX;
    config.limits.workers_max = usize::MAX;
    // No retention task runs here: the kept budget would refuse commits
    // after about 950,000 cycles.
    config.limits.kept_bytes_max = usize::MAX;
    // O(jobs) per event: the benches measure dispatch, not the check.
    config.check_invariants = false;
    config
}

/// The bare core.
pub struct CoreRig {
    core: Core,
    now_ms: i64,
    running: VecDeque<(SessionId, Uuid)>,
    submission: JobSubmission,
    output: Value,
    receipt: Receipt,
    /// The last outbox taken, handed back with the changes.
    outbox: Vec<(SessionId, Outbound)>,
    jobs: usize,
}

impl CoreRig {
    pub fn new(workers: u32, slots: u32, queue_depth: usize) -> Self {
        let mut core = Core::new(config(), ChaCha20Rng::seed_from_u64(1));
        let now_ms = fixtures::EPOCH_MS;
        let submission = fixtures::task_submission("bench");
        let key = fixtures::keypair(7);
        let output = Value::String("summary".into());
        let receipt = fixtures::receipt(&key, Uuid::from_u128(1), &output);
        for w in 0..workers {
            let pubkey = format!("0x02{:064x}", w);
            core.register(&pubkey, vec![JobType::Task], slots, now_ms)
                .expect("register");
        }
        let total = workers as usize * slots as usize + queue_depth;
        for _ in 0..total {
            core.commit(submission.clone(), Tier::Cheap, None, now_ms)
                .expect("commit");
        }
        let mut rig = Self {
            core,
            now_ms,
            running: VecDeque::new(),
            submission,
            output,
            receipt,
            outbox: Vec::new(),
            jobs: total,
        };
        rig.accept_assigns();
        rig.core.take_changes();
        assert_eq!(rig.running.len(), workers as usize * slots as usize);
        assert_eq!(rig.core.pending_jobs(), queue_depth);
        rig
    }

    fn accept_assigns(&mut self) {
        let mut outbox = self.core.take_outbox();
        for (session, out) in outbox.drain(..) {
            if let Outbound::Frame(CoordinatorFrame::Assign(a)) = out {
                self.core.accept(session, a.job_id).expect("accept");
                self.running.push_back((session, a.job_id));
            }
        }
        self.outbox = outbox;
    }

    /// commit → assign → accept → complete, once.
    pub fn cycle(&mut self) {
        self.now_ms += 1;
        let now = self.now_ms;
        self.core.tick(now);
        let (session, job) = self.running.pop_front().expect("a running job");
        self.core
            .complete(session, job, self.output.clone(), self.receipt.clone(), now)
            .expect("complete");
        self.core
            .commit(self.submission.clone(), Tier::Cheap, None, now)
            .expect("commit");
        self.accept_assigns();
        // The shell's flush, less the store and the sessions.
        let changes = self.core.take_changes();
        let outbox = std::mem::take(&mut self.outbox);
        self.core.reuse_buffers(changes, outbox);
        self.jobs += 1;
    }

    pub fn jobs(&self) -> usize {
        self.jobs
    }

    pub fn pending(&self) -> usize {
        self.core.pending_jobs()
    }
}

/// The same cycle through the coordinator shell: each event takes the lock,
/// writes its changes to a plain in-memory store (`server::NO_STORE`) and delivers frames to the session
/// outboxes, as the HTTP handlers and worker sessions do.
pub struct ShellRig {
    c: Coordinator,
    clock: ManualClock,
    outboxes: HashMap<SessionId, OutboxRx>,
    running: VecDeque<(SessionId, Uuid)>,
    submission: JobSubmission,
    output: Value,
    receipt: Receipt,
    jobs: usize,
}

impl ShellRig {
    /// Needs a tokio runtime entered (the coordinator spawns its timer task
    /// there; it is never polled, which is fine for a clock that only this
    /// rig moves).
    pub fn new(workers: u32, slots: u32, queue_depth: usize) -> Self {
        let clock = ManualClock::new(fixtures::EPOCH_MS);
        let settings = Settings {
            config: config(),
            db: server::NO_STORE.into(),
            ..Settings::default()
        };
        let parts = Parts::new(Arc::new(clock.clone()), ChaCha20Rng::seed_from_u64(1));
        // Nothing in `start` waits with no database: one poll finishes it.
        let c = server::start(settings, parts)
            .now_or_never()
            .expect("starts without waiting")
            .expect("starts")
            .coordinator()
            .clone();
        let submission = fixtures::task_submission("bench");
        let key = fixtures::keypair(7);
        let output = Value::String("summary".into());
        let receipt = fixtures::receipt(&key, Uuid::from_u128(1), &output);
        let mut outboxes = HashMap::new();
        for w in 0..workers {
            let pubkey = format!("0x02{:064x}", w);
            let (session, rx) = c
                .register_worker(&pubkey, vec![JobType::Task], slots)
                .expect("register");
            outboxes.insert(session, rx);
        }
        let total = workers as usize * slots as usize + queue_depth;
        for _ in 0..total {
            c.with(|core, now| core.commit(submission.clone(), Tier::Cheap, None, now))
                .expect("commit");
        }
        let mut rig = Self {
            c,
            clock,
            outboxes,
            running: VecDeque::new(),
            submission,
            output,
            receipt,
            jobs: total,
        };
        let sessions: Vec<SessionId> = rig.outboxes.keys().copied().collect();
        for s in sessions {
            rig.drain(s);
        }
        assert_eq!(rig.running.len(), workers as usize * slots as usize);
        rig
    }

    fn drain(&mut self, session: SessionId) {
        let rx = self.outboxes.get_mut(&session).expect("outbox");
        let mut assigned = Vec::new();
        while let Ok(out) = rx.try_recv() {
            if let Outbound::Frame(CoordinatorFrame::Assign(a)) = *out {
                assigned.push(a.job_id);
            }
        }
        for job in assigned {
            self.c
                .with(|core, _| core.accept(session, job))
                .expect("accept");
            self.running.push_back((session, job));
        }
    }

    pub fn cycle(&mut self) {
        self.clock.advance(1);
        let (session, job) = self.running.pop_front().expect("a running job");
        let (output, receipt) = (self.output.clone(), self.receipt.clone());
        self.c
            .with(|core, now| core.complete(session, job, output, receipt, now))
            .expect("complete");
        let submission = self.submission.clone();
        self.c
            .with(|core, now| core.commit(submission, Tier::Cheap, None, now))
            .expect("commit");
        self.drain(session);
        self.jobs += 1;
    }

    pub fn jobs(&self) -> usize {
        self.jobs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_rig_keeps_the_queue_depth() {
        let mut rig = CoreRig::new(3, 2, 10);
        for _ in 0..100 {
            rig.cycle();
        }
        assert_eq!(rig.pending(), 10);
        assert_eq!(rig.jobs(), 116);
    }

    #[test]
    fn shell_rig_cycles() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _guard = rt.enter();
        let mut rig = ShellRig::new(3, 2, 10);
        for _ in 0..100 {
            rig.cycle();
        }
        assert_eq!(rig.jobs(), 116);
        assert_eq!(rig.c.read(|core| core.pending_jobs()), 10);
    }
}
