//! Fault points inside production code (FoundationDB's BUGGIFY), and
//! "sometimes" points that record rare states reached.
//!
//! Our simulated crashes land only where the harness can reach from
//! outside: at store writes, on links, at step boundaries. Timing bugs hide
//! in windows no outside fault reaches: between two steps of one store
//! writer's turn, behind a send that stalls, a timer that fires late. A
//! [`Site`] is compiled in everywhere but fires only on a thread the harness
//! has armed for one simulated world ([`arm`]); the production binary never
//! arms one, so `fire` is a thread-local read that answers `false`.
//!
//! Per world (FoundationDB's recipe): each site is switched on with
//! probability 1/2, and an enabled site fires on 1 call in 4. Each site
//! draws from a ChaCha stream of its own, so a site's fires depend only on
//! the order of its own calls, which the deterministic simulation fixes: a
//! world's two runs fire alike.
//!
//! [`sometimes`] marks a rare state the code reached (a lease expiring
//! during a settlement, a result for a job already ended): the harness
//! counts them per world, lists the states never reached, and steers its
//! draws toward seeds that reached new ones. Recorded only when armed.
//!
//! [`result_deleted`] is a witness, not a fault: retention notes each
//! finished job it deletes with its end time, the time of the pass and
//! why (age or size), so the harness judges every deletion at the moment
//! it happened against the minimum keep time and the lifetime (decisions
//! 0010, 0018), not only what is missing at the end of a run (whose heal
//! outlasts the keep time), and excuses a job missing at the end only if
//! retention deleted it as promised. Likewise
//! [`session_opened`] and [`session_closed`]: when each worker session
//! began and ended, so the harness sees a session kept open past its
//! heartbeat timeout by a worker that stopped reading (decision 0019).
//! And [`connection_opened`] and [`connection_closed`]: each plain HTTP
//! connection a bounded server admitted, with its client's count, so the
//! harness judges the head deadline and the per-address cap (decision
//! 0019) from the accept loop's own accounting. And [`ownership_noted`]:
//! in a several-node world, each change of a job's owner in the shared
//! store, each `assign` a node queues and each node's fence and join, in
//! the order they happened, so the harness sees a node act for a job
//! another node owns (docs/cluster.md: a node that may have lost its lease
//! fences itself before anyone can take its jobs). Recorded only when armed.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;
use std::cell::RefCell;
use std::collections::BTreeMap;

/// A named fault point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Site {
    /// The store writer yields between the steps of its turn (take, commit,
    /// answer), so other tasks run in the window.
    StoreWriterYield,
    /// The process crashes between two steps of the store writer's turn.
    StoreWriterCrash,
    /// A group commit takes 1 to 50 ms.
    StoreFlushSlow,
    /// The facilitator answers a settlement 1 to 2,000 ms late.
    FacilitatorSlow,
    /// The facilitator settles, and its answer is lost.
    FacilitatorLost,
    /// A frame to a worker waits 1 to 200 ms before it is sent.
    WorkerSendStall,
    /// The timer task wakes 1 to 50 ms after the deadline it slept to.
    TimerLate,
    /// A retention pass starts 1 to 1,000 ms late.
    RetentionPurgeLate,
    /// A node renews its lease 1 to 500 ms late.
    ClusterLeaseLate,
    /// A node's claim of an orphaned job takes 1 to 200 ms longer.
    ClusterClaimSlow,
}

/// How many sites there are.
pub const SITES: usize = 10;

impl Site {
    pub const ALL: [Site; SITES] = [
        Site::StoreWriterYield,
        Site::StoreWriterCrash,
        Site::StoreFlushSlow,
        Site::FacilitatorSlow,
        Site::FacilitatorLost,
        Site::WorkerSendStall,
        Site::TimerLate,
        Site::RetentionPurgeLate,
        Site::ClusterLeaseLate,
        Site::ClusterClaimSlow,
    ];

