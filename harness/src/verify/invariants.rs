//! The end-of-run invariants of a simulated run: safety always (what
//! clients and workers saw agrees with what the instances hold, and each
//! core's own invariants), liveness when the scenario asks for it.

use super::{connections, safety, stalls, sybils, Broken};
use crate::spec::Scenario;
use crate::world::{Driver, World};
use protocol::api::JobStatus;
use std::collections::{BTreeMap, BTreeSet};

/// A broken end-of-run invariant: which one, and what broke.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub broken: Broken,
    pub message: String,
}

impl Failure {
    /// A check without a key of its own (`invariants`).
    pub fn other(message: impl Into<String>) -> Self {
        Self {
            broken: Broken::Invariants,
            message: message.into(),
        }
    }
}

/// Safety (always, `safety`): what clients and workers saw agrees with what
/// the instances hold. Liveness (when asked): all jobs terminal / completed,
/// exact counts.
pub fn check(scenario: &Scenario, world: &World) -> Result<(), Failure> {
    for (name, want) in &scenario.invariants.stub_calls {
        let got = world
            .stubs
            .get(name)
            .ok_or_else(|| Failure::other(format!("stub_calls: no stub {name:?}")))?
            .calls()
            .len();
        if got != *want {
            return Err(Failure::other(format!(
                "stub {name} got {got} calls, expected {want}"
            )));
        }
    }
    let mut snapshots = BTreeMap::new();
    for (name, instance) in &world.instances {
        // A live instance's state is in another process; live runs check expectations only.
        let Driver::Sim(sim) = &instance.driver else {
            continue;
        };
        if let Some(snapshot) = world.cluster_snapshot(name) {
            // Several nodes: what every running node holds is checked, and
            // the shared store holds every job whoever owns it.
            for node in world.nodes(name) {
                node.check_core().map_err(Failure::other)?;
            }
            snapshots.insert(name.clone(), snapshot);
            continue;
        }
        let Some(store) = sim.store() else {
            return Err(Failure::other(format!(
                "{name} is not running at the end of the run"
            )));
        };
        sim.check_core().map_err(Failure::other)?;
        let snapshot =
            coordinator::store::Store::load(&*store).map_err(|e| Failure::other(e.to_string()))?;
        snapshots.insert(name.clone(), snapshot);
    }
    check_safety(scenario, world, &snapshots)?;
    for (name, snapshot) in &snapshots {
        let mut counts = BTreeMap::<JobStatus, usize>::new();
        for job in &snapshot.jobs {
            *counts.entry(job.status).or_default() += 1;
            check_job(scenario, name, job)?;
        }
        if let Some(want) = scenario.invariants.job_counts.get(name) {
            let (got, want) = (by_name(&counts), by_name(want));
            if got != want {
                return Err(Failure::other(format!(
                    "{name}: job counts {got:?}, expected {want:?}"
                )));
            }
        }
        world.transcript.log(
            "harness",
            format!(
                "{name} jobs {}",
                serde_json::to_string(&by_name(&counts)).unwrap_or_default()
            ),
        );
    }
    Ok(())
}

