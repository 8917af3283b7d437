//! The swarm's parts without running worlds: generation is a function of
//! the seed, every world renders to a scenario the ordinary checks accept
//! (also after shrinking's removals), and the shrinker keeps exactly what a
//! failure needs.

use super::shrink::shrink;
use super::spec::{Event, WorldSpec};
use super::*;
use std::path::Path;

/// What `harness check` finds wrong with `world` rendered (empty: none).
pub(super) fn checked(world: &WorldSpec) -> Vec<String> {
    let name = scenario_name(WorldId::seed(world.seed), None);
    let text = render::render(world, &name, "test");
    let scenario = match Scenario::parse(&text) {
        Ok(s) => s,
        Err(e) => return vec![e],
    };
    let path = Path::new("scenarios").join(format!("{name}.toml"));
    crate::check::check(&path, &text, &scenario)
        .into_iter()
        .map(|p| format!("line {}: {}", p.line, p.message))
        .collect()
}

#[test]
fn a_seed_always_draws_the_same_world_and_seeds_differ() {
    assert_eq!(WorldSpec::generate(7), WorldSpec::generate(7));
    assert_ne!(WorldSpec::generate(7), WorldSpec::generate(8));
}

#[test]
fn every_drawn_world_renders_to_a_scenario_that_passes_harness_check() {
    for seed in 0..300 {
        let world = WorldSpec::generate(seed);
        assert!(
            world.has_anchors(),
            "seed {seed}: an instance has no honest anchor"
        );
        let problems = checked(&world);
        assert!(problems.is_empty(), "seed {seed}: {problems:#?}");
    }
}

/// A streaming worker needs version 2 whichever kind made it stream (seed
/// 5126: `restart_reads`' streaming worker in an otherwise plain world
/// rendered version 1, which the loader refuses).
#[test]
fn a_streaming_worker_makes_a_world_version_2() {
    let world = WorldSpec::generate(5126);
    assert!(world.workers.iter().any(|w| w.stream));
    let problems = checked(&world);
    assert!(problems.is_empty(), "seed 5126: {problems:#?}");
}

#[test]
fn worlds_stay_valid_scenarios_after_any_removal() {
    for seed in 0..20 {
        let world = WorldSpec::generate(seed);
        // Every single event, worker and pairing removed in turn.
        for i in 0..world.events.len() {
            let mut w = world.clone();
            w.events.remove(i);
            w.normalize();
            let problems = checked(&w);
            assert!(
                problems.is_empty(),
                "seed {seed} without event {i}: {problems:#?}"
            );
        }
        for i in 0..world.workers.len() {
            let mut w = world.clone();
            w.workers.remove(i);
            w.normalize();
            let problems = checked(&w);
            assert!(
                problems.is_empty(),
                "seed {seed} without worker {i}: {problems:#?}"
            );
        }
    }
}

#[test]
fn the_shrinker_keeps_only_what_the_failure_needs() {
    // A world with many events; the "failure" needs one restart of chain_a
    // and a commit after it.
    let seed = (0..500)
        .find(|&s| {
            let w = WorldSpec::generate(s);
            w.events.len() > 30
                && w.events
                    .iter()
                    .any(|t| t.event == Event::Restart("chain_a"))
        })
        .expect("some seed restarts chain_a among many events");
    let world = WorldSpec::generate(seed);
    let fails = |w: &WorldSpec| {
        let restart = w
            .events
            .iter()
            .position(|t| t.event == Event::Restart("chain_a"));
        restart.is_some_and(|r| {
            w.events[r..]
                .iter()
                .any(|t| matches!(&t.event, Event::Commit(c) if c.instance == "chain_a"))
        })
    };
    assert!(fails(&world));
    let (small, runs) = shrink(world.clone(), fails);
    assert!(fails(&small));
    assert_eq!(small.events.len(), 2, "{:#?}", small.events);
    assert!(!small.heal, "the heal is not needed");
    assert!(
        small.workers.len() <= small.instances.len(),
        "only the anchors stay"
    );
    assert!(runs <= shrink::RUNS_MAX);
    let lines = render::render(&small, "x", "x")
        .lines()
        .filter(|l| !l.is_empty())
        .count();
    assert!(lines <= 30, "{lines} lines");
}

