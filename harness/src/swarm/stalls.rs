//! The `stalls` kind: a worker that stops reading its socket (review hole
//! (b), issue 29 finding 3; decision 0019). A worker of its own
//! ([`STALLER`], TASK only, [`STALLER_SLOTS`] slots) joins an instance
//! without payment, retention or several nodes; at a random moment of the
//! timeline it freezes (a `worker freeze` step: its links hold every byte
//! both ways, its socket stays open), a burst of commits with inputs of
//! 150 to 220 KiB follows, more than its links buffer (1 MiB held and a
//! 64 KiB pipe), so the coordinator's sends to it block; it thaws 2 to 6 s
//! after its instance's heartbeat timeout (2 s unless drawn otherwise).
//! `stalled_session_kept` then holds the coordinator to closing its
//! session within the heartbeat timeout of the freeze: a send without a
//! deadline (the code before the fix) keeps it until the thaw.
//!
//! The kind draws from a stream of the seed's own ([`STREAM`]), after the
//! rest of the world is drawn, so a seed without it keeps its world
//! exactly.

use super::floods::FloodEvent;
use super::spec::{Event, InstanceSpec, Kind, Timed, WorkerSpec, WorldSpec};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// The seed's ChaCha stream this kind draws from (the world's is 0).
const STREAM: u64 = 11;
/// The worker that stops reading.
pub const STALLER: &str = "staller";
/// Its slots: enough assigns of the burst's inputs to pass what its links
/// buffer.
pub const STALLER_SLOTS: u32 = 16;
/// The heartbeat timeout its instance gets when none was drawn (ms).
const HEARTBEAT_TIMEOUT_MS: u64 = 2_000;

/// Draws the kind for `world` (already drawn).
pub fn draw(world: &mut WorldSpec) {
    let mut rng = ChaCha20Rng::seed_from_u64(world.seed);
    rng.set_stream(STREAM);
    let fit = |i: &InstanceSpec| {
        i.payment.is_none() && i.nodes == 1 && i.retention_kept_bytes_max.is_none()
    };
    let Some(instance) = world.pick_instance(&mut rng, 0.3, fit) else {
        return;
    };
    world.kinds.0.push(Kind::Stalls);
    let spec = (world.instances.iter_mut())
        .find(|i| i.name == instance)
        .expect("an eligible instance");
    let heartbeat_ms = *spec
        .heartbeat_timeout_ms
        .get_or_insert(HEARTBEAT_TIMEOUT_MS);
    world.workers.push(WorkerSpec {
        name: STALLER.into(),
        instance,
        capabilities: vec!["TASK"],
        slots: STALLER_SLOTS,
        latency: "50".into(),
        faults: vec![],
        heartbeat: None,
        key_of: None,
        node: None,
        stream: false,
    });
    let burst = FloodEvent {
        instance,
        commits: rng.gen_range(16..=24),
        input_bytes: rng.gen_range(150..=220) * 1024,
        index: 30_000,
    };
    let at = super::floods::insertion_point(world, rng.gen_range(0..=world.events.len()));
    let freeze = |frozen| Event::Freeze {
        worker: STALLER.into(),
        frozen,
    };
    let events = [
        (rng.gen_range(0..2_000), freeze(true)),
        (50, Event::Flood(burst)),
        (heartbeat_ms + rng.gen_range(2_000..=6_000), freeze(false)),
    ];
    for (k, (after_ms, event)) in events.into_iter().enumerate() {
        world.events.insert(at + k, Timed { after_ms, event });
    }
}
