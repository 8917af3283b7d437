//! Prometheus metrics, served at `GET /metrics`.
//!
//! Each coordinator owns its registry (no global recorder): the simulation
//! runs many coordinators in one process and each must count only its own.
//! Counters and histograms are atomics updated where an event's outcome is
//! known; gauges that mirror the core (queue depth, workers online) are read
//! from it at scrape time, so the dispatch path does no gauge bookkeeping.
//! Label values come from closed sets (tiers, job types, failure reasons,
//! x402 reason codes, route templates, status codes), so series are bounded.
//! The SQLite writer records its own commits through a [`StoreMetrics`]
//! handle, off every request's path.

use crate::core::{Core, FailureReason, Job};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use protocol::api::{JobStatus, JobType, Tier};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JobLabels {
    tier: &'static str,
    job_type: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FailedLabels {
    tier: &'static str,
    job_type: &'static str,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TierLabel {
    tier: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PaymentReasonLabel {
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HttpLabels {
    method: &'static str,
    route: String,
    status: u16,
}

type LatencyFamily = Family<TierLabel, Histogram, fn() -> Histogram>;

/// Latency buckets in seconds: 1 ms doubling to about 65 s.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

/// Group-commit durations in seconds: 100 µs doubling to about 1.6 s
/// (an fsync takes from tens of microseconds on NVMe to tens of
/// milliseconds on a network disk).
fn flush_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.000_1, 2.0, 15))
}

/// Events per group commit: 1 doubling to 4,096.
fn batch_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 2.0, 13))
}

/// What `x402::Reason::Other` (a facilitator's unknown code) is counted
/// as, so a facilitator cannot grow the label set.
const OTHER_REASON: &str = "other";

/// The coordinator's metrics and the registry that renders them.
pub struct Metrics {
    registry: Registry,
    jobs_committed: Family<JobLabels, Counter>,
    jobs_completed: Family<JobLabels, Counter>,
    jobs_failed: Family<FailedLabels, Counter>,
    results_rejected: Family<ReasonLabel, Counter>,
    sessions_closed: Family<ReasonLabel, Counter>,
    assign_wait: LatencyFamily,
    commit_to_completed: LatencyFamily,
    queue_depth: Family<TierLabel, Gauge>,
    workers_online: Gauge,
    payments_verified: Counter,
    payments_refused: Family<PaymentReasonLabel, Counter>,
    payments_settled: Family<OutcomeLabel, Counter>,
    awaiting_settlement: Gauge,
    http_requests: Family<HttpLabels, Counter>,
    jobs_deleted: Family<ReasonLabel, Counter>,
    job_bytes: Family<StateLabel, Gauge>,
    retention_cut: Gauge,
    store: StoreMetrics,
    hot: Hot,
}

const TIERS: [Tier; 2] = [Tier::Fast, Tier::Cheap];
const JOB_TYPES: [JobType; 2] = [JobType::LlmInfer, JobType::Task];

/// Handles on the series every job passes through, resolved once: an update
/// on the dispatch path (under the coordinator's lock) is then an atomic add
/// or a histogram's short lock, with no label hashing or map lookup. Their
/// series exist at 0 from the start. Indexed by [`TIERS`] and [`JOB_TYPES`].
struct Hot {
    committed: [[Counter; 2]; 2],
    completed: [[Counter; 2]; 2],
    assign_wait: [Histogram; 2],
    commit_to_completed: [Histogram; 2],
}

impl Hot {
    fn resolve(
        committed: &Family<JobLabels, Counter>,
        completed: &Family<JobLabels, Counter>,
        assign_wait: &LatencyFamily,
        commit_to_completed: &LatencyFamily,
    ) -> Self {
        let by_job = |family: &Family<JobLabels, Counter>| {
            TIERS.map(|tier| {
                JOB_TYPES.map(|job_type| {
                    family
                        .get_or_create(&JobLabels {
                            tier: tier.as_str(),
                            job_type: job_type.as_str(),
                        })
                        .clone()
                })
            })
        };
        let by_tier = |family: &LatencyFamily| {
            TIERS.map(|tier| {
                family
                    .get_or_create(&TierLabel {
                        tier: tier.as_str(),
                    })
                    .clone()
            })
        };
        Self {
            committed: by_job(committed),
            completed: by_job(completed),
            assign_wait: by_tier(assign_wait),
            commit_to_completed: by_tier(commit_to_completed),
        }
    }
}

fn tier_index(tier: Tier) -> usize {
    match tier {
        Tier::Fast => 0,
        Tier::Cheap => 1,
    }
}

fn job_type_index(job_type: JobType) -> usize {
    match job_type {
        JobType::LlmInfer => 0,
        JobType::Task => 1,
    }
}

/// The method as a label from a closed set (no allocation per request).
fn method_label(method: &str) -> &'static str {
    match method {
        "GET" => "GET",
        "POST" => "POST",
        "HEAD" => "HEAD",
        "PUT" => "PUT",
        "DELETE" => "DELETE",
        "PATCH" => "PATCH",
        "OPTIONS" => "OPTIONS",
        _ => "other",
    }
}

