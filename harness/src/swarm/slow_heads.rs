//! The `slow_heads` kind: a slowloris attacker (review hole (c), issue 29
//! finding 4; decision 0019). One instance of one node serves with the
//! binary's connection bounds (`http_bounds = true`) with a short head
//! deadline and a small per-address cap; at random moments of the
//! timeline a client of its own ([`ATTACKER`]) opens bursts of plain
//! connections that send an unfinished request head or nothing, more in
//! all than its cap. The world's honest clients go on beside it (each has
//! an address of its own). `unfinished_head_kept` then holds the instance
//! to closing each such connection within its head deadline, and
//! `connections_over_cap` to never counting more open connections for one
//! address than its cap (both from the accept loop's own accounting,
//! `crate::verify::connections`).
//!
//! The kind draws from a stream of the seed's own ([`STREAM`]), after the
//! rest of the world is drawn, so a seed without it keeps its world
//! exactly.

use super::spec::{Event, Kind, Timed, WorldSpec};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// The seed's ChaCha stream this kind draws from (the world's is 0).
const STREAM: u64 = 13;
/// The attacker's client name (its own address).
pub const ATTACKER: &str = "slowloris";
/// At most this many bursts in one world.
pub const BURSTS_MAX: usize = 3;
/// At most this many connections in one burst.
pub const BURST_MAX: u32 = 32;

/// The connection bounds an instance of the kind serves with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpBounds {
    /// `timing.http_head_timeout_ms`.
    pub head_timeout_ms: u64,
    /// `limits.http_connections_per_client_max`: above what any honest
    /// client of a world opens at once (a workload's commits, held polls
    /// and readers come from clients of their own).
    pub per_client_max: usize,
}

/// One burst of the attacker's connections (a `slow_heads` step).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlowHeadsEvent {
    pub instance: &'static str,
    pub count: u32,
    /// `partial` (an unfinished head) or `none` (nothing sent).
    pub head: &'static str,
}

/// Draws the kind for `world` (already drawn).
pub fn draw(world: &mut WorldSpec) {
    let mut rng = ChaCha20Rng::seed_from_u64(world.seed);
    rng.set_stream(STREAM);
    let Some(instance) = world.pick_instance(&mut rng, 0.3, |i| i.nodes == 1) else {
        return;
    };
    world.kinds.0.push(Kind::SlowHeads);
    let bounds = HttpBounds {
        head_timeout_ms: rng.gen_range(1..=4) * 1_000,
        per_client_max: rng.gen_range(8..=16),
    };
    let spec = (world.instances.iter_mut())
        .find(|i| i.name == instance)
        .expect("an eligible instance");
    spec.http_bounds = Some(bounds);
    for _ in 0..rng.gen_range(1..=BURSTS_MAX) {
        let burst = SlowHeadsEvent {
            instance,
            count: rng.gen_range(bounds.per_client_max as u32 / 2..=BURST_MAX),
            head: ["partial", "none"].choose(&mut rng).expect("two heads"),
        };
        let at = super::floods::insertion_point(world, rng.gen_range(0..=world.events.len()));
        let after_ms = rng.gen_range(0..2_000);
        let event = Event::SlowHeads(burst);
        world.events.insert(at, Timed { after_ms, event });
    }
}

/// The step of a burst.
pub fn render(e: &SlowHeadsEvent) -> String {
    format!(
        "\n[[steps]]\nname = \"{ATTACKER} opens {} slow heads\"\nslow_heads = {{ instance = {:?}, count = {}, client = {ATTACKER:?}, head = {:?} }}\n",
        e.count, e.instance, e.count, e.head
    )
}
