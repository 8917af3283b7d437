//! The draws of answers and payments the coordinator must refuse: a
//! receipt of another key, a stream that is not the output, a payment spent
//! elsewhere or replayed during a store cut (`foreign_keys`,
//! `differing_streams`, `front_runs` and `cut_replays`, streams 28 to 30):
//! each is on only where it should be, is drawn in some seeds, and renders
//! to a scenario the ordinary checks accept.

use super::spec::{Event, Kind, WorldSpec};
use super::*;

fn has(worker: &spec::WorkerSpec, kind: &str) -> bool {
    worker.faults.iter().any(|f| f.toml.contains(kind))
}

fn renders(world: &WorldSpec) {
    let problems = super::tests::checked(world);
    assert!(problems.is_empty(), "seed {}: {problems:#?}", world.seed);
}

/// `foreign_key_receipt` goes only to workers that already forge receipts.
#[test]
fn another_keys_receipt_is_drawn_only_for_workers_that_forge() {
    let mut drawn = 0;
    for seed in 0..300 {
        let world = WorldSpec::generate(seed);
        let forgers = world
            .workers
            .iter()
            .filter(|w| has(w, "foreign_key_receipt"));
        for worker in forgers.clone() {
            assert!(world.kinds.has(Kind::ForgedReceipt), "seed {seed}");
            assert!(has(worker, "bad_signature"), "seed {seed}: {}", worker.name);
        }
        if forgers.count() > 0 {
            drawn += 1;
            renders(&world);
        }
    }
    assert!(drawn > 10, "foreign_key_receipt in {drawn} of 300 seeds");
}

/// `deltas_differ` goes only to streaming workers that misbehave already
/// (another fault, a heartbeat fault or another's key), never to the
/// heal's anchors nor to `stream_retries`' staller.
#[test]
fn differing_streams_are_drawn_only_for_streaming_workers_that_misbehave() {
    let mut drawn = 0;
    for seed in 0..300 {
        let world = WorldSpec::generate(seed);
        let differs = world.workers.iter().filter(|w| has(w, "deltas_differ"));
        for worker in differs.clone() {
            assert!(world.kinds.has(Kind::Streams), "seed {seed}");
            assert!(worker.stream, "seed {seed}: {}", worker.name);
            assert_ne!(worker.name, stream_retries::STALLER, "seed {seed}");
            let other_fault = worker.faults.len() > 1;
            let misbehaves = other_fault || worker.heartbeat.is_some() || worker.key_of.is_some();
            assert!(misbehaves, "seed {seed}: {} was honest", worker.name);
        }
        if differs.count() > 0 {
            drawn += 1;
            renders(&world);
        }
    }
    assert!(drawn > 5, "deltas_differ in {drawn} of 300 seeds");
}

/// `spent_elsewhere` facilitator steps come only in `settlement_faults`
/// worlds without BUGGIFY, on one-node instances settling through the
/// facilitator that no restart or crash reaches.
#[test]
fn front_runs_ride_with_settlement_faults_on_facilitated_instances() {
    let mut drawn = 0;
    for seed in 0..2000 {
        let world = WorldSpec::generate(seed);
        let front_runs: Vec<&'static str> = (world.events.iter())
            .filter_map(|t| match t.event {
                Event::Facilitator {
                    instance,
                    script: "spent_elsewhere",
                } => Some(instance),
                _ => None,
            })
            .collect();
        for instance in &front_runs {
            assert!(world.kinds.has(Kind::SettlementFaults), "seed {seed}");
            let i = world.instances.iter().find(|i| i.name == *instance);
            assert_eq!(i.and_then(|i| i.payment), Some("success"), "seed {seed}");
            assert_eq!(i.map(|i| i.nodes), Some(1), "seed {seed}");
            assert!(!world.kinds.has(Kind::Buggify), "seed {seed}");
            let restarted = (world.events.iter()).any(|t| match t.event {
                Event::Restart(i) | Event::GracefulRestart(i) => i == *instance,
                Event::CrashAfter { instance: i, .. } => i == *instance,
                _ => false,
            });
            assert!(!restarted, "seed {seed}: {instance} restarts");
        }
        if !front_runs.is_empty() {
            drawn += 1;
            renders(&world);
        }
    }
    assert!(drawn > 1, "spent_elsewhere in {drawn} of 2000 seeds");
}

/// Each cut replay follows a store cut of its own node directly, within
/// the cut, and the last paid commit before it went to its instance.
#[test]
fn cut_replays_land_inside_a_cut_of_their_node() {
    let mut drawn = 0;
    for seed in 0..600 {
        let world = WorldSpec::generate(seed);
        let mut found = false;
        for (k, t) in world.events.iter().enumerate() {
            let Event::Replay {
                instance,
                node,
                index,
            } = t.event
            else {
                continue;
            };
            if index < cut_replays::INDEX_BASE {
                continue;
            }
            found = true;
            let Event::StorePartition {
                instance: cut,
                node: cut_node,
                for_ms,
            } = world.events[k - 1].event
            else {
                panic!("seed {seed}: replay {index} does not follow a cut");
            };
            assert_eq!((cut, cut_node), (instance, node), "seed {seed}");
            assert!(t.after_ms < for_ms, "seed {seed}");
            let last_paid = (world.events[..k].iter().rev()).find_map(|t| match &t.event {
                Event::Commit(c) if c.pay.is_some() => Some(c.instance),
                _ => None,
            });
            assert_eq!(last_paid, Some(instance), "seed {seed}");
        }
        if found {
            drawn += 1;
            renders(&world);
        }
    }
    assert!(drawn > 3, "cut replays in {drawn} of 600 seeds");
}
