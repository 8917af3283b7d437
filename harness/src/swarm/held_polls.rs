//! The `held_polls` kind: 1 to 4 long polls (`GET /v1/jobs/{id}?wait_ms=N`)
//! of the latest job a step committed on an instance, held in the
//! background across the rest of the timeline, whatever the job then does:
//! completes, fails by its pending timeout, by its attempts running out, by
//! its payment expiring, or is cancelled. Each waits longer than one
//! pending timeout and lease, so a failure the world provokes lands inside
//! it; the safety key `poll_not_woken` judges its answer: a poll that
//! waited its whole `wait_ms` and was then answered a finished job was not
//! woken when the job finished.
//!
//! The kind draws from a stream of the seed's own ([`STREAM`]), after every
//! other kind, so a seed without it keeps its world exactly; one with it
//! keeps its instances, workers and timeline, with the polls inserted.

use super::spec::{Event, Kind, Timed, WorldSpec};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// The seed's ChaCha stream this kind draws from (the world's is 0).
const STREAM: u64 = 9;
/// At most this many held polls in one world.
pub const HELD_POLLS_MAX: usize = 4;
/// The longest wait a poll may ask for (the coordinator's default
/// `poll_wait_ms_max`).
pub const WAIT_MS_MAX: u64 = 30_000;

/// Draws the kind for `world` (already drawn): whether it is on, and its
/// held polls in the timeline.
pub fn draw(world: &mut WorldSpec) {
    let mut rng = ChaCha20Rng::seed_from_u64(world.seed);
    rng.set_stream(STREAM);
    if !rng.gen_bool(0.3) {
        return;
    }
    world.kinds.0.push(Kind::HeldPolls);
    for _ in 0..rng.gen_range(1..=HELD_POLLS_MAX) {
        let Some(instance) = world.instances.choose(&mut rng) else {
            return;
        };
        let (name, node) = (instance.name, rng.gen_range(0..instance.nodes.max(1)));
        // Past one pending timeout and lease where the bound allows, so the
        // job's first failure falls inside the wait; an odd number of ms,
        // so the deadline rarely meets a timer of the coordinator's.
        let cycle_ms = instance.pending_timeout_ms + instance.lease_ms;
        let low_ms = cycle_ms.min(WAIT_MS_MAX / 2);
        let wait_ms = rng.gen_range(low_ms..=WAIT_MS_MAX) | 1;
        let at = rng.gen_range(0..=world.events.len());
        let after_ms = rng.gen_range(0..2_000);
        world.events.insert(
            at,
            Timed {
                after_ms,
                event: Event::Poll {
                    instance: name,
                    node,
                    hold_ms: Some(wait_ms.min(WAIT_MS_MAX - 1)),
                    edge_ms: None,
                },
            },
        );
    }
}