#[test]
fn failures_are_keyed_by_the_invariant_they_broke() {
    use crate::verify::safety::SafetyKey;
    use crate::verify::Broken;
    use coordinator::core::InvariantViolation;
    let slots = InvariantViolation::SessionCount {
        keys: 1,
        workers: 2,
    };
    let cases = [
        (Broken::Core(slots), "core_sessions"),
        (Broken::Panic, "panic"),
        (
            Broken::Safety(SafetyKey::AcknowledgedJobLost),
            "acknowledged_job_lost",
        ),
        (Broken::AllJobsTerminal, "all_jobs_terminal"),
        (Broken::Invariants, "invariants"),
    ];
    for (broken, key) in cases {
        assert_eq!(broken.key(), key, "{broken:?}");
    }
}

#[test]
fn seed_ranges_parse() {
    assert_eq!(parse_seeds("0..10000"), Ok(0..10000));
    assert!(parse_seeds("5..5").is_err());
    assert!(parse_seeds("10").is_err());
}

/// Seeds whose world has the several-nodes kind, among the first `n`.
fn several_node_seeds(n: u64) -> Vec<u64> {
    (0..n)
        .filter(|&s| WorldSpec::generate(s).kinds.has(spec::Kind::Nodes))
        .collect()
}

fn node_events(w: &WorldSpec) -> usize {
    w.events
        .iter()
        .filter(|t| {
            matches!(
                t.event,
                Event::NodeCrash { .. } | Event::StorePartition { .. } | Event::LostAnswer { .. }
            )
        })
        .count()
}

#[test]
fn some_worlds_have_several_nodes_with_crashes_store_cuts_and_lost_answers_and_the_others_one() {
    let seeds = several_node_seeds(300);
    assert!(
        (90..=210).contains(&seeds.len()),
        "about half the seeds: {}",
        seeds.len()
    );
    for seed in 0..300 {
        let w = WorldSpec::generate(seed);
        let clusters = w.instances.iter().filter(|i| i.nodes > 1).count();
        if !seeds.contains(&seed) {
            assert_eq!(clusters, 0, "seed {seed}");
            assert_eq!(node_events(&w), 0, "seed {seed}");
            assert!(w.workers.iter().all(|w| w.node.is_none()), "seed {seed}");
            continue;
        }
        assert!(clusters > 0, "seed {seed}");
        // The `idle_cuts` kind adds one store cut of its own, and
        // `store_blips` up to `BLIPS_MAX` short ones.
        let own = usize::from(w.kinds.has(Kind::IdleCuts));
        let blips = match w.kinds.has(Kind::StoreBlips) {
            true => super::store_blips::BLIPS_MAX as usize,
            false => 0,
        };
        assert!(
            (1..=nodes::NODE_EVENTS_MAX as usize + blips).contains(&(node_events(&w) - own)),
            "seed {seed}"
        );
        for i in w.instances.iter().filter(|i| i.nodes > 1) {
            assert!((1_000..=5_000).contains(&i.node_lease_ms), "seed {seed}");
            // crash_after needs a single node.
            assert!(!w.events.iter().any(
                |t| matches!(t.event, Event::CrashAfter { instance, .. } if instance == i.name)
            ));
            assert!(w.heal_ms() > i.node_lease_ms, "seed {seed}");
        }
        for worker in &w.workers {
            let n = w.nodes_of(worker.instance);
            assert_eq!(worker.node.is_some(), n > 1, "seed {seed}");
            assert!(worker.node.unwrap_or(0) < n, "seed {seed}");
        }
    }
    // Something lands on nodes other than 0, and every node event occurs.
    let worlds: Vec<WorldSpec> = seeds.iter().map(|&s| WorldSpec::generate(s)).collect();
    let on_other_nodes = worlds.iter().any(|w| {
        w.events
            .iter()
            .any(|t| matches!(&t.event, Event::Commit(c) if c.node > 0))
    });
    assert!(on_other_nodes);
    for kind in 0..3 {
        assert!(
            worlds
                .iter()
                .any(|w| w.events.iter().any(|t| match t.event {
                    Event::NodeCrash { .. } => kind == 0,
                    Event::StorePartition { .. } => kind == 1,
                    Event::LostAnswer { .. } => kind == 2,
                    _ => false,
                })),
            "node event {kind} drawn"
        );
    }
}