/// The safety properties of `crate::verify::safety` over the transcript and stores.
fn check_safety(
    scenario: &Scenario,
    world: &World,
    snapshots: &BTreeMap<String, coordinator::store::Snapshot>,
) -> Result<(), Failure> {
    if snapshots.is_empty() {
        return Ok(());
    }
    let proven = world.users.proven();
    let unanswered = world.users.unanswered();
    let no_proofs = BTreeSet::new();
    let settled = from_ledgers(world, |l| l.counts());
    let values = from_ledgers(world, |l| l.values());
    let deleted = results_deleted();
    let refused = from_ledgers(world, |l| l.refused_only());
    let unlearnable = from_ledgers(world, |l| l.unlearnable());
    let instances = snapshots
        .iter()
        .map(|(name, s)| {
            let spec = scenario.instances.get(name);
            let state = safety::InstanceState {
                jobs: &s.jobs,
                trust: &s.trust,
                paid: spec.is_some_and(|i| i.payment.is_some()),
                retention: spec.is_some_and(|i| i.retention_hours.is_some()),
                kept_promise: spec.and_then(kept_promise),
                results_kept: spec.and_then(results_kept),
                results_deleted: Some(&deleted),
                proven: spec
                    .filter(|i| i.user_auth == crate::spec::UserAuthSpec::On)
                    .map(|_| proven.get(name).unwrap_or(&no_proofs)),
                unanswered: unanswered.get(name),
                settled: settled.get(name),
                unlearnable: unlearnable.get(name),
                one_node: world.nodes(name).len() == 1,
                charged: values.get(name).map(|values| super::prices::Charged {
                    values,
                    prices: listed_prices(spec),
                }),
                end_bound: end_bound(world, name, scenario.buggify),
                held_polls: world.held_polls.of(name),
                refused_payments: refused.get(name),
                cluster_held_caps: cluster_held_caps(world, name, scenario.buggify),
            };
            (name.clone(), state)
        })
        .collect();
    let workers = worker_views(world);
    let frames = world.frames.all().unwrap_or_default();
    let checked = world.transcript.with_lines(|lines| {
        safety::check(lines, &frames, &world.streams, &instances, &workers)
            .and_then(|()| check_stalls(scenario, world, lines))
            .and_then(|()| check_private_admission(scenario, world, snapshots))
            .and_then(|()| check_connections(scenario, world, lines))
            .and_then(|()| check_sybils(scenario, world, lines))
            .and_then(|()| check_resources(world, lines))
            .and_then(|()| check_nodes(scenario, world, lines))
            .and_then(|()| check_pairing(scenario, world, snapshots, lines))
            .and_then(|()| check_requests(world, snapshots))
    });
    checked.map_err(|v| Failure {
        broken: Broken::Safety(v.invariant),
        message: v.to_string(),
    })
}

/// The answers to requests steps sent on purpose, each kind by its keys:
/// malformed ones (`crate::verify::bad_input`), then paid commits
/// (decision 0008, [`check_paid_retries`]).
fn check_requests(
    world: &World,
    snapshots: &BTreeMap<String, coordinator::store::Snapshot>,
) -> Result<(), safety::Violation> {
    let jobs = snapshots.iter().map(|(n, s)| (n.as_str(), &s.jobs[..]));
    super::bad_input::check(world.malformed.all(), jobs)?;
    check_paid_retries(world, snapshots)
}

/// Decision 0008 over the paid commits steps sent
/// (`crate::verify::paid_retries`), against what each instance holds at the
/// end.
fn check_paid_retries(
    world: &World,
    snapshots: &BTreeMap<String, coordinator::store::Snapshot>,
) -> Result<(), safety::Violation> {
    let held = (snapshots.iter())
        .map(|(name, s)| {
            let held = super::paid_retries::Held {
                jobs: s.jobs.iter().map(|j| j.id.to_string()).collect(),
                one_node: world.nodes(name).len() == 1,
            };
            (name.clone(), held)
        })
        .collect();
    super::paid_retries::check(world.paid_commits.all(), &held)
}

/// Each worker's instance and key, as the safety keys see them.
fn worker_views(world: &World) -> BTreeMap<String, safety::WorkerView<'_>> {
    let mut views = BTreeMap::new();
    for (name, w) in &world.workers {
        let view = safety::WorkerView {
            instance: &w.instance,
            public_key: &w.public_key,
        };
        views.insert(name.clone(), view);
    }
    views
}

/// The prices an instance lists: the configuration the world built it
/// with (`world::coordinator_config`: the defaults with the scenario's).
fn listed_prices(spec: Option<&crate::spec::Instance>) -> coordinator::config::PriceTable {
    spec.map_or_else(coordinator::config::PriceTable::default, |spec| {
        crate::world::coordinator_config(spec).prices
    })
}

