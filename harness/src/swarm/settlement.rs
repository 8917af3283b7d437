//! The `settlement_faults` kind (issue 30, decision 0021): on instances
//! that settle through the scripted facilitator, the facilitator at random
//! moments refuses settlements (a payer whose balance vanished between
//! verify and settle: `refuse_settle`), answers them slowly (`slow_settle`)
//! or loses an answer (`lose_settle`). The always-on safety keys
//! `charged_for_failed_job`, `settled_twice` and `output_before_settlement`
//! judge the run; the end of the world heals the facilitator as for
//! `facilitator_failure`. After the first fault, 1 to [`POLLS_MAX`] `poll`
//! steps read the latest job shortly after a paid commit, while its
//! settlement may still be slow or lost: the one window in which a result
//! awaiting settlement exists, and so the one in which showing it early
//! (`output_before_settlement`) can be seen.
//!
//! In half of its worlds the paid instances' payment window is short
//! ([`WINDOWS_S`], against the coordinator's 60 s settle margin): a paid
//! job then has 10 to 30 s to be settled, so a job that waits for a worker
//! or a settlement that is slow runs into its payment's expiry, the states
//! `sometimes` names "a paid job's payment expired while it waited" and "a
//! payment expired before its settlement ended" (never reached with the
//! default 300 s window, which outlasts every pending timeout drawn).
//!
//! The kind draws from a stream of the seed's own ([`STREAM`]), after the
//! rest of the world is drawn, so a seed without it keeps its world exactly.

use super::spec::{Event, Kind, Timed, WorldSpec};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// The seed's ChaCha stream this kind draws from (the world's is 0,
/// `user_attacks`' 4, `cancels`' 5).
const STREAM: u64 = 6;
/// At most this many settlement faults in one world.
pub const FAULTS_MAX: usize = 3;
/// At most this many polls of a paid job in one world.
pub const POLLS_MAX: usize = 3;
/// The facilitator scripts it draws.
pub const SCRIPTS: [&str; 3] = ["refuse_settle", "slow_settle", "lose_settle"];
/// The short payment windows (`max_timeout_seconds`) it draws.
pub const WINDOWS_S: [u64; 2] = [70, 90];

/// Draws the kind for `world` (already drawn): whether it is on, and its
/// facilitator events in the timeline.
pub fn draw(world: &mut WorldSpec) {
    let mut rng = ChaCha20Rng::seed_from_u64(world.seed);
    rng.set_stream(STREAM);
    if !rng.gen_bool(0.3) {
        return;
    }
    let paid: Vec<&'static str> = world
        .instances
        .iter()
        .filter(|i| i.payment == Some("success"))
        .map(|i| i.name)
        .collect();
    if paid.is_empty() {
        return;
    }
    world.kinds.0.push(Kind::SettlementFaults);
    for _ in 0..rng.gen_range(1..=FAULTS_MAX) {
        let (Some(&instance), Some(&script)) = (paid.choose(&mut rng), SCRIPTS.choose(&mut rng))
        else {
            continue;
        };
        let at = rng.gen_range(0..=world.events.len());
        let after_ms = rng.gen_range(0..2_000);
        let event = Event::Facilitator { instance, script };
        world.events.insert(at, Timed { after_ms, event });
    }
    draw_polls(world, &mut rng);
    // Last from the stream, so the faults and polls stay as they were.
    if rng.gen_bool(0.5) {
        let window_s = *WINDOWS_S.choose(&mut rng).expect("windows");
        for instance in &mut world.instances {
            if instance.payment.is_some() {
                instance.payment_window_s = Some(window_s);
            }
        }
    }
}

/// Inserts the polls, each right after a random paid commit that follows
/// the first settlement fault (a worker answers within half a second, a
/// slow settlement takes 20 s), of the latest job of that commit's
/// instance and node. Drawn after the faults, from the same stream.
fn draw_polls(world: &mut WorldSpec, rng: &mut ChaCha20Rng) {
    let Some(first) =
        (world.events.iter()).position(|t| matches!(t.event, Event::Facilitator { .. }))
    else {
        return;
    };
    for _ in 0..rng.gen_range(1..=POLLS_MAX) {
        let commits: Vec<(usize, &'static str, u32)> = (world.events.iter().enumerate())
            .skip(first + 1)
            .filter_map(|(at, t)| match &t.event {
                Event::Commit(c) if c.pay.is_some() => Some((at, c.instance, c.node)),
                _ => None,
            })
            .collect();
        let Some(&(at, instance, node)) = commits.choose(rng) else {
            return;
        };
        let after_ms = rng.gen_range(0..3_000);
        let event = Event::Poll {
            instance,
            node,
            hold_ms: None,
            edge_ms: None,
        };
        world.events.insert(at + 1, Timed { after_ms, event });
    }
}
