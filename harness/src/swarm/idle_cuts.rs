//! The `idle_cuts` kind (judged by `node_acted_unowned`): a cluster node
//! with no workload of its own loses the shared store while its only worker
//! holds a job. A node of its own is added to a cluster of two; one worker
//! ([`IDLER`], one slot, TASK only) connects to it and holds every job
//! without answering (the `silent` fault: a worker stuck on a job, still
//! heartbeating), and one public TASK commit goes to that node, so the node
//! assigns it to the idler at once. Then the node is cut from the shared
//! store so that the job's lease lapses [`LAPSE_TENTHS`] tenths of a node
//! lease into the cut, and the cut lasts [`CUT_LEASES`] node leases.
//!
//! The world it models: a node in a quiet hour, whose link to the
//! database breaks while its worker is stuck. It writes nothing during the
//! cut until the lease lapses, so only its lease task sees the cut; by
//! docs/cluster.md it fences itself at half a node lease without renewal,
//! before its node lease lapses and another node takes the job over (a
//! lease and at most a renewal period after its last renewal). When the
//! job's lease lapses the node gives the job to the idler again (its only
//! free worker), an `assign` that `node_acted_unowned` judges against the
//! shared store's owner at that moment: a node still acting then acts for
//! a job another node owns.
//!
//! The kind draws from a stream of the seed's own ([`STREAM`]), after the
//! rest of the world is drawn, so a seed without it keeps its world
//! exactly.

use super::spec::{Commit, Event, InstanceSpec, JobFaultSpec, Kind, Timed, WorkerSpec, WorldSpec};
use crate::spec::NODES_MAX;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// The seed's ChaCha stream this kind draws from (the world's is 0).
const STREAM: u64 = 24;
/// The worker stuck on its job.
pub const IDLER: &str = "idler";
/// The commit's job index (names the job in the transcript).
const INDEX: u32 = 61_000;
/// The job's lease lapses this many tenths of a node lease into the cut:
/// past the take-over (a node lease and a renewal period, a third, late
/// by at most an eighth, after the last renewal, itself at most a third
/// and an eighth before the cut) and before two node leases.
const LAPSE_TENTHS: u64 = 15;
/// The cut lasts this many node leases: past the lapse, and past any
/// self-fence a node could still be waiting for.
const CUT_LEASES: u64 = 3;
/// The commit is answered and its write committed within this long, before
/// the cut begins.
const COMMIT_SETTLED_MS: u64 = 500;

/// Draws the kind for `world` (already drawn).
pub fn draw(world: &mut WorldSpec) {
    let mut rng = ChaCha20Rng::seed_from_u64(world.seed);
    rng.set_stream(STREAM);
    let fit = |i: &InstanceSpec| {
        (2..NODES_MAX).contains(&i.nodes)
            && i.attempts_max >= 2
            && i.lease_ms >= lapse_into_cut_ms(i) + COMMIT_SETTLED_MS
    };
    let Some(instance) = world.pick_instance(&mut rng, 0.5, fit) else {
        return;
    };
    world.kinds.0.push(Kind::IdleCuts);
    let spec = (world.instances.iter_mut())
        .find(|i| i.name == instance)
        .expect("an eligible instance");
    let node = spec.nodes;
    spec.nodes += 1;
    let spec = spec.clone();
    world.workers.push(idler(instance, node));
    let commit = Commit {
        instance,
        tier: if rng.gen_bool(0.5) { "fast" } else { "cheap" },
        job_type: "TASK",
        user: format!("u{}", rng.gen_range(0..4)),
        private: false,
        pay: spec.payment.map(|_| "none"),
        index: INDEX,
        node,
    };
    let cut = Event::StorePartition {
        instance,
        node,
        for_ms: CUT_LEASES * spec.node_lease_ms,
    };
    let at = super::floods::insertion_point(world, rng.gen_range(0..=world.events.len()));
    let events = [
        Timed {
            after_ms: 0,
            event: Event::Commit(commit),
        },
        Timed {
            after_ms: spec.lease_ms - lapse_into_cut_ms(&spec),
            event: cut,
        },
    ];
    world.events.splice(at..at, events);
}

/// How far into the cut the job's lease lapses, in ms.
fn lapse_into_cut_ms(i: &InstanceSpec) -> u64 {
    i.node_lease_ms * LAPSE_TENTHS / 10
}

/// The idler: one slot, TASK only, silent on every job.
fn idler(instance: &'static str, node: u32) -> WorkerSpec {
    WorkerSpec {
        name: IDLER.into(),
        instance,
        capabilities: vec!["TASK"],
        slots: 1,
        latency: "50".into(),
        faults: vec![JobFaultSpec {
            toml: "kind = \"silent\"".into(),
            percent: 100,
        }],
        heartbeat: None,
        key_of: None,
        node: Some(node),
        stream: false,
    }
}
