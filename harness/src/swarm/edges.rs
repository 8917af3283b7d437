//! The `edges` kind (issue 33, item 2): times at the exact edges of a
//! timeout, not only inside it. At a random point of the timeline every
//! worker of an unpaid one-node instance stops, a job is committed that no
//! worker can take, and it is polled at its pending deadline −1 ms, at it
//! and +1 ms (edge polls, `poll` with `edge_ms`); then the workers start
//! again. The safety key `expiry_off_edge` judges the answers: pending
//! before, failed at and after.
//!
//! Drawn from the seed's stream 9 (shared with [`super::held_polls`]) at a
//! word position of its own ([`WORD_POS`]), so the held polls keep theirs
//! and a seed without the kind keeps its world exactly.

use super::spec::{Commit, Event, Kind, Timed, WorldSpec};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// The seed's ChaCha stream this kind draws from (the world's is 0).
const STREAM: u64 = 9;
/// Where in the stream: far past any word the held polls use.
const WORD_POS: u128 = 1 << 32;
/// The edges polled, in ms from the pending deadline.
pub const EDGES_MS: [i64; 3] = [-1, 0, 1];
/// The commit's index (its body's `input`), apart from the timeline's.
const INDEX: u32 = 9_000;

/// Draws the kind for `world` (already drawn): whether it is on, and where
/// its events go in the timeline.
pub fn draw(world: &mut WorldSpec) {
    let mut rng = ChaCha20Rng::seed_from_u64(world.seed);
    rng.set_stream(STREAM);
    rng.set_word_pos(WORD_POS);
    if !rng.gen_bool(0.25) {
        return;
    }
    let unpaid: Vec<&'static str> = world
        .instances
        .iter()
        .filter(|i| i.payment.is_none() && i.nodes == 1)
        .map(|i| i.name)
        .collect();
    let Some(&instance) = unpaid.choose(&mut rng) else {
        return;
    };
    world.kinds.0.push(Kind::Edges);
    let at = rng.gen_range(0..=world.events.len());
    let workers = running_workers(world, instance, at);
    let now = |event| Timed { after_ms: 0, event };
    let mut inserted: Vec<Timed> = workers
        .iter()
        .cloned()
        .map(Event::StopWorker)
        .map(now)
        .collect();
    inserted.push(now(Event::Commit(unpaid_commit(&mut rng, instance, INDEX))));
    for edge_ms in EDGES_MS {
        inserted.push(now(Event::Poll {
            instance,
            node: 0,
            hold_ms: None,
            edge_ms: Some(edge_ms),
        }));
    }
    inserted.extend(workers.into_iter().map(Event::StartWorker).map(now));
    world.events.splice(at..at, inserted);
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