#[test]
fn a_several_node_world_renders_nodes_and_node_steps_that_harness_check_accepts() {
    let seed = several_node_seeds(100)
        .into_iter()
        .find(|&s| {
            let w = WorldSpec::generate(s);
            w.instances.iter().any(|i| i.nodes == 3) && node_events(&w) >= 2
        })
        .expect("a three-node world with two node events");
    let w = WorldSpec::generate(seed);
    let text = render::render(&w, "x", "x");
    assert!(text.contains("nodes = 3\nnode_lease_ms = "), "{text}");
    assert!(text.contains(", node = "), "{text}");
    assert!(
        text.contains("node = 0\n") || text.contains("node = 1\n") || text.contains("node = 2\n")
    );
    assert!(
        text.contains("action = \"crash\", node = ")
            || text.contains("action = \"partition\", node = "),
        "{text}"
    );
    let problems = checked(&w);
    assert!(problems.is_empty(), "seed {seed}: {problems:#?}");
}

#[test]
fn several_node_worlds_stay_valid_with_fewer_nodes() {
    for seed in several_node_seeds(60) {
        let world = WorldSpec::generate(seed);
        for index in 0..world.instances.len() {
            for fewer in 1..world.instances[index].nodes {
                let mut w = world.clone();
                w.instances[index].nodes = fewer;
                w.normalize();
                let name = w.instances[index].name;
                if fewer == 1 {
                    assert!(!w.events.iter().any(|t| matches!(
                        t.event,
                        Event::NodeCrash { instance, .. } | Event::StorePartition { instance, .. }
                            if instance == name
                    )));
                }
                let problems = checked(&w);
                assert!(
                    problems.is_empty(),
                    "seed {seed}, {name} with {fewer} node(s): {problems:#?}"
                );
            }
        }
    }
}

#[test]
fn the_shrinker_drops_nodes_the_failure_does_not_need() {
    let seed = several_node_seeds(200)
        .into_iter()
        .find(|&s| {
            let w = WorldSpec::generate(s);
            w.instances.len() == 1 && w.instances[0].nodes == 3 && node_events(&w) >= 2
        })
        .expect("a three-node world with two node events");
    let world = WorldSpec::generate(seed);
    // A "failure" that needs no node at all: a single coordinator.
    let (small, _) = shrink(world.clone(), |w| {
        w.events.iter().any(|t| matches!(t.event, Event::Commit(_)))
    });
    assert_eq!(small.instances[0].nodes, 1);
    assert_eq!(node_events(&small), 0);
    assert!(small.workers.iter().all(|w| w.node.is_none()));
    // One that needs a store cut of node 2: three nodes and that one cut stay.
    let cut_node_2 = |w: &WorldSpec| {
        w.events
            .iter()
            .any(|t| matches!(t.event, Event::StorePartition { node: 2, .. }))
    };
    let mut world = world;
    world.events.push(spec::Timed {
        after_ms: 0,
        event: Event::StorePartition {
            instance: "chain_a",
            node: 2,
            for_ms: 4_000,
        },
    });
    let (small, _) = shrink(world, cut_node_2);
    assert_eq!(small.instances[0].nodes, 3);
    assert_eq!(node_events(&small), 1, "{:#?}", small.events);
    assert!(checked(&small).is_empty());
}

/// A shrunk world must be a file `harness FILE` accepts, whatever the
/// shrinker removed, even a world shrunk to nothing (a file with no
/// `[[steps]]` is refused by the loader's checks on any build).
#[test]
fn a_world_shrunk_to_nothing_still_loads_and_checks() {
    for seed in 0..40 {
        let (small, _) = shrink(WorldSpec::generate(seed), |_| true);
        let name = scenario_name(WorldId::seed(seed), Some("x"));
        let text = render::render(&small, &name, "x");
        let scenario = crate::Scenario::parse(&text).expect("parses");
        let path = std::path::PathBuf::from(format!("{name}.toml"));
        let problems = crate::check::check(&path, &text, &scenario);
        assert!(problems.is_empty(), "seed {seed}: {problems:?}\n{text}");
    }
}

