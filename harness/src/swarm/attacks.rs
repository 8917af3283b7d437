//! The `user_attacks` kind: every instance runs with user auth on; the
//! users u0..u3 have keys (`[users]`), pair their workers with their proof
//! (codes bound to the worker's key) and sign their PRIVATE commits; an
//! attacker, `mallory`, who knows their ids and holds none of their keys,
//! tries to act for them (`attack` steps): pair a worker of its own to a
//! victim (a create without a proof, with its own key's proof naming the
//! victim or naming itself, a replay of
//! the victim's create, a claim of the victim's bound code read over its
//! shoulder), list a victim's workers, commit PRIVATE jobs as the victim.
//! After a pairing attack the victim commits PRIVATE jobs with its key:
//! had the attack got through, `private_to_unproven_pairing` sees them
//! reach the attacker's worker. A list or commit attack expects to be
//! refused (no safety key judges those).
//!
//! The kind draws from a stream of the seed's own ([`STREAM`]), after the
//! rest of the world is drawn, so a seed without it keeps its world
//! exactly. A seed with it keeps its instances, workers and timeline; its
//! plain-name PRIVATE work (router calls, PRIVATE workloads) is then
//! refused 401, which the world tolerates.

use super::spec::{Event, Timed, WorldSpec};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// The seed's ChaCha stream this kind draws from (the world's is 0).
const STREAM: u64 = 4;
/// At most this many attacks in one world.
pub const ATTACKS_MAX: usize = 4;
/// The attacker's user name (a `[users]` entry beside u0..u3).
pub const ATTACKER: &str = "mallory";
/// The victims: the swarm's users.
pub const USERS: [&str; 4] = ["u0", "u1", "u2", "u3"];

/// One attack of the timeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttackEvent {
    pub instance: &'static str,
    /// An `AttackKind` name (`create_without_proof`, ...), or
    /// [`super::paid_impostors::KIND`] (a paid `http` commit).
    pub kind: &'static str,
    pub victim: String,
    /// The attacker's worker (pairing attacks).
    pub worker: Option<String>,
    /// How many PRIVATE commits the victim makes after a pairing attack.
    pub commits: u32,
    /// Numbers the commits' payloads apart.
    pub index: u32,
    /// A `replay_create` sent this many ms from the end of the replayed
    /// proof's window (drawn by [`super::proof_edges`]).
    pub replay_edge_ms: Option<i64>,
}

impl AttackEvent {
    /// Whether it needs a code the victim created on the instance before
    /// (a replay of the create, or a claim of the code).
    pub fn needs_code(&self) -> bool {
        matches!(self.kind, "replay_create" | "claim_victim_code")
    }
}

/// Draws the kind for `world` (already drawn): whether it is on, the
/// intercepted pairings and the attacks in the timeline.
pub fn draw(world: &mut WorldSpec) {
    let mut rng = ChaCha20Rng::seed_from_u64(world.seed);
    rng.set_stream(STREAM);
    if !rng.gen_bool(0.3) {
        return;
    }
    world.kinds.0.push(super::spec::Kind::UserAttacks);
    world.user_auth = true;
    for k in 0..world.pairings.len() {
        if rng.gen_bool(0.3) {
            let (instance, user) = (world.pairings[k].instance, world.pairings[k].user.clone());
            world.pairings[k].intercept = attacker_worker(&mut rng, world, instance, &user);
        }
    }
    for n in 0..rng.gen_range(1..=ATTACKS_MAX) {
        let Some(attack) = draw_attack(&mut rng, world, n as u32) else {
            continue;
        };
        let at = rng.gen_range(0..=world.events.len());
        let after_ms = rng.gen_range(0..2_000);
        world.events.insert(
            at,
            Timed {
                after_ms,
                event: Event::Attack(attack),
            },
        );
    }
}

