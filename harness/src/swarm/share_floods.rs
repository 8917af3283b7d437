//! The `share_floods` kind (issue 33, `honest_starved`): on an unpaid
//! one-node instance with a small queued budget (`limits.queued_bytes_max`
//! of [`QUEUED_BYTES_MAX`], a client's share a quarter of it), the flooder
//! commits bursts of jobs of 4 to 8 KiB from its own address, more than
//! the whole budget, and an honest user commits right after each burst. A
//! client's share holds the flooder to a quarter: the honest commit finds
//! room. `honest_starved` fails a run in which a commit was refused for
//! capacity while another client held more than its share (the core notes
//! each refusal with the heaviest other client's queued bytes).
//!
//! The kind draws from a stream of the seed's own ([`STREAM`]), after the
//! rest of the world is drawn, so a seed without it keeps its world
//! exactly.

use super::floods::FloodEvent;
use super::spec::{Commit, Event, Kind, Timed, WorldSpec};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// The seed's ChaCha stream this kind draws from (the world's is 0).
const STREAM: u64 = 16;
/// The instance's queued budget: a burst passes it.
pub const QUEUED_BYTES_MAX: usize = 256 * 1024;
/// A client's share of it.
pub const QUEUED_SHARE_BYTES: usize = QUEUED_BYTES_MAX / 4;
/// At most this many bursts in one world.
pub const BURSTS_MAX: u32 = 3;

/// Draws the kind for `world` (already drawn).
pub fn draw(world: &mut WorldSpec) {
    let mut rng = ChaCha20Rng::seed_from_u64(world.seed);
    rng.set_stream(STREAM);
    // Not where a worker stops reading: its bursts of large jobs need the
    // default budget.
    let frozen = |name: &str| {
        world.workers.iter().any(|w| {
            w.instance == name
                && (w.name == super::stalls::STALLER || w.name == super::lease_stalls::SINK)
        })
    };
    let eligible: Vec<&'static str> = (world.instances.iter())
        .filter(|i| i.payment.is_none() && i.nodes == 1 && !frozen(i.name))
        .map(|i| i.name)
        .collect();
    if eligible.is_empty() || !rng.gen_bool(0.3) {
        return;
    }
    let Some(instance) = eligible.choose(&mut rng).copied() else {
        return;
    };
    world.kinds.0.push(Kind::ShareFloods);
    let spec = (world.instances.iter_mut())
        .find(|i| i.name == instance)
        .expect("an eligible instance");
    spec.queued_bytes = Some((QUEUED_BYTES_MAX, QUEUED_SHARE_BYTES));
    for n in 0..rng.gen_range(1..=BURSTS_MAX) {
        let burst = FloodEvent {
            instance,
            commits: rng.gen_range(32..=48),
            input_bytes: rng.gen_range(4..=8) * 1024,
            index: 50_000 + n * 100,
        };
        let honest = Commit {
            instance,
            tier: if rng.gen_bool(0.5) { "fast" } else { "cheap" },
            job_type: if rng.gen_bool(0.5) {
                "LLM_INFER"
            } else {
                "TASK"
            },
            user: format!("u{}", rng.gen_range(0..4)),
            private: false,
            pay: None,
            index: 50_000 + n * 100 + 99,
            node: 0,
        };
        let at = super::floods::insertion_point(world, rng.gen_range(0..=world.events.len()));
        let after_ms = rng.gen_range(0..2_000);
        let events = [
            Timed {
                after_ms,
                event: Event::Flood(burst),
            },
            Timed {
                after_ms: 0,
                event: Event::Commit(honest),
            },
        ];
        world.events.splice(at..at, events);
    }
}