/// `expiry_off_edge` of pairing codes (`crate::verify::code_edges`), then
/// `rate_limit_exceeded` (`crate::verify::rate_limits`) on the simulated
/// one-node instances, with the limits their configuration holds; then
/// [`check_identity`] and [`check_durable_pairing`].
fn check_pairing(
    scenario: &Scenario,
    world: &World,
    snapshots: &BTreeMap<String, coordinator::store::Snapshot>,
    lines: &[String],
) -> Result<(), safety::Violation> {
    let limits = (scenario.instances.iter())
        .filter(|(name, spec)| snapshots.contains_key(*name) && spec.nodes <= 1)
        .map(|(name, spec)| {
            let l = crate::world::coordinator_config(spec).limits;
            let limits = super::rate_limits::RateLimits {
                creates_per_client: l.pairing_creates_per_client_per_minute_max,
                creates_per_user: l.pairing_creates_per_user_per_minute_max,
                claim_failures_per_client: l.claim_failures_per_client_per_minute_max,
                users_as_sent: spec.user_auth != crate::spec::UserAuthSpec::On,
            };
            (name.clone(), limits)
        })
        .collect();
    super::code_edges::check(lines, world.transcript.epoch_ms())?;
    super::rate_limits::check(lines, world.transcript.epoch_ms(), &limits)?;
    check_identity(scenario, world, snapshots)?;
    check_durable_pairing(scenario, world, snapshots, lines)
}

/// `trust_list_not_durable` (`crate::verify::trust_lists`) on the one-node
/// simulated instances on SQLite, then `retry_after_refused`
/// (`crate::verify::retry_afters`) on the one-node simulated instances.
fn check_durable_pairing(
    scenario: &Scenario,
    world: &World,
    snapshots: &BTreeMap<String, coordinator::store::Snapshot>,
    lines: &[String],
) -> Result<(), safety::Violation> {
    let single = |name: &String, spec: &crate::spec::Instance| {
        snapshots.contains_key(name) && spec.nodes <= 1
    };
    let kept: BTreeSet<String> = (scenario.instances.iter())
        .filter(|(name, spec)| single(name, spec) && spec.store == crate::spec::StoreKind::Sqlite)
        .map(|(name, _)| name.clone())
        .collect();
    super::trust_lists::check(&world.trust.all(), lines, &kept)?;
    let judged: BTreeSet<String> = (scenario.instances.iter())
        .filter(|(name, spec)| single(name, spec))
        .map(|(name, _)| name.clone())
        .collect();
    super::retry_afters::check(lines, &judged)
}

/// `proof_accepted_twice` (`crate::verify::proof_replays`) on the simulated
/// instances with user auth on, then `pairing_code_lost`
/// (`crate::verify::codes_kept`) on the one-node simulated instances on
/// SQLite (plain memory keeps nothing across a restart).
fn check_identity(
    scenario: &Scenario,
    world: &World,
    snapshots: &BTreeMap<String, coordinator::store::Snapshot>,
) -> Result<(), safety::Violation> {
    let simulated = |name: &String| snapshots.contains_key(name);
    let proven: BTreeSet<String> = (scenario.instances.iter())
        .filter(|(name, spec)| simulated(name) && spec.user_auth == crate::spec::UserAuthSpec::On)
        .map(|(name, _)| name.clone())
        .collect();
    super::proof_replays::check(&world.proofs.all(), &proven)?;
    let kept: BTreeSet<String> = (scenario.instances.iter())
        .filter(|(name, spec)| {
            simulated(name) && spec.nodes <= 1 && spec.store == crate::spec::StoreKind::Sqlite
        })
        .map(|(name, _)| name.clone())
        .collect();
    let (created, claims) = world.codes.all();
    super::codes_kept::check(&created, &claims, &kept)
}

/// What several-node worlds keep: `node_acted_unowned`, then
/// `node_fenced_early`.
fn check_nodes(
    scenario: &Scenario,
    world: &World,
    lines: &[String],
) -> Result<(), safety::Violation> {
    check_ownership(world).and_then(|()| check_fences(scenario, lines))
}

/// `node_fenced_early` (`crate::verify::fences`) on every several-node
/// instance, with its node lease and whether renewals may come late (fault
/// points on).
fn check_fences(scenario: &Scenario, lines: &[String]) -> Result<(), safety::Violation> {
    let leases = (scenario.instances.iter())
        .filter(|(_, spec)| spec.is_cluster())
        .map(|(name, spec)| {
            let lease = super::fences::NodeLease {
                lease_ms: (spec.node_lease_ms).unwrap_or(coordinator::node::NODE_LEASE_MS),
                late: scenario.buggify,
            };
            (name.clone(), lease)
        })
        .collect();
    super::fences::check(lines, &leases)
}

