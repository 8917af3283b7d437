//! A swarm world: what one seed draws (instances, workers, pairings and a
//! timeline of commits and faults), and its rendering as an ordinary
//! scenario file, so a world the swarm found broken replays with `harness`.
//!
//! Swarm-style generation: each seed first switches whole fault kinds on or
//! off ([`Kinds`]), then draws the world with only the enabled kinds, so
//! rare combinations (payments and restarts and PRIVATE jobs, nothing else)
//! get room instead of drowning in an average of everything.

use crate::check::INSTANCE_NAMES;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;
use std::fmt::Write as _;

/// Fault and feature kinds a seed switches on or off as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Payments,
    PaymentTamper,
    PaymentReplay,
    FacilitatorFailure,
    Private,
    WorkerCrash,
    WorkerDisconnect,
    WorkerSilent,
    WorkerReject,
    WorkerSlow,
    WrongOutput,
    ForgedReceipt,
    DuplicateResult,
    MalformedFrames,
    HeartbeatLoss,
    LinkFaults,
    DuplicateSessions,
    WorkerChurn,
    CoordinatorRestart,
    GracefulRestart,
    CrashBetweenWrites,
    Router,
    ProviderErrors,
    ConcurrentClients,
    RebootInFlight,
    /// Instances of 2 or 3 coordinator nodes on one shared store, with node
    /// crashes and store partitions (drawn by [`super::nodes`]).
    Nodes,
}

impl Kind {
    /// The kinds switched on or off by one coin each from the seed's main
    /// stream, in this order. Fixed: a kind added here would move every
    /// later draw and so change the world of every existing seed; newer
    /// kinds draw from streams of their own ([`Kind::Nodes`]).
    pub const MAIN_STREAM: &'static [Kind] = &[
        Kind::Payments,
        Kind::PaymentTamper,
        Kind::PaymentReplay,
        Kind::FacilitatorFailure,
        Kind::Private,
        Kind::WorkerCrash,
        Kind::WorkerDisconnect,
        Kind::WorkerSilent,
        Kind::WorkerReject,
        Kind::WorkerSlow,
        Kind::WrongOutput,
        Kind::ForgedReceipt,
        Kind::DuplicateResult,
        Kind::MalformedFrames,
        Kind::HeartbeatLoss,
        Kind::LinkFaults,
        Kind::DuplicateSessions,
        Kind::WorkerChurn,
        Kind::CoordinatorRestart,
        Kind::GracefulRestart,
        Kind::CrashBetweenWrites,
        Kind::Router,
        Kind::ProviderErrors,
        Kind::ConcurrentClients,
        Kind::RebootInFlight,
    ];

    /// Every kind, in the order of the coverage table: the main stream's,
    /// then [`Kind::Nodes`].
    pub const ALL: &'static [Kind] = &{
        let mut all = [Kind::Nodes; Self::MAIN_STREAM.len() + 1];
        let mut i = 0;
        while i < Self::MAIN_STREAM.len() {
            all[i] = Self::MAIN_STREAM[i];
            i += 1;
        }
        all
    };

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Payments => "payments",
            Kind::PaymentTamper => "payment_tamper",
            Kind::PaymentReplay => "payment_replay",
            Kind::FacilitatorFailure => "facilitator_failure",
            Kind::Private => "private_jobs",
            Kind::WorkerCrash => "worker_crash",
            Kind::WorkerDisconnect => "worker_disconnect",
            Kind::WorkerSilent => "worker_silent",
            Kind::WorkerReject => "worker_reject",
            Kind::WorkerSlow => "worker_slow",
            Kind::WrongOutput => "wrong_output",
            Kind::ForgedReceipt => "forged_receipt",
            Kind::DuplicateResult => "duplicate_result",
            Kind::MalformedFrames => "malformed_frames",
            Kind::HeartbeatLoss => "heartbeat_loss",
            Kind::LinkFaults => "partitions_delays_holds",
            Kind::DuplicateSessions => "duplicate_sessions",
            Kind::WorkerChurn => "worker_churn",
            Kind::CoordinatorRestart => "coordinator_restart",
            Kind::GracefulRestart => "graceful_restart",
            Kind::CrashBetweenWrites => "crash_between_writes",
            Kind::Router => "router_calls",
            Kind::ProviderErrors => "provider_errors",
            Kind::ConcurrentClients => "concurrent_clients",
            Kind::RebootInFlight => "reboot_in_flight",
            Kind::Nodes => "several_nodes",
        }
    }
}

/// The kinds one seed switched on, in [`Kind::ALL`] order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Kinds(pub Vec<Kind>);

impl Kinds {
    pub fn has(&self, kind: Kind) -> bool {
        self.0.contains(&kind)
    }
}

const NETWORKS: [&str; 2] = ["eip155:84532", "eip155:8453"];
/// At most this many workers in one world (the bound).
pub const WORKERS_MAX: usize = 64;
/// At most this many timeline events in one world.
pub const EVENTS_MAX: usize = 80;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceSpec {
    pub name: &'static str,
    pub network: &'static str,
    /// `None`: payments off; `Some("local")` or a facilitator script.
    pub payment: Option<&'static str>,
    pub lease_ms: u64,
    pub pending_timeout_ms: u64,
    pub attempts_max: u32,
    pub heartbeat_timeout_ms: Option<u64>,
    /// Coordinator nodes on one shared store; 1 is the single coordinator.
    pub nodes: u32,
    /// How long a node's lease lasts (rendered only with `nodes > 1`).
    pub node_lease_ms: u64,
    /// Finished jobs the coordinator keeps in memory (`limits`); `None`
    /// renders nothing (the default, 256). Drawn by [`draw_caches`].
    pub finished_jobs_cached_max: Option<usize>,
    /// Retention on (`retention_hours = 24`) with this small kept budget
    /// (`limits.kept_bytes_max`), so the oldest finished jobs are deleted
    /// while the world runs; `None` renders neither. Drawn by
    /// [`draw_retention`].
    pub retention_kept_bytes_max: Option<usize>,
}