    /// The site's name in transcripts, docs and the coverage table.
    pub fn name(self) -> &'static str {
        match self {
            Site::StoreWriterYield => "store.writer.yield",
            Site::StoreWriterCrash => "store.writer.crash",
            Site::StoreFlushSlow => "store.flush.slow",
            Site::FacilitatorSlow => "facilitator.slow",
            Site::FacilitatorLost => "facilitator.lost",
            Site::WorkerSendStall => "worker.send.stall",
            Site::TimerLate => "timer.late",
            Site::RetentionPurgeLate => "retention.purge.late",
            Site::ClusterLeaseLate => "cluster.lease.late",
            Site::ClusterClaimSlow => "cluster.claim.slow",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// At most this many distinct `sometimes` states are recorded per world
/// (a limit on everything; the code names a few dozen).
const STATES_MAX: usize = 256;

/// At most this many deleted results are noted per world: far more than a
/// simulated world completes.
const DELETED_MAX: usize = 100_000;

/// At most this many worker sessions are noted per world.
pub const SESSIONS_MAX: usize = 10_000;

/// The chance an enabled site fires on one call: 1 in this.
const FIRE_ONE_IN: u32 = 4;

/// One armed world's fault points.
struct Armed {
    buggify: bool,
    /// Off for a phase of the run ([`set_active`]): sites draw nothing.
    active: bool,
    on: [bool; SITES],
    rngs: Vec<ChaCha20Rng>,
    fired: [u64; SITES],
    reached: BTreeMap<&'static str, u64>,
    deleted: Vec<DeletedResult>,
    sessions: Vec<SessionSpan>,
    connections: Vec<ConnectionSpan>,
    ownership: Vec<Ownership>,
}

/// A worker session as its task ran it (see [`session_opened`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionSpan {
    /// The worker's key, as its hello named it.
    pub pubkey: String,
    pub session: u64,
    /// When the core registered it, once authenticated and before its
    /// welcome is sent (the coordinator's clock, ms since the epoch).
    pub opened_ms: i64,
    /// When its task ended it; `None` while it runs, or when its process
    /// died with it.
    pub closed_ms: Option<i64>,
    /// Why its task ended it; `None` while it runs, or when the task was
    /// dropped instead (a crash).
    pub end: Option<SessionEnd>,
}

/// Why a worker session's task ended it: the `reason` label of
/// `worker_sessions_closed_total`, and what the harness judges a closed
/// session by (a worker that reads every frame is never closed for its
/// outbox).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionEnd {
    /// The coordinator sent it a closing error (a session of the same key
    /// replaced it, the process is stopping).
    ClosedByCoordinator,
    /// Its outbox was closed: a frame would have taken it past its bound
    /// (`resources::outbox_bytes_max`), or the session was unregistered.
    OutboxClosed,
    /// A send or a read failed, or the worker broke the protocol.
    ConnectionClosed,
    /// No frame within the heartbeat timeout.
    HeartbeatTimeout,
}

impl SessionEnd {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionEnd::ClosedByCoordinator => "closed by coordinator",
            SessionEnd::OutboxClosed => "outbox closed",
            SessionEnd::ConnectionClosed => "connection closed",
            SessionEnd::HeartbeatTimeout => "heartbeat timeout",
        }
    }
}

/// A finished job retention deleted (see [`result_deleted`]): a result,
/// or a failure record (a failed or refused job, which has no output).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeletedResult {
    pub id: uuid::Uuid,
    /// When the job ended as its ledger orders it (the core's clock, ms
    /// since the epoch): a result's completion; a failure record's
    /// creation (a failed job stores no end time, decision 0018).
    pub completed_ms: i64,
    /// When the pass that deleted it ran.
    pub deleted_ms: i64,
    /// The bytes its ledger (results, or failure records) held when the
    /// pass began: beyond the budget, an owner may be over a share of
    /// 100 % (admission counts only finished results, so queued jobs can
    /// overfill it as they end).
    pub ledger_bytes_before: usize,
    /// A result (`false`: a failure record).
    pub result: bool,
    /// Deleted by the age cut (`false`: by its ledger's size cut).
    pub by_age: bool,
}

thread_local! {
    static ARMED: RefCell<Option<Armed>> = const { RefCell::new(None) };
}

/// Disarms the thread when dropped.
#[must_use = "the thread is disarmed when the guard drops"]
pub struct Guard(());

impl Drop for Guard {
    fn drop(&mut self) {
        ARMED.with(|a| *a.borrow_mut() = None);
    }
}