/// The store writer's metrics: a handle on histograms of the coordinator's
/// registry (clones share them), given to the SQLite store at start-up.
#[derive(Clone, Debug)]
pub struct StoreMetrics {
    flush_seconds: Histogram,
    batch_events: Histogram,
}

impl StoreMetrics {
    /// One group commit of `events` events (`apply` calls) that took
    /// `elapsed` from its transaction's start to the end of its fsync.
    pub fn flushed(&self, events: u64, elapsed: std::time::Duration) {
        self.flush_seconds.observe(elapsed.as_secs_f64());
        self.batch_events.observe(events as f64);
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let jobs_committed = Family::default();
        let jobs_completed = Family::default();
        let assign_wait = Family::new_with_constructor(latency_histogram as fn() -> Histogram);
        let commit_to_completed =
            Family::new_with_constructor(latency_histogram as fn() -> Histogram);
        let m = Self {
            jobs_failed: Family::default(),
            results_rejected: Family::default(),
            sessions_closed: Family::default(),
            queue_depth: Family::default(),
            workers_online: Gauge::default(),
            payments_verified: Counter::default(),
            payments_refused: Family::default(),
            payments_settled: Family::default(),
            awaiting_settlement: Gauge::default(),
            http_requests: Family::default(),
            jobs_deleted: Family::default(),
            job_bytes: Family::default(),
            retention_cut: Gauge::default(),
            hot: Hot::resolve(
                &jobs_committed,
                &jobs_completed,
                &assign_wait,
                &commit_to_completed,
            ),
            jobs_committed,
            jobs_completed,
            assign_wait,
            commit_to_completed,
            store: StoreMetrics {
                flush_seconds: flush_histogram(),
                batch_events: batch_histogram(),
            },
            registry: Registry::default(),
        };
        // The registry adds `_total` to counter names.
        registry.register(
            "jobs_committed",
            "Jobs accepted by a commit (201), by tier and job type",
            m.jobs_committed.clone(),
        );
        registry.register(
            "jobs_completed",
            "Jobs completed, by tier and job type",
            m.jobs_completed.clone(),
        );
        registry.register(
            "jobs_failed",
            "Jobs failed for good, by tier, job type and reason",
            m.jobs_failed.clone(),
        );
        registry.register(
            "results_rejected",
            "Worker results refused (invalid_receipt or invalid_output); the attempt is spent",
            m.results_rejected.clone(),
        );
        registry.register(
            "worker_sessions_closed",
            "Authenticated worker sessions that ended, by why (e.g. heartbeat timeout, connection closed, shutdown)",
            m.sessions_closed.clone(),
        );
        registry.register(
            "job_assign_wait_seconds",
            "From commit to each assignment of the job, by tier (coordinator clock)",
            m.assign_wait.clone(),
        );
        registry.register(
            "job_commit_to_completed_seconds",
            "From commit to completion, by tier (coordinator clock)",
            m.commit_to_completed.clone(),
        );
        registry.register(
            "queue_depth_jobs",
            "Pending jobs, by tier, read at scrape time",
            m.queue_depth.clone(),
        );
        registry.register(
            "workers_online",
            "Authenticated worker sessions, read at scrape time",
            m.workers_online.clone(),
        );
        registry.register(
            "payments_verified",
            "x402 payments that verified",
            m.payments_verified.clone(),
        );
        registry.register(
            "payments_refused",
            "x402 payments refused (402), by x402 reason (`payment_required` when none was sent)",
            m.payments_refused.clone(),
        );
        registry.register(
            "payments_settlements",
            "x402 settlement attempts, by outcome: settled or failed (at commit); settled, refused, lost (an answer lost, retried), expired (none sent by the settle deadline) or unconfirmed (an outcome still unknown at the retry deadline: reconcile), on completion",
            m.payments_settled.clone(),
        );
        registry.register(
            "payments_awaiting_settlement_jobs",
            "Jobs whose checked results wait for their payment's settlement, read at scrape time",
            m.awaiting_settlement.clone(),
        );
        registry.register(
            "http_requests",
            "HTTP requests answered, by method, route template and status",
            m.http_requests.clone(),
        );
        registry.register(
            "retention_deleted_jobs",
            "Finished jobs deleted by retention, by why: age (older than --retention-hours) or size (the oldest, past 90 % of --kept-bytes-max)",
            m.jobs_deleted.clone(),
        );
        registry.register(
            "job_bytes",
            "Bytes of jobs counted against the budgets, read at scrape time: queued (not finished; --queued-bytes-max) and kept (finished; --kept-bytes-max)",
            m.job_bytes.clone(),
        );
        registry.register(
            "retention_cut_timestamp_seconds",
            "Finished jobs created before this Unix time may have been deleted by retention (0 before the first cut in this process), read at scrape time",
            m.retention_cut.clone(),
        );
        registry.register(
            "store_flush_seconds",
            "One group commit of the SQLite writer, from its transaction's start to the end of its fsync (monotonic time; 0 in the simulation)",
            m.store.flush_seconds.clone(),
        );
        registry.register(
            "store_flush_batch_events",
            "Events (job, pairing and trust changes of one request or timer) written by one group commit",
            m.store.batch_events.clone(),
        );
        Self { registry, ..m }
    }

