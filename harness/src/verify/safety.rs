//! Safety properties every simulated run keeps, whatever its scenario says:
//! checked at the end of the run over what the peers saw (the transcript:
//! HTTP answers and worker frames) and what each instance holds (its store).
//! The core checks its own invariants after every event (a breach panics,
//! and the runner reports the panic); these are the outside view of the same
//! promises, the ones a client or a worker could prove broken.
//!
//! Each violation names its invariant (a stable key the swarm shrinks
//! against) and the first transcript line that shows it.

use crate::spec::frames::{Direction, FrameRecord};
use coordinator::core::trust::TrustEntry;
use coordinator::core::Job;
use protocol::api::{JobStatus, PrivacyClass};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// One broken safety property.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub invariant: SafetyKey,
    pub message: String,
    /// The transcript line (0-based) that shows it, when one does.
    pub line: Option<usize>,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "safety {}: {}", self.invariant, self.message)?;
        if let Some(line) = self.line {
            write!(f, " (transcript line {})", line + 1)?;
        }
        Ok(())
    }
}

/// A safety property, by its stable key (the swarm groups and shrinks
/// failures by it; coverage tables and documentation list them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SafetyKey {
    AcknowledgedJobLost,
    ResultAcceptedTwice,
    CompletedJobChanged,
    ReceiptInvalid,
    ReceiptKeyNotHolder,
    PrivateToUntrusted,
    PrivateToUnprovenPairing,
    PrivateBeforeAuth,
    /// A PRIVATE job accepted while none of its user's trusted workers
    /// that serve its type was online.
    PrivateAdmittedOffline,
    /// A user holds more PRIVATE jobs than commits it signed, on an
    /// instance with user auth on and no payments.
    PrivateCommitUnproven,
    PaymentBoughtTwoJobs,
    UnpaidJobDispatched,
    NodeFencedUnprovoked,
    ChargedForFailedJob,
    SettledTwice,
    OutputBeforeSettlement,
    DeltasDisagreeWithOutput,
    PrivateDeltaLeak,
    FailedJobChanged,
    PairingLost,
    HonestResultLost,
    StalledSessionKept,
    /// A worker that read every frame was closed for its outbox.
    ReadingSessionClosed,
    // Timing: jobs ended by their deadline, polls woken, expiries to the ms.
    JobEndOverdue,
    PollNotWoken,
    ExpiryOffEdge,
    // Hostile clients: unfinished heads, connections and sessions per address.
    UnfinishedHeadKept,
    ConnectionsOverCap,
    SessionsOverCap,
    // Accounted memory, shares of the queue, unfunded payments.
    ResourceBoundExceeded,
    HonestStarved,
    UnfundedJobAccepted,
    // Held-poll bounds.
    HeldPollsOverCap,
    // Malformed input in every field.
    BadInputMishandled,
    // A code claimed once, every frame on a kept session.
    PairingClaimedTwice,
    AssignLost,
    // A node acting only for the jobs it owns, a payer charged the listed
    // price.
    NodeActedUnowned,
    ChargedOffPrice,
    // Pairing rate limits.
    RateLimitExceeded,
    // A user proof used once, pairing codes kept across a restart.
    ProofAcceptedTwice,
    PairingCodeLost,
    // A node fenced only after half a lease without a renewal.
    NodeFencedEarly,
    // A paid commit sent again with its payment.
    PaymentAnsweredOtherSubmission,
    PaidRetryRefused,
    // Trust lists across a restart, a retry after its `Retry-After`.
    TrustListNotDurable,
    RetryAfterRefused,
    // Values at the inclusive ends of documented ranges.
    InRangeRefused,
}

impl SafetyKey {
    /// Every safety property, in documentation order.
    pub const ALL: [SafetyKey; 47] = [
        SafetyKey::AcknowledgedJobLost,
        SafetyKey::ResultAcceptedTwice,
        SafetyKey::CompletedJobChanged,
        SafetyKey::ReceiptInvalid,
        SafetyKey::ReceiptKeyNotHolder,
        SafetyKey::PrivateToUntrusted,
        SafetyKey::PrivateToUnprovenPairing,
        SafetyKey::PrivateBeforeAuth,
        SafetyKey::PaymentBoughtTwoJobs,
        SafetyKey::UnpaidJobDispatched,
        SafetyKey::NodeFencedUnprovoked,
        SafetyKey::ChargedForFailedJob,
        SafetyKey::SettledTwice,
        SafetyKey::OutputBeforeSettlement,
        SafetyKey::DeltasDisagreeWithOutput,
        SafetyKey::PrivateDeltaLeak,
        SafetyKey::FailedJobChanged,
        SafetyKey::PairingLost,
        SafetyKey::HonestResultLost,
        SafetyKey::StalledSessionKept,
        // Timing: jobs ended by their deadline, polls woken, expiries to the ms.
        SafetyKey::JobEndOverdue,
        SafetyKey::PollNotWoken,
        SafetyKey::ExpiryOffEdge,
        // Hostile clients: unfinished heads, connections and sessions per address.
        SafetyKey::UnfinishedHeadKept,
        SafetyKey::ConnectionsOverCap,
        SafetyKey::SessionsOverCap,
        // Accounted memory, shares of the queue, unfunded payments.
        SafetyKey::ResourceBoundExceeded,
        SafetyKey::HonestStarved,
        SafetyKey::UnfundedJobAccepted,
        // Held-poll bounds.
        SafetyKey::HeldPollsOverCap,
        // Malformed input in every field.
        SafetyKey::BadInputMishandled,
        // A code claimed once, every frame on a kept session.
        SafetyKey::PairingClaimedTwice,
        SafetyKey::AssignLost,
        // Node ownership, prices charged.
        SafetyKey::NodeActedUnowned,
        SafetyKey::ChargedOffPrice,
        // Pairing rate limits.
        SafetyKey::RateLimitExceeded,
        // A user proof used once, pairing codes kept across a restart.
        SafetyKey::ProofAcceptedTwice,
        SafetyKey::PairingCodeLost,
        // A node fenced only after half a lease without a renewal.
        SafetyKey::NodeFencedEarly,
        // A paid commit sent again with its payment.
        SafetyKey::PaymentAnsweredOtherSubmission,
        SafetyKey::PaidRetryRefused,
        // Trust lists across a restart, a retry after its `Retry-After`.
        SafetyKey::TrustListNotDurable,
        SafetyKey::RetryAfterRefused,
        // Values at the inclusive ends of documented ranges.
        SafetyKey::InRangeRefused,
        // A worker that reads every frame kept, whatever it was sent.
        SafetyKey::ReadingSessionClosed,
        // A PRIVATE job accepted only while a trusted worker could take it.
        SafetyKey::PrivateAdmittedOffline,
        SafetyKey::PrivateCommitUnproven,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SafetyKey::AcknowledgedJobLost => "acknowledged_job_lost",
            SafetyKey::ResultAcceptedTwice => "result_accepted_twice",
            SafetyKey::CompletedJobChanged => "completed_job_changed",
            SafetyKey::ReceiptInvalid => "receipt_invalid",
            SafetyKey::ReceiptKeyNotHolder => "receipt_key_not_holder",
            SafetyKey::PrivateToUntrusted => "private_to_untrusted",
            SafetyKey::PrivateToUnprovenPairing => "private_to_unproven_pairing",
            SafetyKey::PrivateBeforeAuth => "private_before_auth",
            SafetyKey::PaymentBoughtTwoJobs => "payment_bought_two_jobs",
            SafetyKey::UnpaidJobDispatched => "unpaid_job_dispatched",
            SafetyKey::NodeFencedUnprovoked => "node_fenced_unprovoked",
            SafetyKey::ChargedForFailedJob => "charged_for_failed_job",
            SafetyKey::SettledTwice => "settled_twice",
            SafetyKey::OutputBeforeSettlement => "output_before_settlement",
            SafetyKey::DeltasDisagreeWithOutput => "deltas_disagree_with_output",
            SafetyKey::PrivateDeltaLeak => "private_delta_leak",
            SafetyKey::FailedJobChanged => "failed_job_changed",
            SafetyKey::PairingLost => "pairing_lost",
            SafetyKey::HonestResultLost => "honest_result_lost",
            SafetyKey::StalledSessionKept => "stalled_session_kept",
            SafetyKey::JobEndOverdue => "job_end_overdue",
            SafetyKey::PollNotWoken => "poll_not_woken",
            SafetyKey::ExpiryOffEdge => "expiry_off_edge",
            SafetyKey::UnfinishedHeadKept => "unfinished_head_kept",
            SafetyKey::ConnectionsOverCap => "connections_over_cap",
            SafetyKey::SessionsOverCap => "sessions_over_cap",
            SafetyKey::ResourceBoundExceeded => "resource_bound_exceeded",
            SafetyKey::HonestStarved => "honest_starved",
            SafetyKey::UnfundedJobAccepted => "unfunded_job_accepted",
            SafetyKey::HeldPollsOverCap => "held_polls_over_cap",
            SafetyKey::BadInputMishandled => "bad_input_mishandled",
            SafetyKey::PairingClaimedTwice => "pairing_claimed_twice",
            SafetyKey::AssignLost => "assign_lost",
            SafetyKey::NodeActedUnowned => "node_acted_unowned",
            SafetyKey::ChargedOffPrice => "charged_off_price",
            SafetyKey::RateLimitExceeded => "rate_limit_exceeded",
            SafetyKey::ProofAcceptedTwice => "proof_accepted_twice",
            SafetyKey::PairingCodeLost => "pairing_code_lost",
            SafetyKey::NodeFencedEarly => "node_fenced_early",
            SafetyKey::PaymentAnsweredOtherSubmission => "payment_answered_other_submission",
            SafetyKey::PaidRetryRefused => "paid_retry_refused",
            SafetyKey::TrustListNotDurable => "trust_list_not_durable",
            SafetyKey::RetryAfterRefused => "retry_after_refused",
            SafetyKey::InRangeRefused => "in_range_refused",
            SafetyKey::ReadingSessionClosed => "reading_session_closed",
            SafetyKey::PrivateAdmittedOffline => "private_admitted_offline",
            SafetyKey::PrivateCommitUnproven => "private_commit_unproven",
        }
    }
}

