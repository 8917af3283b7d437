//! The identity draws: pairings overclaimed across a restart, paid
//! impostors, claims at a code's expiry, pairing floods, code batches,
//! creates replayed at a proof window's end, trust lists read around a
//! restart, and retries after a 429. Each is on only in the worlds it says
//! (user auth on or off, one-node instances), touches only those, and
//! renders to a scenario the ordinary checks accept; the last three come
//! at the end of the timeline.

use super::spec::{Event, Kind, WorldSpec};
use super::tests::checked;
use super::*;

/// An overclaimed pairing sometimes has a restart of its instance between
/// the owner's claim and the attacker's; a pairing without an overclaim
/// never does.
#[test]
fn overclaim_restarts_land_between_the_two_claims() {
    let mut restarts = 0;
    for seed in 0..400 {
        let world = WorldSpec::generate(seed);
        for p in &world.pairings {
            assert!(!p.overclaim_restart || p.overclaim.is_some(), "seed {seed}");
        }
        let Some(p) = world.pairings.iter().find(|p| p.overclaim_restart) else {
            continue;
        };
        restarts += 1;
        let text = render::render(&world, "w", "test");
        let again = format!("claim {}'s code again", p.user);
        let at = text.find(&again).expect("the attacker's claim");
        let restart = format!(
            "instance = {{ name = {:?}, action = \"restart\" }}",
            p.instance
        );
        let before = &text[..at];
        let owner = before.rfind("/v1/trust/claim").expect("the owner's claim");
        assert!(before[owner..].contains(&restart), "seed {seed}");
        assert!(
            checked(&world).is_empty(),
            "seed {seed}: {:?}",
            checked(&world)
        );
    }
    assert!((3..=60).contains(&restarts), "{restarts} of 400 worlds");
}

/// The attacker's paid PRIVATE commits in a victim's name come only in
/// `user_attacks` worlds with a paid instance, go to a paid instance, carry
/// no user proof, pay, come from the attacker's client and expect no job.
#[test]
fn paid_impostors_pay_without_a_proof_in_user_attack_worlds_only() {
    let mut on = 0;
    for seed in 0..400 {
        let world = WorldSpec::generate(seed);
        let drawn: Vec<&attacks::AttackEvent> = (world.events.iter())
            .filter_map(|t| match &t.event {
                Event::Attack(a) if a.kind == paid_impostors::KIND => Some(a),
                _ => None,
            })
            .collect();
        if drawn.is_empty() {
            continue;
        }
        on += 1;
        assert!(world.kinds.has(Kind::UserAttacks), "seed {seed}");
        for a in &drawn {
            let paid = world.instances.iter().find(|i| i.name == a.instance);
            assert!(paid.is_some_and(|i| i.payment.is_some()), "seed {seed}");
        }
        let text = render::render(&world, "w", "test");
        let lines: Vec<&str> = (text.lines())
            .filter(|l| l.starts_with("http = ") && l.contains("client = \"mallory\""))
            .collect();
        assert_eq!(lines.len(), drawn.len(), "seed {seed}");
        for line in lines {
            assert!(
                line.contains("\"PRIVATE\"") && line.contains("pay = {}"),
                "{line}"
            );
            assert!(line.contains("user_id = \"{{user.u") && !line.contains("user_proof"));
        }
        assert!(text.contains("expect = { body = { job_id = \"absent_or_null\" } }"));
        assert!(
            checked(&world).is_empty(),
            "seed {seed}: {:?}",
            checked(&world)
        );
    }
    assert!((5..=80).contains(&on), "{on} of 400 worlds");
}

/// `code_edges` is on only in worlds with user auth on; there it shortens
/// one instance's codes to seconds and pairs one user's worker there three
/// times, claiming at the expiry -1, +0 and +1 ms; elsewhere no instance
/// has a short code lifetime and no pair step claims at an edge.
#[test]
fn code_edges_claim_at_the_three_edges_of_one_short_lived_instance() {
    let mut on = 0;
    for seed in 0..400 {
        let world = WorldSpec::generate(seed);
        let edges: Vec<(&str, i64)> = (world.events.iter())
            .filter_map(|t| match &t.event {
                Event::Pair {
                    instance,
                    claim_edge_ms: Some(d),
                    ..
                } => Some((*instance, *d)),
                _ => None,
            })
            .collect();
        let short: Vec<&str> = (world.instances.iter())
            .filter(|i| i.pairing_code_ttl_ms.is_some())
            .map(|i| i.name)
            .collect();
        if !world.kinds.has(Kind::CodeEdges) {
            assert!(edges.is_empty() && short.is_empty(), "seed {seed}");
            continue;
        }
        on += 1;
        assert!(world.user_auth, "seed {seed}");
        assert_eq!(short.len(), 1, "seed {seed}");
        let mut offsets: Vec<i64> = edges.iter().map(|(_, d)| *d).collect();
        offsets.sort_unstable();
        assert_eq!(offsets, code_edges::EDGES_MS, "seed {seed}");
        assert!(edges.iter().all(|(i, _)| *i == short[0]), "seed {seed}");
        let text = render::render(&world, "w", "test");
        assert!(text.contains("pairing_code_ttl_ms = "), "seed {seed}");
        assert_eq!(text.matches("claim_edge_ms = ").count(), 3, "seed {seed}");
        assert!(
            checked(&world).is_empty(),
            "seed {seed}: {:?}",
            checked(&world)
        );
    }
    assert!((20..=100).contains(&on), "{on} of 400 worlds");
}