/// `user_attacks` draws from a stream of its own and touches only the
/// worlds it is on in: elsewhere no user auth, no attack, no intercepted
/// pairing. Where it is on, every create and PRIVATE commit of an honest
/// user carries the user's proof.
#[test]
fn user_attacks_change_only_the_worlds_they_are_on_in() {
    let mut on = 0;
    for seed in 0..200 {
        let world = WorldSpec::generate(seed);
        let attacks = world
            .events
            .iter()
            .filter(|t| matches!(t.event, Event::Attack(_)))
            .count();
        if !world.kinds.has(spec::Kind::UserAttacks) {
            assert!(!world.user_auth && attacks == 0, "seed {seed}");
            assert!(world.pairings.iter().all(|p| p.intercept.is_none()));
            continue;
        }
        on += 1;
        let text = render::render(&world, "w", "test");
        assert!(text.contains("user_auth = \"on\"") && text.contains("[users.mallory]"));
        for line in text.lines() {
            // The `garbage` kind's malformed requests act for nobody.
            // The attacker's paid commits (`paid_impostors`) neither.
            let honest = line.starts_with("http = ")
                && !line.contains("malformed = true")
                && !line.contains("client = \"mallory\"")
                && (line.contains("/v1/trust/create") || line.contains("\"PRIVATE\""));
            if honest {
                assert!(
                    line.contains("user_proof = { user = "),
                    "seed {seed}: {line}"
                );
            }
        }
    }
    assert!(
        (30..=90).contains(&on),
        "{on} of 200 worlds have user attacks"
    );
}

/// `cancels` draws from a stream of its own and adds only `cancel` steps:
/// a world without it renders as before the kind existed (no cancel), one
/// with it renders 1 to 4 cancels of the latest job.
#[test]
fn cancels_change_only_the_worlds_they_are_on_in() {
    let mut on = 0;
    for seed in 0..200 {
        let world = WorldSpec::generate(seed);
        let cancels = world
            .events
            .iter()
            .filter(|t| matches!(t.event, Event::Cancel { .. }))
            .count();
        if !world.kinds.has(spec::Kind::Cancels) {
            assert_eq!(cancels, 0, "seed {seed}");
            continue;
        }
        on += 1;
        assert!(
            (1..=super::cancels::CANCELS_MAX).contains(&cancels),
            "seed {seed}"
        );
        let text = render::render(&world, "w", "test");
        assert_eq!(text.matches("\ncancel = {").count(), cancels, "seed {seed}");
        assert!(text.starts_with("schema_version = 2"), "seed {seed}");
    }
    assert!((30..=90).contains(&on), "{on} of 200 worlds have cancels");
}

/// `settlement_faults` reads paid jobs while their settlement may be slow
/// or lost: every `poll` comes right after a paid commit that follows a
/// facilitator fault (readers the `streams` kind draws later may come
/// between), and only in worlds with the kind (but for the two polls that
/// end a `long_retention` world).
#[test]
fn settlement_polls_follow_paid_commits_after_a_fault() {
    let mut polled = 0;
    for seed in 0..300 {
        let world = WorldSpec::generate(seed);
        let events = &world.events;
        let first_fault = events
            .iter()
            .position(|t| matches!(t.event, Event::Facilitator { .. }));
        for (at, t) in events.iter().enumerate() {
            let Event::Poll {
                instance,
                hold_ms: None,
                edge_ms: None,
                ..
            } = t.event
            else {
                continue;
            };
            // `long_retention`'s two polls close the timeline.
            if world.kinds.has(spec::Kind::LongRetention) && at + 2 >= events.len() {
                continue;
            }
            assert!(world.kinds.has(spec::Kind::SettlementFaults), "seed {seed}");
            assert!(first_fault.is_some_and(|f| f < at), "seed {seed}");
            // (`store_blips`' short store cuts land anywhere, between a
            // commit and its poll too.)
            let before = events[..at].iter().rev().find(|t| {
                !matches!(
                    t.event,
                    Event::Poll { .. } | Event::Read(_) | Event::StorePartition { .. }
                )
            });
            assert!(
                matches!(&before.map(|t| &t.event), Some(Event::Commit(c)) if c.instance == instance && c.pay.is_some()),
                "seed {seed}: a poll at {at} follows {before:?}"
            );
            polled += 1;
        }
    }
    assert!(polled >= 20, "{polled} polls in 300 worlds");
}

