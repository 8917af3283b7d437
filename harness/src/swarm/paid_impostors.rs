//! Paid impostors (sabotage `paid-private-by-any-payer`): in a
//! `user_attacks` world with a paid instance, the attacker commits a
//! PRIVATE job in a victim's name with no `X-User-Proof`, paid from its own
//! funded wallet (the scenario payer, whose address is no user's). The
//! coordinator takes a paid commit without a proof as the user's only when
//! the verified payer is the user's own address (`api/jobs.rs`
//! `paid_by_the_user`), so this one must be refused; one that gets a job id
//! would run the attacker's work as the victim on the victim's paired
//! workers. The step's expectation (no `job_id` in the answer, whatever the
//! refusal) judges it.
//!
//! Models a real party: a stranger who knows a victim's public user id and
//! has money of its own. Drawn from a stream of the seed's own
//! ([`STREAM`]), after the `user_attacks` draw, so a world without it keeps
//! its world exactly.

use super::attacks::{AttackEvent, USERS};
use super::spec::{Event, Kind, Timed, WorldSpec};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// The seed's ChaCha stream this draw uses (the world's is 0).
const STREAM: u64 = 31;
/// The attack's kind name (rendered as a paid `http` commit, not as an
/// `attack` step: the attack step sends no payment).
pub const KIND: &str = "paid_commit_as_victim";
/// At most this many such commits in one world.
const COMMITS_MAX: u32 = 2;

/// Draws the commits for `world` (already drawn): in half the
/// `user_attacks` worlds with a paid instance, one or two.
pub fn draw(world: &mut WorldSpec) {
    let mut rng = ChaCha20Rng::seed_from_u64(world.seed);
    rng.set_stream(STREAM);
    let paid: Vec<&'static str> = (world.instances.iter())
        .filter(|i| i.payment.is_some())
        .map(|i| i.name)
        .collect();
    if !world.kinds.has(Kind::UserAttacks) || paid.is_empty() || !rng.gen_bool(0.5) {
        return;
    }
    for n in 0..rng.gen_range(1..=COMMITS_MAX) {
        let attack = AttackEvent {
            instance: paid.choose(&mut rng).expect("a paid instance"),
            kind: KIND,
            victim: USERS.choose(&mut rng).expect("a user").to_string(),
            worker: None,
            commits: 0,
            index: 30_000 + n,
            replay_edge_ms: None,
        };
        let Some(at) = super::code_edges::before_a_commit(&mut rng, world) else {
            return;
        };
        let after_ms = rng.gen_range(0..2_000);
        let event = Event::Attack(attack);
        world.events.insert(at, Timed { after_ms, event });
    }
}

/// The commit: the victim's account as `user_id`, PRIVATE, no proof, paid
/// by the scenario payer from the attacker's own client address.
pub fn render(w: &mut String, a: &AttackEvent) {
    use std::fmt::Write as _;
    let _ = writeln!(
        w,
        "\n[[steps]]\nname = \"attack: {KIND} on {victim}\"\nhttp = {{ instance = {instance:?}, method = \"POST\", path = \"/v1/jobs/commit/fast\", body = {{ job_type = \"TASK\", user_id = \"{{{{user.{victim}}}}}\", privacy_class = \"PRIVATE\", payload = {{ task_type = \"classify\", input = \"job {index}\" }} }}, client = {attacker:?}, pay = {{}} }}\nexpect = {{ body = {{ job_id = \"absent_or_null\" }} }}",
        victim = a.victim,
        instance = a.instance,
        index = a.index,
        attacker = super::attacks::ATTACKER,
    );
}
