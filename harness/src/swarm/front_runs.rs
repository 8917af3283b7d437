//! A payment spent elsewhere (sabotage `spent-elsewhere-counted-paid`),
//! under the `settlement_faults` kind: the scripted facilitator refuses the
//! next *first* `/settle` of a payment `invalid_exact_evm_nonce_already_used`
//! (`spent_elsewhere`, one-shot): a payer who front-runs, spending the
//! authorization elsewhere between `/verify` and the coordinator's first
//! settlement. Nothing was settled for this payee, so the job must fail
//! `payment_failed` and its output stay unseen (decision 0021: only a retry
//! after our own send may count "already used" as our settlement);
//! `output_before_settlement` judges a job shown or completed whose payment
//! the instance's ledger never settled.
//!
//! Only where the verdict is unambiguous: on one-node instances that no
//! process restart or crash reaches, in worlds without BUGGIFY (whose
//! writer crash is one). After a crash between the coordinator's durable
//! "sent" mark and its first `/settle`, its next send is a retry, and
//! decision 0021 deliberately counts "already used" after its own send as
//! its own settlement (a front-run then is indistinguishable): swarm seed
//! 22 of the first run, `output_before_settlement` on main.
//!
//! Drawn from a stream of the seed's own ([`STREAM`], which `cut_replays`
//! draws from next), after every other kind, and only in `settlement_faults` worlds (on their paid instances
//! settling through the facilitator); a seed without it keeps its world
//! exactly, and one with it keeps its other facilitator events.

use super::spec::{Event, Kind, Timed, WorldSpec};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// The seed's ChaCha stream this draw uses (the world's is 0).
const STREAM: u64 = 30;
/// At most this many front-runs in one world.
pub const FRONT_RUNS_MAX: usize = 2;

/// Draws the front-runs, then (from the same stream, after them, so they
/// stay as they are) `cut_replays`.
pub fn draw(world: &mut WorldSpec) {
    let mut rng = ChaCha20Rng::seed_from_u64(world.seed);
    rng.set_stream(STREAM);
    draw_front_runs(world, &mut rng);
    super::cut_replays::draw(world, &mut rng);
}

/// With probability 0.5, 1 to [`FRONT_RUNS_MAX`] `spent_elsewhere`
/// facilitator events at random places of the timeline.
fn draw_front_runs(world: &mut WorldSpec, rng: &mut ChaCha20Rng) {
    if !world.kinds.has(Kind::SettlementFaults) || !rng.gen_bool(0.5) {
        return;
    }
    if world.kinds.has(Kind::Buggify) {
        return;
    }
    let restarted = |name: &str| {
        (world.events.iter()).any(|t| match t.event {
            Event::Restart(i) | Event::GracefulRestart(i) => i == name,
            Event::CrashAfter { instance, .. } => instance == name,
            _ => false,
        })
    };
    let paid: Vec<&'static str> = (world.instances.iter())
        .filter(|i| i.payment == Some("success") && i.nodes == 1 && !restarted(i.name))
        .map(|i| i.name)
        .collect();
    for _ in 0..rng.gen_range(1..=FRONT_RUNS_MAX) {
        let Some(&instance) = paid.choose(rng) else {
            return;
        };
        let at = rng.gen_range(0..=world.events.len());
        let after_ms = rng.gen_range(0..2_000);
        let script = "spent_elsewhere";
        let event = Event::Facilitator { instance, script };
        world.events.insert(at, Timed { after_ms, event });
    }
}