/// Arms this thread for one simulated world of `seed`: `sometimes` points
/// record, and, with `buggify`, about half the sites are switched on.
/// Only the harness calls this; the thread must run nothing else until the
/// guard drops.
pub fn arm(seed: u64, buggify: bool) -> Guard {
    let mut rngs = Vec::with_capacity(SITES);
    let mut on = [false; SITES];
    let mut choose = ChaCha20Rng::seed_from_u64(seed);
    // Stream 0 of the seed chooses the sites; site i fires from stream i + 1.
    for (i, on) in on.iter_mut().enumerate() {
        *on = buggify && choose.gen_bool(0.5);
        let mut rng = ChaCha20Rng::seed_from_u64(seed);
        rng.set_stream(i as u64 + 1);
        rngs.push(rng);
    }
    let armed = Armed {
        buggify,
        active: true,
        on,
        rngs,
        fired: [0; SITES],
        reached: BTreeMap::new(),
        deleted: Vec::new(),
        sessions: Vec::new(),
        connections: Vec::new(),
        ownership: Vec::new(),
    };
    ARMED.with(|a| *a.borrow_mut() = Some(armed));
    Guard(())
}

/// Whether `site` fires now. `false` on any thread not armed with BUGGIFY.
pub fn fire(site: Site) -> bool {
    ARMED.with(|a| {
        let mut a = a.borrow_mut();
        let enabled = |a: &&mut Armed| a.buggify && a.active && a.on[site.index()];
        let Some(armed) = a.as_mut().filter(enabled) else {
            return false;
        };
        let fires = armed.rngs[site.index()].gen_ratio(1, FIRE_ONE_IN);
        armed.fired[site.index()] += u64::from(fires);
        fires
    })
}

/// Stops (`false`) or resumes the fault points of this thread's armed
/// world: a run's liveness phase runs without them. No effect unarmed.
pub fn set_active(active: bool) {
    ARMED.with(|a| {
        if let Some(armed) = a.borrow_mut().as_mut() {
            armed.active = active;
        }
    });
}

/// When `site` fires, a delay drawn from `1..=max_ms` (from the site's own
/// stream); `None` otherwise.
pub fn delay_ms(site: Site, max_ms: u64) -> Option<u64> {
    assert!(max_ms >= 1, "a fault point's delay is at least 1 ms");
    if !fire(site) {
        return None;
    }
    ARMED.with(|a| {
        let mut a = a.borrow_mut();
        let armed = a.as_mut().expect("a site fired, so the thread is armed");
        Some(armed.rngs[site.index()].gen_range(1..=max_ms))
    })
}

/// When `site` fires, sleeps a delay from `1..=max_ms` of the runtime's
/// (simulated) time.
pub async fn stall(site: Site, max_ms: u64) {
    if let Some(ms) = delay_ms(site, max_ms) {
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
    }
}

/// Marks a rare state reached (see the module's doc). Free when unarmed.
pub fn sometimes(state: &'static str) {
    ARMED.with(|a| {
        if let Some(armed) = a.borrow_mut().as_mut() {
            if armed.reached.len() < STATES_MAX || armed.reached.contains_key(state) {
                *armed.reached.entry(state).or_insert(0) += 1;
            }
        }
    });
}

/// Notes that retention deleted a result (see the module's doc). Free when
/// unarmed.
pub fn result_deleted(deleted: DeletedResult) {
    ARMED.with(|a| {
        if let Some(armed) = a.borrow_mut().as_mut() {
            if armed.deleted.len() < DELETED_MAX {
                armed.deleted.push(deleted);
            }
        }
    });
}

/// The results this thread's armed world deleted so far, in order; empty
/// when unarmed.
pub fn deleted_results() -> Vec<DeletedResult> {
    ARMED.with(|a| {
        a.borrow()
            .as_ref()
            .map_or(Vec::new(), |a| a.deleted.clone())
    })
}

/// Notes that worker session `session` of `pubkey` was registered (once
/// authenticated, before its welcome is sent).
/// Free when unarmed.
pub fn session_opened(pubkey: &str, session: u64, at_ms: i64) {
    ARMED.with(|a| {
        if let Some(armed) = a.borrow_mut().as_mut() {
            if armed.sessions.len() < SESSIONS_MAX {
                armed.sessions.push(SessionSpan {
                    pubkey: pubkey.to_owned(),
                    session,
                    opened_ms: at_ms,
                    closed_ms: None,
                    end: None,
                });
            }
        }
    });
}