impl std::fmt::Display for SafetyKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What one simulated instance holds at the end of the run.
pub struct InstanceState<'a> {
    pub jobs: &'a [Job],
    pub trust: &'a [TrustEntry],
    /// Whether its commits require payment.
    pub paid: bool,
    /// Whether it runs retention (`retention_hours`): a finished job may
    /// then be deleted, so a job missing at the end is lost unless
    /// retention deleted it as `kept_promise` allows (where the harness
    /// sees retention's deletions) or the transcript showed it finished
    /// (where it does not: live runs).
    pub retention: bool,
    /// What retention promises to keep, with retention on.
    pub kept_promise: Option<KeptPromise>,
    /// With retention, when a client address's share of the kept budget is
    /// all of it (`kept_share_per_client_percent` 100): the minimum keep
    /// time and the budget (decision 0018). While the results ledger holds
    /// no more than the budget, no owner is over its share, and no result
    /// younger than the keep time may be deleted for room.
    pub results_kept: Option<ResultsKept>,
    /// The results retention deleted in the simulated world, by job id
    /// (the coordinator's witness, `coordinator::buggify::deleted_results`).
    /// `None` where the harness cannot see deletions (live runs).
    pub results_deleted: Option<&'a BTreeMap<String, DeletedAt>>,
    /// With user auth on: the pairings its users proved, (user id in
    /// normal form, worker key in lowercase), from the harness's own
    /// ledger (`world::users`). `None` with user auth off: there a user
    /// id alone pairs, by design, and `private_to_unproven_pairing` does
    /// not judge the instance.
    pub proven: Option<&'a BTreeSet<(String, String)>>,
    /// With user auth on: the pairings whose claim's answer was lost
    /// (`world::users`): `private_to_unproven_pairing` allows them,
    /// `pairing_lost` does not require them.
    pub unanswered: Option<&'a BTreeSet<(String, String)>>,
    /// A simulated paid instance's settlements by authorization nonce
    /// (`world::settlements`); `None` where the harness cannot see them.
    pub settled: Option<&'a BTreeMap<String, usize>>,
    /// Of those, the settlements no process of the instance could learn of
    /// before their retry deadline (`SettleLedger::unlearnable`): decision
    /// 0021's residual, the one excuse of `charged_for_failed_job`.
    pub unlearnable: Option<&'a BTreeSet<String>>,
    /// One node: a restart of it ends every session (`check_not_reopened`).
    pub one_node: bool,
    /// A simulated paid instance's settled amounts and price table
    /// (`charged_off_price`); `None` where the harness cannot see them.
    pub charged: Option<super::prices::Charged<'a>>,
    /// The authorizations the facilitator's `/verify` refused and never
    /// found valid (`world::settlements`); `None` where the harness cannot
    /// see them.
    pub refused_payments: Option<&'a BTreeSet<String>>,
    /// What `job_end_overdue` bounds its jobs' lives by; `None` where the
    /// harness does not know the instance's timing (live runs) or it has
    /// several nodes (neither it nor `poll_not_woken` judges it then).
    pub end_bound: Option<super::overdue::EndBound>,
    /// Its held polls' answers (`world::held_polls`), judged with
    /// `end_bound` (one-node simulated instances).
    pub held_polls: Vec<crate::world::held_polls::HeldAnswer>,
    /// A several-node simulated instance's held-poll bounds (in all, of
    /// one client), where the run's fault points are off: the early side
    /// of `poll_not_woken` judges its held polls too; `None` otherwise.
    pub cluster_held_caps: Option<(usize, usize)>,
}

/// See [`InstanceState::results_kept`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResultsKept {
    pub min_ms: i64,
    pub budget_bytes: usize,
}

/// What retention may delete (decisions 0010 and 0018, docs/durability.md):
/// a finished job that ended more than its lifetime ago (the age cut), or
/// any finished job of its ledger while that ledger is past its mark (the
/// size cut; a result younger than the minimum keep time only from an owner
/// over its share, which `honest_result_lost` judges). Nothing unfinished,
/// nothing else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeptPromise {
    /// `retention_hours` in ms; `None`: no age limit.
    pub lifetime_ms: Option<i64>,
    /// The results ledger's mark (90 % of `kept_bytes_max`): its size cut
    /// deletes only when the ledger holds more.
    pub results_mark_bytes: usize,
    /// The failure records' mark (90 % of `failed_kept_bytes_max`).
    pub failures_mark_bytes: usize,
}

impl KeptPromise {
    /// Whether the promise allows `at`; if not, why.
    fn allows(&self, at: &DeletedAt) -> Result<(), String> {
        if at.by_age {
            return match self.lifetime_ms {
                Some(lifetime_ms) if at.age_ms > lifetime_ms => Ok(()),
                Some(lifetime_ms) => Err(format!(
                    "retention deleted it by age {} ms after it ended, within its lifetime of {lifetime_ms} ms",
                    at.age_ms
                )),
                None => Err("retention deleted it by age on an instance with no age limit".into()),
            };
        }
        let (ledger, mark) = match at.result {
            true => ("results", self.results_mark_bytes),
            false => ("failure records", self.failures_mark_bytes),
        };
        match at.ledger_bytes_before > mark {
            true => Ok(()),
            false => Err(format!(
                "retention deleted it for room while its ledger ({ledger}) held {} bytes, not past its mark of {mark}",
                at.ledger_bytes_before
            )),
        }
    }
}

/// A finished job's deletion, as retention's witness noted it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeletedAt {
    /// How long after its end it was deleted (a failure record: after its
    /// creation, which its ledger orders by).
    pub age_ms: i64,
    /// The bytes of its ledger when that pass began.
    pub ledger_bytes_before: usize,
    /// A result (`false`: a failure record).
    pub result: bool,
    /// By the age cut (`false`: by its ledger's size cut).
    pub by_age: bool,
}

/// A simulated worker: the instance it serves and its key.
pub struct WorkerView<'a> {
    pub instance: &'a str,
    pub public_key: &'a str,
}

/// Checks every property; returns the violation seen earliest in the
/// transcript (store-only findings come last).
pub fn check(
    lines: &[String],
    frames: &[FrameRecord],
    streams: &crate::world::streams::StreamLog,
    instances: &BTreeMap<String, InstanceState<'_>>,
    workers: &BTreeMap<String, WorkerView<'_>>,
) -> Result<(), Violation> {
    let jobs: BTreeMap<(&str, String), &Job> = instances
        .iter()
        .flat_map(|(name, s)| {
            s.jobs
                .iter()
                .map(move |j| ((name.as_str(), j.id.to_string()), j))
        })
        .collect();
    let mut found = Vec::new();
    found.extend(check_lines(lines, instances, workers, &jobs).err());
    found.extend(check_fences(lines).err());
    found.extend(super::claims::check(lines).err());
    found.extend(check_proven(frames, instances, workers, &jobs).err());
    found.extend(super::assigns::check(frames).err());
    // No two jobs assigned with one payment; a job erased before it was
    // durable was never bought.
    let lost = lost_before_durable(lines, instances, &jobs);
    found.extend(super::paid_assigns::check(frames, &lost).err());
    found.extend(super::range_edges::check(frames).err());
    found.extend(check_reads(lines, streams, instances, &jobs));
    for (name, state) in instances {
        found.extend(check_store(name, state).err());
        found.extend(check_pairings_kept(name, state).err());
        found.extend(check_settlements(lines, name, state).err());
        found.extend(check_unfunded(name, state).err());
        if let Some(charged) = &state.charged {
            found.extend(super::prices::check(name, state.jobs, charged).err());
        }
        // Both judge one-node simulated instances only (see each).
        if let Some(bound) = &state.end_bound {
            found.extend(super::overdue::check(lines, name, state.jobs, bound).err());
            if bound.timers_exact {
                let ends = super::polls::JobEnds {
                    epoch_ms: bound.epoch_ms,
                    ended_at_ms: (state.jobs.iter())
                        .filter_map(|j| Some((j.id.to_string(), j.completed_at_ms?)))
                        .collect(),
                };
                found.extend(super::polls::check(&state.held_polls, name, &ends).err());
                found.extend(
                    super::polls::check_caps(&state.held_polls, name, bound.held_caps).err(),
                );
                let caps = (bound.held_caps, false);
                found.extend(check_poll_wakes(lines, frames, name, state, caps).err());
                found.extend(super::edges::check(lines, name, state.jobs, bound).err());
            }
        }
        // Polls sent to a cluster node that does not hold their job.
        if let Some(caps) = state.cluster_held_caps {
            found.extend(check_poll_wakes(lines, frames, name, state, (caps, true)).err());
        }
    }
    match found
        .into_iter()
        .min_by_key(|v| v.line.unwrap_or(usize::MAX))
    {
        Some(v) => Err(v),
        None => Ok(()),
    }
}

