//! The `sybils` kind: Sybil worker sessions (decision 0019). On one
//! instance of one node, a group of workers ([`SYBIL`]-0, -1, ...) dial
//! from one client address of their own and reject every job they are
//! offered (or say nothing of it, and let its lease lapse); there are more
//! of them than the instance's small per-address session cap
//! (`limits.worker_sessions_per_client_max`). `sessions_over_cap` holds the
//! instance to never holding more of their sessions at once than the cap;
//! `job_end_overdue` and the heal hold the honest jobs to ending, and the
//! heal's commits to completing on the honest workers.
//!
//! The kind draws from a stream of the seed's own ([`STREAM`]), after the
//! rest of the world is drawn, so a seed without it keeps its world
//! exactly.

use super::spec::{Kind, WorldSpec};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// The seed's ChaCha stream this kind draws from (the world's is 0).
const STREAM: u64 = 14;
/// The Sybils' name (`sybil-0`, ...) and their client address's.
pub const SYBIL: &str = "sybil";

/// The Sybils of an instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sybils {
    /// How many workers dial from the one address.
    pub count: u32,
    /// `limits.worker_sessions_per_client_max` of the instance.
    pub per_client_max: usize,
    /// Each rejects its jobs (`true`) or stays silent on them.
    pub reject: bool,
    /// Their slots each and the instance's per-address slot cap, when
    /// drawn (by [`super::slot_caps`]); `None`: one slot each, the
    /// default cap.
    pub slot_cap: Option<super::slot_caps::SlotCap>,
}

/// Draws the kind for `world` (already drawn).
pub fn draw(world: &mut WorldSpec) {
    let mut rng = ChaCha20Rng::seed_from_u64(world.seed);
    rng.set_stream(STREAM);
    let Some(instance) = world.pick_instance(&mut rng, 0.3, |i| i.nodes == 1) else {
        return;
    };
    world.kinds.0.push(Kind::Sybils);
    let per_client_max = rng.gen_range(2..=4);
    let sybils = Sybils {
        count: per_client_max as u32 + rng.gen_range(1..=4),
        per_client_max,
        reject: rng.gen_bool(0.7),
        slot_cap: None,
    };
    let spec = (world.instances.iter_mut())
        .find(|i| i.name == instance)
        .expect("an eligible instance");
    spec.sybils = Some(sybils);
}

/// The workers table of an instance's Sybils.
pub fn render(instance: &str, s: &Sybils) -> String {
    let fault = match s.reject {
        true => "kind = \"reject\"",
        false => "kind = \"silent\"",
    };
    let slots = s
        .slot_cap
        .map_or(String::new(), |c| format!("slots = {}\n", c.slots));
    format!(
        "\n[[workers]]\nname = \"{SYBIL}\"\ncount = {}\ninstance = {instance:?}\nclient = \"{SYBIL}\"\n{slots}latency = \"10\"\nfaults = {{ random = [{{ probability = 1.0, {fault} }}] }}\n",
        s.count
    )
}
