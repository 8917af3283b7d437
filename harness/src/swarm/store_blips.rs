//! The `store_blips` kind (sabotage `lease-renewal-time-not-kept`):
//! short store cuts of one cluster node, each shorter than a sixth of its
//! node lease, so that at most one of its lease renewals fails in each
//! (renewals come every third of the lease). The world it models: a
//! healthy node whose database connection drops one answer now and then.
//! By docs/cluster.md a node fences itself only once it could not renew
//! for half its lease, so a blip never fences an honest node; a node that
//! forgot when it last renewed would fence at the first failed renewal.
//! `node_fenced_early` (`crate::verify::fences`) judges each fence against
//! the cuts before it. The blips come after the node has run for half a
//! lease at least ([`SETTLE_LEASES`]), when the forgotten time matters.
//!
//! Drawn from a stream of the seed's own ([`STREAM`]), after every other
//! kind but `long_retention`, so a seed without it keeps its world exactly.

use super::spec::{Event, InstanceSpec, Kind, Timed, WorldSpec};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// The seed's ChaCha stream this kind draws from (the world's is 0).
const STREAM: u64 = 39;
/// At least and at most this many blips in one world.
const BLIPS_MIN: u32 = 2;
pub const BLIPS_MAX: u32 = 5;
/// The first blip comes at least this many node leases into the timeline
/// (a node is not fenced for want of a renewal before half a lease).
const SETTLE_LEASES: u64 = 1;

/// Draws the kind for `world` (already drawn): whether it is on, and its
/// blips in the timeline.
pub fn draw(world: &mut WorldSpec) {
    let mut rng = ChaCha20Rng::seed_from_u64(world.seed);
    rng.set_stream(STREAM);
    if !rng.gen_bool(0.4) {
        return;
    }
    let clusters: Vec<InstanceSpec> = (world.instances.iter())
        .filter(|i| i.nodes > 1)
        .cloned()
        .collect();
    let Some(instance) = clusters.choose(&mut rng) else {
        return;
    };
    world.kinds.0.push(Kind::StoreBlips);
    let node = rng.gen_range(0..instance.nodes);
    let lease_ms = instance.node_lease_ms;
    // Blips from a twelfth to just under a sixth of the lease: one
    // renewal at most falls in each.
    let blip_ms = (lease_ms / 12).max(1)..(lease_ms / 6).max(2);
    // Each blip at a place of its own in the timeline, a while after the
    // event before it; the first one a lease in.
    let mut at = 0;
    let mut first = true;
    for _ in 0..rng.gen_range(BLIPS_MIN..=BLIPS_MAX) {
        at = rng.gen_range(at..=world.events.len());
        let settle_ms = if first { SETTLE_LEASES * lease_ms } else { 0 };
        first = false;
        let after_ms = settle_ms + rng.gen_range(0..lease_ms);
        let event = Event::StorePartition {
            instance: instance.name,
            node,
            for_ms: rng.gen_range(blip_ms.clone()),
        };
        world.events.insert(at, Timed { after_ms, event });
        at += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn some_cluster_worlds_cut_one_node_briefly_a_lease_in() {
        let mut drawn = 0;
        for seed in 0..300 {
            let world = WorldSpec::generate(seed);
            if !world.kinds.has(Kind::StoreBlips) {
                continue;
            }
            drawn += 1;
            // Blips a node lease into the timeline at least (the nodes
            // kind's own cuts may be short too, and come anywhere).
            let mut elapsed_ms = 0;
            let mut blips = 0;
            for t in &world.events {
                elapsed_ms += t.after_ms;
                if let Event::StorePartition {
                    instance, for_ms, ..
                } = t.event
                {
                    let lease_ms = lease_of(&world, instance);
                    blips += usize::from(for_ms * 6 < lease_ms && elapsed_ms >= lease_ms);
                }
            }
            assert!(blips >= BLIPS_MIN as usize, "seed {seed}");
        }
        assert!(drawn > 5, "{drawn} worlds drew store_blips");
    }

    fn lease_of(world: &WorldSpec, name: &str) -> u64 {
        let i = world.instances.iter().find(|i| i.name == name);
        i.expect("its instance").node_lease_ms
    }
}