/// `node_acted_unowned` (`crate::verify::ownership`), over what the
/// coordinator noted in this thread's watched world; a record cut at its
/// bound is judged up to the cut.
fn check_ownership(world: &World) -> Result<(), safety::Violation> {
    let facts = coordinator::buggify::ownership();
    super::ownership::check(&facts, world.transcript.epoch_ms())
}

/// `resource_bound_exceeded` and `honest_starved` (`crate::verify::resources`),
/// over what the coordinator noted in this thread's watched world.
fn check_resources(world: &World, lines: &[String]) -> Result<(), safety::Violation> {
    let exceeded = coordinator::resources::exceeded();
    let refusals = coordinator::resources::refusals();
    let epoch_ms = world.transcript.epoch_ms();
    super::resources::check(lines, epoch_ms, &exceeded, &refusals)
}

/// What each simulated paid instance's settlement ledger says
/// (`world::settlements`), by instance.
fn from_ledgers<T>(
    world: &World,
    read: impl Fn(&crate::world::settlements::SettleLedger) -> T,
) -> BTreeMap<&String, T> {
    (world.instances.iter())
        .filter_map(|(name, i)| Some((name, read(i.settlements.as_ref()?))))
        .collect()
}

/// The worker sessions the coordinator noted in this thread's simulated
/// world, their times on the transcript's clock (`+0.000s` is 0).
fn sessions_since_epoch(world: &World) -> Vec<coordinator::buggify::SessionSpan> {
    let epoch_ms = world.transcript.epoch_ms();
    coordinator::buggify::sessions()
        .into_iter()
        .map(|mut s| {
            since_epoch(epoch_ms, &mut s.opened_ms, &mut s.closed_ms);
            s
        })
        .collect()
}

/// Moves a span's times from the coordinator's clock to the transcript's.
fn since_epoch(epoch_ms: i64, opened_ms: &mut i64, closed_ms: &mut Option<i64>) {
    *opened_ms -= epoch_ms;
    *closed_ms = closed_ms.map(|c| c - epoch_ms);
}

/// `private_commit_unproven` (`crate::verify::private_admission`) on the
/// instances with user auth on and no payments, and `private_admitted_offline`
/// on the one-node instances, over the sessions the coordinator noted in
/// this thread's simulated world (on its own clock, as the stores are).
fn check_private_admission(
    scenario: &Scenario,
    world: &World,
    snapshots: &BTreeMap<String, coordinator::store::Snapshot>,
) -> Result<(), safety::Violation> {
    for (name, s) in snapshots {
        let proofs_only = scenario
            .instances
            .get(name)
            .is_some_and(|i| i.user_auth == crate::spec::UserAuthSpec::On && i.payment.is_none());
        if proofs_only {
            let admitted = super::private_admission::Admitted {
                instance: name,
                jobs: &s.jobs,
                trust: &s.trust,
            };
            let proven = world.users.proven_commits(name);
            super::private_admission::check_proven(&admitted, &proven)?;
        }
    }
    let sessions = coordinator::buggify::sessions();
    // Past the witness's bound later sessions are not noted.
    if sessions.len() >= coordinator::buggify::SESSIONS_MAX {
        return Ok(());
    }
    let mut capable: BTreeMap<String, BTreeSet<protocol::api::JobType>> = BTreeMap::new();
    for w in world.workers.values() {
        let types = capable
            .entry(w.public_key.to_ascii_lowercase())
            .or_default();
        types.extend(w.config.capabilities.iter().copied());
    }
    let one_node = snapshots
        .iter()
        .filter(|(name, _)| world.nodes(name).len() == 1);
    for (name, s) in one_node {
        let admitted = super::private_admission::Admitted {
            instance: name,
            jobs: &s.jobs,
            trust: &s.trust,
        };
        super::private_admission::check(&admitted, &sessions, &capable)?;
    }
    Ok(())
}

/// `stalled_session_kept` and `reading_session_closed`
/// (`crate::verify::stalls`), over the sessions the coordinator noted in
/// this thread's simulated world.
fn check_stalls(
    scenario: &Scenario,
    world: &World,
    lines: &[String],
) -> Result<(), safety::Violation> {
    let sessions = sessions_since_epoch(world);
    let default_ms = coordinator::config::Timing::default().heartbeat_timeout_ms;
    let workers = (world.workers.iter())
        .filter_map(|(name, w)| {
            let spec = scenario.instances.get(&w.instance)?;
            let key = &w.public_key;
            let shared = (world.workers.values())
                .filter(|o| o.public_key == *key)
                .count()
                > 1;
            let frozen = stalls::Frozen {
                public_key: key,
                heartbeat_timeout_ms: spec.timing.heartbeat_timeout_ms.unwrap_or(default_ms) as i64,
                judged: !shared && spec.nodes <= 1,
            };
            Some((name.clone(), frozen))
        })
        .collect();
    stalls::check(lines, &sessions, &workers)
        .and_then(|()| stalls::check_reading(lines, &sessions, &workers))
}

