//! The `poll_hoards` kind: long-poll hoarding. On a one-node instance with
//! small held-poll bounds (`limits.held_polls_max` and
//! `limits.held_polls_per_client_max`, drawn here), 2 to 4 hoarders, each a
//! client of its own address, send bursts of long polls
//! (`GET /v1/jobs/{id}?wait_ms=N`, a `poll` step with `count`) of each of
//! two jobs committed at once (polled while unfinished), more than a client's
//! bound, and together more than the total; an honest poll of the scenario
//! client follows each burst. The bound in all is then reached, so a
//! newcomer's poll takes the place of the heaviest hoarder's oldest
//! (answered early, the `sometimes` point "a held poll was answered early
//! to make room").
//!
//! Judged by `held_polls_over_cap` (no client holds more than its bound,
//! nobody more than the total, and every poll is answered with its job,
//! never refused: from the answers the clients see),
//! `resource_bound_exceeded` (the shell's own count of the same), and
//! `poll_not_woken` (the honest poll answers on its job's change or at
//! its deadline, hoarders or not).
//!
//! The kind draws from a stream of the seed's own ([`STREAM`]), after the
//! rest of the world is drawn, so a seed without it keeps its world
//! exactly.

use super::edges::public_commit;
use super::held_polls::WAIT_MS_MAX;
use super::spec::{Event, InstanceSpec, Kind, Timed, WorldSpec};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// The seed's ChaCha stream this kind draws from (the world's is 0).
const STREAM: u64 = 18;
/// The hoarders' client names, one address each.
pub const HOARDERS: [&str; 4] = ["hoarder0", "hoarder1", "hoarder2", "hoarder3"];
/// At most this many bursts in one world.
pub const BURSTS_MAX: u32 = 3;
/// The commits' indexes (their bodies' `input`), apart from the
/// timeline's and the other kinds'.
const INDEX: u32 = 70_000;

/// A burst of one hoarder's held polls of the latest job (a `poll` step
/// with `count`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HoardEvent {
    pub instance: &'static str,
    pub client: &'static str,
    pub count: u32,
    pub wait_ms: u64,
}

/// Draws the kind for `world` (already drawn).
pub fn draw(world: &mut WorldSpec) {
    let mut rng = ChaCha20Rng::seed_from_u64(world.seed);
    rng.set_stream(STREAM);
    // One node (a poll of a job another node holds waits on the remote
    // watch, and `poll_not_woken` judges one-node instances); no
    // connection bounds (they would cut the hoarders before their polls).
    let fit = |i: &InstanceSpec| i.nodes == 1 && i.http_bounds.is_none();
    let Some(instance) = world.pick_instance(&mut rng, 0.3, fit) else {
        return;
    };
    world.kinds.0.push(Kind::PollHoards);
    let hoarders = rng.gen_range(2..=HOARDERS.len());
    let bursts = rng.gen_range(1..=BURSTS_MAX);
    // Above what the scenario client may hold, so a hoarder is the
    // heaviest client when the total is reached.
    let honest = honest_polls(world, instance) + bursts as usize;
    let per_client = rng.gen_range(3..=6).max(honest + 2);
    let total = rng.gen_range((hoarders + 1).max(per_client + 1)..=hoarders * per_client);
    let spec = (world.instances.iter_mut())
        .find(|i| i.name == instance)
        .expect("an eligible instance");
    spec.held_polls = Some((total, per_client));
    let cycle_ms = spec.pending_timeout_ms + spec.lease_ms;
    let paid = spec.payment.is_some();
    for burst in 0..bursts {
        let shape = Burst {
            instance,
            hoarders,
            per_client,
            cycle_ms,
            paid,
        };
        let events = draw_burst(&mut rng, &shape, INDEX + burst * 10);
        let at = super::floods::insertion_point(world, rng.gen_range(0..=world.events.len()));
        let at = super::deadlines::outside_edge_polls(world, at);
        let after_ms = rng.gen_range(0..2_000);
        let timed = events.into_iter().enumerate().map(|(k, event)| Timed {
            after_ms: if k == 0 { after_ms } else { 0 },
            event,
        });
        world.events.splice(at..at, timed);
    }
}

/// What every burst of a world shares.
struct Burst {
    instance: &'static str,
    hoarders: usize,
    per_client: usize,
    /// One pending timeout and lease of the instance.
    cycle_ms: u64,
    paid: bool,
}

/// One burst's events, its commits numbered from `index`.
fn draw_burst(rng: &mut ChaCha20Rng, b: &Burst, index: u32) -> Vec<Event> {
    let mut events = Vec::new();
    // Two jobs committed in one instant, each polled at once by every
    // hoarder while it is unfinished (a finished job's poll is answered
    // at once): together more than a client's bound, each alone at times
    // more, at times less.
    for part in 0..2 {
        events.push(Event::Commit(public_commit(
            rng,
            b.instance,
            index + part,
            b.paid.then_some("none"),
        )));
        for client in &HOARDERS[..b.hoarders] {
            let count = rng.gen_range(b.per_client / 2 + 1..=2 * b.per_client) as u32;
            let wait_ms = rng.gen_range(1..WAIT_MS_MAX) | 1;
            let hoard = HoardEvent {
                instance: b.instance,
                client,
                count,
                wait_ms,
            };
            events.push(Event::Hoard(hoard));
        }
    }
    // As the `held_polls` kind's: past one pending timeout and lease where
    // the bound allows, so a failure lands inside it.
    let low_ms = b.cycle_ms.min(WAIT_MS_MAX / 2);
    let wait_ms = rng.gen_range(low_ms..=WAIT_MS_MAX) | 1;
    events.push(Event::Poll {
        instance: b.instance,
        node: 0,
        hold_ms: Some(wait_ms.min(WAIT_MS_MAX - 1)),
        edge_ms: None,
    });
    events
}

/// The held polls of the scenario client the world already sends to
/// `instance` (the `held_polls` and `poll_deadlines` kinds').
fn honest_polls(world: &WorldSpec, instance: &str) -> usize {
    let held = |t: &&Timed| matches!(t.event, Event::Poll { instance: i, hold_ms: Some(_), .. } if i == instance);
    world.events.iter().filter(held).count()
}

/// The step of a burst.
pub fn render(e: &HoardEvent) -> String {
    format!(
        "\n[[steps]]\nname = \"{} holds {} polls\"\npoll = {{ instance = {:?}, job = \"latest\", client = {:?}, hold_ms = {}, count = {} }}\n",
        e.client, e.count, e.instance, e.client, e.wait_ms, e.count
    )
}
