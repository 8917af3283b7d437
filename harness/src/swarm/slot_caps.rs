//! The `slot_caps` kind (sabotage `worker-slot-cap-ignores-new-session`):
//! the Sybils of the `sybils` kind declare several slots each, and their
//! instance caps the slots of one address's worker sessions together
//! (`limits.worker_slots_per_client_max`) below what its session cap
//! would let them hold: a cap of `m * slots` to `m * slots + slots - 1`,
//! with `m` fewer than the session cap, so the session that would cross
//! it is one the session cap still lets in. `sessions_over_cap`
//! (`crate::verify::sybils`) judges the slots of the sessions open at once
//! against it, from each worker's declared slots.
//!
//! The kind draws from a stream of the seed's own ([`STREAM`]), after the
//! rest of the world is drawn, so a seed without it keeps its world
//! exactly; it is drawn only where the `sybils` kind is on.

use super::spec::{Kind, WorldSpec};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// The seed's ChaCha stream this kind draws from (the world's is 0).
const STREAM: u64 = 43;
/// Slots each Sybil may declare.
const SLOTS_MAX: u32 = 64;

/// The Sybils' slots each, and their instance's per-address slot cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotCap {
    pub slots: u32,
    /// `limits.worker_slots_per_client_max`.
    pub per_client_max: u32,
}

/// Draws the kind for `world` (already drawn).
pub fn draw(world: &mut WorldSpec) {
    let mut rng = ChaCha20Rng::seed_from_u64(world.seed);
    rng.set_stream(STREAM);
    if !rng.gen_bool(0.7) {
        return;
    }
    let Some(instance) = (world.instances.iter_mut()).find(|i| i.sybils.is_some()) else {
        return;
    };
    // The cap holds for every address: at least the most slots any other
    // worker of the instance declares, or the heal finds it refused (swarm
    // seed 495 on the first draw, which ignored them).
    let others_max = (world.workers.iter())
        .filter(|w| w.instance == instance.name)
        .map(|w| w.slots)
        .max()
        .unwrap_or(1);
    if others_max > SLOTS_MAX {
        return;
    }
    let sybils = instance.sybils.as_mut().expect("found above");
    // Sessions that fit under the cap: fewer than the session cap allows,
    // so one more is refused only by the slots.
    let fit = rng.gen_range(1..sybils.per_client_max) as u32;
    let slots = rng.gen_range(others_max..=SLOTS_MAX);
    sybils.slot_cap = Some(SlotCap {
        slots,
        per_client_max: fit * slots + rng.gen_range(0..slots),
    });
    world.kinds.0.push(Kind::SlotCaps);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where drawn, the Sybils' sessions that fit the slot cap are fewer
    /// than the session cap and than the Sybils, and the table renders
    /// both.
    #[test]
    fn a_slot_cap_lets_in_fewer_sybils_than_the_session_cap() {
        let mut on = 0;
        for seed in 0..300 {
            let world = WorldSpec::generate(seed);
            let capped = (world.instances.iter()).find_map(|i| Some((i.sybils?, i.name)));
            let Some((s, name)) = capped.filter(|(s, _)| s.slot_cap.is_some()) else {
                assert!(!world.kinds.has(Kind::SlotCaps), "seed {seed}");
                continue;
            };
            on += 1;
            let c = s.slot_cap.expect("drawn");
            let fit = (c.per_client_max / c.slots) as usize;
            assert!(fit >= 1 && fit < s.per_client_max, "seed {seed}");
            assert!(fit < s.count as usize, "seed {seed}");
            let others_max = (world.workers.iter())
                .filter(|w| w.instance == name)
                .map(|w| w.slots)
                .max();
            assert!(others_max <= Some(c.per_client_max), "seed {seed}");
            let text = super::super::render::render(&world, "w", "test");
            let limit = format!("worker_slots_per_client_max = {}", c.per_client_max);
            assert!(text.contains(&limit), "seed {seed}");
            assert!(
                text.contains(&format!("slots = {}", c.slots)),
                "seed {seed}"
            );
        }
        assert!(on > 10, "{on} of 300 worlds cap the Sybils' slots");
    }
}