/// What the stream readers were shown (`crate::verify::streams`), and the
/// readers that resumed after their one-node instance restarted
/// (`crate::verify::stream_resumes`).
fn check_reads(
    lines: &[String],
    streams: &crate::world::streams::StreamLog,
    instances: &BTreeMap<String, InstanceState<'_>>,
    jobs: &BTreeMap<(&str, String), &Job>,
) -> Vec<Violation> {
    let settled_on_completion: BTreeSet<&str> = (instances.iter())
        .filter(|(_, s)| s.paid && s.settled.is_some())
        .map(|(name, _)| name.as_str())
        .collect();
    let (reads, committers) = (streams.all(), streams.committers());
    let shown = super::streams::check(&reads, &committers, jobs, &settled_on_completion);
    let resumed = check_resumes(lines, &reads, instances);
    [shown.err(), resumed.err()].into_iter().flatten().collect()
}

/// Readers that resumed after their one-node instance restarted
/// (`crate::verify::stream_resumes`).
fn check_resumes(
    lines: &[String],
    reads: &[crate::world::streams::StreamRead],
    instances: &BTreeMap<String, InstanceState<'_>>,
) -> Result<(), Violation> {
    let restarts: BTreeMap<&str, Vec<usize>> = (instances.iter())
        .filter(|(_, s)| s.one_node)
        .map(|(name, _)| {
            (
                name.as_str(),
                super::stream_resumes::restart_lines(lines, name),
            )
        })
        .collect();
    for read in reads.iter().filter(|r| !r.resumes.is_empty()) {
        if let Some(at) = restarts.get(read.instance.as_str()) {
            super::stream_resumes::check(read, at)?;
        }
    }
    Ok(())
}

/// Whether a job was erased before it was durable: no store holds it at
/// the end, retention did not delete it, and no commit of it was answered
/// 201 (`crate::verify::paid_assigns`).
fn lost_before_durable<'a>(
    lines: &'a [String],
    instances: &'a BTreeMap<String, InstanceState<'_>>,
    jobs: &'a BTreeMap<(&str, String), &Job>,
) -> impl Fn(&str) -> bool + 'a {
    let acknowledged: BTreeSet<&str> = (lines.iter())
        .filter_map(|line| {
            line.split_once(" < 201 ")?
                .1
                .split_once("\"job_id\":\"")?
                .1
                .get(..36)
        })
        .collect();
    move |id: &str| {
        let stored = jobs.keys().any(|(_, job)| job == id);
        let deleted =
            (instances.values()).any(|s| s.results_deleted.is_some_and(|d| d.contains_key(id)));
        !stored && !deleted && !acknowledged.contains(id)
    }
}

/// Held polls of `instance` answered early
/// (`crate::verify::polls::check_early`), or at their deadline after a
/// first assign on a one-node instance (`crate::verify::polls::check_late`),
/// where no stop, crash or restart reached it (nor, on a cluster, a node's
/// crash, store cut or lost answer: each is an instance control line too).
/// `caps`: its held-poll bounds, and whether it has several nodes.
fn check_poll_wakes(
    lines: &[String],
    frames: &[FrameRecord],
    instance: &str,
    state: &InstanceState<'_>,
    (held_caps, several_nodes): ((usize, usize), bool),
) -> Result<(), Violation> {
    if super::polls::disturbed(lines, instance) {
        return Ok(());
    }
    let assigns = super::polls::assign_windows(frames, lines);
    let polls = &state.held_polls;
    super::polls::check_early(polls, instance, &assigns, held_caps, several_nodes)?;
    if several_nodes {
        return Ok(());
    }
    super::polls::check_late(polls, instance, &assigns)
}

/// `private_to_unproven_pairing`: on an instance with user auth on, every
/// PRIVATE job was assigned (an `assign` frame any worker received, traced
/// or not) only to a worker whose pairing with the job's user the user
/// proved: created with the user's own proof and claimed for that worker's
/// key (the key the create named, if it named one).
fn check_proven(
    frames: &[FrameRecord],
    instances: &BTreeMap<String, InstanceState<'_>>,
    workers: &BTreeMap<String, WorkerView<'_>>,
    jobs: &BTreeMap<(&str, String), &Job>,
) -> Result<(), Violation> {
    for record in frames {
        let frame = &record.frame;
        if record.direction != Direction::Received
            || frame["type"].as_str() != Some("assign")
            || frame["privacy_class"].as_str() != Some(PrivacyClass::Private.as_str())
        {
            continue;
        }
        let Some(view) = workers.get(&record.worker) else {
            continue;
        };
        let Some(proven) = instances.get(view.instance).and_then(|s| s.proven) else {
            continue;
        };
        let id = frame["job_id"].as_str().unwrap_or_default();
        // The job's user comes from the store (a lost job is reported as such).
        let Some(job) = jobs.get(&(view.instance, id.to_owned())) else {
            continue;
        };
        let user = normal_user(&job.submission.user_id);
        let key = view.public_key.to_ascii_lowercase();
        let pair = (user.clone(), key);
        let unanswered = instances.get(view.instance).and_then(|s| s.unanswered);
        if !proven.contains(&pair) && !unanswered.is_some_and(|u| u.contains(&pair)) {
            return Err(Violation {
                invariant: SafetyKey::PrivateToUnprovenPairing,
                message: format!(
                    "PRIVATE job {id} of {user} reached {} ({}), a pairing {user} never proved",
                    record.worker, view.public_key
                ),
                line: Some(record.line.saturating_sub(1)),
            });
        }
    }
    Ok(())
}

/// `pairing_lost`: on an instance with user auth on, every pairing a user
/// proved (a claim answered 2xx of a code the user created with its own
/// proof: the harness's ledger) is still in the instance's trust at the
/// end, across crashes and restarts: nothing unpairs a worker, so a
/// pairing answered before it was durable and lost in a crash shows here.
fn check_pairings_kept(instance: &str, state: &InstanceState<'_>) -> Result<(), Violation> {
    let Some(proven) = state.proven else {
        return Ok(());
    };
    for (user, key) in proven {
        let kept = state.trust.iter().any(|t| {
            normal_user(&t.user_id) == *user && t.provider_pubkey.eq_ignore_ascii_case(key)
        });
        if !kept {
            return Err(Violation {
                invariant: SafetyKey::PairingLost,
                message: format!(
                    "{instance}: {user} paired worker {key} (a claim answered 2xx); at the end the instance does not trust it"
                ),
                line: None,
            });
        }
    }
    Ok(())
}

/// A user id as the coordinator keys it with user auth on.
fn normal_user(user_id: &str) -> String {
    protocol::user_proof::normalize_user_id(user_id).unwrap_or_else(|| user_id.to_owned())
}

/// Decision 0021, judged against the instance's settlement ledger:
/// `settled_twice`, a payment settled more than once; `charged_for_failed_job`,
/// a job that ended failed whose payment was settled; `output_before_settlement`,
/// a paid job whose output a poll showed (or that ended completed) though
/// its payment was never settled.
fn check_settlements(
    lines: &[String],
    instance: &str,
    state: &InstanceState<'_>,
) -> Result<(), Violation> {
    let shown = outputs_shown(lines, instance);
    if let Some((id, line)) = shown.iter().find(|(_, (_, completed))| !completed) {
        return Err(Violation {
            invariant: SafetyKey::OutputBeforeSettlement,
            message: format!("{instance}: job {id}'s output was shown before the job completed"),
            line: Some(line.0),
        });
    }
    let Some(settled) = state.settled else {
        return Ok(());
    };
    for job in state.jobs {
        let Some(paid) = &job.paid_with else { continue };
        let nonce = paid.nonce.nonce.to_string().to_ascii_lowercase();
        let count = settled.get(&nonce).copied().unwrap_or(0);
        let id = job.id.to_string();
        let found = |invariant, message, line| {
            Err(Violation {
                invariant,
                message,
                line,
            })
        };
        if count > 1 {
            let message = format!("{instance}: the payment of job {id} was settled {count} times");
            return found(SafetyKey::SettledTwice, message, None);
        }
        if job.status == JobStatus::Failed && count > 0 && !unlearned(job, &nonce, state) {
            let reason = job.error.map_or("failed", |r| r.as_str());
            let message =
                format!("{instance}: job {id} failed ({reason}) and its payment was settled");
            return found(SafetyKey::ChargedForFailedJob, message, None);
        }
        let line = shown.get(&id).map(|(line, _)| *line);
        if count == 0 && (line.is_some() || job.status == JobStatus::Completed) {
            let message =
                format!("{instance}: job {id}'s output was shown, its payment never settled");
            return found(SafetyKey::OutputBeforeSettlement, message, line);
        }
    }
    Ok(())
}

/// Decision 0021's residual: a paid job failed `payment_expired` though its
/// settlement landed, because every answer and retry that could have told
/// its one node was lost with a process that stayed down (or up only
/// briefly) until the retry deadline.
fn unlearned(job: &Job, nonce: &str, state: &InstanceState<'_>) -> bool {
    job.error == Some(coordinator::core::FailureReason::PaymentExpired)
        && state.one_node
        && state.unlearnable.is_some_and(|u| u.contains(nonce))
}

/// `unfunded_job_accepted`: no job exists whose authorization the
/// facilitator's `/verify` refused (an unfunded payer) and never found
/// valid: a commit with it is answered 402 and buys nothing, so no worker
/// does work that nobody will pay for.
fn check_unfunded(instance: &str, state: &InstanceState<'_>) -> Result<(), Violation> {
    let Some(refused) = state.refused_payments else {
        return Ok(());
    };
    let paid = state
        .jobs
        .iter()
        .filter_map(|j| Some((j, j.paid_with.as_ref()?)));
    for (job, paid) in paid {
        let nonce = paid.nonce.nonce.to_string().to_ascii_lowercase();
        if refused.contains(&nonce) {
            return Err(Violation {
                invariant: SafetyKey::UnfundedJobAccepted,
                message: format!(
                    "{instance}: job {} was bought with authorization {nonce}, which the facilitator refused and never found valid",
                    job.id
                ),
                line: None,
            });
        }
    }
    Ok(())
}