/// Notes that the session's task ended it, for `end` (the latest open one
/// of that key and id: ids restart with each process). Free when unarmed.
pub fn session_closed(pubkey: &str, session: u64, at_ms: i64, end: Option<SessionEnd>) {
    ARMED.with(|a| {
        if let Some(armed) = a.borrow_mut().as_mut() {
            let open = (armed.sessions.iter_mut().rev())
                .find(|s| s.closed_ms.is_none() && s.session == session && s.pubkey == pubkey);
            if let Some(span) = open {
                span.closed_ms = Some(at_ms);
                span.end = end;
            }
        }
    });
}

/// The worker sessions this thread's armed world ran so far, in the order
/// they opened; empty when unarmed.
pub fn sessions() -> Vec<SessionSpan> {
    ARMED.with(|a| {
        a.borrow()
            .as_ref()
            .map_or(Vec::new(), |a| a.sessions.clone())
    })
}

/// What an armed world did so far: the sites switched on, how often each
/// fired, and the `sometimes` states reached with their counts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fired {
    pub on: Vec<Site>,
    pub fired: BTreeMap<Site, u64>,
    pub reached: BTreeMap<&'static str, u64>,
}

/// This thread's record; empty when unarmed.
pub fn fired() -> Fired {
    ARMED.with(|a| {
        let a = a.borrow();
        let Some(armed) = a.as_ref() else {
            return Fired::default();
        };
        let on = Site::ALL.into_iter().filter(|s| armed.on[s.index()]);
        Fired {
            on: on.collect(),
            fired: Site::ALL
                .into_iter()
                .filter(|s| armed.fired[s.index()] > 0)
                .map(|s| (s, armed.fired[s.index()]))
                .collect(),
            reached: armed.reached.clone(),
        }
    })
}

/// At most this many plain HTTP connections are noted per world.
const CONNECTIONS_MAX: usize = 100_000;

/// A plain HTTP connection as the bounded accept loop admitted it
/// (the `connections` module, decision 0019): only a server whose bounds are
/// enforced notes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionSpan {
    /// The address served (the listener's).
    pub server: String,
    /// The client's rate-limit key (its address; IPv6 by /64).
    pub client: String,
    /// The client's open plain connections with this one, as the accept
    /// loop counted them when it admitted it.
    pub open_of_client: usize,
    /// When it was admitted (the coordinator's clock, ms since the epoch).
    pub opened_ms: i64,
    /// When its place was given back (closed, or upgraded to a worker
    /// session); `None` while open.
    pub closed_ms: Option<i64>,
}

/// Notes an admitted connection; its index names it for
/// [`connection_closed`]. `None` (and free) when unarmed.
pub fn connection_opened(span: ConnectionSpan) -> Option<usize> {
    ARMED.with(|a| {
        let mut a = a.borrow_mut();
        let armed = a.as_mut()?;
        if armed.connections.len() >= CONNECTIONS_MAX {
            return None;
        }
        armed.connections.push(span);
        Some(armed.connections.len() - 1)
    })
}

/// Notes that connection `index` gave its place back at `at_ms`.
pub fn connection_closed(index: usize, at_ms: i64) {
    ARMED.with(|a| {
        if let Some(span) = (a.borrow_mut().as_mut()).and_then(|a| a.connections.get_mut(index)) {
            span.closed_ms = Some(at_ms);
        }
    });
}

/// The plain connections this thread's armed world admitted so far, in
/// order; empty when unarmed.
pub fn connections() -> Vec<ConnectionSpan> {
    ARMED.with(|a| {
        a.borrow()
            .as_ref()
            .map_or(Vec::new(), |a| a.connections.clone())
    })
}

/// At most this many ownership facts are noted per world (far more than a
/// simulated world makes); the harness judges the record up to its cut.
const OWNERSHIP_MAX: usize = 200_000;

/// A fact of a several-node world about who acts for a job (see
/// [`ownership_noted`]). Node ids are the cluster's (`--node-id`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ownership {
    /// The shared store now names `owner` as the job's owner (`None`: the
    /// job is in the pool).
    Owned {
        job: uuid::Uuid,
        owner: Option<String>,
    },
    /// Node `node` queued an `assign` of the job for one of its workers.
    Assigned {
        node: String,
        job: uuid::Uuid,
        at_ms: i64,
    },
    /// Node `node` fenced itself: it acts no more until it joins again.
    Fenced { node: String },
    /// Node `node` joined the cluster (at its start, or again after a
    /// fence or crash).
    Joined { node: String },
}