/// `streams` draws from a stream of its own: a world without it has no
/// reader and no streaming worker (it renders as before the kind existed);
/// one with it has 1 to 6 detached readers.
#[test]
fn streams_change_only_the_worlds_they_are_on_in() {
    let mut on = 0;
    for seed in 0..200 {
        let world = WorldSpec::generate(seed);
        let reads = world
            .events
            .iter()
            .filter(|t| matches!(&t.event, Event::Read(r) if r.index < super::stream_retries::INDEX_BASE && r.index != super::restart_reads::READER))
            .count();
        if !world.kinds.has(spec::Kind::Streams) {
            assert_eq!(reads, 0, "seed {seed}");
            // (`restart_reads` streams with a worker of its own.)
            let own = |w: &spec::WorkerSpec| w.name == super::restart_reads::WORKER;
            assert!(
                world.workers.iter().all(|w| !w.stream || own(w)),
                "seed {seed}"
            );
            continue;
        }
        on += 1;
        assert!(
            (1..=super::streams::READERS_MAX).contains(&reads),
            "seed {seed}"
        );
        let text = render::render(&world, "w", "test");
        let rendered = text
            .lines()
            .filter(|l| l.starts_with("stream = ") && l.ends_with("detach = true }"))
            .count();
        let all = (world.events.iter())
            .filter(|t| matches!(t.event, Event::Read(_)))
            .count();
        assert_eq!(rendered, all, "seed {seed}");
        assert!(text.starts_with("schema_version = 2"), "seed {seed}");
    }
    assert!((30..=90).contains(&on), "{on} of 200 worlds have streams");
}

/// A variation keeps its seed's world but the timeline's gaps, renders to
/// a scenario the checks accept, and is a function of its number.
#[test]
fn a_variation_changes_only_the_timelines_gaps() {
    for seed in 0..60 {
        let world = WorldSpec::generate(seed);
        let varied = WorldId { seed, variation: 3 }.world();
        assert_eq!(varied, WorldId { seed, variation: 3 }.world());
        let gaps = |w: &WorldSpec| w.events.iter().map(|t| t.after_ms).collect::<Vec<_>>();
        let mut same = varied.clone();
        for (t, original) in same.events.iter_mut().zip(&world.events) {
            t.after_ms = original.after_ms;
        }
        assert_eq!(same, world, "seed {seed}: only gaps change");
        if world.events.iter().filter(|t| t.after_ms > 10).count() > 3 {
            assert_ne!(gaps(&varied), gaps(&world), "seed {seed}");
        }
        assert!(checked(&varied).is_empty(), "seed {seed}");
    }
}

/// Steering keeps, per state no world reached before, the lowest seed of
/// the round that reached it; variations reach states without being kept.
#[test]
fn the_first_seed_to_reach_a_new_state_is_kept_once() {
    let result = |seed, variation, states: &[&'static str]| SeedResult {
        id: WorldId { seed, variation },
        verdict: Verdict::Pass,
        kinds: vec![],
        coverage: Default::default(),
        sim_ms: 0,
        reads: vec![],
        fired: coordinator::buggify::Fired {
            reached: states.iter().map(|s| (*s, 1)).collect(),
            ..Default::default()
        },
    };
    let mut seen = std::collections::BTreeSet::from(["old"]);
    let round = [
        result(4, 0, &["old", "b"]),
        result(4, 1, &["c"]),
        result(5, 0, &["a", "b"]),
        result(9, 0, &["a", "c"]),
    ];
    assert_eq!(steer::first_reachers(&round, &mut seen), vec![4, 5]);
    assert_eq!(seen.len(), 4, "a, b and c join old");
    assert!(steer::first_reachers(&round, &mut seen).is_empty());
}

/// `edges` polls a job at its pending deadline −1, 0 and +1 ms while no
/// worker of its instance runs: right after every running worker of that
/// instance stopped and a commit, and before they start again; only in
/// worlds with the kind.
#[test]
fn edge_polls_follow_a_commit_no_worker_can_take() {
    let mut on = 0;
    for seed in 0..200 {
        let world = WorldSpec::generate(seed);
        let edges: Vec<usize> = (world.events.iter().enumerate())
            .filter(|(_, t)| {
                matches!(
                    t.event,
                    Event::Poll {
                        edge_ms: Some(_),
                        ..
                    }
                )
            })
            .map(|(i, _)| i)
            .collect();
        if !world.kinds.has(spec::Kind::Edges) {
            assert!(edges.is_empty(), "seed {seed}");
            continue;
        }
        on += 1;
        let per_edge = super::edges::EDGES_MS.len();
        assert!(
            [per_edge, 2 * per_edge, 3 * per_edge].contains(&edges.len()),
            "seed {seed}"
        );
        for first in edges.iter().step_by(per_edge) {
            edge_follows_a_commit_no_worker_can_take(&world, *first, seed);
        }
        assert!(checked(&world).is_empty(), "seed {seed}");
    }
    assert!((20..=80).contains(&on), "{on} of 200 worlds have edges");
}