/// The jobs whose output an answer of `instance` showed, with the first
/// line and whether the job was completed there (an output is shown only
/// with `completed`, which on completion means settled).
fn outputs_shown(lines: &[String], instance: &str) -> BTreeMap<String, (usize, bool)> {
    let mut shown = BTreeMap::new();
    for (n, line) in lines.iter().enumerate() {
        let Some((actor, rest)) = split(line) else {
            continue;
        };
        if actor != instance {
            continue;
        }
        let Some(body) = json_after(rest, "< 200 ") else {
            continue;
        };
        let output = body.pointer("/result/output").is_some_and(|o| !o.is_null());
        let completed = body["status"].as_str() == Some("completed");
        if let (true, Some(id)) = (output, body["id"].as_str()) {
            let seen = shown.entry(id.to_owned()).or_insert((n, completed));
            if !completed && seen.1 {
                *seen = (n, false);
            }
        }
    }
    shown
}

/// A node of a several-node instance is fenced by the shared store only
/// after it was cut from it (a `partition` step): otherwise two nodes
/// disagreed about who holds a job, which the conditional writes caught
/// (for example two nodes claimed the same pool job).
fn check_fences(lines: &[String]) -> Result<(), Violation> {
    let mut partitioned = std::collections::BTreeSet::new();
    for (n, line) in lines.iter().enumerate() {
        let Some((actor, rest)) = split(line) else {
            continue;
        };
        if actor == "harness" {
            // `instance chain_a partition node 2 for 8000 ms`
            let words: Vec<&str> = rest.split(' ').collect();
            if let ["instance", name, "partition", "node", i, ..] = words[..] {
                partitioned.insert(format!("{name}-{i}"));
            }
            continue;
        }
        if rest.starts_with("fenced by the shared store") && !partitioned.contains(actor) {
            return Err(Violation {
                invariant: SafetyKey::NodeFencedUnprovoked,
                message: format!("node {actor} was fenced though never cut from the store"),
                line: Some(n),
            });
        }
    }
    Ok(())
}

/// A transcript line split as `[+S.mmm] actor rest`.
fn split(line: &str) -> Option<(&str, &str)> {
    let rest = line.split_once("] ")?.1;
    rest.split_once(' ')
}

/// The JSON after a prefix such as `<- ` or `< 201 `.
fn json_after(rest: &str, prefix: &str) -> Option<Value> {
    serde_json::from_str(rest.strip_prefix(prefix)?).ok()
}

/// Per worker: authenticated on its current connection?
#[derive(Default)]
struct Seen<'a> {
    authenticated: BTreeMap<&'a str, bool>,
    accepted: BTreeMap<(&'a str, String), usize>,
    completed: BTreeMap<(&'a str, String), (Value, usize)>,
    /// Jobs shown `failed` (a poll, or a cancel's answer): their error and
    /// the line.
    failed: BTreeMap<(&'a str, String), (Value, usize)>,
    /// Jobs shown finished (a poll answered completed or failed, or a
    /// worker told `result_accepted`): retention may delete them.
    ended: std::collections::BTreeSet<(&'a str, String)>,
    /// The line of each instance's latest stop, crash or restart, and of
    /// each worker's latest welcome (`check_not_reopened`).
    restarted: BTreeMap<&'a str, usize>,
    welcomed: BTreeMap<&'a str, usize>,
    /// 201s for jobs missing at the end, on instances that run retention:
    /// lost unless retention deleted them as promised. With the line.
    missing: Vec<(&'a str, String, usize)>,
}

fn check_lines<'a>(
    lines: &'a [String],
    instances: &BTreeMap<String, InstanceState<'_>>,
    workers: &'a BTreeMap<String, WorkerView<'a>>,
    jobs: &BTreeMap<(&str, String), &Job>,
) -> Result<(), Violation> {
    let mut seen = Seen::default();
    // A workload's commit `#i`, by (workload, i): the instance it went to.
    let mut sent_to: BTreeMap<(&str, &str), &str> = BTreeMap::new();
    for (n, line) in lines.iter().enumerate() {
        let Some((actor, rest)) = split(line) else {
            continue;
        };
        let at = |invariant, message| Violation {
            invariant,
            message,
            line: Some(n),
        };
        note_restarts_and_welcomes(line, actor, rest, instances, workers, &mut seen, n);
        if let Some((name, _)) = instances.get_key_value(actor) {
            let retention = instances[name.as_str()].retention;
            check_answer(name, retention, rest, jobs, &mut seen, n).map_err(|(i, m)| at(i, m))?;
        } else if let Some((name, w)) = workers.get_key_value(actor) {
            let Some(state) = instances.get(w.instance) else {
                continue;
            };
            check_frame(name, w, state, rest, jobs, &mut seen).map_err(|(i, m)| at(i, m))?;
        } else {
            check_workload(actor, rest, instances, jobs, &mut sent_to, &mut seen, n)
                .map_err(|(i, m)| at(i, m))?;
        }
    }
    let lost = seen.missing.iter().find_map(|(instance, id, line)| {
        let shown_finished = seen.ended.contains(&(*instance, id.clone()));
        let why = deletion_excused(&instances[*instance], id, shown_finished).err()?;
        Some((instance, id, line, why))
    });
    if let Some((instance, id, line, why)) = lost {
        return Err(Violation {
            invariant: SafetyKey::AcknowledgedJobLost,
            message: format!("{instance} answered 201 for job {id}, which it no longer has: {why}"),
            line: Some(*line),
        });
    }
    check_results_kept(instances, &seen)
}

/// Notes line `n` as its instance's latest restart (a stop, crash or
/// restart, as `verify::edges` reads them) or its worker's latest welcome.
fn note_restarts_and_welcomes<'a>(
    line: &str,
    actor: &str,
    rest: &str,
    instances: &'a BTreeMap<String, InstanceState<'_>>,
    workers: &'a BTreeMap<String, WorkerView<'a>>,
    seen: &mut Seen<'a>,
    n: usize,
) {
    if actor == "harness" {
        let after_stamp = line.split_once("] ").map_or("", |(_, r)| r);
        for name in instances.keys() {
            if super::edges::disturbs(after_stamp, name) {
                seen.restarted.insert(name, n);
            }
        }
    } else if rest.starts_with("{\"event\":\"welcomed\"") {
        if let Some((name, _)) = workers.get_key_value(actor) {
            seen.welcomed.insert(name, n);
        }
    }
}

/// Whether retention may have deleted job `id`, missing at the end: where
/// the harness sees retention's deletions (the simulation), only if it
/// deleted the job as the promise allows; where it does not (live), only if
/// the transcript showed the job finished.
fn deletion_excused(
    state: &InstanceState<'_>,
    id: &str,
    shown_finished: bool,
) -> Result<(), String> {
    match (state.results_deleted, state.kept_promise) {
        (Some(deleted), Some(promise)) => match deleted.get(id) {
            Some(at) => promise.allows(at),
            None => Err("no retention pass deleted it".into()),
        },
        _ if shown_finished => Ok(()),
        _ => Err("never shown finished, and the harness cannot see retention's deletions".into()),
    }
}

/// `honest_result_lost`: on an instance where a client's share is the
/// whole budget, retention deleted a result younger than the minimum keep
/// time (decision 0018) in a pass that began with the ledger within the
/// budget (so no owner was over its share). Judged at the pass that
/// deleted it: the end of a run comes after a heal longer than the keep
/// time, when every deletion looks old enough.
fn check_results_kept(
    instances: &BTreeMap<String, InstanceState<'_>>,
    seen: &Seen<'_>,
) -> Result<(), Violation> {
    let young = seen.missing.iter().find_map(|(instance, id, line)| {
        let state = &instances[*instance];
        let kept = state.results_kept?;
        let at = *state.results_deleted?.get(id).filter(|at| at.result)?;
        let within = at.ledger_bytes_before <= kept.budget_bytes;
        (within && at.age_ms < kept.min_ms).then_some((instance, id, line, at, kept))
    });
    match young {
        Some((instance, id, line, at, kept)) => Err(Violation {
            invariant: SafetyKey::HonestResultLost,
            message: format!(
                "{instance} deleted job {id}'s result {} ms after it completed, younger than the minimum keep time ({} ms), though no client address was over its share (the ledger held {} of {} bytes)",
                at.age_ms, kept.min_ms, at.ledger_bytes_before, kept.budget_bytes
            ),
            line: Some(*line),
        }),
        None => Ok(()),
    }
}

/// A line's time, in ms after `+0.000s`.
pub(crate) fn line_ms(line: &str) -> i64 {
    let stamp = line
        .strip_prefix("[+")
        .and_then(|rest| rest.split_once("s]"))
        .map(|(stamp, _)| stamp);
    let Some((s, ms)) = stamp.and_then(|stamp| stamp.split_once('.')) else {
        return i64::MAX;
    };
    match (s.parse::<i64>(), ms.parse::<i64>()) {
        (Ok(s), Ok(ms)) => s * 1000 + ms,
        _ => i64::MAX,
    }
}

type Found = (SafetyKey, String);

/// An instance's HTTP answer: a 201 names a job that must survive (until
/// retention deletes it, once finished); a completed job's result and
/// receipt never change.
fn check_answer<'a>(
    instance: &'a str,
    retention: bool,
    rest: &str,
    jobs: &BTreeMap<(&str, String), &Job>,
    seen: &mut Seen<'a>,
    line: usize,
) -> Result<(), Found> {
    if let Some(body) = json_after(rest, "< 201 ") {
        if let Some(id) = body["job_id"].as_str() {
            if !jobs.contains_key(&(instance, id.to_owned())) {
                if retention {
                    seen.missing.push((instance, id.to_owned(), line));
                    return Ok(());
                }
                return Err((
                    SafetyKey::AcknowledgedJobLost,
                    format!("{instance} answered 201 for job {id}, which it no longer has"),
                ));
            }
        }
    } else if let Some(body) = json_after(rest, "< 200 ") {
        let (Some(id), Some(status)) = (body["id"].as_str(), body["status"].as_str()) else {
            return Ok(());
        };
        check_failed_kept(instance, retention, id, &body, jobs, seen, line)?;
        if status != "completed" {
            return Ok(());
        }
        seen.ended.insert((instance, id.to_owned()));
        let outcome = serde_json::json!([body["result"], body["receipt"]]);
        let key = (instance, id.to_owned());
        match seen.completed.get(&key) {
            Some((first, first_line)) if *first != outcome => {
                return Err((
                    SafetyKey::CompletedJobChanged,
                    format!(
                        "{instance} job {id} was completed with {first} (line {}) and later with {outcome}",
                        first_line + 1
                    ),
                ))
            }
            Some(_) => {}
            None => {
                seen.completed.insert(key, (outcome, line));
            }
        }
        if !ends_as(jobs, instance, id, retention, JobStatus::Completed) {
            return Err((
                SafetyKey::CompletedJobChanged,
                format!("{instance} showed job {id} completed; at the end it is not"),
            ));
        }
    }
    Ok(())
}

/// A job shown `failed` (a poll, or the answer to its cancel) stays failed
/// with the same error: no later answer shows it otherwise, and it is
/// failed at the end (unless retention deleted it). A cancel answered
/// before its failure was durable, then lost in a crash, shows here.
fn check_failed_kept<'a>(
    instance: &'a str,
    retention: bool,
    id: &str,
    body: &Value,
    jobs: &BTreeMap<(&str, String), &Job>,
    seen: &mut Seen<'a>,
    line: usize,
) -> Result<(), Found> {
    let key = (instance, id.to_owned());
    // A job record carries its error in `result` (spec 2.4).
    let error = &body["result"]["error"];
    let shown = (body["status"].as_str(), error);
    if let Some((error, first_line)) = seen.failed.get(&key) {
        if shown != (Some("failed"), error) {
            return Err((
                SafetyKey::FailedJobChanged,
                format!(
                    "{instance} showed job {id} failed ({error}, line {}) and later {} ({})",
                    first_line + 1,
                    body["status"],
                    error
                ),
            ));
        }
        return Ok(());
    }
    if shown.0 != Some("failed") {
        return Ok(());
    }
    seen.ended.insert(key.clone());
    seen.failed.insert(key, (error.clone(), line));
    if !ends_as(jobs, instance, id, retention, JobStatus::Failed) {
        return Err((
            SafetyKey::FailedJobChanged,
            format!("{instance} showed job {id} failed; at the end it is not"),
        ));
    }
    Ok(())
}

