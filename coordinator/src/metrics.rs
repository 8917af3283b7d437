//! Prometheus metrics, served at `GET /metrics`.
//!
//! Each coordinator owns its registry (no global recorder): the simulation
//! runs many coordinators in one process and each must count only its own.
//! Counters and histograms are atomics updated where an event's outcome is
//! known; gauges that mirror the core (queue depth, workers online) are read
//! from it at scrape time, so the dispatch path does no gauge bookkeeping.
//! Label values come from closed sets (tiers, job types, failure reasons,
//! x402 reason codes, route templates, status codes), so series are bounded.

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
struct PaymentReasonLabel {
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HttpLabels {
    method: String,
    route: String,
    status: u16,
}

type LatencyFamily = Family<TierLabel, Histogram, fn() -> Histogram>;

/// Latency buckets in seconds: 1 ms doubling to about 65 s.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
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
    http_requests: Family<HttpLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let m = Self {
            jobs_committed: Family::default(),
            jobs_completed: Family::default(),
            jobs_failed: Family::default(),
            results_rejected: Family::default(),
            sessions_closed: Family::default(),
            assign_wait: Family::new_with_constructor(latency_histogram),
            commit_to_completed: Family::new_with_constructor(latency_histogram),
            queue_depth: Family::default(),
            workers_online: Gauge::default(),
            payments_verified: Counter::default(),
            payments_refused: Family::default(),
            payments_settled: Family::default(),
            http_requests: Family::default(),
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
            "x402 settlements, by outcome (settled or failed)",
            m.payments_settled.clone(),
        );
        registry.register(
            "http_requests",
            "HTTP requests answered, by method, route template and status",
            m.http_requests.clone(),
        );
        Self { registry, ..m }
    }

    pub fn job_committed(&self, tier: Tier, job_type: JobType) {
        self.jobs_committed
            .get_or_create(&JobLabels {
                tier: tier.as_str(),
                job_type: job_type.as_str(),
            })
            .inc();
    }

    pub fn result_rejected(&self, reason: FailureReason) {
        self.results_rejected
            .get_or_create(&ReasonLabel {
                reason: reason.as_str(),
            })
            .inc();
    }

    /// `reason` is one of the session's fixed end reasons.
    pub fn session_closed(&self, reason: &'static str) {
        self.sessions_closed
            .get_or_create(&ReasonLabel { reason })
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

    /// `route` is the matched route template, never the raw path.
    pub fn http_request(&self, method: &str, route: &str, status: u16) {
        self.http_requests
            .get_or_create(&HttpLabels {
                method: method.to_owned(),
                route: route.to_owned(),
                status,
            })
            .inc();
    }

    /// Counts what one event's changes did to jobs. Runs in the flush's
    /// walk of the changes, which the store and the log already make.
    pub fn observe_job(&self, job: &Job, now_ms: i64) {
        let tier = job.tier.as_str();
        let job_type = job.submission.job_type.as_str();
        match job.status {
            JobStatus::Assigned => {
                self.assign_wait
                    .get_or_create(&TierLabel { tier })
                    .observe(seconds(now_ms - job.created_at_ms));
            }
            JobStatus::Completed => {
                self.jobs_completed
                    .get_or_create(&JobLabels { tier, job_type })
                    .inc();
                let ended_ms = job.completed_at_ms.unwrap_or(now_ms);
                self.commit_to_completed
                    .get_or_create(&TierLabel { tier })
                    .observe(seconds(ended_ms - job.created_at_ms));
            }
            JobStatus::Failed => {
                let reason = job.error.map_or("failed", FailureReason::as_str);
                self.jobs_failed
                    .get_or_create(&FailedLabels {
                        tier,
                        job_type,
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