/// The edge polls from `first` on follow a commit (paid exactly where its
/// instance takes payments) made while no worker of its instance runs.
fn edge_follows_a_commit_no_worker_can_take(world: &WorldSpec, first: usize, seed: u64) {
    let Event::Commit(commit) = &world.events[first - 1].event else {
        panic!("seed {seed}: the edge polls do not follow a commit");
    };
    let instance = world.instances.iter().find(|i| i.name == commit.instance);
    let paid = instance.is_some_and(|i| i.payment.is_some());
    assert_eq!(commit.pay.is_some(), paid, "seed {seed}");
    // Every worker of the instance is stopped at the commit.
    let of_instance: Vec<&str> = (world.workers.iter())
        .filter(|w| w.instance == commit.instance)
        .map(|w| w.name.as_str())
        .collect();
    let mut running = of_instance.clone();
    for t in &world.events[..first] {
        match &t.event {
            Event::StopWorker(n) => running.retain(|r| r != n),
            Event::StartWorker(n) if of_instance.contains(&n.as_str()) => running.push(n),
            _ => {}
        }
    }
    // But for the lease edge's own worker, which takes the job and never
    // answers.
    let lease_edge = [super::edges::LEASE_WORKER];
    assert!(
        running.is_empty() || running == lease_edge,
        "seed {seed}: {running:?} still run"
    );
}

/// Short payment windows come only with `settlement_faults`, on every paid
/// instance of such a world, one node or several, and render as the payment's
/// `max_timeout_seconds` in a scenario the checks accept.
#[test]
fn short_payment_windows_ride_with_settlement_faults() {
    let mut short = 0;
    for seed in 0..300 {
        let world = WorldSpec::generate(seed);
        let windows: Vec<_> = world
            .instances
            .iter()
            .filter_map(|i| i.payment_window_s)
            .collect();
        if !world.kinds.has(spec::Kind::SettlementFaults) {
            assert!(windows.is_empty(), "seed {seed}");
            continue;
        }
        if windows.is_empty() {
            continue;
        }
        short += 1;
        let paid = world
            .instances
            .iter()
            .filter(|i| i.payment.is_some())
            .count();
        assert_eq!(windows.len(), paid, "seed {seed}");
        assert!(
            windows.iter().all(|w| settlement::WINDOWS_S.contains(w)),
            "seed {seed}"
        );
        let text = render::render(&world, "w", "test");
        assert_eq!(
            text.matches("max_timeout_seconds = ").count(),
            paid,
            "seed {seed}"
        );
        assert!(checked(&world).is_empty(), "seed {seed}");
    }
    assert!(
        short >= 5,
        "{short} of 300 worlds have short payment windows"
    );
}

/// `slow_heads` turns the connection bounds on for one instance of one
/// node and renders each burst as a `slow_heads` step from the attacker;
/// only in worlds with the kind, whose other parts it leaves as drawn.
#[test]
fn slow_heads_bound_one_instance_and_open_bursts_on_it() {
    let mut on = 0;
    for seed in 0..200 {
        let world = WorldSpec::generate(seed);
        let bursts: Vec<&super::slow_heads::SlowHeadsEvent> = (world.events.iter())
            .filter_map(|t| match &t.event {
                Event::SlowHeads(s) => Some(s),
                _ => None,
            })
            .collect();
        let bounded: Vec<_> = (world.instances.iter())
            .filter(|i| i.http_bounds.is_some())
            .collect();
        if !world.kinds.has(spec::Kind::SlowHeads) {
            assert!(bursts.is_empty() && bounded.is_empty(), "seed {seed}");
            continue;
        }
        on += 1;
        let [instance] = bounded[..] else {
            panic!("seed {seed}: {} bounded instances", bounded.len());
        };
        assert_eq!(instance.nodes, 1, "seed {seed}");
        assert!(
            (1..=super::slow_heads::BURSTS_MAX).contains(&bursts.len()),
            "seed {seed}"
        );
        assert!(bursts.iter().all(|b| b.instance == instance.name));
        let text = render::render(&world, "w", "test");
        let steps = text
            .lines()
            .filter(|l| l.starts_with("slow_heads = "))
            .count();
        assert_eq!(steps, bursts.len(), "seed {seed}");
        assert!(text.contains("http_bounds = true"), "seed {seed}");
        assert!(checked(&world).is_empty(), "seed {seed}");
    }
    assert!(
        (30..=90).contains(&on),
        "{on} of 200 worlds have slow heads"
    );
}