/// Notes an ownership fact (see the module's doc). Free when unarmed.
pub fn ownership_noted(fact: Ownership) {
    ARMED.with(|a| {
        if let Some(armed) = a.borrow_mut().as_mut() {
            if armed.ownership.len() < OWNERSHIP_MAX {
                armed.ownership.push(fact);
            }
        }
    });
}

/// The ownership facts this thread's armed world noted so far, in order
/// (the first [`OWNERSHIP_MAX`]); empty when unarmed.
pub fn ownership() -> Vec<Ownership> {
    ARMED.with(|a| {
        a.borrow()
            .as_ref()
            .map_or(Vec::new(), |a| a.ownership.clone())
    })
}

/// Every `sometimes` state the code names, for the "never reached" list.
/// A state marked but missing here is a test failure (see the tests).
pub const STATES: &[&str] = &[
    "a held poll was answered early to make room",
    "a lease expired on a held job",
    "a paid job's payment expired while it waited",
    "a payment expired before its settlement ended",
    "a restart requeued a job a worker held",
    "settlement answer lost and retried",
    "settlement found its own lost settlement spent",
    "settlement outcome unknown at its retry deadline",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unarmed_thread_never_fires_and_records_nothing() {
        for site in Site::ALL {
            assert!(!fire(site));
        }
        sometimes("a state");
        assert_eq!(fired(), Fired::default());
    }

    #[test]
    fn an_armed_world_fires_alike_on_each_run_and_disarms_on_drop() {
        let run = || {
            let _guard = arm(7, true);
            let fires: Vec<bool> = (0..200).map(|i| fire(Site::ALL[i % SITES])).collect();
            sometimes("x");
            (fires, fired())
        };
        let (a, b) = (run(), run());
        assert_eq!(a, b);
        assert!(
            a.0.iter().any(|f| *f),
            "some enabled site fires in 200 calls"
        );
        assert_eq!(a.1.reached.get("x"), Some(&1));
        assert!(Site::ALL.iter().all(|s| !fire(*s)), "disarmed on drop");
    }

    #[test]
    fn sites_stopped_for_a_phase_draw_nothing_and_resume_where_they_were() {
        let calls = |n: usize| {
            (0..n)
                .map(|i| fire(Site::ALL[i % SITES]))
                .collect::<Vec<_>>()
        };
        let whole = {
            let _guard = arm(3, true);
            calls(100)
        };
        let _guard = arm(3, true);
        let first = calls(50);
        set_active(false);
        assert!(calls(100).iter().all(|f| !f));
        set_active(true);
        assert_eq!([first, calls(50)].concat(), whole);
    }

    #[test]
    fn without_buggify_sites_stay_off_but_states_record() {
        let _guard = arm(7, false);
        assert!((0..100).all(|i| !fire(Site::ALL[i % SITES])));
        sometimes("y");
        assert!(fired().on.is_empty());
        assert_eq!(fired().reached.get("y"), Some(&1));
    }

    /// Every `sometimes` call in the crate's other sources is listed in
    /// [`STATES`] (so "never reached" can name it), and every listed
    /// state is still marked somewhere.
    #[test]
    fn every_state_the_code_marks_is_listed() {
        let mut marked = std::collections::BTreeSet::new();
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut dirs = vec![src];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().is_some_and(|e| e == "rs")
                    && !path.ends_with("buggify.rs")
                {
                    let text = std::fs::read_to_string(&path).unwrap();
                    let calls = text.split("sometimes(").skip(1);
                    for part in calls.filter_map(|p| p.trim_start().strip_prefix('"')) {
                        marked.insert(part.split('"').next().unwrap().to_owned());
                    }
                }
            }
        }
        let listed: std::collections::BTreeSet<String> =
            STATES.iter().map(|s| s.to_string()).collect();
        assert_eq!(marked, listed);
    }

    #[test]
    fn about_half_the_sites_are_on_across_seeds() {
        let on: usize = (0..200)
            .map(|s| arm(s, true))
            .map(|_g| fired().on.len())
            .sum();
        // 2,000 coin flips: the mean 1,000 within 10 %.
        assert!((900..=1100).contains(&on), "{on} sites on");
    }
}