/// `unfinished_head_kept` and `connections_over_cap`
/// (`crate::verify::connections`), over the plain connections the bounded
/// instances' accept loops admitted in this thread's simulated world.
fn check_connections(
    scenario: &Scenario,
    world: &World,
    lines: &[String],
) -> Result<(), safety::Violation> {
    let epoch_ms = world.transcript.epoch_ms();
    let spans: Vec<_> = coordinator::buggify::connections()
        .into_iter()
        .map(|mut s| {
            since_epoch(epoch_ms, &mut s.opened_ms, &mut s.closed_ms);
            s
        })
        .collect();
    if spans.is_empty() {
        return Ok(());
    }
    let mut served = BTreeMap::new();
    for (name, spec) in scenario.instances.iter().filter(|(_, i)| i.http_bounds) {
        let config = crate::world::coordinator_config(spec);
        for addr in world.served_addrs(name) {
            let bounds = connections::Served {
                instance: name.clone(),
                head_timeout_ms: config.timing.http_head_timeout_ms as i64,
                per_client_max: config.limits.http_connections_per_client_max,
            };
            served.insert(addr, bounds);
        }
    }
    let slow: BTreeSet<String> = (scenario.steps.iter())
        .filter_map(|s| match &s.action {
            crate::spec::Action::SlowHeads(h) => world.client_key(&h.client),
            _ => None,
        })
        .collect();
    let end_ms = lines.last().map_or(0, |l| safety::line_ms(l));
    connections::check(&spans, &served, &slow, end_ms)
}

/// `sessions_over_cap` (`crate::verify::sybils`), over the sessions the
/// coordinator noted, for the workers that dial from a named client and
/// share their key with no other worker.
fn check_sybils(
    scenario: &Scenario,
    world: &World,
    lines: &[String],
) -> Result<(), safety::Violation> {
    let dialled: Vec<sybils::Dialled> = (world.workers.values())
        .filter(|w| {
            let shared = (world.workers.values())
                .filter(|o| o.public_key == w.public_key)
                .count();
            shared == 1
        })
        .filter_map(|w| {
            Some(sybils::Dialled {
                public_key: &w.public_key,
                client: w.client.as_deref()?,
                instance: &w.instance,
                slots: w.config.slots,
            })
        })
        .collect();
    if dialled.is_empty() {
        return Ok(());
    }
    let sessions = sessions_since_epoch(world);
    let caps = (scenario.instances.iter())
        .filter(|(_, i)| i.nodes <= 1)
        .map(|(name, spec)| {
            let limits = crate::world::coordinator_config(spec).limits;
            let caps = sybils::Caps {
                sessions: limits.worker_sessions_per_client_max,
                slots: limits.worker_slots_per_client_max,
            };
            (name.clone(), caps)
        })
        .collect();
    sybils::check(lines, &sessions, &dialled, &caps)
}

/// The held-poll bounds of a simulated instance of several nodes (each
/// node's; they share one config), where the run's fault points are off.
fn cluster_held_caps(world: &World, name: &str, buggify: bool) -> Option<(usize, usize)> {
    let nodes = world.nodes(name);
    let first = nodes.first().filter(|_| nodes.len() > 1 && !buggify)?;
    let limits = first.limits();
    Some((limits.held_polls_max, limits.held_polls_per_client_max))
}

/// `job_end_overdue`'s bound for a simulated instance of one node.
fn end_bound(world: &World, name: &str, buggify: bool) -> Option<crate::verify::overdue::EndBound> {
    let [node] = &world.nodes(name)[..] else {
        return None;
    };
    let epoch_ms = world.transcript.epoch_ms();
    Some(crate::verify::overdue::EndBound {
        timing: node.timing().clone(),
        epoch_ms,
        end_ms: epoch_ms + world.transcript.elapsed_ms(),
        timers_exact: !buggify,
        held_caps: (
            node.limits().held_polls_max,
            node.limits().held_polls_per_client_max,
        ),
    })
}

