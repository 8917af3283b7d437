//! The `buggify` kind: the coordinator's fault points fire in the world
//! (decision 0024). Which sites are on, and when each fires, the
//! coordinator draws from the world's seed (`coordinator::buggify::arm`);
//! the swarm only switches the kind on, from a stream of the seed's own
//! ([`STREAM`]) drawn after the rest of the world, so a seed without it
//! keeps its world exactly.

use super::spec::{Kind, WorldSpec};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// The seed's ChaCha stream this kind draws from.
const STREAM: u64 = 8;

/// Switches the kind on for about a third of the worlds.
pub fn draw(world: &mut WorldSpec) {
    let mut rng = ChaCha20Rng::seed_from_u64(world.seed);
    rng.set_stream(STREAM);
    if rng.gen_bool(0.3) {
        world.kinds.0.push(Kind::Buggify);
    }
}
