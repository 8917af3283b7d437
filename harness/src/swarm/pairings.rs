//! The `late_pairings` kind: with user auth on, honest users pair workers
//! in the middle of the timeline too, not only in the set-up (where the
//! fault points wait, so no crash can cut a pairing there). A `pair` step
//! tolerates a crash that cuts it; a claim answered 2xx enters the ledger
//! of proven pairings, and the safety key `pairing_lost` holds the
//! instance to it across every later crash: a claim answered before its
//! pairing is durable shows there.
//!
//! The kind draws from a stream of the seed's own ([`STREAM`]), after every
//! other kind, so a seed without it keeps its world exactly.

use super::attacks::{attacker_worker, USERS};
use super::spec::{Event, Kind, Timed, WorldSpec};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// The seed's ChaCha stream this kind draws from.
const STREAM: u64 = 12;
/// At most this many pairings in one timeline.
pub const PAIRINGS_MAX: usize = 3;

/// Draws the kind for `world` (already drawn): on in half the worlds with
/// user auth on, with 1 to [`PAIRINGS_MAX`] pairings of a user with an
/// honest worker it has not paired on that instance.
pub fn draw(world: &mut WorldSpec) {
    let mut rng = ChaCha20Rng::seed_from_u64(world.seed);
    rng.set_stream(STREAM);
    if !world.user_auth || !rng.gen_bool(0.5) {
        return;
    }
    let mut drawn = false;
    for _ in 0..rng.gen_range(1..=PAIRINGS_MAX) {
        let Some(instance) = world.instances.choose(&mut rng).map(|i| i.name) else {
            return;
        };
        let user = USERS.choose(&mut rng).expect("users").to_string();
        // The worker `attacker_worker` picks is one the user did not pair.
        let Some(worker) = attacker_worker(&mut rng, world, instance, &user) else {
            continue;
        };
        let at = rng.gen_range(0..=world.events.len());
        let after_ms = rng.gen_range(0..2_000);
        let event = Event::Pair {
            instance,
            user,
            worker,
            claim_edge_ms: None,
        };
        world.events.insert(at, Timed { after_ms, event });
        drawn = true;
    }
    if drawn {
        world.kinds.0.push(Kind::LatePairings);
    }
}
