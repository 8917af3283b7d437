//! The `overclaims` kind: on a world with user auth off, an attacker reads
//! an honest user's plain pairing code over its shoulder and claims it for
//! a worker of its own *after* the owner's worker claimed it; the victim
//! then commits PRIVATE jobs, which a second claim answered 200 would let
//! reach the attacker's worker. The safety key `pairing_claimed_twice`
//! judges the transcript: no pairing code is answered 200 by two
//! `/v1/trust/claim` requests (the code is single-use, spec: "a code can be
//! claimed once").
//!
//! The kind draws from a stream of the seed's own ([`STREAM`]), after every
//! other kind, so a seed without it keeps its world exactly; one with it
//! keeps its instances, workers and timeline, with the second claims added
//! to the set-up and the victim's commits put first in the timeline.
//! Some overclaimed pairings have a coordinator restart between the two
//! claims (drawn last on the stream): a claim answered 200 but not kept
//! would leave the code claimable again.

use super::attacks::attacker_worker;
use super::spec::{Commit, Event, Kind, Timed, WorldSpec};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// The seed's ChaCha stream this kind draws from (the world's is 0).
const STREAM: u64 = 20;
/// At most this many PRIVATE commits of a victim after its code was
/// claimed again.
pub const COMMITS_MAX: u32 = 3;
/// How often an overclaimed pairing has a restart between its claims.
const RESTART_P: f64 = 0.4;

/// Draws the kind for `world` (already drawn): in a third of the worlds
/// with plain pairings, each pairing's code is claimed again by an
/// attacker's worker with probability one half.
pub fn draw(world: &mut WorldSpec) {
    let mut rng = ChaCha20Rng::seed_from_u64(world.seed);
    rng.set_stream(STREAM);
    if world.user_auth || world.pairings.is_empty() || !rng.gen_bool(0.3) {
        return;
    }
    let mut drawn = false;
    for k in 0..world.pairings.len() {
        if !rng.gen_bool(0.5) {
            continue;
        }
        let (instance, user) = (world.pairings[k].instance, world.pairings[k].user.clone());
        let Some(worker) = attacker_worker(&mut rng, world, instance, &user) else {
            continue;
        };
        world.pairings[k].overclaim = Some(worker);
        drawn = true;
        let payment = world.instances.iter().find(|i| i.name == instance);
        let pay = payment.and_then(|i| i.payment).map(|_| "none");
        for n in 0..rng.gen_range(1..=COMMITS_MAX) {
            let commit = Commit {
                instance,
                tier: if rng.gen_bool(0.5) { "fast" } else { "cheap" },
                job_type: "TASK",
                user: user.clone(),
                private: true,
                pay,
                index: 20_000 + (k as u32) * 10 + n,
                node: 0,
            };
            let event = Event::Commit(commit);
            world.events.insert(0, Timed { after_ms: 0, event });
        }
    }
    if drawn {
        world.kinds.0.push(Kind::Overclaims);
        draw_restarts(&mut rng, world);
    }
}

/// An operator's restart (a deploy, a crash) between the owner's claim and
/// the attacker's, so a claim that was answered but not kept by the store
/// is seen when the code is claimed again. Drawn after every other draw of
/// this stream, so a world without it keeps the rest of its overclaims
/// exactly.
fn draw_restarts(rng: &mut ChaCha20Rng, world: &mut WorldSpec) {
    for p in world.pairings.iter_mut().filter(|p| p.overclaim.is_some()) {
        p.overclaim_restart = rng.gen_bool(RESTART_P);
    }
}
