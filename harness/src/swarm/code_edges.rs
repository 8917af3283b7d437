//! The `code_edges` kind (sabotage `pairing-code-claimable-at-expiry`):
//! with user auth on, one instance's pairing codes live a few seconds
//! (`timing.pairing_code_ttl_ms`, as an operator who wants codes typed in
//! at once would set it) and a user pairs a worker three times
//! mid-timeline, each claim sent at its fresh code's `expires_at` -1, +0
//! and +1 ms: a user who types the code in just as it runs out.
//! `expiry_off_edge` judges each claim against the `expires_at` its create
//! was answered with (`verify/code_edges.rs`): paired only before it.
//!
//! The kind draws from a stream of the seed's own ([`STREAM`]), after every
//! other kind but `long_retention`, so a seed without it keeps its world
//! exactly. A world with it keeps its set-up; on the instance it shortens,
//! a code claimed later than its lifetime (an attack's claim of a victim's
//! code read over its shoulder) is refused `expired` instead.

use super::attacks::USERS;
use super::spec::{Event, Kind, Timed, WorldSpec};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// The seed's ChaCha stream this kind draws from (the world's is 0).
const STREAM: u64 = 32;
/// The claims' offsets from their codes' expiry, in ms.
pub const EDGES_MS: [i64; 3] = [-1, 0, 1];

/// Draws the kind for `world` (already drawn): on in half the worlds with
/// user auth on, on one instance with an honest worker.
pub fn draw(world: &mut WorldSpec) {
    let mut rng = ChaCha20Rng::seed_from_u64(world.seed);
    rng.set_stream(STREAM);
    if !world.user_auth || !rng.gen_bool(0.5) {
        return;
    }
    let Some(k) = (0..world.instances.len())
        .collect::<Vec<_>>()
        .choose(&mut rng)
        .copied()
    else {
        return;
    };
    let instance = world.instances[k].name;
    let honest: Vec<String> = (world.workers.iter())
        .filter(|w| w.instance == instance && w.honest())
        .map(|w| w.name.clone())
        .collect();
    let Some(worker) = honest.choose(&mut rng).cloned() else {
        return;
    };
    if before_a_commit(&mut rng, world).is_none() {
        return;
    }
    world.instances[k].pairing_code_ttl_ms = Some(rng.gen_range(2..=5) * 1_000);
    let user = USERS.choose(&mut rng).expect("users").to_string();
    let mut edges = EDGES_MS;
    edges.shuffle(&mut rng);
    for edge_ms in edges {
        let Some(at) = before_a_commit(&mut rng, world) else {
            return;
        };
        let after_ms = rng.gen_range(0..2_000);
        let event = Event::Pair {
            instance,
            user: user.clone(),
            worker: worker.clone(),
            claim_edge_ms: Some(edge_ms),
        };
        world.events.insert(at, Timed { after_ms, event });
    }
    world.kinds.0.push(Kind::CodeEdges);
}

/// A place in the timeline for an event of the identity draws: right
/// before a commit, and not among the first two events. The kinds drawn
/// before them give the timeline a shape (an edge poll right after its
/// commit, a settlement poll after its paid commit, `lease_answers`' stops
/// first and its answer last) that an event put there does not split.
pub(super) fn before_a_commit(rng: &mut ChaCha20Rng, world: &WorldSpec) -> Option<usize> {
    let places: Vec<usize> = (2..world.events.len())
        .filter(|&p| matches!(world.events[p].event, Event::Commit(_)))
        .collect();
    places.choose(rng).copied()
}
