//! The `edges` kind: times at the exact edges of a timeout, not only inside
//! it. At a random point of the timeline every worker of a one-node
//! instance stops, a job is committed that no worker can take, and it is
//! polled at its deadline −1 ms, at it and +1 ms (edge polls, `poll` with
//! `edge_ms`); then the workers start again. The deadline is the pending
//! timeout's, or for a paid job whichever comes first of it and its
//! payment's (`validBefore` less the settle margin, decision 0021; the
//! short payment windows of `settlement_faults` put the payment's first).
//! An unpaid edge and a paid edge are drawn apart. The safety key
//! `expiry_off_edge` judges the answers: pending before, failed
//! (`no_eligible_worker` or `payment_expired`) at and after. A third draw
//! puts a job at the edge of its lease (see [`draw_lease_edge`]).
//!
//! Drawn from the seed's stream 9 (shared with [`super::held_polls`]) at a
//! word position of its own ([`WORD_POS`]), so the held polls keep theirs
//! and a seed without the kind keeps its world exactly.

use super::spec::{Commit, Event, JobFaultSpec, Kind, Timed, WorkerSpec, WorldSpec};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;
use std::ops::Range;

/// The seed's ChaCha stream this kind draws from (the world's is 0).
const STREAM: u64 = 9;
/// Where in the stream: far past any word the held polls use.
const WORD_POS: u128 = 1 << 32;
/// The edges polled, in ms from the pending deadline.
pub const EDGES_MS: [i64; 3] = [-1, 0, 1];
/// The commit's index (its body's `input`), apart from the timeline's.
const INDEX: u32 = 9_000;
/// Where in the stream the paid edge is drawn: past the unpaid one's words.
const PAID_WORD_POS: u128 = (1 << 32) + (1 << 16);
/// The paid commit's index.
const PAID_INDEX: u32 = 9_001;
/// Where in the stream the lease edge is drawn.
const LEASE_WORD_POS: u128 = (1 << 32) + (2 << 16);
/// The lease edge's commit's index.
const LEASE_INDEX: u32 = 9_002;
/// The worker that holds the lease edge's job without answering.
pub use crate::verify::edges::LEASE_WORKER;
/// How long the lease edge's worker is given to connect, ms.
const CONNECT_MS: u64 = 500;

/// Draws the kind for `world` (already drawn): whether it is on, and where
/// its events go in the timeline. The unpaid edge comes first; the paid
/// one is drawn from its own word position ([`PAID_WORD_POS`]), so the
/// unpaid draws stayed as they were when it was added.
pub fn draw(world: &mut WorldSpec) {
    let mut rng = ChaCha20Rng::seed_from_u64(world.seed);
    rng.set_stream(STREAM);
    rng.set_word_pos(WORD_POS);
    let mut unpaid = 0..0;
    if rng.gen_bool(0.25) {
        if let Some(instance) = one_node(world, false).choose(&mut rng).copied() {
            unpaid = insert_edges(world, &mut rng, instance, None, 0..0);
        }
    }
    rng.set_word_pos(PAID_WORD_POS);
    let mut paid = 0..0;
    if rng.gen_bool(0.25) {
        if let Some(instance) = one_node(world, true).choose(&mut rng).copied() {
            paid = insert_edges(world, &mut rng, instance, Some("none"), unpaid.clone());
        }
    }
    rng.set_word_pos(LEASE_WORD_POS);
    if rng.gen_bool(0.25) {
        draw_lease_edge(world, &mut rng, [unpaid, paid]);
    }
}

/// The lease edge: on an unpaid one-node instance whose jobs get one
/// attempt, a worker of its own that accepts every job and never answers
/// ([`LEASE_WORKER`], stopped from the start) is started while every
/// other worker of the instance is stopped; a job is committed, which it
/// takes, and polled at its lease's end −1, 0 and +1 ms: held before,
/// failed `worker_timeout` at and after (`expiry_off_edge`).
fn draw_lease_edge(world: &mut WorldSpec, rng: &mut ChaCha20Rng, within: [Range<usize>; 2]) {
    let single = (world.instances.iter())
        .filter(|i| i.payment.is_none() && i.nodes == 1 && i.attempts_max == 1)
        .map(|i| i.name);
    let Some(instance) = single.collect::<Vec<_>>().choose(rng).copied() else {
        return;
    };
    world.workers.push(WorkerSpec {
        name: LEASE_WORKER.into(),
        instance,
        capabilities: vec![],
        slots: 1,
        latency: "50".into(),
        faults: vec![JobFaultSpec {
            toml: "kind = \"silent\"".into(),
            percent: 100,
        }],
        heartbeat: None,
        key_of: None,
        node: None,
        stream: false,
    });
    let stop = Timed {
        after_ms: 0,
        event: Event::StopWorker(LEASE_WORKER.into()),
    };
    world.events.insert(0, stop);
    let shifted = within.map(|r| r.start + 1..r.end + 1);
    let at = rng.gen_range(1..=world.events.len());
    let at = shifted
        .iter()
        .fold(at, |at, r| match r.contains(&at) && at != r.start {
            true => r.end,
            false => at,
        });
    let block = lease_block(world, rng, instance, at);
    world.events.splice(at..at, block);
    if !world.kinds.has(Kind::Edges) {
        world.kinds.0.push(Kind::Edges);
    }
}

