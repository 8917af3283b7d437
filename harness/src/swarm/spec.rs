//! A swarm world: what one seed draws (instances, workers, pairings and a
//! timeline of commits and faults), and its rendering as an ordinary
//! scenario file, so a world the swarm found broken replays with `harness`.
//!
//! Swarm-style generation: each seed first switches whole fault kinds on or
//! off ([`Kinds`]), then draws the world with only the enabled kinds, so
//! rare combinations (payments and restarts and PRIVATE jobs, nothing else)
//! get room instead of drowning in an average of everything.

use rand::seq::SliceRandom;
use rand::Rng;
use rand_chacha::ChaCha20Rng;

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
    /// User auth on, honest users who pair and commit with their keys, and
    /// attackers who act for them without (drawn by [`super::attacks`]).
    UserAttacks,
    /// Cancels at random moments of the timeline, each of the latest job
    /// committed on an instance (drawn by [`super::cancels`]).
    Cancels,
    /// Refused, slow and lost settlements on facilitator instances (drawn
    /// by [`super::settlement`]).
    SettlementFaults,
    /// Streaming workers and readers of jobs' events (drawn by
    /// [`super::streams`]).
    Streams,
    /// The coordinator's fault points fire (`buggify = true`, decision
    /// 0024; drawn by [`super::buggify`]).
    Buggify,
    /// Honest pairings in the timeline, where a crash can cut them, beside
    /// the set-up's (drawn by [`super::pairings`]).
    LatePairings,
    /// A flooder commits bursts of jobs from a client address of its own on
    /// instances that run retention, whose kept budget is then shared by
    /// nobody's rule but age (drawn by [`super::floods`]).
    Floods,
    /// A worker of its own stops reading its socket while a burst of large
    /// jobs is sent to it (drawn by [`super::stalls`]).
    Stalls,
    /// Long polls held across what the latest job then does (drawn by
    /// [`super::held_polls`]).
    HeldPolls,
    /// Edge polls of a job no worker can take, at its pending deadline
    /// −1, 0 and +1 ms (drawn by [`super::edges`]).
    Edges,
    // Hostile clients: unfinished request heads, Sybil workers from one
    // address.
    /// One instance serves with the binary's connection bounds and a
    /// slowloris client opens unfinished heads (drawn by
    /// [`super::slow_heads`]).
    SlowHeads,
    /// Sybil workers from one address that reject or ignore every job
    /// (drawn by [`super::sybils`]).
    Sybils,
    // Accounted memory and shares (a stalled worker's outbox, one client's
    // share of the queue), and a long poll answered at its deadline.
    /// A worker stops reading while its leases, shorter than its send
    /// deadline, lapse and free slots for new assigns (drawn by
    /// [`super::lease_stalls`]).
    LeaseStalls,
    /// A flooder commits past its share of the queued budget from one
    /// address while honest clients commit; on paid instances with one
    /// reused or an unfunded authorization (drawn by
    /// [`super::share_floods`]).
    ShareFloods,
    /// A long poll of a job that cannot change while it is held, answered
    /// exactly at its deadline (drawn by [`super::deadlines`]).
    PollDeadlines,
    // Held-poll bounds against hoarders.
    /// Hoarders from addresses of their own hold bursts of long polls
    /// past the held-poll bounds (drawn by [`super::poll_hoards`]).
    PollHoards,
    // Malformed input in every field.
    /// An attacker sends bursts of malformed requests, every field of
    /// every door (drawn by [`super::garbage`]).
    Garbage,
    // A code claimed once, every frame on a kept session, a node acting only
    // for the jobs it owns, results kept their whole lifetime.
    /// On an instance with user auth off, an attacker claims an honest
    /// plain pairing code again after its owner did (drawn by
    /// [`super::overclaims`]).
    Overclaims,
    /// A worker stops reading while its leases lapse, then reads again
    /// before its heartbeat timeout (drawn by [`super::lease_thaws`]).
    LeaseThaws,
    /// A cluster node with no workload loses the shared store while its
    /// only worker holds a job (drawn by [`super::idle_cuts`]).
    IdleCuts,
    /// An instance keeps results one hour and the world lives one to two
    /// hours past its timeline (drawn by [`super::long_retention`]).
    LongRetention,
    // A worker's answer racing its lease's end.
    /// A worker answers at its lease's end (+0 or +1 ms) while another is
    /// free to take the retried job (drawn by [`super::lease_answers`]).
    LeaseAnswers,
    // Streams across a retry: readers who follow a job, or resume it, after
    // its attempt died mid-stream.
    /// A streaming worker loses each job mid-stream as its lease lapses;
    /// readers follow it across the retry and resume from the dead
    /// attempt's event ids (drawn by [`super::stream_retries`]).
    StreamRetries,
    // Pairing codes: claims at their expiry, floods past the per-minute
    // limits, codes created at once and claimed after a restart.
    /// An instance's pairing codes live seconds; a user's worker claims
    /// fresh codes at their expiry -1, +0 and +1 ms (drawn by
    /// [`super::code_edges`]).
    CodeEdges,
    /// One client sends bursts of pairing creates and claims of unknown
    /// codes past the per-minute limits (drawn by [`super::pairing_floods`]).
    PairingFloods,
    /// A user creates two or three pairing codes at once, the instance
    /// restarts, then the codes are claimed (drawn by
    /// [`super::code_batches`]).
    CodeBatches,
    // Wake-ups and fences on time: a held poll woken by a paid job's result,
    // a node fenced only after half a lease without a renewal.
    /// Chains of held polls of a paid job across its worker's result, on
    /// a one-node instance with a worker of its own (drawn by
    /// [`super::result_polls`]).
    ResultPolls,
    /// Store cuts of a cluster node shorter than a sixth of its lease,
    /// so at most one renewal fails (drawn by [`super::store_blips`]).
    StoreBlips,
    // Across nodes, addresses and processes: a poll woken on a node that
    // does not hold its job, slots capped per address, a stream resumed
    // after a restart.
    /// Chains of held polls sent to a cluster node that does not hold
    /// their job, across its result on the node that does (drawn by
    /// [`super::remote_polls`]).
    RemotePolls,
    /// A per-address cap on worker slots below what the Sybils of an
    /// instance hold together (drawn by [`super::slot_caps`]).
    SlotCaps,
    /// A reader cut mid-stream resumes after a restart, while the job's
    /// new attempt streams (drawn by [`super::restart_reads`]).
    RestartReads,
    // Identity at its edges: proofs replayed at the last valid millisecond,
    // trust lists across restarts, Retry-After.
    /// A pairing made again, its create replayed at the proof window's
    /// end -1, +0, +1 ms (drawn by [`super::proof_edges`]).
    ProofEdges,
    /// A worker key paired again with its user, then the user's trust
    /// list read before and after a restart (drawn by
    /// [`super::trust_restarts`]).
    TrustRestarts,
    /// Failed claims past the per-client limit, then a retry after
    /// exactly the answered `Retry-After` (drawn by [`super::retry_afters`]).
    RetryAfters,
    // The inclusive ends of documented ranges.
    /// Requests at the inclusive ends of documented ranges (drawn by
    /// [`super::range_edges`]).
    RangeEdges,
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
    /// then [`Kind::Nodes`], [`Kind::UserAttacks`], [`Kind::Cancels`],
    /// [`Kind::SettlementFaults`], [`Kind::Streams`], [`Kind::Buggify`],
    /// [`Kind::LatePairings`], [`Kind::Floods`], [`Kind::Stalls`],
    /// [`Kind::HeldPolls`], [`Kind::Edges`], then the hostile clients'
    /// ([`Kind::SlowHeads`], [`Kind::Sybils`]), [`Kind::LeaseStalls`],
    /// [`Kind::ShareFloods`], [`Kind::PollDeadlines`], [`Kind::PollHoards`]
    /// and [`Kind::Garbage`], then [`Kind::Overclaims`], [`Kind::LeaseThaws`],
    /// [`Kind::IdleCuts`], [`Kind::LongRetention`], [`Kind::LeaseAnswers`] and
    /// [`Kind::StreamRetries`], then [`Kind::CodeEdges`] and
    /// [`Kind::PairingFloods`], then [`Kind::CodeBatches`], then
    /// [`Kind::ResultPolls`] and [`Kind::StoreBlips`], then
    /// [`Kind::RemotePolls`], [`Kind::SlotCaps`] and [`Kind::RestartReads`],
    /// then [`Kind::ProofEdges`], [`Kind::TrustRestarts`] and
    /// [`Kind::RetryAfters`], then [`Kind::RangeEdges`].
    pub const ALL: &'static [Kind] = &{
        let mut all = [Kind::Nodes; Self::MAIN_STREAM.len() + 36];
        all[Self::MAIN_STREAM.len() + 1] = Kind::UserAttacks;
        all[Self::MAIN_STREAM.len() + 2] = Kind::Cancels;
        all[Self::MAIN_STREAM.len() + 3] = Kind::SettlementFaults;
        all[Self::MAIN_STREAM.len() + 4] = Kind::Streams;
        all[Self::MAIN_STREAM.len() + 5] = Kind::Buggify;
        all[Self::MAIN_STREAM.len() + 6] = Kind::LatePairings;
        all[Self::MAIN_STREAM.len() + 7] = Kind::Floods;
        all[Self::MAIN_STREAM.len() + 8] = Kind::Stalls;
        all[Self::MAIN_STREAM.len() + 9] = Kind::HeldPolls;
        all[Self::MAIN_STREAM.len() + 10] = Kind::Edges;
        // Hostile clients.
        all[Self::MAIN_STREAM.len() + 11] = Kind::SlowHeads;
        all[Self::MAIN_STREAM.len() + 12] = Kind::Sybils;
        // Accounted memory and shares, a poll's deadline.
        all[Self::MAIN_STREAM.len() + 13] = Kind::LeaseStalls;
        all[Self::MAIN_STREAM.len() + 14] = Kind::ShareFloods;
        all[Self::MAIN_STREAM.len() + 15] = Kind::PollDeadlines;
        // Held-poll hoarding.
        all[Self::MAIN_STREAM.len() + 16] = Kind::PollHoards;
        // Malformed input.
        all[Self::MAIN_STREAM.len() + 17] = Kind::Garbage;
        // Single-use codes, kept sessions, node ownership, result lifetimes.
        all[Self::MAIN_STREAM.len() + 18] = Kind::Overclaims;
        all[Self::MAIN_STREAM.len() + 19] = Kind::LeaseThaws;
        all[Self::MAIN_STREAM.len() + 20] = Kind::IdleCuts;
        all[Self::MAIN_STREAM.len() + 21] = Kind::LongRetention;
        // A worker's answer at its lease's end.
        all[Self::MAIN_STREAM.len() + 22] = Kind::LeaseAnswers;
        // Streams across a retry.
        all[Self::MAIN_STREAM.len() + 23] = Kind::StreamRetries;
        // Pairing codes.
        all[Self::MAIN_STREAM.len() + 24] = Kind::CodeEdges;
        all[Self::MAIN_STREAM.len() + 25] = Kind::PairingFloods;
        all[Self::MAIN_STREAM.len() + 26] = Kind::CodeBatches;
        // Wake-ups and fences on time.
        all[Self::MAIN_STREAM.len() + 27] = Kind::ResultPolls;
        all[Self::MAIN_STREAM.len() + 28] = Kind::StoreBlips;
        // Across nodes, addresses and processes.
        all[Self::MAIN_STREAM.len() + 29] = Kind::RemotePolls;
        all[Self::MAIN_STREAM.len() + 30] = Kind::SlotCaps;
        all[Self::MAIN_STREAM.len() + 31] = Kind::RestartReads;
        // Identity at its edges.
        all[Self::MAIN_STREAM.len() + 32] = Kind::ProofEdges;
        all[Self::MAIN_STREAM.len() + 33] = Kind::TrustRestarts;
        all[Self::MAIN_STREAM.len() + 34] = Kind::RetryAfters;
        // The inclusive ends of documented ranges.
        all[Self::MAIN_STREAM.len() + 35] = Kind::RangeEdges;
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
            Kind::UserAttacks => "user_attacks",
            Kind::Cancels => "cancels",
            Kind::SettlementFaults => "settlement_faults",
            Kind::Streams => "streams",
            Kind::Buggify => "buggify",
            Kind::LatePairings => "late_pairings",
            Kind::Floods => "floods",
            Kind::Stalls => "stalls",
            Kind::HeldPolls => "held_polls",
            Kind::Edges => "edges",
            Kind::SlowHeads => "slow_heads",
            Kind::Sybils => "sybils",
            Kind::LeaseStalls => "lease_stalls",
            Kind::ShareFloods => "share_floods",
            Kind::PollDeadlines => "poll_deadlines",
            Kind::PollHoards => "poll_hoards",
            Kind::Garbage => "garbage",
            Kind::Overclaims => "overclaims",
            Kind::LeaseThaws => "lease_thaws",
            Kind::IdleCuts => "idle_cuts",
            Kind::LongRetention => "long_retention",
            later => later.later_kind_name(),
        }
    }

    /// The names of the kinds from [`Kind::LeaseAnswers`] on (apart from
    /// [`Self::as_str`], which names the others, to keep each match short).
    fn later_kind_name(self) -> &'static str {
        match self {
            // A worker's answer at its lease's end.
            Kind::LeaseAnswers => "lease_answers",
            // Streams across a retry.
            Kind::StreamRetries => "stream_retries",
            // Pairing codes.
            Kind::CodeEdges => "code_edges",
            Kind::PairingFloods => "pairing_floods",
            Kind::CodeBatches => "code_batches",
            // Wake-ups and fences on time.
            Kind::ResultPolls => "result_polls",
            Kind::StoreBlips => "store_blips",
            // Across nodes, addresses and processes.
            Kind::RemotePolls => "remote_polls",
            Kind::SlotCaps => "slot_caps",
            Kind::RestartReads => "restart_reads",
            // Identity at its edges.
            Kind::ProofEdges => "proof_edges",
            Kind::TrustRestarts => "trust_restarts",
            Kind::RetryAfters => "retry_afters",
            // The inclusive ends of documented ranges.
            Kind::RangeEdges => "range_edges",
            named => unreachable!("{named:?} is named by as_str"),
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

pub const NETWORKS: [&str; 2] = ["eip155:84532", "eip155:8453"];
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
    /// `limits.kept_share_per_client_percent`, when drawn (by
    /// [`super::floods`]); `None` renders nothing (the default, 12).
    pub kept_share_percent: Option<usize>,
    /// The payment's `max_timeout_seconds`, when drawn short (by
    /// [`super::settlement`]); `None` renders nothing (the default, 300).
    pub payment_window_s: Option<u64>,
    /// Serves with the binary's connection bounds (`http_bounds = true`)
    /// at these values; `None` renders nothing (bounds off). Drawn by
    /// [`super::slow_heads`].
    pub http_bounds: Option<super::slow_heads::HttpBounds>,
    /// Sybil workers dialling from one address, and the instance's cap on
    /// their sessions; `None` renders neither. Drawn by [`super::sybils`].
    pub sybils: Option<super::sybils::Sybils>,
    /// `limits.queued_bytes_max` and `limits.queued_bytes_per_client_max`,
    /// when drawn (by [`super::share_floods`]); `None` renders neither.
    pub queued_bytes: Option<(usize, usize)>,
    /// `limits.held_polls_max` and `limits.held_polls_per_client_max`,
    /// when drawn (by [`super::poll_hoards`]); `None` renders neither.
    pub held_polls: Option<(usize, usize)>,
    /// `retention_hours` when drawn short (by [`super::long_retention`]);
    /// `None` renders 24 where a kept budget turns retention on.
    pub retention_hours: Option<u64>,
    /// `timing.pairing_code_ttl_ms` when drawn short (by
    /// [`super::code_edges`]); `None` renders none (one hour).
    pub pairing_code_ttl_ms: Option<i64>,
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
    /// Sends its outputs as deltas (the `streams` kind).
    pub stream: bool,
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
    /// With user auth on: an attacker claims the code for this worker of
    /// its own between the create and the worker's claim.
    pub intercept: Option<String>,
    /// With user auth off: an attacker claims the code again for this
    /// worker of its own after the owner's claim ([`super::overclaims`]).
    pub overclaim: Option<String>,
    /// With `overclaim`: the instance crashes and restarts between the
    /// owner's claim and the attacker's, so the claim must have been kept
    /// (drawn by [`super::overclaims`]).
    pub overclaim_restart: bool,
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
    /// An `attack` step against user `victim` (`u0`..`u3`), then, for a
    /// pairing attack, PRIVATE commits of the victim signed with its key.
    Attack(super::attacks::AttackEvent),
    /// A `pair` step: `user` pairs `worker` honestly, mid-timeline.
    Pair {
        instance: &'static str,
        user: String,
        worker: String,
        /// With `d`: the claim waits for the code's expiry plus `d` ms
        /// (drawn by [`super::code_edges`]).
        claim_edge_ms: Option<i64>,
    },
    /// A `cancel` of the latest job committed on the instance, whatever
    /// its state then (pending, running, ended: 200, 409 or, on a node
    /// that does not hold it, 503).
    Cancel {
        instance: &'static str,
        node: u32,
    },
    /// A `poll` (`GET /v1/jobs/{id}`) of the latest job committed on the
    /// instance: without a wait (drawn by [`super::settlement`]), or held
    /// in the background for `hold_ms` (drawn by [`super::held_polls`]),
    /// or at its pending deadline plus `edge_ms` (drawn by
    /// [`super::edges`]).
    Poll {
        instance: &'static str,
        node: u32,
        hold_ms: Option<u64>,
        edge_ms: Option<i64>,
    },
    /// A burst of the flooder's commits (drawn by [`super::floods`]).
    Flood(super::floods::FloodEvent),
    /// A detached reader of the latest job's events on an instance, or of
    /// a chat completion (the `streams` kind).
    Read(super::streams::ReadEvent),
    /// A `worker freeze` (`frozen`) or `worker thaw` step (drawn by
    /// [`super::stalls`]).
    Freeze {
        worker: String,
        frozen: bool,
    },
    /// A burst of slowloris connections (drawn by [`super::slow_heads`]).
    SlowHeads(super::slow_heads::SlowHeadsEvent),
    /// A burst of a hoarder's held polls (drawn by [`super::poll_hoards`]).
    Hoard(super::poll_hoards::HoardEvent),
    /// One malformed request (drawn by [`super::garbage`]).
    Garbage(super::garbage::GarbageRequest),
    /// A burst of pairing creates or failed claims from one client (drawn
    /// by [`super::pairing_floods`]).
    PairingFlood(super::pairing_floods::PairingFlood),
    /// Pairing codes created at once, a restart, their claims (drawn by
    /// [`super::code_batches`]).
    CodeBatch(super::code_batches::CodeBatch),
    /// A paid commit sent again with the last payment (drawn by
    /// [`super::paid_retries`] and [`super::reused_payments`]).
    PaidRetry(super::paid_retries::Retry),
    /// A pairing made again, the user's list around a restart (drawn by
    /// [`super::trust_restarts`]).
    TrustRestart(super::trust_restarts::TrustRestart),
    /// Failed claims past the limit, a 429 waited out, a retry (drawn by
    /// [`super::retry_afters`]).
    RetryAfter(super::retry_afters::RetryWait),
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
    /// Every instance runs with user auth on (the `user_attacks` kind):
    /// users u0..u3 and the attacker have keys, pairings and PRIVATE
    /// commits carry the user's proof.
    pub user_auth: bool,
}