/// One worker fault drawn with a probability per job, in percent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobFaultSpec {
    /// The TOML of the fault's kind and fields, e.g. `kind = "silent"`.
    pub toml: String,
    pub percent: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerSpec {
    pub name: String,
    pub instance: &'static str,
    /// Empty means both job types (the default).
    pub capabilities: Vec<&'static str>,
    pub slots: u32,
    pub latency: String,
    pub faults: Vec<JobFaultSpec>,
    /// `heartbeat = { ... }` fault, when drawn.
    pub heartbeat: Option<String>,
    /// A second session with this (earlier) worker's key.
    pub key_of: Option<String>,
    /// The node it connects to, on an instance of several nodes.
    pub node: Option<u32>,
}

impl WorkerSpec {
    pub fn honest(&self) -> bool {
        self.faults.is_empty() && self.heartbeat.is_none() && self.key_of.is_none()
    }
}

/// A network fault between a worker and its instance (a version-2
/// `[[faults]]` table), repaired before the timeline ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkFault {
    /// `partition`, `delay` or `hold`.
    pub kind: &'static str,
    pub worker: String,
    pub instance: &'static str,
    pub at_ms: u64,
    pub for_ms: u64,
    /// For `delay`.
    pub delay_ms: u64,
}

/// A client committing beside the timeline (a version-2 `[[workloads]]`
/// table): its commits race the timeline's own, and a reboot can catch
/// them in flight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Load {
    pub instance: &'static str,
    pub count: u32,
    pub start_ms: u64,
    pub over_ms: u64,
    pub paid: bool,
    /// A user paired on the instance, whose commits are then PRIVATE.
    pub private_user: Option<String>,
}

/// A crash and restart at a random time in a window (a version-2
/// `[[faults]]` reboot), beside the timeline: it can fall in the middle of
/// a request, a dispatch or a group commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reboot {
    pub instance: &'static str,
    pub from_ms: u64,
    pub to_ms: u64,
    pub down_ms: u64,
}

