//! The `floods` kind: on instances that run retention with a small kept
//! budget (`limits.kept_bytes_max`), a flooder commits bursts of jobs from
//! a client address of its own (`client = "flooder"`), with inputs of a few
//! KiB, which honest workers answer: its results crowd the budget the
//! honest users' results are kept in (issue 29, finding 1; decision 0018).
//!
//! Those instances render `kept_share_per_client_percent = 100`: no owner
//! is then ever over its share, so decision 0018 promises that no result
//! younger than the minimum keep time (2 minutes, longer than any world)
//! is deleted for room; commits get 503 instead. `honest_result_lost`
//! holds the instance to it at every deletion (retention's witness,
//! `coordinator::buggify::result_deleted`). A retention that deletes by
//! age or creation order whoever owns what (the code before the fix) is
//! seen at once.
//!
//! The kind draws from a stream of the seed's own ([`STREAM`]), after the
//! rest of the world is drawn, so a seed without it keeps its world
//! exactly.

use super::spec::{Event, Kind, Timed, WorldSpec};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// The seed's ChaCha stream this kind draws from (the world's is 0).
const STREAM: u64 = 10;
/// At most this many bursts in one world.
pub const BURSTS_MAX: usize = 3;
/// At most this many commits in one burst: enough to pass a 64 KiB kept
/// budget's high-water mark on their own.
pub const BURST_COMMITS_MAX: u32 = 40;
/// The flooder's client (its own address) and user id.
pub const FLOODER: &str = "flooder";

/// One burst of the flooder's commits, sent back to back to node 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FloodEvent {
    pub instance: &'static str,
    pub commits: u32,
    /// Bytes of each commit's input text.
    pub input_bytes: usize,
    /// Numbers the commits' inputs apart.
    pub index: u32,
}

/// Draws the kind for `world` (already drawn): whether it is on, and the
/// bursts in the timeline, on instances that run retention.
pub fn draw(world: &mut WorldSpec) {
    let mut rng = ChaCha20Rng::seed_from_u64(world.seed);
    rng.set_stream(STREAM);
    let kept: Vec<&'static str> = world
        .instances
        .iter()
        .filter(|i| i.retention_kept_bytes_max.is_some())
        .map(|i| i.name)
        .collect();
    if kept.is_empty() || !rng.gen_bool(0.5) {
        return;
    }
    world.kinds.0.push(Kind::Floods);
    for i in &mut world.instances {
        if i.retention_kept_bytes_max.is_some() {
            i.kept_share_percent = Some(100);
        }
    }
    for n in 0..rng.gen_range(1..=BURSTS_MAX) {
        let Some(instance) = kept.choose(&mut rng).copied() else {
            return;
        };
        let flood = FloodEvent {
            instance,
            commits: rng.gen_range(10..=BURST_COMMITS_MAX),
            input_bytes: rng.gen_range(1..=4) * 1024,
            index: 20_000 + n as u32 * 100,
        };
        let at = insertion_point(world, rng.gen_range(0..=world.events.len()));
        let after_ms = rng.gen_range(0..2_000);
        let event = Event::Flood(flood);
        world.events.insert(at, Timed { after_ms, event });
    }
}

/// `at`, or the first point after it not followed by a step on the latest
/// job committed (a poll, cancel or reader): a burst between a commit and
/// such a step would make the flooder's job the latest.
pub fn insertion_point(world: &WorldSpec, mut at: usize) -> usize {
    while world.events.get(at).is_some_and(|t| {
        matches!(
            t.event,
            Event::Poll { .. } | Event::Cancel { .. } | Event::Read(_)
        )
    }) {
        at += 1;
    }
    at
}

/// What the heal must wait beyond the longest job in a world with the
/// kind: the minimum keep time and a retention pass, so the young results
/// that fill the budget (commits get 503 meanwhile, by design) may be
/// deleted before the heal's commits. Found by the first run on main:
/// 9 seeds in 2000 (seed 145) failed `heal_job_not_completed` on a 503.
pub fn heal_extra_ms(world: &WorldSpec) -> u64 {
    match world.kinds.has(Kind::Floods) {
        true => coordinator::config::Limits::default().kept_min_ms as u64 + 2_000,
        false => 0,
    }
}