/// `sybils` gives one instance of one node more Sybil workers, dialling
/// from one client, than its per-address session cap, renders them as one
/// workers table and stops them in the heal; only in worlds with the kind.
#[test]
fn sybils_outnumber_their_instances_cap_and_leave_in_the_heal() {
    let mut on = 0;
    for seed in 0..200 {
        let world = WorldSpec::generate(seed);
        let with: Vec<_> = (world.instances.iter())
            .filter(|i| i.sybils.is_some())
            .collect();
        if !world.kinds.has(spec::Kind::Sybils) {
            assert!(with.is_empty(), "seed {seed}");
            continue;
        }
        on += 1;
        let [instance] = with[..] else {
            panic!("seed {seed}: {} instances with Sybils", with.len());
        };
        let s = instance.sybils.expect("drawn");
        assert!(s.count as usize > s.per_client_max, "seed {seed}");
        let text = render::render(&world, "w", "test");
        assert!(text.contains("client = \"sybil\""), "seed {seed}");
        let stops = (0..s.count)
            .filter(|k| text.contains(&format!("name = \"sybil-{k}\", action = \"stop\"")))
            .count();
        assert_eq!(stops, s.count as usize, "seed {seed}");
        assert!(checked(&world).is_empty(), "seed {seed}");
    }
    assert!((30..=90).contains(&on), "{on} of 200 worlds have Sybils");
}

/// `poll_hoards` bounds the held polls of one instance of one node, and
/// its hoarders, more than one, each hold more than a client may, and
/// together more than the total: the render carries the bounds and one
/// `poll` step with `count` per hoarder and burst; only in worlds with
/// the kind.
#[test]
fn poll_hoards_hold_past_the_bounds_of_one_instance() {
    let mut on = 0;
    for seed in 0..200 {
        let world = WorldSpec::generate(seed);
        let hoards: Vec<&super::poll_hoards::HoardEvent> = (world.events.iter())
            .filter_map(|t| match &t.event {
                Event::Hoard(h) => Some(h),
                _ => None,
            })
            .collect();
        let bounded: Vec<_> = (world.instances.iter())
            .filter(|i| i.held_polls.is_some())
            .collect();
        if !world.kinds.has(spec::Kind::PollHoards) {
            assert!(hoards.is_empty() && bounded.is_empty(), "seed {seed}");
            continue;
        }
        on += 1;
        let [instance] = bounded[..] else {
            panic!("seed {seed}: {} bounded instances", bounded.len());
        };
        assert_eq!(instance.nodes, 1, "seed {seed}");
        let (total, per_client) = instance.held_polls.expect("drawn");
        assert!(hoards.iter().all(|h| h.instance == instance.name));
        assert!(hoards.iter().all(|h| h.count as usize > per_client / 2));
        let clients: std::collections::BTreeSet<_> = hoards.iter().map(|h| h.client).collect();
        assert!(clients.len() >= 2, "seed {seed}");
        assert!(clients.len() * per_client >= total, "seed {seed}");
        let text = render::render(&world, "w", "test");
        let steps = text
            .lines()
            .filter(|l| l.starts_with("poll = ") && l.contains("count = "))
            .count();
        assert_eq!(steps, hoards.len(), "seed {seed}");
        assert!(
            text.contains(&format!("held_polls_per_client_max = {per_client}")),
            "seed {seed}"
        );
        assert!(checked(&world).is_empty(), "seed {seed}");
    }
    assert!((30..=90).contains(&on), "{on} of 200 worlds hoard polls");
}

