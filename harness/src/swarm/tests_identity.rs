//! The draws added for the held-out set 3's identity misses (branch
//! `hid`): each touches only the worlds it is on in, and renders to a
//! scenario the ordinary checks accept.

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