impl WorldSpec {
    /// With probability `p`, one of the instances that `fit`, drawn from
    /// `rng`: how an attacker kind picks its target. Draws nothing when no
    /// instance fits, so such a seed's stream stays as it was.
    pub fn pick_instance(
        &self,
        rng: &mut ChaCha20Rng,
        p: f64,
        fit: impl Fn(&InstanceSpec) -> bool,
    ) -> Option<&'static str> {
        let fitting: Vec<&'static str> = self
            .instances
            .iter()
            .filter(|i| fit(i))
            .map(|i| i.name)
            .collect();
        if fitting.is_empty() || !rng.gen_bool(p) {
            return None;
        }
        fitting.choose(rng).copied()
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
        for p in &mut self.pairings {
            if p.intercept.as_ref().is_some_and(|w| !workers.contains(w)) {
                p.intercept = None;
            }
            if p.overclaim.as_ref().is_some_and(|w| !workers.contains(w)) {
                p.overclaim = None;
                p.overclaim_restart = false;
            }
        }
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
        self.keep_trust_restarts_and_retry_afters(&instances, &workers);
        self.normalize_events(&instances, &workers, &paid, &facilitated);
        self.normalize_beside(&instances, &paid);
        super::nodes::normalize(self);
    }

    /// Keeps the timeline's events that still make sense: on instances and
    /// workers still there, a worker started only after it stopped, a
    /// replay only after a payment, node events only on several nodes
    /// (trust restarts and retries after a 429 are judged before, by
    /// `keep_trust_restarts_and_retry_afters`).
    fn normalize_events(
        &mut self,
        instances: &[&'static str],
        workers: &[String],
        paid: &[&'static str],
        facilitated: &[&'static str],
    ) {
        let mut stopped: Vec<String> = Vec::new();
        let mut paid_once = false;
        let mut kept = Vec::with_capacity(self.events.len());
        for mut t in std::mem::take(&mut self.events) {
            let keep = match &mut t.event {
                Event::Commit(c) if !instances.contains(&c.instance) => false,
                Event::Commit(c) => {
                    if !paid.contains(&c.instance) {
                        c.pay = None;
                    } else if c.pay.is_none() {
                        c.pay = Some("none");
                    }
                    paid_once |= c.pay.is_some();
                    true
                }
                Event::Replay { instance, .. } => paid_once && paid.contains(instance),
                Event::PaidRetry(r) => paid_once && paid.contains(&r.commit.instance),
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
                Event::Cancel { instance, .. } | Event::Poll { instance, .. } => {
                    instances.contains(instance)
                }
                Event::Read(r) => instances.contains(&r.instance),
                Event::Flood(f) => instances.contains(&f.instance),
                Event::SlowHeads(s) => instances.contains(&s.instance),
                Event::Hoard(h) => instances.contains(&h.instance),
                Event::Garbage(g) => super::garbage::keeps(self, g),
                Event::PairingFlood(f) => instances.contains(&f.instance),
                Event::Freeze { worker, .. } => workers.contains(worker),
                Event::Pair { .. } | Event::Attack(_) | Event::CodeBatch(_) => {
                    self.keeps_user_event(&t.event, instances, workers)
                }
                Event::TrustRestart(_) | Event::RetryAfter(_) => true,
            };
            if keep {
                kept.push(t);
            }
        }
        self.events = kept;
    }

    /// Keeps a trust restart (user auth on, its worker there) or a retry
    /// after a 429 only where it still makes sense: its one-node instance
    /// is there.
    fn keep_trust_restarts_and_retry_afters(
        &mut self,
        instances: &[&'static str],
        workers: &[String],
    ) {
        let (user_auth, nodes) = (self.user_auth, self.instances.clone());
        let single = |name: &str| nodes.iter().any(|i| i.name == name && i.nodes <= 1);
        let single = |name: &'static str| instances.contains(&name) && single(name);
        self.events.retain(|t| match &t.event {
            Event::TrustRestart(t) => {
                user_auth && single(t.instance) && workers.contains(&t.worker)
            }
            Event::RetryAfter(r) => single(r.instance),
            _ => true,
        });
    }

    /// Whether a pairing or an attack still makes sense: its instance and
    /// worker are there, a pairing's users are (user auth on), and an
    /// attack that needs the victim's code has a pairing to take it from.
    fn keeps_user_event(
        &self,
        event: &Event,
        instances: &[&'static str],
        workers: &[String],
    ) -> bool {
        match event {
            Event::Pair {
                instance, worker, ..
            } => self.user_auth && instances.contains(instance) && workers.contains(worker),
            Event::CodeBatch(b) => {
                self.user_auth
                    && instances.contains(&b.instance)
                    && self.nodes_of(b.instance) == 1
                    && workers.contains(&b.worker)
            }
            Event::Attack(a) => {
                instances.contains(&a.instance)
                    && a.worker.as_ref().is_none_or(|w| workers.contains(w))
                    && (!a.needs_code()
                        || self
                            .pairings
                            .iter()
                            .any(|p| p.instance == a.instance && p.user == a.victim))
            }
            _ => true,
        }
    }

    /// Keeps the link faults, loads and reboots inside the (new) timeline
    /// and on instances still there.
    fn normalize_beside(&mut self, instances: &[&'static str], paid: &[&'static str]) {
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
            + super::floods::heal_extra_ms(self)
    }
}

/// Simulated time the timeline's events take (their gaps added up).
pub fn timeline_ms(events: &[Timed]) -> u64 {
    events.iter().map(|t| t.after_ms).sum()
}
