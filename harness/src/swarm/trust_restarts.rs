//! The `trust_restarts` kind (sabotage `repaired-key-keeps-old-paired-at`):
//! with user auth on, at the end of the timeline a user pairs a worker it
//! paired in the set-up once more (a fresh code, claimed later: pairing the
//! same key again refreshes its `paired_at`), lists its workers, the
//! instance crashes and restarts, and the user lists them again.
//! `trust_list_not_durable` (`verify/trust_lists.rs`) judges that the list
//! after the restart answers what the list before it did. No other kind
//! lists a user's workers on both sides of a restart.
//!
//! The kind draws from a stream of the seed's own ([`STREAM`]), after every
//! other kind but `long_retention`, so a seed without it keeps its world
//! exactly. Only one-node instances (SQLite, as every swarm instance).

use super::spec::{Event, Kind, Timed, WorldSpec};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;
use std::fmt::Write as _;

/// The seed's ChaCha stream this kind draws from (the world's is 0).
const STREAM: u64 = 40;

/// One pairing made again, then the user's list around a restart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustRestart {
    pub instance: &'static str,
    pub user: String,
    pub worker: String,
}

/// Draws the kind for `world` (already drawn): in 80 % of the worlds with
/// user auth on, one set-up pairing of a one-node instance, made again.
pub fn draw(world: &mut WorldSpec) {
    let mut rng = ChaCha20Rng::seed_from_u64(world.seed);
    rng.set_stream(STREAM);
    if !world.user_auth || !rng.gen_bool(0.8) {
        return;
    }
    let single: Vec<_> = (world.pairings.iter())
        .filter(|p| world.nodes_of(p.instance) <= 1)
        .collect();
    let Some(pairing) = single.choose(&mut rng) else {
        return;
    };
    let again = TrustRestart {
        instance: pairing.instance,
        user: pairing.user.clone(),
        worker: pairing.worker.clone(),
    };
    let after_ms = rng.gen_range(0..2_000);
    let event = Event::TrustRestart(again);
    world.events.push(Timed { after_ms, event });
    world.kinds.0.push(Kind::TrustRestarts);
}

/// The `pair` step, the list, the restart, the list.
pub fn render(t: &TrustRestart) -> String {
    let mut w = String::new();
    let (instance, user, worker) = (t.instance, &t.user, &t.worker);
    let _ = writeln!(
        w,
        "\n[[steps]]\nname = \"{user} pairs {worker} again\"\npair = {{ instance = {instance:?}, user = {user:?}, worker = {worker:?} }}"
    );
    let list = format!(
        "http = {{ instance = {instance:?}, method = \"GET\", path = \"/v1/trust/list?user_id={{{{user.{user}}}}}\", user_proof = {{ user = {user:?} }} }}"
    );
    let _ = writeln!(
        w,
        "\n[[steps]]\nname = \"{user} lists its workers\"\n{list}\n\n[[steps]]\ninstance = {{ name = {instance:?}, action = \"restart\" }}\n\n[[steps]]\nname = \"{user} lists its workers after a restart\"\n{list}"
    );
    w
}