/// Whether job `id` of `instance` is `status` at the end: a job shown
/// finished keeps its status, unless retention deleted it (deleted is not
/// changed).
fn ends_as(
    jobs: &BTreeMap<(&str, String), &Job>,
    instance: &str,
    id: &str,
    retention: bool,
    status: JobStatus,
) -> bool {
    match jobs.get(&(instance, id.to_owned())) {
        Some(job) => job.status == status,
        None => retention,
    }
}

/// A workload's lines (`load > #3 chain_a fast ...`, `load < #3 201 ID`):
/// a job it was answered 201 for must survive, as for any other client.
fn check_workload<'a>(
    workload: &'a str,
    rest: &'a str,
    instances: &BTreeMap<String, InstanceState<'_>>,
    jobs: &BTreeMap<(&str, String), &Job>,
    sent_to: &mut BTreeMap<(&'a str, &'a str), &'a str>,
    seen: &mut Seen<'a>,
    line: usize,
) -> Result<(), Found> {
    if let Some(commit) = rest.strip_prefix("> #") {
        let mut words = commit.split(' ');
        if let (Some(i), Some(instance)) = (words.next(), words.next()) {
            if instances.contains_key(instance) {
                sent_to.insert((workload, i), instance);
            }
        }
    } else if let Some(answer) = rest.strip_prefix("< #") {
        let mut words = answer.split(' ');
        let (Some(i), Some("201"), Some(id)) = (words.next(), words.next(), words.next()) else {
            return Ok(());
        };
        let Some(instance) = sent_to.get(&(workload, i)) else {
            return Ok(());
        };
        if !jobs.contains_key(&(*instance, id.to_owned())) {
            if instances[*instance].retention {
                seen.missing.push((instance, id.to_owned(), line));
                return Ok(());
            }
            return Err((
                SafetyKey::AcknowledgedJobLost,
                format!("{instance} answered {workload}'s commit #{i} 201 for job {id}, which it no longer has"),
            ));
        }
    }
    Ok(())
}

/// A worker's frame: PRIVATE payloads only to authenticated trusted
/// sessions, paid instances dispatch only paid jobs, one acceptance per job
/// and its receipt signed by the holder's key.
fn check_frame<'a>(
    worker: &'a str,
    view: &WorkerView<'a>,
    state: &InstanceState<'_>,
    rest: &str,
    jobs: &BTreeMap<(&str, String), &Job>,
    seen: &mut Seen<'a>,
) -> Result<(), Found> {
    if rest.starts_with("{\"event\":\"connecting\"") {
        seen.authenticated.insert(worker, false);
        return Ok(());
    }
    if rest.starts_with("{\"event\":\"welcomed\"") {
        seen.authenticated.insert(worker, true);
        return Ok(());
    }
    let Some(frame) = json_after(rest, "<- ") else {
        return Ok(());
    };
    let id = frame["job_id"].as_str().unwrap_or_default().to_owned();
    let job = jobs.get(&(view.instance, id.clone()));
    match frame["type"].as_str() {
        Some("assign") => check_assign(worker, view, state, &frame, &id, job, seen),
        Some("result_accepted") => {
            let count = seen
                .accepted
                .entry((view.instance, id.clone()))
                .or_default();
            *count += 1;
            seen.ended.insert((view.instance, id.clone()));
            if *count > 1 {
                return Err((
                    SafetyKey::ResultAcceptedTwice,
                    format!("job {id} got result_accepted a second time, at {worker}"),
                ));
            }
            check_holder_key(worker, view, &id, job)
        }
        _ => Ok(()),
    }
}

fn check_assign(
    worker: &str,
    view: &WorkerView<'_>,
    state: &InstanceState<'_>,
    frame: &Value,
    id: &str,
    job: Option<&&Job>,
    seen: &Seen<'_>,
) -> Result<(), Found> {
    check_not_reopened(worker, view, state, id, seen)?;
    if state.paid && frame["payment_ref"].is_null() {
        return Err((
            SafetyKey::UnpaidJobDispatched,
            format!("job {id} was assigned to {worker} without a payment on a paid instance"),
        ));
    }
    if frame["privacy_class"].as_str() != Some(PrivacyClass::Private.as_str()) {
        return Ok(());
    }
    if seen.authenticated.get(worker) != Some(&true) {
        return Err((
            SafetyKey::PrivateBeforeAuth,
            format!("PRIVATE job {id} reached {worker} before it was authenticated"),
        ));
    }
    // The job's user comes from the store; a PRIVATE job the store lost is
    // reported as a lost acknowledged job instead.
    let Some(job) = job else { return Ok(()) };
    // Pairings are never revoked, so the trust held at the end includes
    // every pairing that existed at the assignment.
    if !user_trusts(state.trust, &job.submission.user_id, view.public_key) {
        return Err((
            SafetyKey::PrivateToUntrusted,
            format!(
                "PRIVATE job {id} of {} reached {worker} ({}), whom the user never paired",
                job.submission.user_id, view.public_key
            ),
        ));
    }
    Ok(())
}

/// A job a client was shown finished (a poll answered `completed` or
/// `failed`, or a cancel answered `failed`) is never handed to a worker
/// again: the answer promised an end that survives a crash. A poll answered
/// from memory before the store's commit breaks this only when a crash
/// lands in between, and the rerun's output is the same, so the job's final
/// state alone cannot show it. Judged where a frame's sending time is
/// certain without the coordinator's side: on a one-node instance restarted
/// after the answer, a session welcomed after the restart receives only
/// what the new process sent (an `assign` sent before the answer may still
/// be on its way on an older connection).
fn check_not_reopened(
    worker: &str,
    view: &WorkerView<'_>,
    state: &InstanceState<'_>,
    id: &str,
    seen: &Seen<'_>,
) -> Result<(), Found> {
    let key = (view.instance, id.to_owned());
    let restarted = seen.restarted.get(view.instance);
    let welcomed = seen.welcomed.get(worker);
    let fresh_after = |shown: usize| {
        state.one_node && restarted.is_some_and(|r| *r > shown && welcomed.is_some_and(|w| w > r))
    };
    if let Some((_, line)) = seen.completed.get(&key).filter(|(_, l)| fresh_after(*l)) {
        return Err((
            SafetyKey::CompletedJobChanged,
            format!("job {id} was shown completed (line {}), and after a restart assigned to {worker} again", line + 1),
        ));
    }
    if let Some((error, line)) = seen.failed.get(&key).filter(|(_, l)| fresh_after(*l)) {
        return Err((
            SafetyKey::FailedJobChanged,
            format!("job {id} was shown failed ({error}, line {}), and after a restart assigned to {worker} again", line + 1),
        ));
    }
    Ok(())
}