/// Counts keyed by status name, in name order, without zero counts (a
/// scenario may list a status with 0 or leave it out).
fn by_name(counts: &BTreeMap<JobStatus, usize>) -> BTreeMap<&'static str, usize> {
    counts
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(status, n)| (status.as_str(), *n))
        .collect()
}

/// The per-job liveness invariants of instance `name`.
fn check_job(scenario: &Scenario, name: &str, job: &coordinator::core::Job) -> Result<(), Failure> {
    let error = job
        .error
        .map_or(String::new(), |e| format!(" (result.error {})", e.as_str()));
    if scenario.invariants.all_jobs_terminal && !job.status.is_terminal() {
        return Err(Failure {
            broken: Broken::AllJobsTerminal,
            message: format!(
                "{name}: job {} is still {} after {} attempt(s){error}",
                job.id, job.status, job.attempts
            ),
        });
    }
    if scenario.invariants.all_jobs_completed && job.status != JobStatus::Completed {
        return Err(Failure::other(format!(
            "{name}: job {} is {}, not completed, after {} attempt(s){error}",
            job.id, job.status, job.attempts
        )));
    }
    Ok(())
}

/// The transcript lines that mention the first job id in `message`, for an
/// invariant failure: the job's history as the run saw it.
pub fn job_history(message: &str, transcript: &[String]) -> Vec<String> {
    const HISTORY_LINES_MAX: usize = 12;
    let Some(id) = message
        .split(|c: char| !(c.is_ascii_hexdigit() || c == '-'))
        .find(|w| w.len() == 36 && uuid::Uuid::parse_str(w).is_ok())
    else {
        return Vec::new();
    };
    let lines: Vec<String> = transcript
        .iter()
        .filter(|l| l.contains(id))
        .map(|l| l.chars().take(240).collect())
        .collect();
    let skip = lines.len().saturating_sub(HISTORY_LINES_MAX);
    lines.into_iter().skip(skip).collect()
}

/// What retention promises an instance that runs it (its lifetime and the
/// ledgers' marks): `safety::KeptPromise`.
fn kept_promise(spec: &crate::spec::scenario::Instance) -> Option<safety::KeptPromise> {
    let hours = spec.retention_hours?;
    let defaults = coordinator::config::Limits::default();
    let mark = |max| coordinator::core::percent_of(max, coordinator::core::KEPT_HIGH_WATER_PERCENT);
    let kept_max = spec
        .limits
        .kept_bytes_max
        .unwrap_or(defaults.kept_bytes_max);
    Some(safety::KeptPromise {
        lifetime_ms: (hours > 0).then(|| i64::try_from(hours * 3_600_000).unwrap_or(i64::MAX)),
        results_mark_bytes: mark(kept_max),
        failures_mark_bytes: mark(defaults.failed_kept_bytes_max),
    })
}

/// The minimum keep time and the budget of an instance's results when it
/// runs retention and a client's share is the whole budget (100 %): see
/// `safety::InstanceState::results_kept`.
fn results_kept(spec: &crate::spec::scenario::Instance) -> Option<safety::ResultsKept> {
    let share = spec.limits.kept_share_per_client_percent?;
    let defaults = coordinator::config::Limits::default();
    (spec.retention_hours.is_some() && share >= 100).then(|| safety::ResultsKept {
        min_ms: defaults.kept_min_ms,
        budget_bytes: spec
            .limits
            .kept_bytes_max
            .unwrap_or(defaults.kept_bytes_max),
    })
}

/// The results retention deleted in this thread's simulated world, by job
/// id: how long after its completion, and from how full a ledger.
fn results_deleted() -> BTreeMap<String, safety::DeletedAt> {
    coordinator::buggify::deleted_results()
        .into_iter()
        .map(|d| {
            let at = safety::DeletedAt {
                age_ms: d.deleted_ms - d.completed_ms,
                ledger_bytes_before: d.ledger_bytes_before,
                result: d.result,
                by_age: d.by_age,
            };
            (d.id.to_string(), at)
        })
        .collect()
}
