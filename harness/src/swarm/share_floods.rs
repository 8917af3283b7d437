//! The `share_floods` kind: floods from one client that must not disturb
//! the others.
//!
//! - Shares (`honest_starved`): on an unpaid one-node instance with a small
//!   queued budget (`limits.queued_bytes_max` of [`QUEUED_BYTES_MAX`], a
//!   client's share a quarter of it), the flooder commits bursts of jobs of
//!   4 to 8 KiB from its own address, more than the whole budget, and an
//!   honest user commits right after each burst. A client's share holds
//!   the flooder to a quarter: the honest commit finds room.
//!   `honest_starved` fails a run in which a commit was refused for
//!   capacity while another client held more than its share.
//! - Payments (`unfunded_job_accepted`, `payment_bought_two_jobs`): on an
//!   instance settling through the facilitator, the payer's funds vanish
//!   (`/verify` refuses `insufficient_funds`), a burst of paid commits
//!   follows (each is answered 402 and buys nothing), the funds come back,
//!   an honest paid commit, then replays of its authorization with other
//!   bodies (each buys nothing).
//!
//! The kind draws from a stream of the seed's own ([`STREAM`]), after the
//! rest of the world is drawn, so a seed without it keeps its world
//! exactly.

use super::edges::public_commit;
use super::floods::FloodEvent;
use super::spec::{Event, Kind, Timed, WorldSpec};
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
/// At most this many unfunded paid commits, and replays, in one world.
pub const PAID_FLOOD_MAX: u32 = 12;

/// Draws the kind for `world` (already drawn).
pub fn draw(world: &mut WorldSpec) {
    let mut rng = ChaCha20Rng::seed_from_u64(world.seed);
    rng.set_stream(STREAM);
    let shares = draw_shares(world, &mut rng);
    let payments = draw_payments(world, &mut rng);
    if shares || payments {
        world.kinds.0.push(Kind::ShareFloods);
    }
}

/// The share bursts, if drawn; whether they were.
fn draw_shares(world: &mut WorldSpec, rng: &mut ChaCha20Rng) -> bool {
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
        return false;
    }
    let Some(instance) = eligible.choose(rng).copied() else {
        return false;
    };
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
        let commit = public_commit(rng, instance, 50_000 + n * 100 + 99, None);
        let at = super::floods::insertion_point(world, rng.gen_range(0..=world.events.len()));
        let after_ms = rng.gen_range(0..2_000);
        let events = [
            Timed {
                after_ms,
                event: Event::Flood(burst),
            },
            Timed {
                after_ms: 0,
                event: Event::Commit(commit),
            },
        ];
        world.events.splice(at..at, events);
    }
    true
}

/// The payment floods, if drawn; whether they were.
fn draw_payments(world: &mut WorldSpec, rng: &mut ChaCha20Rng) -> bool {
    let facilitated: Vec<&'static str> = (world.instances.iter())
        .filter(|i| i.payment == Some("success"))
        .map(|i| i.name)
        .collect();
    if facilitated.is_empty() || !rng.gen_bool(0.4) {
        return false;
    }
    let Some(instance) = facilitated.choose(rng).copied() else {
        return false;
    };
    let nodes = world.nodes_of(instance);
    let script = |script| Event::Facilitator { instance, script };
    let mut events = vec![(rng.gen_range(0..2_000), script("insufficient_funds"))];
    for k in 0..rng.gen_range(2..=PAID_FLOOD_MAX) {
        let commit = public_commit(rng, instance, 60_000 + k, Some("none"));
        events.push((0, Event::Commit(commit)));
    }
    events.push((0, script("success")));
    let commit = public_commit(rng, instance, 60_099, Some("none"));
    events.push((0, Event::Commit(commit)));
    for k in 0..rng.gen_range(1..=PAID_FLOOD_MAX) {
        let node = rng.gen_range(0..nodes);
        let index = 60_100 + k;
        events.push((
            0,
            Event::Replay {
                instance,
                node,
                index,
            },
        ));
    }
    let at = super::floods::insertion_point(world, rng.gen_range(0..=world.events.len()));
    let timed = events
        .into_iter()
        .map(|(after_ms, event)| Timed { after_ms, event });
    world.events.splice(at..at, timed);
    true
}