fn check_holder_key(
    worker: &str,
    view: &WorkerView<'_>,
    id: &str,
    job: Option<&&Job>,
) -> Result<(), Found> {
    let Some(receipt) = job.and_then(|j| j.receipt.as_ref()) else {
        return Ok(());
    };
    if !receipt
        .provider_pubkey
        .eq_ignore_ascii_case(view.public_key)
    {
        return Err((
            SafetyKey::ReceiptKeyNotHolder,
            format!(
                "job {id} was accepted from {worker} ({}) but its receipt names {}",
                view.public_key, receipt.provider_pubkey
            ),
        ));
    }
    Ok(())
}

/// Store-only properties: receipts verify, one job per payment.
fn check_store(instance: &str, state: &InstanceState<'_>) -> Result<(), Violation> {
    let mut refs = BTreeMap::<&str, String>::new();
    let violation = |invariant, message| Violation {
        invariant,
        message,
        line: None,
    };
    for job in state.jobs {
        if let Some(r) = job.payment_ref.as_deref() {
            if let Some(other) = refs.insert(r, job.id.to_string()) {
                return Err(violation(
                    SafetyKey::PaymentBoughtTwoJobs,
                    format!("{instance}: payment {r} bought jobs {other} and {}", job.id),
                ));
            }
        }
        if job.status != JobStatus::Completed {
            continue;
        }
        let (Some(receipt), Some(output)) = (&job.receipt, &job.output) else {
            return Err(violation(
                SafetyKey::ReceiptInvalid,
                format!(
                    "{instance}: completed job {} lacks a receipt or output",
                    job.id
                ),
            ));
        };
        check_receipt(instance, job, receipt, output)
            .map_err(|m| violation(SafetyKey::ReceiptInvalid, m))?;
        if job.submission.privacy_class == PrivacyClass::Private
            && !user_trusts(
                state.trust,
                &job.submission.user_id,
                &receipt.provider_pubkey,
            )
        {
            return Err(violation(
                SafetyKey::PrivateToUntrusted,
                format!(
                    "{instance}: PRIVATE job {} was done by {}, whom {} never paired",
                    job.id, receipt.provider_pubkey, job.submission.user_id
                ),
            ));
        }
    }
    Ok(())
}

/// `receipt_invalid` for one completed job: its receipt verifies against
/// its output and is this job's, for this job's payment.
fn check_receipt(
    instance: &str,
    job: &Job,
    receipt: &protocol::receipt::Receipt,
    output: &Value,
) -> Result<(), String> {
    receipt
        .verify(output)
        .map_err(|e| format!("{instance}: job {} receipt: {e}", job.id))?;
    // A receipt signs its job id, so another job's valid receipt proves
    // nothing about this one.
    if receipt.job_id != job.id {
        return Err(format!(
            "{instance}: job {} holds the receipt of job {}",
            job.id, receipt.job_id
        ));
    }
    // The receipt signs the payment it was done for (the spec's receipt
    // fields), so a receipt bound to another payment, or to one where the
    // job had none, proves nothing about this job's.
    if receipt.payment_ref != job.payment_ref {
        return Err(format!(
            "{instance}: job {} (payment {:?}) holds a receipt for payment {:?}",
            job.id, job.payment_ref, receipt.payment_ref
        ));
    }
    Ok(())
}