/// A user paired with a worker during set-up (before any fault).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pairing {
    pub user: String,
    pub instance: &'static str,
    pub worker: String,
    /// The node the code is claimed on (it is created on node 0).
    pub claim_node: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Commit(Commit),
    /// The last payment header again, with another body: must buy nothing.
    Replay {
        instance: &'static str,
        /// The node it goes to: a payment spent on one node must buy
        /// nothing on another.
        node: u32,
        index: u32,
    },
    StopWorker(String),
    StartWorker(String),
    Restart(&'static str),
    /// Stop gracefully (as on SIGTERM) and start again.
    GracefulRestart(&'static str),
    /// Crash right after the instance's next store write of this kind.
    CrashAfter {
        instance: &'static str,
        write: &'static str,
    },
    Facilitator {
        instance: &'static str,
        script: &'static str,
    },
    /// The hosted stubs fail every call until the heal (`None` heals).
    ProviderFault(&'static str),
    Router {
        index: u32,
        private: bool,
    },
    /// Node `node` crashes; its supervisor starts it again `down_ms` later.
    NodeCrash {
        instance: &'static str,
        node: u32,
        down_ms: u64,
    },
    /// Node `node` is cut from the shared store for `for_ms`, then healed.
    StorePartition {
        instance: &'static str,
        node: u32,
        for_ms: u64,
    },
    /// Node `node`'s next write to the shared store commits but its answer
    /// is lost; the node retries it.
    LostAnswer {
        instance: &'static str,
        node: u32,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit {
    pub instance: &'static str,
    pub tier: &'static str,
    pub job_type: &'static str,
    pub user: String,
    pub private: bool,
    /// `None`: no payment; `Some("none")` valid; else the `pay.alter`.
    pub pay: Option<&'static str>,
    pub index: u32,
    /// The node of the instance it goes to.
    pub node: u32,
}

/// An event `after_ms` after the one before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timed {
    pub after_ms: u64,
    pub event: Event,
}

/// Everything one seed drew.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorldSpec {
    pub seed: u64,
    pub kinds: Kinds,
    pub instances: Vec<InstanceSpec>,
    pub workers: Vec<WorkerSpec>,
    pub pairings: Vec<Pairing>,
    pub events: Vec<Timed>,
    pub link_faults: Vec<LinkFault>,
    pub loads: Vec<Load>,
    pub reboots: Vec<Reboot>,
    /// Jobs committed after the heal that must complete (liveness), with
    /// a health check before them; 0 leaves both out (the shrinker does,
    /// when the failure is a job that never ends).
    pub heal_commits: u32,
    /// Whether the run ends with the heal and its liveness checks (the
    /// shrinker drops it when a safety failure does not need it).
    pub heal: bool,
}

impl WorldSpec {
    /// Draws the world of `seed`.
    pub fn generate(seed: u64) -> Self {
        let mut rng = ChaCha20Rng::seed_from_u64(seed);
        let kinds = Kinds(
            Kind::MAIN_STREAM
                .iter()
                .copied()
                .filter(|_| rng.gen_bool(0.5))
                .collect(),
        );
        let instances = draw_instances(&mut rng, &kinds);
        let workers = draw_workers(&mut rng, &kinds, &instances);
        let pairings = draw_pairings(&mut rng, &kinds, &workers);
        let mut events = draw_events(&mut rng, &kinds, &instances, &workers, &pairings);
        let heal_commits = rng.gen_range(1..=4);
        let mut workers = workers;
        if kinds.has(Kind::DuplicateSessions) {
            add_twins(&mut rng, &mut workers, &mut events);
        }
        let link_faults = if kinds.has(Kind::LinkFaults) {
            draw_link_faults(&mut rng, &workers, timeline_ms(&events))
        } else {
            vec![]
        };
        let end_ms = timeline_ms(&events);
        let loads = if kinds.has(Kind::ConcurrentClients) {
            draw_loads(&mut rng, &instances, &pairings, end_ms)
        } else {
            vec![]
        };
        let reboots = if kinds.has(Kind::RebootInFlight) {
            draw_reboots(&mut rng, &instances, end_ms)
        } else {
            vec![]
        };
        let mut world = Self {
            seed,
            kinds,
            instances,
            workers,
            pairings,
            events,
            link_faults,
            loads,
            reboots,
            heal_commits,
            heal: true,
        };
        super::nodes::draw(&mut world);
        draw_caches(&mut world);
        draw_retention(&mut world);
        world
    }

    /// How many nodes instance `name` has (1 when it is not declared).
    pub fn nodes_of(&self, name: &str) -> u32 {
        self.instances
            .iter()
            .find(|i| i.name == name)
            .map_or(1, |i| i.nodes)
    }

    /// The workers stopped when the timeline ends.
    pub fn stopped_at_end(&self) -> Vec<&str> {
        let mut stopped: Vec<&str> = Vec::new();
        for t in &self.events {
            match &t.event {
                Event::StopWorker(n) => stopped.push(n),
                Event::StartWorker(n) => stopped.retain(|s| s != n),
                _ => {}
            }
        }
        stopped
    }

    /// Makes a world whose parts were removed (by shrinking) consistent
    /// again: events and pairings name only existing instances and workers,
    /// a worker is stopped only when running and started only when
    /// stopped, a replay follows a payment, payments go only to paid
    /// instances, and every instance keeps an honest worker of both types.
    pub fn normalize(&mut self) {
        let instances: Vec<&'static str> = self.instances.iter().map(|i| i.name).collect();
        self.workers.retain(|w| instances.contains(&w.instance));
        let names: Vec<String> = self.workers.iter().map(|w| w.name.clone()).collect();
        self.workers
            .retain(|w| w.key_of.as_ref().is_none_or(|k| names.contains(k)));
        let workers: Vec<String> = self.workers.iter().map(|w| w.name.clone()).collect();
        let end_ms = timeline_ms(&self.events);
        self.link_faults.retain(|f| {
            workers.contains(&f.worker)
                && instances.contains(&f.instance)
                && f.at_ms + f.for_ms <= end_ms
        });
        self.pairings
            .retain(|p| instances.contains(&p.instance) && workers.contains(&p.worker));
        let paid: Vec<&'static str> = self
            .instances
            .iter()
            .filter(|i| i.payment.is_some())
            .map(|i| i.name)
            .collect();
        let facilitated: Vec<&'static str> = self
            .instances
            .iter()
            .filter(|i| i.payment == Some("success"))
            .map(|i| i.name)
            .collect();
        let mut stopped: Vec<String> = Vec::new();
        let mut paid_once = false;
        let mut kept = Vec::with_capacity(self.events.len());
        for mut t in std::mem::take(&mut self.events) {
            let keep = match &mut t.event {
                Event::Commit(c) => {
                    if !instances.contains(&c.instance) {
                        false
                    } else {
                        if !paid.contains(&c.instance) {
                            c.pay = None;
                        } else if c.pay.is_none() {
                            c.pay = Some("none");
                        }
                        paid_once |= c.pay.is_some();
                        true
                    }
                }
                Event::Replay { instance, .. } => paid_once && paid.contains(instance),
                Event::StopWorker(n) => {
                    let ok = workers.contains(n) && !stopped.contains(n);
                    if ok {
                        stopped.push(n.clone());
                    }
                    ok
                }
                Event::StartWorker(n) => {
                    let ok = stopped.contains(n);
                    stopped.retain(|s| s != n);
                    ok
                }
                Event::Restart(i) | Event::GracefulRestart(i) => instances.contains(i),
                // An armed SQLite write needs a single node.
                Event::CrashAfter { instance: i, .. } => {
                    instances.contains(i) && self.nodes_of(i) == 1
                }
                Event::NodeCrash { instance, node, .. }
                | Event::StorePartition { instance, node, .. }
                | Event::LostAnswer { instance, node } => {
                    let nodes = self.nodes_of(instance);
                    instances.contains(instance) && nodes > 1 && *node < nodes
                }
                Event::Facilitator { instance, .. } => facilitated.contains(instance),
                Event::ProviderFault(_) | Event::Router { .. } => true,
            };
            if keep {
                kept.push(t);
            }
        }
        self.events = kept;
        let end_ms = timeline_ms(&self.events);
        self.link_faults.retain(|f| f.at_ms + f.for_ms <= end_ms);
        let pairings = &self.pairings;
        self.loads.retain(|l| instances.contains(&l.instance));
        for load in &mut self.loads {
            load.paid &= paid.contains(&load.instance);
            let paired = |u: &String| {
                pairings
                    .iter()
                    .any(|p| p.instance == load.instance && p.user == *u)
            };
            if !load.private_user.as_ref().is_some_and(paired) {
                load.private_user = None;
            }
        }
        self.reboots
            .retain(|r| instances.contains(&r.instance) && r.from_ms < end_ms);
        for reboot in &mut self.reboots {
            reboot.to_ms = reboot.to_ms.min(end_ms);
        }
        super::nodes::normalize(self);
    }

    /// Whether every instance keeps an honest worker of both job types
    /// (the heal's liveness checks need one).
    pub fn has_anchors(&self) -> bool {
        self.instances.iter().all(|i| {
            self.workers
                .iter()
                .any(|w| w.instance == i.name && w.honest() && w.capabilities.is_empty())
        })
    }

    /// Simulated time the heal phase waits for every job to end: the
    /// longest a job can live (pending timeout, then every attempt's lease,
    /// with room for reconnects), plus a margin.
    pub fn heal_ms(&self) -> u64 {
        self.instances
            .iter()
            .map(|i| {
                let heartbeat_ms = i.heartbeat_timeout_ms.unwrap_or(30_000);
                i.pending_timeout_ms
                    + u64::from(i.attempts_max) * (i.lease_ms + heartbeat_ms + 6_000)
                    + super::nodes::heal_extra_ms(self, i)
            })
            .max()
            .unwrap_or(0)
            + 10_000
    }
}

/// Simulated time the timeline's events take (their gaps added up).
pub fn timeline_ms(events: &[Timed]) -> u64 {
    events.iter().map(|t| t.after_ms).sum()
}

/// Second sessions with the keys of some workers: each replaces the other
/// (`error replaced`) and reconnects, so the two take turns.
/// Each twin is stopped again early in the timeline (an event inserted among
/// the first few): while both run they take turns every reconnect backoff,
/// which costs a handshake each, so a whole run of it would only be slow.
fn add_twins(rng: &mut ChaCha20Rng, workers: &mut Vec<WorkerSpec>, events: &mut Vec<Timed>) {
    let count = rng.gen_range(1..=2).min(workers.len());
    let originals: Vec<WorkerSpec> = workers.choose_multiple(rng, count).cloned().collect();
    for original in originals {
        let at = rng.gen_range(0..=events.len().min(3));
        events.insert(
            at,
            Timed {
                after_ms: 0,
                event: Event::StopWorker(format!("{}-twin", original.name)),
            },
        );
        workers.push(WorkerSpec {
            name: format!("{}-twin", original.name),
            key_of: Some(original.name.clone()),
            faults: vec![],
            heartbeat: None,
            ..original
        });
    }
}

/// Partitions, delays and holds between a worker and its instance, each
/// repaired before the timeline ends (the heal needs a healthy network).
fn draw_link_faults(rng: &mut ChaCha20Rng, workers: &[WorkerSpec], end_ms: u64) -> Vec<LinkFault> {
    if end_ms < 100 {
        return vec![];
    }
    (0..rng.gen_range(1..=3))
        .map(|_| {
            let worker = workers.choose(rng).expect("a worker");
            let at_ms = rng.gen_range(0..end_ms - 1);
            LinkFault {
                kind: pick(rng, &["partition", "delay", "hold"]),
                worker: worker.name.clone(),
                instance: worker.instance,
                at_ms,
                for_ms: rng.gen_range(1..=(end_ms - at_ms).min(20_000)),
                delay_ms: rng.gen_range(1..=500),
            }
        })
        .collect()
}

/// One or two clients committing beside the timeline, each on one
/// instance, spread over the timeline.
fn draw_loads(
    rng: &mut ChaCha20Rng,
    instances: &[InstanceSpec],
    pairings: &[Pairing],
    end_ms: u64,
) -> Vec<Load> {
    let span_ms = end_ms.max(1_000);
    (0..rng.gen_range(1..=2))
        .map(|_| {
            let instance = instances.choose(rng).expect("an instance");
            let paired: Vec<&Pairing> = pairings
                .iter()
                .filter(|p| p.instance == instance.name)
                .collect();
            let start_ms = rng.gen_range(0..span_ms / 2);
            Load {
                instance: instance.name,
                count: rng.gen_range(5..=40),
                start_ms,
                over_ms: rng.gen_range(100..=span_ms - start_ms),
                paid: instance.payment.is_some() && rng.gen_bool(0.7),
                private_user: paired
                    .choose(rng)
                    .filter(|_| rng.gen_bool(0.3))
                    .map(|p| p.user.clone()),
            }
        })
        .collect()
}

/// One or two reboots at random times inside the timeline.
fn draw_reboots(rng: &mut ChaCha20Rng, instances: &[InstanceSpec], end_ms: u64) -> Vec<Reboot> {
    if end_ms < 100 {
        return vec![];
    }
    (0..rng.gen_range(1..=2))
        .map(|_| {
            let from_ms = rng.gen_range(0..end_ms - 1);
            Reboot {
                instance: instances.choose(rng).expect("an instance").name,
                from_ms,
                to_ms: rng.gen_range(from_ms + 1..=end_ms),
                down_ms: *[0, 0, 50, 300, 1_000].choose(rng).expect("a downtime"),
            }
        })
        .collect()
}

/// One of `items`, drawn uniformly.
fn pick<T: Copy>(rng: &mut ChaCha20Rng, items: &[T]) -> T {
    *items.choose(rng).expect("a non-empty list")
}

fn draw_instances(rng: &mut ChaCha20Rng, kinds: &Kinds) -> Vec<InstanceSpec> {
    let count = if rng.gen_bool(0.3) { 2 } else { 1 };
    (0..count)
        .map(|i| {
            let payment = kinds.has(Kind::Payments) && rng.gen_bool(0.7);
            let payment = payment.then(|| {
                if kinds.has(Kind::FacilitatorFailure) || rng.gen_bool(0.5) {
                    "success"
                } else {
                    "local"
                }
            });
            InstanceSpec {
                name: INSTANCE_NAMES[i],
                network: NETWORKS[i],
                payment,
                lease_ms: pick(rng, &[1_000, 3_000, 10_000, 60_000]),
                pending_timeout_ms: pick(rng, &[5_000, 20_000, 120_000]),
                attempts_max: rng.gen_range(1..=5),
                heartbeat_timeout_ms: kinds
                    .has(Kind::HeartbeatLoss)
                    .then(|| pick(rng, &[2_000, 5_000])),
                nodes: 1,
                node_lease_ms: 0,
                finished_jobs_cached_max: None,
                retention_kept_bytes_max: None,
            }
        })
        .collect()
}

/// The seed's ChaCha stream the finished-job caches are drawn from (the
/// world's is 0, the nodes kind's 1): drawn after the rest, so every other
/// draw of a seed is what it was before caches were drawn.
const CACHE_STREAM: u64 = 2;

/// Half the instances keep the default cache of finished jobs; the others
/// hold 0, 1 or 4, so polls, paid retries and worker frames about finished
/// jobs read them from the store (core/ended.rs).
fn draw_caches(world: &mut WorldSpec) {
    let mut rng = ChaCha20Rng::seed_from_u64(world.seed);
    rng.set_stream(CACHE_STREAM);
    for i in &mut world.instances {
        i.finished_jobs_cached_max = rng.gen_bool(0.5).then(|| pick(&mut rng, &[0, 1, 4]));
    }
}

/// The seed's ChaCha stream retention is drawn from: after every other
/// draw, so a seed draws the world it drew before retention was drawn.
const RETENTION_STREAM: u64 = 3;

/// A quarter of the instances run retention with a kept budget small
/// enough to fill (about 55 or 220 small jobs), so size retention deletes
/// finished jobs among the world's faults (restarts, crashes between
/// writes, several nodes). Room for the heal's new jobs stays: the budget's
/// last fifth holds at least five small jobs.
fn draw_retention(world: &mut WorldSpec) {
    let mut rng = ChaCha20Rng::seed_from_u64(world.seed);
    rng.set_stream(RETENTION_STREAM);
    for i in &mut world.instances {
        i.retention_kept_bytes_max = rng
            .gen_bool(0.25)
            .then(|| pick(&mut rng, &[64 * 1024, 256 * 1024]));
    }
}

fn draw_workers(
    rng: &mut ChaCha20Rng,
    kinds: &Kinds,
    instances: &[InstanceSpec],
) -> Vec<WorkerSpec> {
    // Mostly small fleets, sometimes a large one.
    let count = if rng.gen_bool(0.1) {
        rng.gen_range(8..=WORKERS_MAX)
    } else {
        rng.gen_range(1..=5)
    }
    .max(instances.len());
    (0..count)
        .map(|i| {
            let instance = instances[i % instances.len()].name;
            // The first worker of each instance is an honest anchor of both
            // job types, so the heal has someone to finish every job.
            let anchor = i < instances.len();
            let capabilities = match rng.gen_range(0..6) {
                0 if !anchor => vec!["LLM_INFER"],
                1 if !anchor => vec!["TASK"],
                _ => vec![],
            };
            let latency = match rng.gen_range(0..3) {
                0 => format!("{}", rng.gen_range(1..=200)),
                1 => {
                    let min_ms = rng.gen_range(1..=100);
                    format!("{min_ms}..{}", min_ms + rng.gen_range(0..=400))
                }
                _ => format!("{}~{}", rng.gen_range(20..=300), rng.gen_range(1..=100)),
            };
            let honest = anchor || rng.gen_bool(0.4);
            let faults = if honest {
                vec![]
            } else {
                draw_job_faults(rng, kinds)
            };
            let heartbeat =
                (!honest && kinds.has(Kind::HeartbeatLoss) && rng.gen_bool(0.4)).then(|| {
                    if rng.gen_bool(0.5) {
                        format!(
                            "{{ kind = \"stop\", after_ms = {} }}",
                            rng.gen_range(0..5_000)
                        )
                    } else {
                        format!(
                            "{{ kind = \"slow\", interval_ms = {} }}",
                            rng.gen_range(1_000..10_000)
                        )
                    }
                });
            WorkerSpec {
                name: format!("w{i:02}"),
                instance,
                capabilities,
                slots: pick(rng, &[1, 1, 2, 4]),
                latency,
                faults,
                heartbeat,
                key_of: None,
                node: None,
            }
        })
        .collect()
}

fn draw_job_faults(rng: &mut ChaCha20Rng, kinds: &Kinds) -> Vec<JobFaultSpec> {
    let mut faults = Vec::new();
    let mut add = |rng: &mut ChaCha20Rng, kind: Kind, toml: String| {
        if kinds.has(kind) && rng.gen_bool(0.5) {
            faults.push(JobFaultSpec {
                toml,
                percent: rng.gen_range(5..=60),
            });
        }
    };
    let restart_ms = rng.gen_range(50..3_000);
    add(
        rng,
        Kind::WorkerCrash,
        format!("kind = \"crash\", restart_after_ms = {restart_ms}"),
    );
    add(rng, Kind::WorkerDisconnect, "kind = \"disconnect\"".into());
    add(rng, Kind::WorkerSilent, "kind = \"silent\"".into());
    let accept_first = rng.gen_bool(0.5);
    add(
        rng,
        Kind::WorkerReject,
        format!("kind = \"reject\", accept_first = {accept_first}"),
    );
    let extra_ms = rng.gen_range(100..70_000);
    add(
        rng,
        Kind::WorkerSlow,
        format!("kind = \"slow\", extra_ms = {extra_ms}"),
    );
    let wrong = if rng.gen_bool(0.5) {
        "invalid_output"
    } else {
        "wrong_output_hash"
    };
    add(rng, Kind::WrongOutput, format!("kind = \"{wrong}\""));
    add(rng, Kind::ForgedReceipt, "kind = \"bad_signature\"".into());
    add(
        rng,
        Kind::DuplicateResult,
        "kind = \"duplicate_result\"".into(),
    );
    let frame = pick(
        rng,
        &[
            "\"not_json\"",
            "\"unknown_type\"",
            "\"unexpected\"",
            "\"foreign_result\"",
        ],
    );
    add(
        rng,
        Kind::MalformedFrames,
        format!("kind = \"malformed\", frame = {frame}"),
    );
    faults
}

fn draw_pairings(rng: &mut ChaCha20Rng, kinds: &Kinds, workers: &[WorkerSpec]) -> Vec<Pairing> {
    if !kinds.has(Kind::Private) {
        return vec![];
    }
    // Users u0..u3; some paired with one or two workers, some with none.
    let mut pairings = Vec::new();
    for user in 0..4 {
        let paired = rng.gen_range(0..=2).min(workers.len());
        for w in workers.choose_multiple(rng, paired) {
            pairings.push(Pairing {
                user: format!("u{user}"),
                instance: w.instance,
                worker: w.name.clone(),
                claim_node: 0,
            });
        }
    }
    pairings
}

fn draw_events(
    rng: &mut ChaCha20Rng,
    kinds: &Kinds,
    instances: &[InstanceSpec],
    workers: &[WorkerSpec],
    pairings: &[Pairing],
) -> Vec<Timed> {
    let count = rng.gen_range(3..=EVENTS_MAX);
    let mut stopped: Vec<String> = Vec::new();
    let mut paid_once = false;
    let mut events = Vec::with_capacity(count);
    for index in 0..count as u32 {
        let after_ms = match rng.gen_range(0..4) {
            0 => 0,
            1 => rng.gen_range(1..50),
            2 => rng.gen_range(50..1_000),
            _ => rng.gen_range(1_000..15_000),
        };
        let event = draw_event(
            rng,
            kinds,
            instances,
            workers,
            pairings,
            index,
            &mut stopped,
        );
        let event = match event {
            Event::Replay { .. } if !paid_once => continue,
            e => e,
        };
        if let Event::Commit(Commit { pay: Some(_), .. }) = &event {
            paid_once = true;
        }
        events.push(Timed { after_ms, event });
    }
    events
}

fn draw_event(
    rng: &mut ChaCha20Rng,
    kinds: &Kinds,
    instances: &[InstanceSpec],
    workers: &[WorkerSpec],
    pairings: &[Pairing],
    index: u32,
    stopped: &mut Vec<String>,
) -> Event {
    let instance = instances.choose(rng).expect("an instance");
    let roll = rng.gen_range(0..100);
    match roll {
        // Faults, each when its kind is on; otherwise a commit.
        0..=4 if kinds.has(Kind::CoordinatorRestart) => Event::Restart(instance.name),
        5..=7 if kinds.has(Kind::CrashBetweenWrites) => Event::CrashAfter {
            instance: instance.name,
            write: pick(
                rng,
                &["commit", "nonce_reserved", "nonce_spent", "nonce_released"],
            ),
        },
        8..=15 if kinds.has(Kind::WorkerChurn) => {
            let w = workers.choose(rng).expect("a worker").name.clone();
            if let Some(at) = stopped.iter().position(|s| *s == w) {
                stopped.remove(at);
                Event::StartWorker(w)
            } else {
                stopped.push(w.clone());
                Event::StopWorker(w)
            }
        }
        16..=18 if kinds.has(Kind::PaymentReplay) && instance.payment.is_some() => Event::Replay {
            instance: instance.name,
            node: 0,
            index,
        },
        19..=20 if kinds.has(Kind::FacilitatorFailure) && instance.payment == Some("success") => {
            Event::Facilitator {
                instance: instance.name,
                script: pick(rng, &["success", "insufficient_funds", "settle_failure"]),
            }
        }
        21..=22 if kinds.has(Kind::ProviderErrors) => {
            Event::ProviderFault(pick(rng, &["server_error", "rate_limited", "none"]))
        }
        27..=28 if kinds.has(Kind::GracefulRestart) => Event::GracefulRestart(instance.name),
        23..=26 if kinds.has(Kind::Router) => Event::Router {
            index,
            private: kinds.has(Kind::Private) && rng.gen_bool(0.3),
        },
        _ => Event::Commit(draw_commit(rng, kinds, instance, pairings, index)),
    }
}

fn draw_commit(
    rng: &mut ChaCha20Rng,
    kinds: &Kinds,
    instance: &InstanceSpec,
    pairings: &[Pairing],
    index: u32,
) -> Commit {
    let private = kinds.has(Kind::Private) && rng.gen_bool(0.4);
    let user = if private {
        // Mostly users paired on this instance, sometimes one who is not.
        let paired: Vec<&Pairing> = pairings
            .iter()
            .filter(|p| p.instance == instance.name)
            .collect();
        match paired.choose(rng) {
            Some(p) if rng.gen_bool(0.8) => p.user.clone(),
            _ => format!("u{}", rng.gen_range(0..4)),
        }
    } else {
        format!("u{}", rng.gen_range(0..4))
    };
    let pay = instance.payment.map(|_| {
        if kinds.has(Kind::PaymentTamper) && rng.gen_bool(0.2) {
            pick(
                rng,
                &[
                    "recipient",
                    "amount",
                    "window",
                    "future",
                    "network",
                    "signature",
                ],
            )
        } else {
            "none"
        }
    });
    Commit {
        instance: instance.name,
        tier: if rng.gen_bool(0.5) { "fast" } else { "cheap" },
        job_type: if rng.gen_bool(0.5) {
            "LLM_INFER"
        } else {
            "TASK"
        },
        user,
        private,
        pay,
        index,
        node: 0,
    }
}

/// Renders the world as a scenario file that the ordinary `harness`
/// command replays (`name` must be the file's stem).
pub fn render(world: &WorldSpec, name: &str, description: &str) -> String {
    let mut out = String::new();
    let w = &mut out;
    let version = if world.link_faults.is_empty()
        && world.loads.is_empty()
        && world.reboots.is_empty()
        && world.workers.iter().all(|w| w.key_of.is_none())
    {
        1
    } else {
        2
    };
    let _ = writeln!(w, "schema_version = {version}");
    let _ = writeln!(w, "name = {name:?}");
    let _ = writeln!(w, "description = {description:?}");
    let _ = writeln!(w, "seed = {}", world.seed);
    let _ = writeln!(w, "live = false");
    for i in &world.instances {
        render_instance(w, i);
    }
    for worker in &world.workers {
        render_worker(w, worker);
    }
    for (k, f) in world.link_faults.iter().enumerate() {
        render_link_fault(w, k, f);
    }
    for (k, r) in world.reboots.iter().enumerate() {
        let _ = writeln!(
            w,
            "\n[[faults]]\nname = \"reboot{k}\"\nkind = \"reboot\"\ninstance = {:?}\nwindow = [\"{}ms\", \"{}ms\"]\nfor = \"{}ms\"",
            r.instance, r.from_ms, r.to_ms, r.down_ms
        );
    }
    for (k, l) in world.loads.iter().enumerate() {
        render_load(w, k, l);
    }
    if world
        .events
        .iter()
        .any(|e| matches!(e.event, Event::ProviderFault(_) | Event::Router { .. }))
    {
        let _ = writeln!(w, "\n[router]\nallow_private_hosted = false");
    }
    for (k, p) in world.pairings.iter().enumerate() {
        render_pairing(w, k, p);
    }
    for t in &world.events {
        if t.after_ms > 0 {
            let _ = writeln!(w, "\n[[steps]]\nadvance = \"{}ms\"", t.after_ms);
        }
        render_event(w, &t.event);
    }
    if world.heal {
        render_heal(w, world);
        let _ = writeln!(w, "\n[invariants]\nall_jobs_terminal = true");
    }
    out
}

fn render_instance(w: &mut String, i: &InstanceSpec) {
    let _ = writeln!(w, "\n[instances.{}]\nnetwork = {:?}", i.name, i.network);
    if i.nodes > 1 {
        let _ = writeln!(
            w,
            "nodes = {}\nnode_lease_ms = {}",
            i.nodes, i.node_lease_ms
        );
    }
    let heartbeat = i.heartbeat_timeout_ms.map_or(String::new(), |ms| {
        format!(
            ", heartbeat_interval_ms = {}, heartbeat_timeout_ms = {ms}",
            ms / 4
        )
    });
    let _ = writeln!(
        w,
        "timing = {{ lease_ms = {}, pending_timeout_ms = {}, attempts_max = {}{heartbeat} }}",
        i.lease_ms, i.pending_timeout_ms, i.attempts_max
    );
    if let Some(script) = i.payment {
        let _ = writeln!(w, "payment = {{ facilitator = {script:?} }}");
    }
    let mut limits = Vec::new();
    if let Some(n) = i.finished_jobs_cached_max {
        limits.push(format!("finished_jobs_cached_max = {n}"));
    }
    if let Some(bytes) = i.retention_kept_bytes_max {
        limits.push(format!("kept_bytes_max = {bytes}"));
        let _ = writeln!(w, "retention_hours = 24");
    }
    if !limits.is_empty() {
        let _ = writeln!(w, "limits = {{ {} }}", limits.join(", "));
    }
}

fn render_worker(w: &mut String, spec: &WorkerSpec) {
    let _ = writeln!(w, "\n[[workers]]\nname = {:?}", spec.name);
    if let Some(original) = &spec.key_of {
        let _ = writeln!(w, "key_of = {original:?}");
    }
    if spec.instance != INSTANCE_NAMES[0] {
        let _ = writeln!(w, "instance = {:?}", spec.instance);
    }
    if let Some(node) = spec.node {
        let _ = writeln!(w, "node = {node}");
    }
    if !spec.capabilities.is_empty() {
        let _ = writeln!(w, "capabilities = {:?}", spec.capabilities);
    }
    if spec.slots != 1 {
        let _ = writeln!(w, "slots = {}", spec.slots);
    }
    let _ = writeln!(w, "latency = {:?}", spec.latency);
    let mut faults = Vec::new();
    if !spec.faults.is_empty() {
        let random: Vec<String> = spec
            .faults
            .iter()
            .map(|f| format!("{{ probability = 0.{:02}, {} }}", f.percent, f.toml))
            .collect();
        faults.push(format!("random = [{}]", random.join(", ")));
    }
    if let Some(h) = &spec.heartbeat {
        faults.push(format!("heartbeat = {h}"));
    }
    if !faults.is_empty() {
        let _ = writeln!(w, "faults = {{ {} }}", faults.join(", "));
    }
}

fn render_link_fault(w: &mut String, k: usize, f: &LinkFault) {
    let delay = if f.kind == "delay" {
        format!(", delay = \"{}ms\"", f.delay_ms)
    } else {
        String::new()
    };
    let _ = writeln!(
        w,
        "\n[[faults]]\nname = \"link{k}\"\nkind = {:?}\nbetween = [{:?}, {:?}]\nat = \"{}ms\"\nfor = \"{}ms\"{}",
        f.kind,
        f.worker,
        f.instance,
        f.at_ms,
        f.for_ms,
        if delay.is_empty() { String::new() } else { format!("\n{}", &delay[2..]) }
    );
}

fn render_load(w: &mut String, k: usize, l: &Load) {
    let (privacy, user) = match &l.private_user {
        Some(user) => ("{ PRIVATE = 1 }", format!("\nuser = {user:?}")),
        None => ("{ PUBLIC = 1 }", String::new()),
    };
    let payers = if l.paid {
        "{ paid = 1 }"
    } else {
        "{ unpaid = 1 }"
    };
    let _ = writeln!(
        w,
        "\n[[workloads]]\nname = \"load{k}\"\ninstances = [{:?}]\ncount = {}\nstart = \"{}ms\"\nover = \"{}ms\"\ntiers = {{ fast = 1, cheap = 1 }}\njob_types = {{ LLM_INFER = 1, TASK = 1 }}\nprivacy = {privacy}\npayers = {payers}{user}\nuntil = \"answered\"",
        l.instance, l.count, l.start_ms, l.over_ms
    );
}

fn render_pairing(w: &mut String, k: usize, p: &Pairing) {
    let _ = writeln!(
        w,
        "\n[[steps]]\nname = \"pair {user} with {worker}\"\nhttp = {{ instance = {instance:?}, method = \"POST\", path = \"/v1/trust/create\", body = {{ user_id = {user:?} }} }}\ncapture = {{ code{k} = \"$.pairing_code\" }}",
        user = p.user,
        worker = p.worker,
        instance = p.instance,
    );
    let _ = writeln!(
        w,
        "\n[[steps]]\nhttp = {{ instance = {instance:?}{node}, method = \"POST\", path = \"/v1/trust/claim\", body = {{ pairing_code = \"{{{{code{k}}}}}\", provider_pubkey = \"{{{{pubkey.{worker}}}}}\" }} }}\nexpect = {{ status = 200 }}",
        instance = p.instance,
        node = node_key(p.claim_node),
        worker = p.worker,
    );
}

fn commit_body(c: &Commit) -> String {
    let privacy = if c.private {
        ", privacy_class = \"PRIVATE\""
    } else {
        ""
    };
    let payload = if c.job_type == "TASK" {
        format!(
            "{{ task_type = \"classify\", input = \"job {}\" }}",
            c.index
        )
    } else {
        format!("{{ prompt = \"job {}\", max_tokens = 8 }}", c.index)
    };
    format!(
        "{{ job_type = {:?}, user_id = {:?}{privacy}, payload = {payload} }}",
        c.job_type, c.user
    )
}

fn render_event(w: &mut String, event: &Event) {
    let _ = match event {
        Event::Commit(c) => {
            let pay = match c.pay {
                None => String::new(),
                Some("none") => ", pay = {}".into(),
                Some(alter) => format!(", pay = {{ alter = {alter:?} }}"),
            };
            writeln!(
                w,
                "\n[[steps]]\nhttp = {{ instance = {:?}{}, method = \"POST\", path = \"/v1/jobs/commit/{}\", body = {}{pay} }}",
                c.instance,
                node_key(c.node),
                c.tier,
                commit_body(c)
            )
        }
        Event::Replay { instance, node, index } => {
            let c = Commit {
                instance,
                tier: "cheap",
                job_type: "TASK",
                user: "replayer".into(),
                private: false,
                pay: None,
                index: *index,
                node: *node,
            };
            writeln!(
                w,
                "\n[[steps]]\nname = \"replay the last payment\"\nhttp = {{ instance = {instance:?}{}, method = \"POST\", path = \"/v1/jobs/commit/cheap\", body = {}, headers = {{ \"{{{{last_payment_header}}}}\" = \"{{{{last_payment}}}}\" }} }}",
                node_key(*node),
                commit_body(&c)
            )
        }
        Event::StopWorker(name) => writeln!(w, "\n[[steps]]\nworker = {{ name = {name:?}, action = \"stop\" }}"),
        Event::StartWorker(name) => writeln!(w, "\n[[steps]]\nworker = {{ name = {name:?}, action = \"start\" }}"),
        Event::Restart(instance) => writeln!(w, "\n[[steps]]\ninstance = {{ name = {instance:?}, action = \"restart\" }}"),
        Event::GracefulRestart(instance) => writeln!(w, "\n[[steps]]\ninstance = {{ name = {instance:?}, action = \"graceful_restart\" }}"),
        Event::CrashAfter { instance, write } => writeln!(
            w,
            "\n[[steps]]\ninstance = {{ name = {instance:?}, action = \"crash_after\", write = {write:?} }}"
        ),
        Event::Facilitator { instance, script } => {
            writeln!(w, "\n[[steps]]\nfacilitator = {{ instance = {instance:?}, script = {script:?} }}")
        }
        Event::ProviderFault(fault) => {
            let fault = provider_fault(fault);
            writeln!(
                w,
                "\n[[steps]]\nstub = {{ name = \"provider_a\"{fault} }}\n\n[[steps]]\nstub = {{ name = \"provider_b\"{fault} }}"
            )
        }
        Event::Router { index, private } => {
            let privacy = if *private { ", privacy_class = \"PRIVATE\"" } else { "" };
            writeln!(
                w,
                "\n[[steps]]\nrouter = {{ call = \"run_llm\", request = {{ prompt = \"routed {index}\", max_tokens = 8, user_id = \"u0\"{privacy} }} }}"
            )
        }
        Event::NodeCrash { instance, node, down_ms } => writeln!(
            w,
            "\n[[steps]]\ninstance = {{ name = {instance:?}, action = \"crash\", node = {node}, duration_ms = {down_ms} }}"
        ),
        Event::StorePartition { instance, node, for_ms } => writeln!(
            w,
            "\n[[steps]]\ninstance = {{ name = {instance:?}, action = \"partition\", node = {node}, duration_ms = {for_ms} }}"
        ),
        Event::LostAnswer { instance, node } => writeln!(
            w,
            "\n[[steps]]\ninstance = {{ name = {instance:?}, action = \"lose_answer\", node = {node} }}"
        ),
    };
}

/// `, node = N` for an `http` step to node N > 0 (node 0 is the default).
fn node_key(node: u32) -> String {
    match node {
        0 => String::new(),
        n => format!(", node = {n}"),
    }
}

fn provider_fault(fault: &str) -> String {
    match fault {
        "none" => String::new(),
        f => format!(", default_fault = {{ kind = {f:?} }}"),
    }
}

/// The heal: every fault stops (faulty workers leave, honest ones come
/// back, an armed crash is cleared by a restart, facilitator and stubs
/// heal), then enough simulated time for every job to end, then a few new
/// jobs that must complete.
fn render_heal(w: &mut String, world: &WorldSpec) {
    let stopped = world.stopped_at_end();
    let _ = writeln!(w, "\n[[steps]]\nname = \"heal\"\nadvance = \"1ms\"");
    for worker in &world.workers {
        let action = match (stopped.contains(&worker.name.as_str()), worker.honest()) {
            (true, true) => "start",
            (false, false) => "stop",
            _ => continue,
        };
        let _ = writeln!(
            w,
            "\n[[steps]]\nworker = {{ name = {:?}, action = \"{action}\" }}",
            worker.name
        );
    }
    for i in &world.instances {
        let armed = world
            .events
            .iter()
            .any(|t| matches!(t.event, Event::CrashAfter { instance, .. } if instance == i.name));
        if armed {
            let _ = writeln!(
                w,
                "\n[[steps]]\ninstance = {{ name = {:?}, action = \"restart\" }}",
                i.name
            );
        }
        let scripted = world
            .events
            .iter()
            .any(|t| matches!(t.event, Event::Facilitator { instance, .. } if instance == i.name));
        if scripted {
            let _ = writeln!(
                w,
                "\n[[steps]]\nfacilitator = {{ instance = {:?}, script = \"success\" }}",
                i.name
            );
        }
    }
    if world
        .events
        .iter()
        .any(|t| matches!(t.event, Event::ProviderFault(_)))
    {
        let _ = writeln!(w, "\n[[steps]]\nstub = {{ name = \"provider_a\" }}\n\n[[steps]]\nstub = {{ name = \"provider_b\" }}");
    }
    for (k, l) in world.loads.iter().enumerate() {
        let _ = writeln!(
            w,
            "\n[[steps]]\nname = \"heal: workload_answered: every commit of load{k} is answered\"\nwait_until = {{ workload = \"load{k}\", within = \"{}ms\" }}",
            l.start_ms + l.over_ms + 60_000
        );
    }
    let _ = writeln!(w, "\n[[steps]]\nadvance = \"{}ms\"", world.heal_ms());
    if world.heal_commits == 0 {
        return;
    }
    for i in &world.instances {
        let honest = world
            .workers
            .iter()
            .filter(|w| w.instance == i.name && w.honest())
            .count();
        let _ = writeln!(
            w,
            "\n[[steps]]\nname = \"heal: workers_online: every honest worker is back, no other\"\nhttp = {{ instance = {:?}, path = \"/v1/health\" }}\nexpect = {{ status = 200, body = {{ workers_online = {honest} }} }}",
            i.name
        );
    }
    for (k, i) in world.instances.iter().enumerate() {
        for n in 0..world.heal_commits {
            render_heal_commit(w, i, k as u32 * 100 + n);
        }
    }
}

/// A PUBLIC job committed after the heal: an honest worker of every job
/// type is online, so it must complete.
fn render_heal_commit(w: &mut String, i: &InstanceSpec, n: u32) {
    let pay = if i.payment.is_some() {
        ", pay = {}"
    } else {
        ""
    };
    let _ = writeln!(
        w,
        "\n[[steps]]\nname = \"heal: heal_job_not_completed: a new job completes\"\nhttp = {{ instance = {:?}, method = \"POST\", path = \"/v1/jobs/commit/fast\", body = {{ job_type = \"TASK\", user_id = \"healer\", payload = {{ task_type = \"classify\", input = \"heal {n}\" }} }}{pay} }}\nexpect = {{ status = 201 }}\ncapture = {{ heal{n} = \"$.job_id\" }}",
        i.name
    );
    let _ = writeln!(
        w,
        "\n[[steps]]\nname = \"heal: heal_job_not_completed: a new job completes\"\nwait_until = {{ instance = {:?}, job = \"{{{{heal{n}}}}}\", status = \"completed\", within = \"30s\" }}",
        i.name
    );
}