/// `pairing_floods` is on only in worlds with user auth off; its bursts go
/// to one single-node instance from the flooder's own client, 11 to 15
/// requests each, creates for three names of its own or claims of codes no
/// instance hands out (seven hex digits).
#[test]
fn pairing_floods_burst_past_the_limits_from_a_client_of_their_own() {
    let (mut on, mut edges) = (0, 0);
    for seed in 0..400 {
        let world = WorldSpec::generate(seed);
        let floods: Vec<&pairing_floods::PairingFlood> = (world.events.iter())
            .filter_map(|t| match &t.event {
                Event::PairingFlood(f) => Some(f),
                _ => None,
            })
            .collect();
        if !world.kinds.has(Kind::PairingFloods) {
            assert!(floods.is_empty(), "seed {seed}");
            continue;
        }
        on += 1;
        assert!(!world.user_auth && !floods.is_empty(), "seed {seed}");
        let instances: std::collections::BTreeSet<_> = floods.iter().map(|f| f.instance).collect();
        assert_eq!(instances.len(), 1, "seed {seed}");
        for f in &floods {
            assert!((11..=15).contains(&f.count), "seed {seed}");
            let i = world.instances.iter().find(|i| i.name == f.instance);
            assert!(i.is_some_and(|i| i.nodes == 1), "seed {seed}");
        }
        let text = render::render(&world, "w", "test");
        let sent: Vec<&str> = (text.lines())
            .filter(|l| l.contains("client = \"pairing_flood\""))
            .collect();
        // A burst sent again at its windows' end counts twice.
        let bursts = |f: &&pairing_floods::PairingFlood| 1 + u32::from(f.again_at_window_end);
        let count: u32 = floods.iter().map(|f| f.count * bursts(f)).sum();
        assert_eq!(sent.len(), count as usize, "seed {seed}");
        let again = floods.iter().filter(|f| f.again_at_window_end).count();
        assert!(again <= 1, "seed {seed}");
        let window_ends = text.matches("name = \"pairing flood: at its windows' end\"");
        assert_eq!(window_ends.count(), again, "seed {seed}");
        edges += again;
        for line in sent {
            let code = line.split("pairing_code = \"").nth(1);
            assert!(code.is_none_or(|c| c.find('"') == Some(7)), "{line}");
        }
        assert!(
            checked(&world).is_empty(),
            "seed {seed}: {:?}",
            checked(&world)
        );
    }
    assert!((30..=120).contains(&on), "{on} of 400 worlds");
    assert!(edges * 4 >= on && edges * 4 <= on * 3, "{edges} of {on}");
}

/// Code batches come only in worlds with user auth on, on one-node
/// instances, each one `pair` step of 2 or 3 codes with a restart before
/// its claims.
#[test]
fn code_batches_create_codes_at_once_and_restart_before_the_claims() {
    let mut on = 0;
    for seed in 0..400 {
        let world = WorldSpec::generate(seed);
        let batches: Vec<&code_batches::CodeBatch> = (world.events.iter())
            .filter_map(|t| match &t.event {
                Event::CodeBatch(b) => Some(b),
                _ => None,
            })
            .collect();
        assert_eq!(
            batches.is_empty(),
            !world.kinds.has(Kind::CodeBatches),
            "seed {seed}"
        );
        if batches.is_empty() {
            continue;
        }
        on += 1;
        assert!(world.user_auth, "seed {seed}");
        for b in &batches {
            assert_eq!(world.nodes_of(b.instance), 1, "seed {seed}");
            assert!((2..=3).contains(&b.codes), "seed {seed}");
        }
        let text = render::render(&world, "w", "test");
        let steps = text.matches("restart_before_claim = true").count();
        assert_eq!(steps, batches.len(), "seed {seed}");
        assert!(
            checked(&world).is_empty(),
            "seed {seed}: {:?}",
            checked(&world)
        );
    }
    assert!((10..=120).contains(&on), "{on} of 400 worlds");
}

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
        // The block ends the timeline but for the trust restarts', the retry
        // afters' and `long_retention`'s events, and `range_edges`' worker's
        // start.
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
