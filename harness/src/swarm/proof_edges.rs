//! The `proof_edges` kind (sabotage `proof-nonce-forgotten-at-window-end`):
//! with user auth on, at the end of the timeline a user pairs one of its
//! workers again (a fresh create with its own proof), and the attacker
//! replays that create, proof and all, at the proof's window end -1, +0 and
//! +1 ms (issue time + `user_proof_window_ms`, the last instant a proof is
//! valid, then the first it is not). A nonce forgotten at that last instant
//! lets the replay at +0 through, which `proof_accepted_twice` judges
//! (`verify/proof_replays.rs`). The `user_attacks` kind's `replay_create`
//! comes at a random place in the timeline, never on the window's edge.
//!
//! The kind draws from a stream of the seed's own ([`STREAM`]), after every
//! other kind but `long_retention`, so a seed without it keeps its world
//! exactly. Its events go last in the timeline: the replays wait about one
//! proof window (300 s) after the pairing, and nothing else waits with them.

use super::attacks::{attacker_worker, AttackEvent};
use super::spec::{Event, Kind, Timed, WorldSpec};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// The seed's ChaCha stream this kind draws from (the world's is 0).
const STREAM: u64 = 34;
/// The replays' offsets from the proof window's end, in ms, in the order
/// sent (each step waits for its instant, so they must rise).
pub const EDGES_MS: [i64; 3] = [-1, 0, 1];

/// Draws the kind for `world` (already drawn): in 60 % of the worlds with
/// user auth on, one set-up pairing is made again and its create replayed
/// at the edges.
pub fn draw(world: &mut WorldSpec) {
    let mut rng = ChaCha20Rng::seed_from_u64(world.seed);
    rng.set_stream(STREAM);
    if !world.user_auth || !rng.gen_bool(0.6) {
        return;
    }
    let Some(pairing) = world.pairings.choose(&mut rng).cloned() else {
        return;
    };
    let (instance, victim) = (pairing.instance, pairing.user.clone());
    let Some(attacker) = attacker_worker(&mut rng, world, instance, &victim) else {
        return;
    };
    let after_ms = rng.gen_range(0..2_000);
    let pair = Event::Pair {
        instance,
        user: victim.clone(),
        worker: pairing.worker.clone(),
        claim_edge_ms: None,
    };
    world.events.push(Timed {
        after_ms,
        event: pair,
    });
    for (n, edge_ms) in EDGES_MS.into_iter().enumerate() {
        let attack = AttackEvent {
            instance,
            kind: "replay_create",
            victim: victim.clone(),
            worker: Some(attacker.clone()),
            commits: 0,
            index: 40_000 + n as u32,
            replay_edge_ms: Some(edge_ms),
        };
        let event = Event::Attack(attack);
        world.events.push(Timed { after_ms: 0, event });
    }
    world.kinds.0.push(Kind::ProofEdges);
}
