//! The `poll_deadlines` kind (times at the exact edges of every timeout): a
//! long poll (`GET /v1/jobs/{id}?wait_ms=N`) of a job that cannot change
//! while it is held, so it must be answered exactly at its deadline, not a
//! millisecond later. At a random point of the timeline every worker of an
//! unpaid one-node instance stops, a job is committed that no worker can
//! take, and it is polled with a wait shorter than its pending timeout (it
//! stays `pending` throughout); the workers start again once the wait is
//! over. The safety key `poll_not_woken` judges the answer: held longer
//! than its `wait_ms` is late.
//!
//! Drawn from the seed's stream 17, after every other kind, so a seed
//! without it keeps its world exactly.

use super::edges::{public_commit, running_workers};
use super::held_polls::WAIT_MS_MAX;
use super::spec::{Event, Kind, Timed, WorldSpec};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// The seed's ChaCha stream this kind draws from (the world's is 0).
const STREAM: u64 = 17;
/// The commit's index (its body's `input`), apart from the timeline's and
/// the `edges` kind's.
const INDEX: u32 = 9_100;

/// Draws the kind for `world` (already drawn): whether it is on, and where
/// its events go in the timeline.
pub fn draw(world: &mut WorldSpec) {
    let mut rng = ChaCha20Rng::seed_from_u64(world.seed);
    rng.set_stream(STREAM);
    if !rng.gen_bool(0.25) {
        return;
    }
    let unpaid: Vec<(&'static str, u64)> = world
        .instances
        .iter()
        .filter(|i| i.payment.is_none() && i.nodes == 1)
        .map(|i| (i.name, i.pending_timeout_ms))
        .collect();
    let Some(&(instance, pending_timeout_ms)) = unpaid.choose(&mut rng) else {
        return;
    };
    world.kinds.0.push(Kind::PollDeadlines);
    let at = outside_edge_polls(world, rng.gen_range(0..=world.events.len()));
    let workers = running_workers(world, instance, at);
    // Shorter than the pending timeout (the job is still pending at the
    // poll's deadline) and than the longest wait; an odd number of ms, so
    // the deadline rarely meets a timer of the coordinator's.
    let wait_ms = rng.gen_range(1..pending_timeout_ms.min(WAIT_MS_MAX)) | 1;
    let now = |event| Timed { after_ms: 0, event };
    let mut inserted = super::edges::stop_now(&workers);
    inserted.push(now(Event::Commit(public_commit(
        &mut rng, instance, INDEX, None,
    ))));
    inserted.push(now(Event::Poll {
        instance,
        node: 0,
        hold_ms: Some(wait_ms),
        edge_ms: None,
    }));
    // The workers come back, and the timeline goes on, once the poll's
    // deadline has passed.
    let back = inserted.len();
    inserted.extend(workers.into_iter().map(Event::StartWorker).map(now));
    let next = at + back;
    world.events.splice(at..at, inserted);
    if let Some(t) = world.events.get_mut(next) {
        t.after_ms += wait_ms + 1;
    }
}

/// `at`, or the place right after the `edges` kind's polls if `at` falls
/// between them or between them and their commit: they must follow that
/// commit at once, while no worker runs (`super::edges`).
pub(super) fn outside_edge_polls(world: &WorldSpec, at: usize) -> usize {
    let is_edge = |t: &Timed| {
        matches!(
            t.event,
            Event::Poll {
                edge_ms: Some(_),
                ..
            }
        )
    };
    let first = world.events.iter().position(is_edge);
    let last = world.events.iter().rposition(is_edge);
    match (first, last) {
        (Some(first), Some(last)) if (first..=last).contains(&at) => last + 1,
        _ => at,
    }
}