    /// The handle the store writer records its commits with.
    pub fn store(&self) -> StoreMetrics {
        self.store.clone()
    }

    /// `jobs` finished jobs deleted by retention, for `reason` (`age` or `size`).
    pub fn jobs_deleted(&self, reason: &'static str, jobs: u64) {
        self.jobs_deleted
            .get_or_create(&ReasonLabel { reason })
            .inc_by(jobs);
    }

    pub fn job_committed(&self, tier: Tier, job_type: JobType) {
        self.hot.committed[tier_index(tier)][job_type_index(job_type)].inc();
    }

    pub fn result_rejected(&self, reason: FailureReason) {
        self.results_rejected
            .get_or_create(&ReasonLabel {
                reason: reason.as_str(),
            })
            .inc();
    }

    pub fn session_closed(&self, end: crate::buggify::SessionEnd) {
        self.sessions_closed
            .get_or_create(&ReasonLabel {
                reason: end.as_str(),
            })
            .inc();
    }

    /// `reason` is `None` when no payment was sent at all.
    pub fn payment_refused(&self, reason: Option<&x402::Reason>) {
        let reason = match reason {
            None => "payment_required",
            Some(x402::Reason::Other(_)) => OTHER_REASON,
            Some(r) => r.as_str(),
        };
        self.payments_refused
            .get_or_create(&PaymentReasonLabel {
                reason: reason.to_owned(),
            })
            .inc();
    }

    pub fn payment_verified(&self) {
        self.payments_verified.inc();
    }

    pub fn payment_settled(&self, settled: bool) {
        let outcome = if settled { "settled" } else { "failed" };
        self.payments_settled
            .get_or_create(&OutcomeLabel { outcome })
            .inc();
    }

    /// One settlement attempt on completion ended `outcome` (settled,
    /// refused, lost, expired).
    pub fn settlement(&self, outcome: &'static str) {
        self.payments_settled
            .get_or_create(&OutcomeLabel { outcome })
            .inc();
    }

    /// `route` is the matched route template, never the raw path.
    pub fn http_request(&self, method: &str, route: &str, status: u16) {
        self.http_requests
            .get_or_create(&HttpLabels {
                method: method_label(method),
                route: route.to_owned(),
                status,
            })
            .inc();
    }

    /// Counts what one event's changes did to jobs. Runs in the flush's
    /// walk of the changes, which the store and the log already make.
    pub fn observe_job(&self, job: &Job, now_ms: i64) {
        let tier = tier_index(job.tier);
        match job.status {
            JobStatus::Assigned => {
                self.hot.assign_wait[tier].observe(seconds(now_ms - job.created_at_ms));
            }
            JobStatus::Completed => {
                self.hot.completed[tier][job_type_index(job.submission.job_type)].inc();
                let ended_ms = job.completed_at_ms.unwrap_or(now_ms);
                self.hot.commit_to_completed[tier].observe(seconds(ended_ms - job.created_at_ms));
            }
            JobStatus::Failed => {
                let reason = job.error.map_or("failed", FailureReason::as_str);
                self.jobs_failed
                    .get_or_create(&FailedLabels {
                        tier: job.tier.as_str(),
                        job_type: job.submission.job_type.as_str(),
                        reason,
                    })
                    .inc();
            }
            _ => {}
        }
    }

    /// The exposition text, with the gauges read from `core` now.
    pub fn render(&self, core: &Core) -> String {
        let depth = core.pending_by_tier();
        for tier in [Tier::Fast, Tier::Cheap] {
            let jobs = depth.get(&tier).copied().unwrap_or(0);
            self.queue_depth
                .get_or_create(&TierLabel {
                    tier: tier.as_str(),
                })
                .set(i64::try_from(jobs).unwrap_or(i64::MAX));
        }
        let (queued, _) = core.job_bytes();
        let (kept, failed) = core.kept_bytes_by_ledger();
        for (state, bytes) in [("queued", queued), ("kept", kept), ("failed", failed)] {
            self.job_bytes
                .get_or_create(&StateLabel { state })
                .set(i64::try_from(bytes).unwrap_or(i64::MAX));
        }
        let cut_s = core.retention_cut_ms().map_or(0, |ms| ms.div_euclid(1000));
        self.retention_cut.set(cut_s.max(0));
        let awaiting = core.awaiting_settlement();
        self.awaiting_settlement
            .set(i64::try_from(awaiting).unwrap_or(i64::MAX));
        let online = core.workers_online();
        self.workers_online
            .set(i64::try_from(online).unwrap_or(i64::MAX));
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}

fn seconds(ms: i64) -> f64 {
    // A clock step back would give a negative span; count it as zero.
    ms.max(0) as f64 / 1000.0
}
