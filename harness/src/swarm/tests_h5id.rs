//! The draws added for held-out set 5's identity misses (branch `h5id`):
//! each is on only in the worlds it says, goes last in the timeline, and
//! renders to a scenario the ordinary checks accept.

use super::spec::{Event, Kind, WorldSpec};
use super::tests::checked;
use super::*;

/// The events a kind put in the world, by kind.
fn drawn(world: &WorldSpec, kind: Kind) -> usize {
    (world.events.iter())
        .filter(|t| match (&t.event, kind) {
            (Event::Attack(a), Kind::ProofEdges) => a.replay_edge_ms.is_some(),
            (Event::TrustRestart(_), Kind::TrustRestarts) => true,
            (Event::RetryAfter(_), Kind::RetryAfters) => true,
            _ => false,
        })
        .count()
}

/// Proof edges: with user auth on, a pairing made again, then three
/// replays of its create at the window's end -1, +0, +1 ms, last.
#[test]
fn proof_edges_replay_a_fresh_create_at_its_window_end() {
    let mut on = 0;
    for seed in 0..400 {
        let world = WorldSpec::generate(seed);
        let n = drawn(&world, Kind::ProofEdges);
        assert_eq!(n > 0, world.kinds.has(Kind::ProofEdges), "seed {seed}");
        if n == 0 {
            continue;
        }
        on += 1;
        assert!(world.user_auth && n == 3, "seed {seed}");
        // The block ends the timeline but for the other `h5id` kinds' and
        // `long_retention`'s polls, and `range_edges`' worker's start.
        let at = (world.events.iter())
            .position(|t| matches!(&t.event, Event::Attack(a) if a.replay_edge_ms.is_some()))
            .expect("the replays")
            - 1;
        let after = &world.events[at + 4..];
        let others = |t: &&super::spec::Timed| match &t.event {
            Event::TrustRestart(_) | Event::RetryAfter(_) | Event::Poll { .. } => true,
            Event::StartWorker(w) => w == crate::verify::range_edges::WORKER,
            _ => false,
        };
        assert!(after.iter().all(|t| others(&t)), "seed {seed}: {after:?}");
        let Event::Pair { user, .. } = &world.events[at].event else {
            panic!("seed {seed}: the pairing first");
        };
        let edges: Vec<Option<i64>> = (world.events[at + 1..at + 4].iter())
            .map(|t| match &t.event {
                Event::Attack(a) if a.kind == "replay_create" && a.victim == *user => {
                    a.replay_edge_ms
                }
                _ => None,
            })
            .collect();
        assert_eq!(edges, [Some(-1), Some(0), Some(1)], "seed {seed}");
        let text = render::render(&world, "w", "test");
        assert_eq!(text.matches("replay_edge_ms = ").count(), 3, "seed {seed}");
        assert!(
            checked(&world).is_empty(),
            "seed {seed}: {:?}",
            checked(&world)
        );
    }
    assert!((5..=60).contains(&on), "{on} of 400 worlds");
}

/// Trust restarts: with user auth on, a set-up pairing of a one-node
/// instance made again, its user's list, a restart, the list again.
#[test]
fn trust_restarts_list_around_a_restart_after_a_pairing_made_again() {
    let mut on = 0;
    for seed in 0..400 {
        let world = WorldSpec::generate(seed);
        let n = drawn(&world, Kind::TrustRestarts);
        assert_eq!(n > 0, world.kinds.has(Kind::TrustRestarts), "seed {seed}");
        let Some(t) = (world.events.iter()).find_map(|t| match &t.event {
            Event::TrustRestart(t) => Some(t),
            _ => None,
        }) else {
            continue;
        };
        on += 1;
        assert!(world.user_auth && n == 1, "seed {seed}");
        assert_eq!(world.nodes_of(t.instance), 1, "seed {seed}");
        let paired = (world.pairings.iter())
            .any(|p| p.instance == t.instance && p.user == t.user && p.worker == t.worker);
        assert!(paired, "seed {seed}: a set-up pairing made again");
        let text = render::render(&world, "w", "test");
        let steps = trust_restarts::render(t);
        let lists = format!("path = \"/v1/trust/list?user_id={{{{user.{}}}}}\"", t.user);
        assert_eq!(steps.matches(&lists).count(), 2, "seed {seed}");
        assert!(steps.contains("action = \"restart\""), "seed {seed}");
        assert!(text.contains(&steps), "seed {seed}");
        assert!(
            checked(&world).is_empty(),
            "seed {seed}: {:?}",
            checked(&world)
        );
    }
    assert!((10..=100).contains(&on), "{on} of 400 worlds");
}

/// Retry afters: on a one-node instance, the limit's failed claims, a
/// wait off the whole second, the claim that waits out its 429.
#[test]
fn retry_afters_wait_out_a_429_sent_off_the_second() {
    let mut on = 0;
    for seed in 0..400 {
        let world = WorldSpec::generate(seed);
        let n = drawn(&world, Kind::RetryAfters);
        assert_eq!(n > 0, world.kinds.has(Kind::RetryAfters), "seed {seed}");
        let Some(r) = (world.events.iter()).find_map(|t| match &t.event {
            Event::RetryAfter(r) => Some(r),
            _ => None,
        }) else {
            continue;
        };
        on += 1;
        assert_eq!(world.nodes_of(r.instance), 1, "seed {seed}");
        assert!(r.wait_ms % 1_000 != 0 && r.wait_ms < 60_000, "seed {seed}");
        let text = render::render(&world, "w", "test");
        assert_eq!(
            text.matches("client = \"retry_after\"").count(),
            11,
            "seed {seed}"
        );
        assert_eq!(text.matches("retry_after = true").count(), 1, "seed {seed}");
        assert!(
            checked(&world).is_empty(),
            "seed {seed}: {:?}",
            checked(&world)
        );
    }
    assert!((30..=120).contains(&on), "{on} of 400 worlds");
}

/// A shrunk world keeps an event only where it still makes sense: no
/// trust restart or retry on an instance that is gone.
#[test]
fn shrinking_drops_the_events_of_instances_that_are_gone() {
    let world = (0..400)
        .map(WorldSpec::generate)
        .find(|w| w.kinds.has(Kind::TrustRestarts) && w.kinds.has(Kind::RetryAfters))
        .expect("a world with both");
    let mut shrunk = world.clone();
    shrunk.pairings.clear();
    shrunk.instances.retain(|i| i.name == "none");
    shrunk.normalize();
    assert_eq!(drawn(&shrunk, Kind::TrustRestarts), 0);
    assert_eq!(drawn(&shrunk, Kind::RetryAfters), 0);
}