/// `garbage` sends bursts of malformed requests to one instance, each an
/// `http` or `raw_request` step marked `malformed = true` from the
/// attacker's own client, payment garbage only where payments are on and
/// proof garbage only with user auth; only in worlds with the kind, about
/// a quarter of them. Across the worlds, every family of the catalogue is
/// drawn.
#[test]
fn garbage_sends_marked_malformed_requests_to_one_instance() {
    let (mut on, mut text_all) = (0, String::new());
    for seed in 0..200 {
        let world = WorldSpec::generate(seed);
        let sent: Vec<&super::garbage::GarbageRequest> = (world.events.iter())
            .filter_map(|t| match &t.event {
                Event::Garbage(g) => Some(g),
                _ => None,
            })
            .collect();
        if !world.kinds.has(spec::Kind::Garbage) {
            assert!(sent.is_empty(), "seed {seed}");
            continue;
        }
        on += 1;
        assert!(sent.len() >= 3, "seed {seed}");
        let instances: std::collections::BTreeSet<_> = sent.iter().map(|g| g.instance).collect();
        assert_eq!(instances.len(), 1, "seed {seed}");
        assert!(
            sent.iter().all(|g| super::garbage::keeps(&world, g)),
            "seed {seed}"
        );
        let text = render::render(&world, "w", "test");
        let marked = (text.lines())
            .filter(|l| l.contains("client = \"garbage\"") && l.ends_with("malformed = true }"))
            .count();
        assert_eq!(marked, sent.len(), "seed {seed}");
        assert!(
            checked(&world).is_empty(),
            "seed {seed}: {:?}",
            checked(&world)
        );
        text_all.push_str(&text);
    }
    assert!((25..=80).contains(&on), "{on} of 200 worlds send garbage");
    for family in [
        "raw_request = ",
        "x-payment = ",
        "x-user-proof = ",
        "/v1/chat/completions",
        "wait_ms=",
        "/v1/trust/",
        "\\\\u0000",
        "\\\\ud800",
    ] {
        assert!(text_all.contains(family), "no world drew {family}");
    }
}

#[test]
fn an_idle_cut_adds_a_node_whose_only_worker_holds_a_job_whose_lease_lapses_inside_its_cut() {
    let worlds: Vec<WorldSpec> = (0..300)
        .map(WorldSpec::generate)
        .filter(|w| w.kinds.has(Kind::IdleCuts))
        .collect();
    assert!(!worlds.is_empty(), "some of 300 seeds draw idle_cuts");
    for w in &worlds {
        let idler = (w.workers.iter())
            .find(|x| x.name == super::idle_cuts::IDLER)
            .expect("the idler");
        let i = (w.instances.iter())
            .find(|i| i.name == idler.instance)
            .expect("its instance");
        let node = idler.node.expect("on a node");
        assert_eq!(node + 1, i.nodes, "seed {}: a node of its own", w.seed);
        let others = (w.workers.iter()).filter(|x| x.instance == i.name && x.node == Some(node));
        assert_eq!(others.count(), 1, "seed {}: the idler alone", w.seed);
        let at = (w.events.iter())
            .position(
                |t| matches!(&t.event, Event::Commit(c) if c.instance == i.name && c.node == node),
            )
            .expect("a commit to the idle node");
        // A short cut of `store_blips`, drawn after this kind at a random
        // place of the timeline, may land between the commit and the cut
        // (a known cost: benches/results/held-out-2026-11-29-fourth-misses-core.md).
        let idle_cut = match w.events[at + 1].event {
            Event::StorePartition {
                node: cut, for_ms, ..
            } if for_ms > 2 * i.node_lease_ms => Some((cut, for_ms)),
            _ => None,
        };
        let Some((cut, for_ms)) = idle_cut else {
            assert!(
                w.kinds.has(Kind::StoreBlips),
                "seed {}: the cut follows the commit",
                w.seed
            );
            continue;
        };
        assert_eq!(cut, node);
        // The lease lapses after a node lease and a renewal period into
        // the cut, and before two; the cut outlasts both.
        let into_ms = i.lease_ms - w.events[at + 1].after_ms;
        assert!(into_ms > i.node_lease_ms * 3 / 2 - 1 && into_ms < 2 * i.node_lease_ms);
        assert!(for_ms > 2 * i.node_lease_ms);
    }
}

/// `long_retention` lives hours past the timeline, so it is drawn only
/// where no worker's heartbeat fault reconnects it all along (seed 1777
/// filled its transcript), and at most in about half the fitting worlds.
#[test]
fn long_retention_worlds_have_no_worker_reconnecting_all_along() {
    let worlds: Vec<WorldSpec> = (0..2000)
        .map(WorldSpec::generate)
        .filter(|w| w.kinds.has(spec::Kind::LongRetention))
        .collect();
    assert!(worlds.len() >= 20, "{} worlds", worlds.len());
    for w in &worlds {
        assert!(
            w.workers.iter().all(|x| x.heartbeat.is_none()),
            "seed {}",
            w.seed
        );
        let kept = w.instances.iter().filter(|i| i.retention_hours == Some(1));
        assert_eq!(kept.count(), 1, "seed {}", w.seed);
    }
    assert!(!WorldSpec::generate(1777)
        .kinds
        .has(spec::Kind::LongRetention));
}
