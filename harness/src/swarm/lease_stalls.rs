//! The `lease_stalls` kind: a worker that stops reading while its leases
//! lapse. A worker of its own
//! ([`SINK`], TASK only, [`SINK_SLOTS`] slots) joins an unpaid one-node
//! instance without retention whose lease (1 or 3 s) is drawn shorter than
//! its heartbeat timeout (set to [`HEARTBEAT_LEASES`] leases): a send to
//! the frozen worker blocks for up to the heartbeat timeout, and meanwhile
//! every lapsed lease frees a slot the core fills with a new assign. Rounds
//! of the flooder's commits of 100 to 200 KiB, one a lease, keep jobs
//! queued for those slots. Unbounded, the outbox would grow by a slot's
//! worth of assigns at every lease; a frame that would take it past
//! its bound (`slots × (body_bytes_max + 3 KiB)`) closes the session, and
//! `resource_bound_exceeded` holds the coordinator to that bound after
//! every event. The worker thaws 2 to 6 s after the heartbeat timeout.
//!
//! The kind draws from a stream of the seed's own ([`STREAM`]), after the
//! rest of the world is drawn, so a seed without it keeps its world
//! exactly.

use super::floods::FloodEvent;
use super::spec::{Event, InstanceSpec, Kind, Timed, WorkerSpec, WorldSpec};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// The seed's ChaCha stream this kind draws from (the world's is 0).
const STREAM: u64 = 15;
/// The worker that stops reading.
pub const SINK: &str = "sink";
/// Its slots: a bound of about 1 MiB, passed by a few rounds of assigns.
pub const SINK_SLOTS: u32 = 4;
/// Its instance's heartbeat timeout, in leases: the rounds of lapses a
/// blocked send sees.
pub const HEARTBEAT_LEASES: u64 = 5;
/// Leases it may draw (ms): shorter than any honest worker's latency
/// lets jobs lapse at honest workers too.
const LEASES_MS: [u64; 2] = [1_000, 3_000];

/// Which sink a draw adds: the kind's, or [`super::lease_thaws`]'s.
pub struct Sink {
    /// The seed's ChaCha stream it draws from.
    pub stream: u64,
    pub kind: Kind,
    /// Its worker's name.
    pub name: &'static str,
    /// Whether it reads again before its heartbeat timeout (after 2 or 3
    /// rounds of lapses) rather than 2 to 6 s after it.
    pub early_thaw: bool,
}

/// Draws the kind for `world` (already drawn).
pub fn draw(world: &mut WorldSpec) {
    draw_sink(
        world,
        &Sink {
            stream: STREAM,
            kind: Kind::LeaseStalls,
            name: SINK,
            early_thaw: false,
        },
    );
}

/// Draws `sink` for `world`: its instance, worker and timeline.
pub fn draw_sink(world: &mut WorldSpec, sink: &Sink) {
    let mut rng = ChaCha20Rng::seed_from_u64(world.seed);
    rng.set_stream(sink.stream);
    // Not where the `edges` kind stops every worker around a job none may
    // take: the sink would take it. Not where another sink or a share
    // budget is (its bursts of large jobs need the default budget).
    let edged = |name: &str| {
        (world.events.iter()).any(|t| {
            matches!(t.event, Event::Poll { instance, edge_ms: Some(_), .. } if instance == name)
        })
    };
    let sunk = |name: &str| (world.workers.iter()).any(|w| w.instance == name && w.name == SINK);
    let fit = |i: &InstanceSpec| {
        i.payment.is_none()
            && i.nodes == 1
            && i.retention_kept_bytes_max.is_none()
            && !edged(i.name)
            && (!sink.early_thaw || (!sunk(i.name) && i.queued_bytes.is_none()))
    };
    let Some(instance) = world.pick_instance(&mut rng, 0.25, fit) else {
        return;
    };
    world.kinds.0.push(sink.kind);
    let spec = (world.instances.iter_mut())
        .find(|i| i.name == instance)
        .expect("an eligible instance");
    let lease_ms = *LEASES_MS.choose(&mut rng).expect("leases");
    spec.lease_ms = spec.lease_ms.min(lease_ms);
    let heartbeat_ms =
        (spec.lease_ms * HEARTBEAT_LEASES).max(spec.heartbeat_timeout_ms.unwrap_or(0));
    spec.heartbeat_timeout_ms = Some(heartbeat_ms);
    let lease_ms = spec.lease_ms;
    world.workers.push(WorkerSpec {
        name: sink.name.into(),
        instance,
        capabilities: vec!["TASK"],
        slots: SINK_SLOTS,
        latency: "50".into(),
        faults: vec![],
        heartbeat: None,
        key_of: None,
        node: None,
        stream: false,
    });
    let events = timeline(&mut rng, sink, instance, lease_ms, heartbeat_ms);
    let at = super::floods::insertion_point(world, rng.gen_range(0..=world.events.len()));
    for (k, (after_ms, event)) in events.into_iter().enumerate() {
        world.events.insert(at + k, Timed { after_ms, event });
    }
}

/// The sink's freeze, its rounds of commits a lease apart, and its thaw.
fn timeline(
    rng: &mut ChaCha20Rng,
    sink: &Sink,
    instance: &'static str,
    lease_ms: u64,
    heartbeat_ms: u64,
) -> Vec<(u64, Event)> {
    let freeze = |frozen| Event::Freeze {
        worker: sink.name.into(),
        frozen,
    };
    let mut events = vec![(rng.gen_range(0..2_000), freeze(true))];
    for round in 0..HEARTBEAT_LEASES as u32 {
        let burst = FloodEvent {
            instance,
            commits: rng.gen_range(6..=8),
            input_bytes: rng.gen_range(100..=200) * 1024,
            index: 40_000 + round * 100,
        };
        let after_ms = if round == 0 { 50 } else { lease_ms };
        events.push((after_ms, Event::Flood(burst)));
    }
    if !sink.early_thaw {
        events.push((heartbeat_ms + rng.gen_range(2_000..=6_000), freeze(false)));
        return events;
    }
    // After round `rounds` (its outbox past its bound by then), a quarter
    // lease at most into the next: well inside the heartbeat timeout.
    let rounds = rng.gen_range(2..=3);
    let into_ms = rng.gen_range(0..=lease_ms / 4);
    let next = &mut events[rounds + 2].0;
    *next -= into_ms;
    events.insert(rounds + 2, (into_ms, freeze(false)));
    events
}
