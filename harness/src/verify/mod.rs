//! What a finished run is judged by: the scenario's end-of-run invariants,
//! the safety properties every simulated run keeps, and the temporal
//! properties over its frames. A broken one is named by [`Broken`], typed
//! from where it broke to the swarm, the shrinker and the report.

pub mod assigns;
pub mod bad_input;
pub mod claims;
pub mod code_edges;
pub mod codes_kept;
pub mod connections;
pub mod edges;
pub mod fences;
pub mod invariants;
pub mod overdue;
pub mod ownership;
pub mod paid_assigns;
pub mod paid_retries;
pub mod polls;
pub mod prices;
pub mod private_admission;
pub mod proof_replays;
pub mod range_edges;
pub mod rate_limits;
pub mod resources;
pub mod retry_afters;
pub mod safety;
pub mod stalls;
pub mod stream_gens;
pub mod stream_resumes;
pub mod streams;
pub mod sybils;
pub mod temporal;
pub mod trust_lists;

use coordinator::core::InvariantViolation;
use safety::SafetyKey;

/// Which invariant a run broke.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Broken {
    /// The core's own check after an event (a breach panics by design).
    Core(InvariantViolation),
    /// Any other panic in the world.
    Panic,
    /// A safety property (`safety`).
    Safety(SafetyKey),
    /// `all_jobs_terminal`: a job still not terminal at the end.
    AllJobsTerminal,
    /// `world_limit_exceeded`: the world reached a limit on its transcript
    /// or its simulated time (`harness/src/run/limits.rs`) before it ended.
    WorldLimit,
    /// Every other end-of-run check: liveness counts, stub calls, temporal
    /// properties, a core found broken at the end of the run.
    Invariants,
}

impl Broken {
    /// The stable key the swarm groups and shrinks failures by, e.g.
    /// `core_slots`, `acknowledged_job_lost`.
    pub fn key(&self) -> String {
        match self {
            Broken::Core(v) => format!("core_{}", core_key(v)),
            Broken::Panic => "panic".into(),
            Broken::Safety(key) => key.as_str().into(),
            Broken::AllJobsTerminal => "all_jobs_terminal".into(),
            Broken::Invariants => "invariants".into(),
            Broken::WorldLimit => "world_limit_exceeded".into(),
        }
    }
}

/// The core invariant's name: the label its message starts with.
fn core_key(v: &InvariantViolation) -> &'static str {
    use InvariantViolation as V;
    match v {
        V::JobBytes { .. } => "byte_budgets",
        V::PendingWithFreeWorker { .. } => "dispatch",
        V::Deadline { .. } | V::StrayTimers { .. } | V::DeadlineTooFar { .. } => "deadline",
        V::Overloaded { .. } => "slots",
        V::IdleSet { .. } => "idle_set",
        V::Holder { .. } => "holder",
        V::Settlement { .. } => "settlement",
        V::UntrustedHolder { .. } => "trust",
        V::Attempts { .. } => "attempts",
        V::Queue { .. } => "queue",
        V::EmptyQueue { .. } => "empty_queue",
        V::PendingCount { .. } => "pending_count",
        V::TierOrder { .. } => "tier_order",
        V::IdleCount { .. } => "idle_count",
        V::Ended { .. } => "finished_jobs",
        V::SessionCount { .. } | V::SessionIndex { .. } => "sessions",
        V::Unstored { .. } => "store_rows",
    }
}
