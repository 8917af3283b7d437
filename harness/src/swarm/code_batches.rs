//! The `code_batches` kind (sabotage `pairings-keyed-by-user-in-batch`):
//! with user auth on, a user creates two or three pairing codes for one
//! honest worker at once, mid-timeline (a tool that retries a create it
//! thinks lost, or a user pairing from two devices), so one group commit of
//! the store may hold them all; the instance then crashes and restarts
//! before the codes are claimed. A code answered 201 but not written is
//! `invalid_code` to its claim after the restart, which `pairing_code_lost`
//! judges (`verify/codes_kept.rs`). Without this kind no world has two
//! pairing records of one honest user pending at once: every other create
//! and claim is one step that waits for its answer.
//!
//! The kind draws from a stream of the seed's own ([`STREAM`]), after every
//! other kind but `long_retention`, so a seed without it keeps its world
//! exactly. Only one-node instances (SQLite, as every swarm instance).

use super::attacks::USERS;
use super::spec::{Event, Kind, Timed, WorldSpec};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// The seed's ChaCha stream this kind draws from (the world's is 0).
const STREAM: u64 = 35;
/// At most this many batches in one world.
pub const BATCHES_MAX: u32 = 2;

/// One batch: `codes` creates at once, a restart, the claims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeBatch {
    pub instance: &'static str,
    pub user: String,
    pub worker: String,
    pub codes: u32,
}

/// Draws the kind for `world` (already drawn): on in half the worlds with
/// user auth on, with 1 to [`BATCHES_MAX`] batches, each on a one-node
/// instance with an honest worker, right before a commit.
pub fn draw(world: &mut WorldSpec) {
    let mut rng = ChaCha20Rng::seed_from_u64(world.seed);
    rng.set_stream(STREAM);
    if !world.user_auth || !rng.gen_bool(0.5) {
        return;
    }
    let mut drawn = false;
    for _ in 0..rng.gen_range(1..=BATCHES_MAX) {
        let single: Vec<&'static str> = (world.instances.iter())
            .filter(|i| i.nodes <= 1)
            .map(|i| i.name)
            .collect();
        let Some(&instance) = single.choose(&mut rng) else {
            return;
        };
        let honest: Vec<String> = (world.workers.iter())
            .filter(|w| w.instance == instance && w.honest())
            .map(|w| w.name.clone())
            .collect();
        let Some(worker) = honest.choose(&mut rng).cloned() else {
            continue;
        };
        let user = USERS.choose(&mut rng).expect("users").to_string();
        let codes = rng.gen_range(2..=crate::spec::calls::PAIR_CODES_MAX);
        let Some(at) = super::code_edges::before_a_commit(&mut rng, world) else {
            continue;
        };
        let after_ms = rng.gen_range(0..2_000);
        let batch = CodeBatch {
            instance,
            user,
            worker,
            codes,
        };
        let event = Event::CodeBatch(batch);
        world.events.insert(at, Timed { after_ms, event });
        drawn = true;
    }
    if drawn {
        world.kinds.0.push(Kind::CodeBatches);
    }
}

/// The batch's one `pair` step.
pub fn render(b: &CodeBatch) -> String {
    format!(
        "\n[[steps]]\nname = \"{user} creates {codes} codes for {worker} at once, then claims them after a restart\"\npair = {{ instance = {instance:?}, user = {user:?}, worker = {worker:?}, codes = {codes}, restart_before_claim = true }}\n",
        user = b.user,
        worker = b.worker,
        codes = b.codes,
        instance = b.instance,
    )
}