/// The lease edge's events at timeline position `at`.
fn lease_block(
    world: &WorldSpec,
    rng: &mut ChaCha20Rng,
    instance: &'static str,
    at: usize,
) -> Vec<Timed> {
    let others = running_workers(world, instance, at);
    let now = |event| Timed { after_ms: 0, event };
    let mut block = stop_now(&others);
    block.push(now(Event::StartWorker(LEASE_WORKER.into())));
    // Time for it to connect and prove its key before the commit.
    block.push(Timed {
        after_ms: CONNECT_MS,
        event: Event::Commit(public_commit(rng, instance, LEASE_INDEX, None)),
    });
    block.extend(edge_polls(instance));
    block.push(now(Event::StopWorker(LEASE_WORKER.into())));
    block.extend(others.into_iter().map(Event::StartWorker).map(now));
    block
}

/// The one-node instances of `world` with (or without) payments.
fn one_node(world: &WorldSpec, paid: bool) -> Vec<&'static str> {
    let instances = world.instances.iter();
    let fit = instances.filter(|i| i.payment.is_some() == paid && i.nodes == 1);
    fit.map(|i| i.name).collect()
}

/// At a drawn point (never inside the events of `within`) every running
/// worker of `instance` stops, a public commit (paid with `pay`, or
/// unpaid) is made, polled at its deadline −1, 0 and +1 ms, and the
/// workers start again. Returns where the events went.
fn insert_edges(
    world: &mut WorldSpec,
    rng: &mut ChaCha20Rng,
    instance: &'static str,
    pay: Option<&'static str>,
    within: Range<usize>,
) -> Range<usize> {
    if !world.kinds.has(Kind::Edges) {
        world.kinds.0.push(Kind::Edges);
    }
    let mut at = rng.gen_range(0..=world.events.len());
    if within.start < at && at < within.end {
        at = within.end;
    }
    let workers = running_workers(world, instance, at);
    let index = if pay.is_some() { PAID_INDEX } else { INDEX };
    let commit = public_commit(rng, instance, index, pay);
    let now = |event| Timed { after_ms: 0, event };
    let mut inserted = stop_now(&workers);
    inserted.push(now(Event::Commit(commit)));
    inserted.extend(edge_polls(instance));
    inserted.extend(workers.into_iter().map(Event::StartWorker).map(now));
    let end = at + inserted.len();
    world.events.splice(at..at, inserted);
    at..end
}

/// A public commit of job `index` by an honest user (`u0`..`u3`) to node 0
/// of `instance`, paid with `pay` (see [`Commit::pay`]) or unpaid; its
/// tier, type and user drawn from `rng` in that order.
pub(super) fn public_commit(
    rng: &mut ChaCha20Rng,
    instance: &'static str,
    index: u32,
    pay: Option<&'static str>,
) -> Commit {
    Commit {
        instance,
        tier: if rng.gen_bool(0.5) { "fast" } else { "cheap" },
        job_type: if rng.gen_bool(0.5) {
            "LLM_INFER"
        } else {
            "TASK"
        },
        user: format!("u{}", rng.gen_range(0..4)),
        private: false,
        pay,
        index,
        node: 0,
    }
}

/// The edge polls of `instance`'s latest job, at once: each waits for
/// its edge of the job's deadline.
fn edge_polls(instance: &'static str) -> impl Iterator<Item = Timed> {
    EDGES_MS.into_iter().map(move |edge_ms| Timed {
        after_ms: 0,
        event: Event::Poll {
            instance,
            node: 0,
            hold_ms: None,
            edge_ms: Some(edge_ms),
        },
    })
}

/// Events that stop `workers` at once, in their order.
pub(super) fn stop_now(workers: &[String]) -> Vec<Timed> {
    let stop = |name: &String| Timed {
        after_ms: 0,
        event: Event::StopWorker(name.clone()),
    };
    workers.iter().map(stop).collect()
}

/// `instance`'s workers running at timeline position `at` (stopping one
/// twice, or starting one that runs, is not a timeline the loader takes).
pub(super) fn running_workers(world: &WorldSpec, instance: &str, at: usize) -> Vec<String> {
    let mut stopped: Vec<&String> = Vec::new();
    for t in &world.events[..at] {
        match &t.event {
            Event::StopWorker(n) => stopped.push(n),
            Event::StartWorker(n) => stopped.retain(|s| *s != n),
            _ => {}
        }
    }
    world
        .workers
        .iter()
        .filter(|w| w.instance == instance && !stopped.contains(&&w.name))
        .map(|w| w.name.clone())
        .collect()
}
