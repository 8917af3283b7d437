//! Drawing a swarm world from a seed: the enabled kinds first, then each
//! part of the world from the seed's ChaCha stream in a fixed order. A new
//! kind draws from a stream of its own (or after every other draw), never
//! in the middle of an existing stream: every seed keeps the world it drew.

use super::spec::*;
use crate::spec::names::INSTANCE_NAMES;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

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
            user_auth: false,
        };
        draw_own_streams(&mut world);
        world
    }
}

/// The kinds drawn after the main stream's world, each from a stream of
/// its own, in this order. The order is not the streams' numbering, and it
/// is part of every seed's world: a kind reads, and appends to, the world
/// the kinds above it drew, so moving one can change the world of any seed
/// that has both.
fn draw_own_streams(world: &mut WorldSpec) {
    super::nodes::draw(world);
    draw_caches(world);
    draw_retention(world);
    super::attacks::draw(world);
    super::cancels::draw(world);
    super::settlement::draw(world);
    super::streams::draw(world);
    super::buggify::draw(world);
    super::pairings::draw(world);
    super::floods::draw(world);
    super::stalls::draw(world);
    super::held_polls::draw(world);
    super::edges::draw(world);
    super::slow_heads::draw(world);
    super::sybils::draw(world);
    super::lease_stalls::draw(world);
    super::share_floods::draw(world);
    super::deadlines::draw(world);
    super::poll_hoards::draw(world);
    super::garbage::draw(world);
    super::overclaims::draw(world);
    super::other_receipts::draw(world);
    super::lease_thaws::draw(world);
    super::idle_cuts::draw(world);
    // Streams across a retry: stream 25.
    super::stream_retries::draw(world);
    // Answers with another payment's receipt or at a lease's end: streams 26
    // and 27.
    super::other_payments::draw(world);
    super::lease_answers::draw(world);
    // Receipts of another key, streams that are not the output, payments
    // spent elsewhere or replayed in a store cut: streams 28, 29 and 30.
    super::foreign_keys::draw(world);
    super::differing_streams::draw(world);
    super::front_runs::draw(world);
    // Paid impostors, claims at a code's expiry, pairing floods: streams 31
    // to 33.
    super::paid_impostors::draw(world);
    super::code_edges::draw(world);
    super::pairing_floods::draw(world);
    // Pairing codes created at once, claimed after a restart: stream 35.
    super::code_batches::draw(world);
    // Held polls across a paid job's result, short store cuts of a node:
    // streams 38 and 39.
    super::result_polls::draw(world);
    super::store_blips::draw(world);
    // Paid commits retried, or reused for another prompt: streams 36 and 37.
    super::paid_retries::draw(world);
    super::reused_payments::draw(world);
    // Polls of a job another node holds, slot caps per address, reads
    // resumed after a restart: streams 42 to 44.
    super::remote_polls::draw(world);
    super::slot_caps::draw(world);
    super::restart_reads::draw(world);
    // Identity at its edges (proof windows, trust lists across a restart,
    // Retry-After): streams 34, 40 and 41.
    super::proof_edges::draw(world);
    super::trust_restarts::draw(world);
    super::retry_afters::draw(world);
    // The inclusive ends of documented ranges: stream 47.
    super::range_edges::draw(world);
    // Receipts that name no payment: stream 46.
    super::other_payments::draw_unbound(world);
    // PRIVATE commits with no proof at all: stream 48.
    super::attacks::draw_unproven(world);
    // Last: it lives past the timeline the others drew.
    super::long_retention::draw(world);
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
                kept_share_percent: None,
                payment_window_s: None,
                http_bounds: None,
                sybils: None,
                queued_bytes: None,
                held_polls: None,
                retention_hours: None,
                pairing_code_ttl_ms: None,
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
                stream: false,
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
                intercept: None,
                overclaim: None,
                overclaim_restart: false,
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
