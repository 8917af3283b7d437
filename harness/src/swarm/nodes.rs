//! Several-node worlds, the `several_nodes` kind: instances become clusters
//! of 2 or 3 coordinator nodes on one shared store (see scenarios/README.md,
//! "Several nodes"); workers, commits, payment replays and pairing claims
//! are spread over the nodes; node crashes (restarted after a downtime) and
//! store partitions (healed after a while) join the timeline.
//!
//! The kind draws from a stream of the seed's own ([`STREAM`]), after the
//! rest of the world is drawn, so a seed's other draws are exactly what they
//! were before the kind existed: a seed without it has the same world, one
//! with it the same world spread over nodes.
//!
//! Not combined with `crash_after` (it arms a single node's SQLite write):
//! an instance with an armed crash stays a single coordinator. Whole-
//! instance faults keep acting where the scenario language puts them:
//! restarts, graceful restarts and reboots on node 0, workloads and router
//! calls through node 0, link faults on the worker's own node.

use super::spec::{Event, InstanceSpec, Kind, Timed, WorldSpec};
use crate::spec::NODES_MAX;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;
use std::ops::RangeInclusive;

/// The seed's ChaCha stream this kind draws from (the world's is 0).
const STREAM: u64 = 1;
/// Node leases drawn, in ms.
const LEASE_MS: RangeInclusive<u64> = 1_000..=5_000;
/// At most this many node crashes and store partitions in one world.
pub const NODE_EVENTS_MAX: u32 = 4;
/// A node's downtime or store cut lasts at least this long, and at most
/// [`DISRUPTION_LEASES_MAX`] of its leases: shorter than half a lease it is
/// not fenced, shorter than a lease it keeps its jobs, longer the others
/// take them over.
const DISRUPTION_MIN_MS: u64 = 200;
const DISRUPTION_LEASES_MAX: u64 = 3;
/// After a node's downtime or store cut: the supervisor's retry to rejoin
/// (every second) and a claim round of the nodes (about a second).
const REJOIN_AND_CLAIM_MS: u64 = 2_000;

/// Draws the kind for `world` (already drawn): whether it is on, which
/// instances become clusters, and the nodes of everything.
pub fn draw(world: &mut WorldSpec) {
    let mut rng = ChaCha20Rng::seed_from_u64(world.seed);
    rng.set_stream(STREAM);
    if !rng.gen_bool(0.5) {
        return;
    }
    let armed: Vec<&'static str> = world
        .events
        .iter()
        .filter_map(|t| match t.event {
            Event::CrashAfter { instance, .. } => Some(instance),
            _ => None,
        })
        .collect();
    for i in &mut world.instances {
        if !armed.contains(&i.name) {
            i.nodes = rng.gen_range(2..=NODES_MAX);
            i.node_lease_ms = rng.gen_range(LEASE_MS);
        }
    }
    let clusters: Vec<InstanceSpec> = world
        .instances
        .iter()
        .filter(|i| i.nodes > 1)
        .cloned()
        .collect();
    if clusters.is_empty() {
        return;
    }
    spread(&mut rng, world);
    for _ in 0..rng.gen_range(1..=NODE_EVENTS_MAX) {
        let i = clusters.choose(&mut rng).expect("a cluster");
        let node = rng.gen_range(0..i.nodes);
        let ms = rng.gen_range(DISRUPTION_MIN_MS..=DISRUPTION_LEASES_MAX * i.node_lease_ms);
        // Crashes and store cuts two in five each, a lost answer one.
        let event = match rng.gen_range(0..5) {
            0 | 1 => Event::NodeCrash {
                instance: i.name,
                node,
                down_ms: ms,
            },
            2 | 3 => Event::StorePartition {
                instance: i.name,
                node,
                for_ms: ms,
            },
            _ => Event::LostAnswer {
                instance: i.name,
                node,
            },
        };
        let at = rng.gen_range(0..=world.events.len());
        world.events.insert(at, Timed { after_ms: 0, event });
    }
    world.kinds.0.push(Kind::Nodes);
}

/// Puts each worker, commit, replay and pairing claim of a cluster on a
/// node drawn uniformly; a worker's twin on its original's node.
fn spread(rng: &mut ChaCha20Rng, world: &mut WorldSpec) {
    let of = node_counts(world);
    for k in 0..world.workers.len() {
        let n = of(world.workers[k].instance);
        if n < 2 {
            continue;
        }
        let node = match &world.workers[k].key_of {
            Some(original) => world
                .workers
                .iter()
                .find(|w| w.name == *original)
                .and_then(|w| w.node)
                .unwrap_or(0),
            None => rng.gen_range(0..n),
        };
        world.workers[k].node = Some(node);
    }
    for p in &mut world.pairings {
        p.claim_node = rng.gen_range(0..of(p.instance));
    }
    for t in &mut world.events {
        match &mut t.event {
            Event::Commit(c) => c.node = rng.gen_range(0..of(c.instance)),
            Event::Replay { instance, node, .. } => *node = rng.gen_range(0..of(instance)),
            _ => {}
        }
    }
}

/// How many nodes each instance has, by name (1 for an unknown name),
/// apart from `world`, so that it can be changed meanwhile.
fn node_counts(world: &WorldSpec) -> impl Fn(&str) -> u32 {
    let nodes: Vec<(&'static str, u32)> =
        world.instances.iter().map(|i| (i.name, i.nodes)).collect();
    move |name| {
        nodes
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(1, |(_, k)| *k)
    }
}

/// Keeps node indices valid after shrinking removed nodes: a worker,
/// commit, replay or claim on a node that is gone moves to node `index mod
/// nodes`; a single coordinator's workers name no node. (Node crashes and
/// store partitions of a node that is gone are dropped by
/// [`WorldSpec::normalize`].)
pub fn normalize(world: &mut WorldSpec) {
    let of = node_counts(world);
    for w in &mut world.workers {
        let n = of(w.instance);
        w.node = (n > 1).then(|| w.node.unwrap_or(0) % n);
    }
    for p in &mut world.pairings {
        p.claim_node %= of(p.instance);
    }
    for t in &mut world.events {
        match &mut t.event {
            Event::Commit(c) => c.node %= of(c.instance),
            Event::Replay { instance, node, .. } => *node %= of(instance),
            Event::Cancel { instance, node } | Event::Poll { instance, node, .. } => {
                *node %= of(instance)
            }
            Event::Read(r) => r.node %= of(r.instance),
            Event::PaidRetry(r) => r.commit.node %= of(r.commit.instance),
            _ => {}
        }
    }
}

/// What the heal must wait beyond a single coordinator's longest job on a
/// cluster: the longest downtime or store cut of one of its nodes (which
/// may start as the timeline ends), the node lease lapsing (before the
/// others take its jobs over), and the rejoin and a claim round.
pub fn heal_extra_ms(world: &WorldSpec, i: &InstanceSpec) -> u64 {
    if i.nodes < 2 {
        return 0;
    }
    let longest_ms = world
        .events
        .iter()
        .filter_map(|t| match t.event {
            Event::NodeCrash {
                instance, down_ms, ..
            } if instance == i.name => Some(down_ms),
            Event::StorePartition {
                instance, for_ms, ..
            } if instance == i.name => Some(for_ms),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    longest_ms + i.node_lease_ms + REJOIN_AND_CLAIM_MS
}
