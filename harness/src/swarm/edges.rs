//! The `edges` kind (issue 33, item 2): times at the exact edges of a
//! timeout, not only inside it. At a random point of the timeline every
//! worker of a one-node instance stops, a job is committed that no worker
//! can take, and it is polled at its deadline −1 ms, at it and +1 ms (edge
//! polls, `poll` with `edge_ms`); then the workers start again. The
//! deadline is the pending timeout's, or for a paid job whichever comes
//! first of it and its payment's (`validBefore` less the settle margin,
//! decision 0021; the short payment windows of `settlement_faults` put the
//! payment's first). An unpaid edge and a paid edge are drawn apart. The
//! safety key `expiry_off_edge` judges the answers: pending before, failed
//! (`no_eligible_worker` or `payment_expired`) at and after.
//!
//! Drawn from the seed's stream 9 (shared with [`super::held_polls`]) at a
//! word position of its own ([`WORD_POS`]), so the held polls keep theirs
//! and a seed without the kind keeps its world exactly.

use super::spec::{Commit, Event, Kind, Timed, WorldSpec};
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
    if rng.gen_bool(0.25) {
        if let Some(instance) = one_node(world, true).choose(&mut rng).copied() {
            insert_edges(world, &mut rng, instance, Some("none"), unpaid);
        }
    }
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
    let commit = Commit {
        pay,
        ..unpaid_commit(rng, instance, index)
    };
    let now = |event| Timed { after_ms: 0, event };
    let mut inserted: Vec<Timed> = workers
        .iter()
        .cloned()
        .map(Event::StopWorker)
        .map(now)
        .collect();
    inserted.push(now(Event::Commit(commit)));
    for edge_ms in EDGES_MS {
        inserted.push(now(Event::Poll {
            instance,
            node: 0,
            hold_ms: None,
            edge_ms: Some(edge_ms),
        }));
    }
    inserted.extend(workers.into_iter().map(Event::StartWorker).map(now));
    let end = at + inserted.len();
    world.events.splice(at..at, inserted);
    at..end
}

/// An unpaid public commit of job `index` to node 0 of `instance`, its
/// tier, type and user drawn from `rng` in that order.
pub(super) fn unpaid_commit(rng: &mut ChaCha20Rng, instance: &'static str, index: u32) -> Commit {
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
        pay: None,
        index,
        node: 0,
    }
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
