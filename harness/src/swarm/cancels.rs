//! The `cancels` kind (issue 30, item 5; decision 0022): 1 to 4 `cancel`
//! steps at random moments of the timeline, each of the latest job a step
//! committed on a random instance (`job = "latest"`), whatever it is doing
//! then: pending, held by a worker (which gets the `cancel` frame), or
//! ended (409). A cancelled job ends `failed` / `cancelled`, an allowed end:
//! the safety keys judge what cancelled jobs leave behind (a result
//! accepted for one would be `result_accepted_twice` or
//! `completed_job_changed` once it was shown failed).
//!
//! The kind draws from a stream of the seed's own ([`STREAM`]), after every
//! other kind, so a seed without it keeps its world exactly; one with it
//! keeps its instances, workers and timeline, with the cancels inserted.

use super::spec::{Event, Kind, Timed, WorldSpec};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// The seed's ChaCha stream this kind draws from (the world's is 0).
const STREAM: u64 = 5;
/// At most this many cancels in one world.
pub const CANCELS_MAX: usize = 4;

/// Draws the kind for `world` (already drawn): whether it is on, and its
/// cancels in the timeline.
pub fn draw(world: &mut WorldSpec) {
    let mut rng = ChaCha20Rng::seed_from_u64(world.seed);
    rng.set_stream(STREAM);
    if !rng.gen_bool(0.3) {
        return;
    }
    world.kinds.0.push(Kind::Cancels);
    for _ in 0..rng.gen_range(1..=CANCELS_MAX) {
        let Some(instance) = world.instances.choose(&mut rng) else {
            return;
        };
        let (name, node) = (instance.name, rng.gen_range(0..instance.nodes.max(1)));
        let at = rng.gen_range(0..=world.events.len());
        let after_ms = rng.gen_range(0..2_000);
        world.events.insert(
            at,
            Timed {
                after_ms,
                event: Event::Cancel {
                    instance: name,
                    node,
                },
            },
        );
    }
}
