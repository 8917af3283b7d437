//! The swarm's parts without running worlds: generation is a function of
//! the seed, every world renders to a scenario the ordinary checks accept
//! (also after shrinking's removals), and the shrinker keeps exactly what a
//! failure needs.

use super::shrink::shrink;
use super::world::{Event, WorldSpec};
use super::*;
use std::path::Path;

fn checked(world: &WorldSpec) -> Vec<String> {
    let name = scenario_name(world.seed, None);
    let text = world::render(world, &name, "test");
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
    let lines = world::render(&small, "x", "x")
        .lines()
        .filter(|l| !l.is_empty())
        .count();
    assert!(lines <= 30, "{lines} lines");
}

#[test]
fn failures_are_classified_by_invariant() {
    let cases = [
        (
            "panic: core invariant broken after an event at 5 ms: slots: worker 1 holds 2 jobs in 1 slots at x.rs:1",
            "core_slots",
        ),
        ("panic: index out of bounds at x.rs:2", "panic"),
        ("safety acknowledged_job_lost: chain_a answered 201", "acknowledged_job_lost"),
        ("chain_a: job 1 is still pending after 0 attempt(s)", "all_jobs_terminal"),
    ];
    for (message, key) in cases {
        assert_eq!(invariant_key(message), key, "{message}");
    }
}

#[test]
fn seed_ranges_parse() {
    assert_eq!(parse_seeds("0..10000"), Ok(0..10000));
    assert!(parse_seeds("5..5").is_err());
    assert!(parse_seeds("10").is_err());
}