fn draw_attack(rng: &mut ChaCha20Rng, world: &WorldSpec, n: u32) -> Option<AttackEvent> {
    let instance = world.instances.choose(rng)?.name;
    let victim = USERS.choose(rng)?.to_string();
    let paired = world
        .pairings
        .iter()
        .any(|p| p.instance == instance && p.user == victim);
    let mut kinds = vec![
        "create_without_proof",
        "create_with_wrong_key",
        "create_with_own_proof",
        "list_without_proof",
        "commit_as_victim",
    ];
    if paired {
        kinds.extend(["replay_create", "claim_victim_code"]);
    }
    let kind = *kinds.choose(rng)?;
    let pairs = !matches!(kind, "list_without_proof" | "commit_as_victim");
    let worker = if pairs {
        Some(attacker_worker(rng, world, instance, &victim)?)
    } else {
        None
    };
    Some(AttackEvent {
        instance,
        kind,
        victim,
        worker,
        commits: if pairs { rng.gen_range(1..=3) } else { 0 },
        index: 10_000 + n * 10,
        replay_edge_ms: None,
    })
}

/// The seed's ChaCha stream [`draw_unproven`] draws from.
const UNPROVEN_STREAM: u64 = 48;

/// In `user_attacks` worlds, on each instance without payments with
/// probability 0.5, a PRIVATE commit in a victim's name with no proof at
/// all (`commit_without_proof`), expected refused; `private_commit_unproven`
/// judges the store too (held-out set 7: a proof skipped for commits
/// without one, as if a payment proved them, on unpaid deployments). Drawn
/// last from a stream of its own, so seeds keep their worlds.
pub fn draw_unproven(world: &mut WorldSpec) {
    if !world.kinds.has(super::spec::Kind::UserAttacks) {
        return;
    }
    let mut rng = ChaCha20Rng::seed_from_u64(world.seed);
    rng.set_stream(UNPROVEN_STREAM);
    let unpaid: Vec<&'static str> = (world.instances.iter())
        .filter(|i| i.payment.is_none())
        .map(|i| i.name)
        .collect();
    for (n, instance) in unpaid.into_iter().enumerate() {
        if !rng.gen_bool(0.5) {
            continue;
        }
        let Some(victim) = USERS.choose(&mut rng) else {
            continue;
        };
        let attack = AttackEvent {
            instance,
            kind: "commit_without_proof",
            victim: victim.to_string(),
            worker: None,
            commits: 0,
            index: 10_500 + n as u32,
            replay_edge_ms: None,
        };
        // Right after one of the kind's own attacks: the kinds drawn after
        // `user_attacks` placed their blocks around those (a timeline's
        // end, a commit and its retry side by side, `proof_edges`' replays,
        // which are attacks too), and this keeps them whole.
        let attacks: Vec<usize> = (world.events.iter().enumerate())
            .filter(|(_, t)| match &t.event {
                Event::Attack(a) => {
                    a.replay_edge_ms.is_none() && a.kind != super::paid_impostors::KIND
                }
                _ => false,
            })
            .map(|(i, _)| i)
            .collect();
        let Some(&after) = attacks.choose(&mut rng) else {
            return;
        };
        let after_ms = rng.gen_range(0..2_000);
        let event = Event::Attack(attack);
        world.events.insert(after + 1, Timed { after_ms, event });
    }
}

/// An honest worker of `instance` that `victim` did not pair: the one the
/// attacker would like trusted (and the one a late honest pairing pairs,
/// `super::pairings`).
pub(super) fn attacker_worker(
    rng: &mut ChaCha20Rng,
    world: &WorldSpec,
    instance: &str,
    victim: &str,
) -> Option<String> {
    let candidates: Vec<&String> = world
        .workers
        .iter()
        .filter(|w| w.instance == instance && w.honest())
        .map(|w| &w.name)
        .filter(|name| {
            !world
                .pairings
                .iter()
                .any(|p| p.instance == instance && p.user == victim && p.worker == **name)
        })
        .collect();
    candidates.choose(rng).map(|name| (*name).clone())
}
