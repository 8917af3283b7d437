//! The `long_retention` kind: a world that lives past a result's documented
//! lifetime. Swarm worlds last minutes of simulated time, and instances
//! with retention keep results 24 h, so no finished job ever reaches its
//! lifetime; a retention that deletes too early (an hour written short) is
//! never seen. Here one instance that runs retention keeps results one hour
//! (`retention_hours = 1`, the shortest the configuration allows) and,
//! after the timeline and its workloads, the world advances one to two
//! hours, as a deployment lives on after a burst of work: a poll of the
//! latest result well inside its hour, then one past it. The existing keys
//! judge it: `acknowledged_job_lost` (retention's witness held to
//! `KeptPromise`, which allows an age deletion only past the lifetime) and
//! `honest_result_lost`.
//!
//! Not drawn where a worker has a heartbeat fault: it would reconnect all
//! along the hours, and its sessions alone fill the transcript.
//!
//! The advance is one step: the simulation's clock jumps from timer to
//! timer, so hours cost what their timers cost, not their length.
//!
//! The kind draws from a stream of the seed's own ([`STREAM`]), after every
//! other kind, so a seed without it keeps its world exactly.

use super::spec::{Event, Kind, Timed, WorldSpec};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// The seed's ChaCha stream this kind draws from (the world's is 0).
const STREAM: u64 = 22;
/// The lifetime drawn, in hours.
pub const RETENTION_HOURS: u64 = 1;
const HOUR_MS: u64 = 3_600_000;

/// Draws the kind for `world` (already drawn): in half the worlds with an
/// instance that runs retention, one such instance keeps results one hour
/// and the world lives one to two hours past its timeline.
pub fn draw(world: &mut WorldSpec) {
    let mut rng = ChaCha20Rng::seed_from_u64(world.seed);
    rng.set_stream(STREAM);
    let Some(name) = world.pick_instance(&mut rng, 0.5, |i| i.retention_kept_bytes_max.is_some())
    else {
        return;
    };
    // Not where a worker's heartbeat fault makes it time out and reconnect
    // all along: over hours its sessions alone would fill the transcript
    // past its limit (seed 1777: 400,000 lines by +2798 s). Checked after
    // the stream's first draw, so the worlds it keeps are the ones drawn.
    if world.workers.iter().any(|w| w.heartbeat.is_some()) {
        return;
    }
    world.kinds.0.push(Kind::LongRetention);
    let instance = (world.instances.iter_mut())
        .find(|i| i.name == name)
        .expect("picked");
    instance.retention_hours = Some(RETENTION_HOURS);
    // Past every workload's end (they run inside the timeline).
    let loads_end_ms = (world.loads.iter())
        .filter(|l| l.instance == name)
        .map(|l| l.start_ms + l.over_ms)
        .max()
        .unwrap_or(0);
    let timeline_ms: u64 = world.events.iter().map(|t| t.after_ms).sum();
    let settle_ms = loads_end_ms.saturating_sub(timeline_ms) + rng.gen_range(1_000..60_000);
    // Well inside the hour of a result that ended during the timeline.
    let early_ms = rng.gen_range(HOUR_MS / 6..HOUR_MS / 2);
    let late_ms = rng.gen_range(HOUR_MS..=2 * HOUR_MS) - early_ms;
    for after_ms in [settle_ms + early_ms, late_ms] {
        let event = Event::Poll {
            instance: name,
            node: 0,
            hold_ms: None,
            edge_ms: None,
        };
        world.events.push(Timed { after_ms, event });
    }
}
