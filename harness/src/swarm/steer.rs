//! Coverage that steers (Antithesis's "sometimes" assertions): the swarm
//! runs its seed range in rounds; a seed whose world reached a `sometimes`
//! state no earlier world reached (`coordinator::buggify::sometimes`) is
//! kept, and variations of its world run first in the next round, so the
//! neighbourhood of a rare state is explored before more of the average.
//!
//! A variation is the seed's world with its timeline's gaps stretched or
//! shrunk ([`vary`]): the same peers, faults and kinds, other interleavings
//! around the state it reached. It is named by its seed and its number
//! ([`WorldId`]), so a failing variation shrinks and replays like a seed.
//! Everything here is computed from results sorted by world, after each
//! round: the worlds run never depend on the thread count or timing.

use super::spec::WorldSpec;
use super::SeedResult;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;
use std::collections::BTreeSet;

/// Seeds of the range run per round (variations come on top).
pub const ROUND_SEEDS: u64 = 250;
/// At most this many variations of one seed (`--steer`).
pub const VARIATIONS_MAX: u32 = 32;
/// The first ChaCha stream of a variation's draws (stream `FIRST + k`);
/// far above the world's own kinds' streams.
const STREAM_FIRST: u64 = 1_000;

/// One world of the swarm: a seed's own (`variation` 0) or a variation of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WorldId {
    pub seed: u64,
    pub variation: u32,
}

impl WorldId {
    pub fn seed(seed: u64) -> Self {
        Self { seed, variation: 0 }
    }

    /// The world: the seed's, varied when this is a variation.
    pub fn world(self) -> WorldSpec {
        let mut world = WorldSpec::generate(self.seed);
        if self.variation > 0 {
            vary(&mut world, self.variation);
        }
        world
    }
}

impl std::fmt::Display for WorldId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.variation {
            0 => write!(f, "{}", self.seed),
            k => write!(f, "{}v{k}", self.seed),
        }
    }
}

/// Variation `k` of `world`: every gap of its timeline scaled by 1/2 to
/// 3/2, and a gap of nothing sometimes opened by up to 20 ms.
pub fn vary(world: &mut WorldSpec, k: u32) {
    assert!(k > 0, "variation 0 is the seed's own world");
    let mut rng = ChaCha20Rng::seed_from_u64(world.seed);
    rng.set_stream(STREAM_FIRST + u64::from(k));
    for t in &mut world.events {
        let scaled = t.after_ms * rng.gen_range(50..=150) / 100;
        t.after_ms = match scaled {
            0 if rng.gen_bool(0.25) => rng.gen_range(1..=20),
            ms => ms,
        };
    }
}

/// The seeds of one round (sorted by world) that reached a state no world
/// in `seen` reached, the first per state; the states join `seen`.
/// Variations reach states too, but only seeds' own worlds are varied.
pub fn first_reachers(round: &[SeedResult], seen: &mut BTreeSet<&'static str>) -> Vec<u64> {
    let mut kept = BTreeSet::new();
    for r in round {
        for state in r.fired.reached.keys() {
            if seen.insert(state) && r.id.variation == 0 {
                kept.insert(r.id.seed);
            }
        }
    }
    kept.into_iter().collect()
}