fn user_trusts(trust: &[TrustEntry], user: &str, key: &str) -> bool {
    trust
        .iter()
        .any(|t| t.user_id == user && t.provider_pubkey.eq_ignore_ascii_case(key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const J1: &str = "00000000-0000-4000-8000-000000000001";
    const J2: &str = "00000000-0000-4000-8000-000000000002";
    const KEY_W: &str = "0x02aa";
    const KEY_V: &str = "0x02bb";

    fn job(id: &str, user: &str, private: bool, payment_ref: Option<&str>) -> Job {
        serde_json::from_value(json!({
            "id": id,
            "submission": {
                "job_type": "TASK", "user_id": user,
                "payload": {"job_type": "TASK", "task_type": "classify", "input": "x"},
                "privacy_class": if private { "PRIVATE" } else { "PUBLIC" },
            },
            "tier": "FAST", "status": "running", "output": null, "error": null,
            "receipt": null, "created_at_ms": 0, "completed_at_ms": null,
            "attempts": 1, "payment_ref": payment_ref, "deadline_ms": 1, "seq": 1,
        }))
        .expect("a job")
    }

    /// An instance's state with `jobs` and nothing else: no trust, no
    /// payments, no retention, no records of the run.
    fn plain_state(jobs: &[Job]) -> InstanceState<'_> {
        InstanceState {
            jobs,
            trust: &[],
            paid: false,
            retention: false,
            kept_promise: None,
            results_kept: None,
            results_deleted: None,
            proven: None,
            unanswered: None,
            settled: None,
            unlearnable: None,
            one_node: true,
            charged: None,
            end_bound: None,
            held_polls: Vec::new(),
            refused_payments: None,
            cluster_held_caps: None,
        }
    }

    #[test]
    fn a_fence_needs_a_partition_of_that_node() {
        let lines = |partition: &str| -> Vec<String> {
            vec![
                format!(
                    "[+1.000s] harness instance chain_a partition node {partition} for 8000 ms"
                ),
                "[+2.500s] chain_a-2 fenced by the shared store; crashed".into(),
            ]
        };
        assert_eq!(check_fences(&lines("2")), Ok(()));
        let v = check_fences(&lines("1")).unwrap_err();
        assert_eq!(v.invariant, SafetyKey::NodeFencedUnprovoked);
        assert_eq!(v.line, Some(1));
    }

    fn trust(user: &str, key: &str) -> TrustEntry {
        TrustEntry {
            user_id: user.into(),
            provider_pubkey: key.into(),
            paired_at_ms: 0,
        }
    }

    /// Runs the checks over `lines` with instance `chain_a` holding `jobs`
    /// and `trust`, and workers `w` (key KEY_W) and `v` (KEY_V) on it.
    fn verdict(
        lines: &[&str],
        jobs: &[Job],
        trust: &[TrustEntry],
        paid: bool,
    ) -> Option<&'static str> {
        verdict_with(lines, jobs, trust, paid, false)
    }

    /// [`verdict`] on an instance that runs retention or not.
    fn verdict_with(
        lines: &[&str],
        jobs: &[Job],
        trust: &[TrustEntry],
        paid: bool,
        retention: bool,
    ) -> Option<&'static str> {
        let lines: Vec<String> = lines.iter().map(|l| format!("[+0.001s] {l}")).collect();
        let state = InstanceState {
            trust,
            paid,
            retention,
            ..plain_state(jobs)
        };
        let instances = BTreeMap::from([("chain_a".to_owned(), state)]);
        let workers = BTreeMap::from([
            (
                "w".to_owned(),
                WorkerView {
                    instance: "chain_a",
                    public_key: KEY_W,
                },
            ),
            (
                "v".to_owned(),
                WorkerView {
                    instance: "chain_a",
                    public_key: KEY_V,
                },
            ),
        ]);
        check(&lines, &[], &Default::default(), &instances, &workers)
            .err()
            .map(|v| v.invariant.as_str())
    }

    fn assign(id: &str, privacy: &str, payment_ref: &str) -> String {
        format!(
            r#"<- {{"type":"assign","job_id":"{id}","privacy_class":"{privacy}","payment_ref":{payment_ref}}}"#
        )
    }

    #[test]
    fn a_201_for_a_job_the_store_lost_is_caught() {
        let answer = format!(r#"chain_a < 201 {{"job_id":"{J1}"}}"#);
        assert_eq!(
            verdict(&[&answer], &[job(J1, "u", false, None)], &[], false),
            None
        );
        assert_eq!(
            verdict(&[&answer], &[], &[], false),
            Some("acknowledged_job_lost")
        );
    }

    #[test]
    fn a_201_to_a_workload_for_a_job_the_store_lost_is_caught() {
        let commit = "load > #3 chain_a fast TASK PUBLIC";
        let answer = format!("load < #3 201 {J1}");
        assert_eq!(
            verdict(&[commit, &answer], &[job(J1, "u", false, None)], &[], false),
            None
        );
        assert_eq!(
            verdict(&[commit, &answer], &[], &[], false),
            Some("acknowledged_job_lost")
        );
        // A refusal acknowledges nothing.
        let refused = "load < #3 402 payment required";
        assert_eq!(verdict(&[commit, refused], &[], &[], false), None);
    }

    #[test]
    fn a_second_result_accepted_is_caught() {
        let accepted = format!(r#"<- {{"type":"result_accepted","job_id":"{J1}"}}"#);
        let (once, twice) = (format!("w {accepted}"), format!("v {accepted}"));
        let jobs = [job(J1, "u", false, None)];
        assert_eq!(verdict(&[&once], &jobs, &[], false), None);
        assert_eq!(
            verdict(&[&once, &twice], &jobs, &[], false),
            Some("result_accepted_twice")
        );
    }

    #[test]
    fn a_job_shown_finished_and_assigned_again_after_a_restart_is_caught() {
        let assigned = format!("w {}", assign(J1, "PUBLIC", "null"));
        let completed = format!(
            r#"chain_a < 200 {{"id":"{J1}","status":"completed","result":{{"output":"x"}},"receipt":null}}"#
        );
        let failed = format!(
            r#"chain_a < 200 {{"id":"{J1}","status":"failed","result":{{"error":"timeout"}}}}"#
        );
        let restart = "harness instance chain_a restart";
        let welcomed = r#"w {"event":"welcomed","session":0,"session_id":1}"#;
        // Retention on, the job gone at the end: only the lines judge.
        let judge = |lines: &[&str]| verdict_with(lines, &[], &[], false, true);
        for shown in [&completed, &failed] {
            assert_eq!(judge(&[&assigned, shown, restart, welcomed]), None);
            // Without a restart, or on a session from before it, the
            // assign may have been sent before the answer.
            assert_eq!(judge(&[shown, &assigned]), None);
            assert_eq!(judge(&[shown, welcomed, restart, &assigned]), None);
        }
        let reopened = |shown: &str| judge(&[shown, restart, welcomed, &assigned]);
        assert_eq!(reopened(&completed), Some("completed_job_changed"));
        assert_eq!(reopened(&failed), Some("failed_job_changed"));
    }

    #[test]
    fn a_job_shown_failed_with_one_error_and_later_another_is_caught() {
        let failed = |error: &str| {
            format!(
                r#"chain_a < 200 {{"id":"{J1}","status":"failed","result":{{"error":"{error}"}}}}"#
            )
        };
        let (timeout, cancelled) = (failed("timeout"), failed("cancelled"));
        let judge = |lines: &[&str]| verdict_with(lines, &[], &[], false, true);
        assert_eq!(judge(&[&timeout, &timeout]), None);
        assert_eq!(judge(&[&timeout, &cancelled]), Some("failed_job_changed"));
    }

    #[test]
    fn a_private_assignment_to_an_unpaired_or_unauthenticated_worker_is_caught() {
        let welcomed = r#"w {"event":"welcomed","session":0,"session_id":1}"#;
        let private = format!("w {}", assign(J1, "PRIVATE", "null"));
        let jobs = [job(J1, "alice", true, None)];
        let paired = [trust("alice", KEY_W)];
        assert_eq!(verdict(&[welcomed, &private], &jobs, &paired, false), None);
        let other = [trust("alice", KEY_V)];
        assert_eq!(
            verdict(&[welcomed, &private], &jobs, &other, false),
            Some("private_to_untrusted")
        );
        let reconnecting = r#"w {"event":"connecting","attempt":1}"#;
        assert_eq!(
            verdict(&[welcomed, reconnecting, &private], &jobs, &paired, false),
            Some("private_before_auth")
        );
    }

    #[test]
    fn an_unpaid_assignment_on_a_paid_instance_is_caught() {
        let paid = format!("w {}", assign(J1, "PUBLIC", "\"x402:0x01\""));
        let unpaid = format!("w {}", assign(J1, "PUBLIC", "null"));
        let jobs = [job(J1, "u", false, Some("x402:0x01"))];
        assert_eq!(verdict(&[&paid], &jobs, &[], true), None);
        assert_eq!(verdict(&[&unpaid], &jobs, &[], false), None);
        assert_eq!(
            verdict(&[&unpaid], &jobs, &[], true),
            Some("unpaid_job_dispatched")
        );
    }

    #[test]
    fn one_payment_for_two_jobs_is_caught() {
        let one = [
            job(J1, "u", false, Some("x402:0x01")),
            job(J2, "u", false, Some("x402:0x02")),
        ];
        assert_eq!(verdict(&[], &one, &[], true), None);
        let reused = [
            job(J1, "u", false, Some("x402:0x01")),
            job(J2, "u", false, Some("x402:0x01")),
        ];
        assert_eq!(
            verdict(&[], &reused, &[], true),
            Some("payment_bought_two_jobs")
        );
    }

    #[test]
    fn a_completed_job_that_changes_or_reverts_is_caught() {
        let shown = |output: &str| {
            format!(
                r#"chain_a < 200 {{"id":"{J1}","status":"completed","result":{{"output":"{output}"}},"receipt":null}}"#
            )
        };
        let mut completed = job(J1, "u", false, None);
        completed.status = JobStatus::Completed;
        let running = job(J1, "u", false, None);
        let (a, b) = (shown("a"), shown("b"));
        // The store's receipt check is not what this test is about: the
        // job reverts (running at the end) or its output changes.
        assert_eq!(
            verdict(&[&a, &b], std::slice::from_ref(&running), &[], false),
            Some("completed_job_changed")
        );
        let first = check_lines(
            &[format!("[+0.001s] {a}"), format!("[+0.002s] {b}")],
            &BTreeMap::from([(
                "chain_a".to_owned(),
                InstanceState {
                    ..plain_state(&[completed.clone()])
                },
            )]),
            &BTreeMap::new(),
            &BTreeMap::from([(("chain_a", J1.to_owned()), &completed)]),
        );
        assert_eq!(
            first.err().map(|v| v.invariant.as_str()),
            Some("completed_job_changed")
        );
        assert!(check_lines(
            &[format!("[+0.001s] {a}"), format!("[+0.002s] {a}")],
            &BTreeMap::from([(
                "chain_a".to_owned(),
                InstanceState {
                    ..plain_state(&[completed.clone()])
                }
            )]),
            &BTreeMap::new(),
            &BTreeMap::from([(("chain_a", J1.to_owned()), &completed)]),
        )
        .is_ok());
    }

    /// `pairing_lost`: a proven pairing missing from the instance's trust
    /// at the end breaks it; one the trust holds, or any pairing on an
    /// instance with user auth off (`proven: None`), does not.
    #[test]
    fn a_proven_pairing_the_instance_lost_is_caught() {
        let user = "0x1111111111111111111111111111111111111111";
        let proven = BTreeSet::from([(user.to_owned(), KEY_W.to_ascii_lowercase())]);
        let state = |trust, proven| InstanceState {
            trust,
            proven,
            ..plain_state(&[])
        };
        let kept = [trust(user, KEY_W)];
        let lost = check_pairings_kept("chain_a", &state(&[], Some(&proven)));
        assert_eq!(
            lost.err().map(|v| v.invariant),
            Some(SafetyKey::PairingLost)
        );
        assert!(check_pairings_kept("chain_a", &state(&kept, Some(&proven))).is_ok());
        assert!(check_pairings_kept("chain_a", &state(&[], None)).is_ok());
    }

    /// `failed_job_changed`: a job shown failed (a cancel's answer or a
    /// poll) that a later answer shows otherwise, or that is not failed at
    /// the end, breaks it; shown failed alike and failed at the end does not.
    #[test]
    fn a_failed_job_that_changes_or_reverts_is_caught() {
        let cancelled = format!(
            r#"chain_a < 200 {{"id":"{J1}","status":"failed","result":{{"error":"cancelled"}}}}"#
        );
        let timed_out = format!(
            r#"chain_a < 200 {{"id":"{J1}","status":"failed","result":{{"error":"lease_expired"}}}}"#
        );
        let completed_poll = format!(
            r#"chain_a < 200 {{"id":"{J1}","status":"completed","result":{{"output":"a"}},"receipt":null}}"#
        );
        let mut failed = job(J1, "u", false, None);
        failed.status = JobStatus::Failed;
        let mut completed = job(J1, "u", false, None);
        completed.status = JobStatus::Completed;
        let failed = std::slice::from_ref(&failed);
        let key = Some("failed_job_changed");
        // Cancelled, then completed after a restart restored it.
        assert_eq!(verdict(&[&cancelled], &[completed], &[], false), key);
        assert_eq!(
            verdict(&[&cancelled, &completed_poll], failed, &[], false),
            key
        );
        assert_eq!(verdict(&[&cancelled, &timed_out], failed, &[], false), key);
        // Gone at the end: lost without retention, deleted with it.
        assert_eq!(verdict(&[&cancelled], &[], &[], false), key);
        assert_eq!(verdict_with(&[&cancelled], &[], &[], false, true), None);
        assert_eq!(verdict(&[&cancelled, &cancelled], failed, &[], false), None);
    }

    /// `private_to_unproven_pairing`: with user auth on, a PRIVATE
    /// assignment to a worker whose pairing the user never proved breaks
    /// it, traced or not; a proven pairing, a PUBLIC job or an instance
    /// with user auth off (`proven: None`) does not.
    #[test]
    fn a_private_job_reaches_only_proven_pairings() {
        use crate::spec::frames::{Direction, FrameRecord};
        const ALICE: &str = "0x00000000000000000000000000000000000000aa";
        let private = job(J1, ALICE, true, None);
        let public = job(J2, ALICE, false, None);
        let assign = |id: &str, class: &str| FrameRecord {
            worker: "w".into(),
            direction: Direction::Received,
            frame: json!({"type": "assign", "job_id": id, "privacy_class": class}),
            line: 3,
        };
        let frames = [assign(J2, "PUBLIC"), assign(J1, "PRIVATE")];
        let jobs = [private.clone(), public.clone()];
        let index = BTreeMap::from([
            (("chain_a", J1.to_owned()), &private),
            (("chain_a", J2.to_owned()), &public),
        ]);
        let workers = BTreeMap::from([(
            "w".to_owned(),
            WorkerView {
                instance: "chain_a",
                public_key: KEY_W,
            },
        )]);
        let judge = |proven: Option<&BTreeSet<(String, String)>>| {
            let state = InstanceState {
                proven,
                ..plain_state(&jobs)
            };
            let instances = BTreeMap::from([("chain_a".to_owned(), state)]);
            check_proven(&frames, &instances, &workers, &index)
                .err()
                .map(|v| (v.invariant.as_str(), v.line))
        };
        let other = BTreeSet::from([(ALICE.to_owned(), KEY_V.to_owned())]);
        assert_eq!(
            judge(Some(&other)),
            Some(("private_to_unproven_pairing", Some(2)))
        );
        assert_eq!(
            judge(Some(&BTreeSet::new())).map(|v| v.0),
            Some("private_to_unproven_pairing")
        );
        let proven = BTreeSet::from([(ALICE.to_owned(), KEY_W.to_owned())]);
        assert_eq!(judge(Some(&proven)), None);
        assert_eq!(judge(None), None);
        // A pairing whose claim's answer was lost may exist (swarm seed
        // 3764): the user's PRIVATE job may go there.
        let state = InstanceState {
            proven: Some(&other),
            unanswered: Some(&proven),
            ..plain_state(&jobs)
        };
        let instances = BTreeMap::from([("chain_a".to_owned(), state)]);
        assert!(check_proven(&frames, &instances, &workers, &index).is_ok());
    }

    /// With retention, where the harness cannot see retention's deletions
    /// (live), a finished job may be gone at the end: its 201 and its
    /// completed poll are then no violation. A job never shown finished is
    /// lost, and without retention any missing job is.
    #[test]
    fn unwitnessed_retention_may_delete_only_jobs_shown_finished() {
        let committed = format!(r#"chain_a < 201 {{"job_id":"{J1}"}}"#);
        let accepted = format!(r#"w <- {{"type":"result_accepted","job_id":"{J1}"}}"#);
        let failed = format!(r#"chain_a < 200 {{"id":"{J1}","status":"failed"}}"#);
        let completed = format!(
            r#"chain_a < 200 {{"id":"{J1}","status":"completed","result":{{"output":"a"}},"receipt":null}}"#
        );
        for ended in [&accepted, &failed, &completed] {
            let lines = [committed.as_str(), ended.as_str()];
            assert_eq!(verdict_with(&lines, &[], &[], false, true), None);
            assert_eq!(
                verdict_with(&lines, &[], &[], false, false),
                Some("acknowledged_job_lost")
            );
        }
        let unseen = verdict_with(&[&committed], &[], &[], false, true);
        assert_eq!(unseen, Some("acknowledged_job_lost"));
    }

    /// Where the harness sees retention's deletions, a job missing at the
    /// end is excused only by a deletion the promise allows: by age more
    /// than its lifetime after it ended (not at it), by size only while its
    /// own ledger was past its mark. A job shown finished but gone with no
    /// deletion noted is lost, as is one deleted by age with no age limit.
    #[test]
    fn witnessed_retention_excuses_only_what_its_promise_allows() {
        let committed = format!(r#"[+0.001s] chain_a < 201 {{"job_id":"{J1}"}}"#);
        let completed = format!(
            r#"[+1.000s] chain_a < 200 {{"id":"{J1}","status":"completed","result":{{"output":"a"}},"receipt":null}}"#
        );
        let promise = KeptPromise {
            lifetime_ms: Some(3_600_000),
            results_mark_bytes: 900,
            failures_mark_bytes: 90,
        };
        let judge = |promise: KeptPromise, at: Option<DeletedAt>| {
            let deleted: BTreeMap<String, DeletedAt> =
                at.map(|at| (J1.to_owned(), at)).into_iter().collect();
            let state = InstanceState {
                kept_promise: Some(promise),
                results_deleted: Some(&deleted),
                ..retained_state()
            };
            let instances = BTreeMap::from([("chain_a".to_owned(), state)]);
            let lines = [committed.clone(), completed.clone()];
            let found = check(
                &lines,
                &[],
                &Default::default(),
                &instances,
                &BTreeMap::new(),
            );
            found.err().map(|v| v.invariant.as_str())
        };
        let at = |age_ms, ledger_bytes_before, result, by_age| {
            Some(DeletedAt {
                age_ms,
                ledger_bytes_before,
                result,
                by_age,
            })
        };
        let lost = Some("acknowledged_job_lost");
        assert_eq!(judge(promise, None), lost);
        assert_eq!(judge(promise, at(3_600_001, 0, true, true)), None);
        assert_eq!(judge(promise, at(3_600_000, 0, true, true)), lost);
        let no_age_limit = KeptPromise {
            lifetime_ms: None,
            ..promise
        };
        assert_eq!(judge(no_age_limit, at(3_600_001, 0, true, true)), lost);
        assert_eq!(judge(promise, at(5, 901, true, false)), None);
        assert_eq!(judge(promise, at(5, 900, true, false)), lost);
        // A failure record: its own ledger's mark.
        assert_eq!(judge(promise, at(5, 91, false, false)), None);
        assert_eq!(judge(promise, at(5, 90, false, false)), lost);
    }

    /// An instance that runs retention, holding no job.
    fn retained_state<'a>() -> InstanceState<'a> {
        InstanceState {
            retention: true,
            ..plain_state(&[])
        }
    }

    /// Where no client can be over its share, a result deleted younger
    /// than the minimum keep time is lost, however long the run went on
    /// after; one deleted older is not, nor one kept, nor a deletion on an
    /// instance whose owners may be over their shares, nor one in a pass
    /// that began with the ledger over the budget (each past the results'
    /// mark, so the deletion itself is one the promise allows).
    #[test]
    fn a_result_deleted_younger_than_its_keep_time_is_lost() {
        let committed = format!(r#"[+0.001s] chain_a < 201 {{"job_id":"{J1}"}}"#);
        let end = "[+600.000s] note end".to_owned();
        let judge = |min_ms: Option<i64>, deleted_after_ms: Option<i64>, ledger_bytes: usize| {
            let at = |age_ms| DeletedAt {
                age_ms,
                ledger_bytes_before: ledger_bytes,
                result: true,
                by_age: false,
            };
            let deleted: BTreeMap<String, DeletedAt> = (deleted_after_ms.map(at))
                .map(|d| (J1.to_owned(), d))
                .into_iter()
                .collect();
            let budget_bytes = 1_000;
            let state = InstanceState {
                kept_promise: Some(KeptPromise {
                    lifetime_ms: None,
                    results_mark_bytes: 900,
                    failures_mark_bytes: 90,
                }),
                results_kept: min_ms.map(|min_ms| ResultsKept {
                    min_ms,
                    budget_bytes,
                }),
                results_deleted: Some(&deleted),
                ..retained_state()
            };
            let instances = BTreeMap::from([("chain_a".to_owned(), state)]);
            let lines = [committed.clone(), end.clone()];
            check(
                &lines,
                &[],
                &Default::default(),
                &instances,
                &BTreeMap::new(),
            )
            .err()
            .map(|v| v.invariant.as_str())
        };
        let keep = Some(120_000);
        assert_eq!(
            judge(keep, Some(119_999), 1_000),
            Some("honest_result_lost")
        );
        assert_eq!(judge(keep, Some(120_000), 1_000), None);
        // Gone with no deletion noted: lost whatever its age.
        assert_eq!(judge(keep, None, 1_000), Some("acknowledged_job_lost"));
        assert_eq!(judge(None, Some(1), 1_000), None);
        // Overfilled by queued jobs that ended: the owner is over its share.
        assert_eq!(judge(keep, Some(1), 1_001), None);
    }

    /// A completed job holding another job's receipt
    /// (correctly signed, of the same output) is `receipt_invalid`; its
    /// own receipt is not.
    #[test]
    fn a_receipt_of_another_job_is_invalid() {
        let key = protocol::signing::Keypair::from_secret_hex(&"11".repeat(32)).expect("key");
        let output = json!({"label": "x"});
        let receipt_of = |id: &str| {
            protocol::receipt::ReceiptBody::new(
                id.parse().expect("uuid"),
                key.public_key_hex(),
                &output,
                "2026-11-21T10:00:00.001Z".into(),
                None,
            )
            .sign(&key)
        };
        let mut done = job(J1, "u", false, None);
        done.status = JobStatus::Completed;
        done.output = Some(output.clone());
        done.receipt = Some(Box::new(receipt_of(J1)));
        assert!(check_store("chain_a", &plain_state(std::slice::from_ref(&done))).is_ok());
        done.receipt = Some(Box::new(receipt_of(J2)));
        let v = check_store("chain_a", &plain_state(std::slice::from_ref(&done)))
            .expect_err("another job's receipt");
        assert_eq!(v.invariant, SafetyKey::ReceiptInvalid);
    }

    /// A completed job whose receipt (correctly signed, of this job and its
    /// output) names another payment, or a payment where the job had none,
    /// or none where it had one, is `receipt_invalid`; a receipt naming the
    /// job's own payment is not.
    #[test]
    fn a_receipt_for_another_payment_is_invalid() {
        let key = protocol::signing::Keypair::from_secret_hex(&"11".repeat(32)).expect("key");
        let output = json!({"label": "x"});
        let judge = |job_ref: Option<&str>, receipt_ref: Option<&str>| {
            let mut done = job(J1, "u", false, job_ref);
            done.status = JobStatus::Completed;
            done.output = Some(output.clone());
            let receipt = protocol::receipt::ReceiptBody::new(
                J1.parse().expect("uuid"),
                key.public_key_hex(),
                &output,
                "2026-11-21T10:00:00.001Z".into(),
                receipt_ref.map(str::to_owned),
            )
            .sign(&key);
            done.receipt = Some(Box::new(receipt));
            check_store("chain_a", &plain_state(std::slice::from_ref(&done)))
                .err()
                .map(|v| v.invariant)
        };
        assert_eq!(judge(Some("x402:a"), Some("x402:a")), None);
        assert_eq!(judge(None, None), None);
        let invalid = Some(SafetyKey::ReceiptInvalid);
        assert_eq!(judge(Some("x402:a"), Some("x402:b")), invalid);
        assert_eq!(judge(None, Some("x402:b")), invalid);
        assert_eq!(judge(Some("x402:a"), None), invalid);
    }
}
