//! The draws of worker answers that carry a receipt bound to another
//! payment or to none, or race a lease's end (`other_payments`,
//! `lease_answers`, streams 26, 46 and 27):
//! each is on only where it should be, keeps every other seed's world, and
//! renders to a scenario the ordinary checks accept.

use super::spec::{Event, Kind, WorldSpec};
use super::*;

/// `other_payment_ref` and `no_payment_ref` go only to workers that
/// already forge receipts, in `forged_receipt` worlds, are each drawn in
/// some of them, and render to worker faults `harness check` accepts.
#[test]
fn receipts_bound_to_another_or_no_payment_are_drawn_only_for_workers_that_forge() {
    for fault in ["other_payment_ref", "no_payment_ref"] {
        let mut drawn = 0;
        for seed in 0..300 {
            let world = WorldSpec::generate(seed);
            let before = drawn;
            for worker in &world.workers {
                let has = |kind: &str| worker.faults.iter().any(|f| f.toml.contains(kind));
                if has(fault) {
                    assert!(world.kinds.has(Kind::ForgedReceipt), "seed {seed}");
                    assert!(has("bad_signature"), "seed {seed}: {}", worker.name);
                    drawn += 1;
                }
            }
            if drawn > before {
                let problems = super::tests::checked(&world);
                assert!(problems.is_empty(), "seed {seed}: {problems:#?}");
            }
        }
        assert!(drawn > 10, "{fault} drawn {drawn} times in 300 seeds");
    }
}

/// `lease_answers` appends its block to the end of the timeline on an
/// unpaid one-node instance with retries: the answerer answers or gives
/// up at the lease's end (+0 or +1 ms), both it and the taker are stopped
/// from the start, and the
/// world renders to a scenario `harness check` accepts.
#[test]
fn lease_answers_end_the_timeline_at_a_lease_edge() {
    let mut on = 0;
    for seed in 0..300 {
        let world = WorldSpec::generate(seed);
        let answerer = world
            .workers
            .iter()
            .find(|w| w.name == lease_answers::ANSWERER);
        if !world.kinds.has(Kind::LeaseAnswers) {
            assert!(answerer.is_none(), "seed {seed}");
            continue;
        }
        on += 1;
        let answerer = answerer.expect("the answerer");
        let instance = (world.instances.iter())
            .find(|i| i.name == answerer.instance)
            .expect("its instance");
        assert!(instance.payment.is_none() && instance.nodes == 1 && instance.attempts_max > 1);
        let lease = instance.lease_ms;
        let ends = answerer.faults[0].toml.as_str();
        let edge = match ends.strip_prefix("kind = \"slow\", extra_ms = ") {
            Some(extra) => {
                assert_eq!(answerer.latency, lease.to_string(), "seed {seed}");
                extra.parse::<u64>().expect("extra_ms")
            }
            None => {
                assert_eq!(ends, "kind = \"give_up\"", "seed {seed}");
                answerer.latency.parse::<u64>().expect("latency") - lease
            }
        };
        assert!(edge <= 1, "seed {seed}: {edge} ms past the lease");
        // Among the stops that open the timeline (later kinds put their
        // own workers' stops first too).
        let stopped = |name: &str| {
            (world.events.iter())
                .take_while(|t| matches!(t.event, Event::StopWorker(_)))
                .any(|t| matches!(&t.event, Event::StopWorker(n) if n == name))
        };
        assert!(stopped(lease_answers::ANSWERER) && stopped(lease_answers::TAKER));
        let last = world.events.last().map(|t| &t.event);
        let stop = world.events.iter().rposition(
            |t| matches!(&t.event, Event::StopWorker(n) if n == lease_answers::ANSWERER),
        );
        assert!(stop.is_some() && last.is_some(), "seed {seed}");
        let problems = super::tests::checked(&world);
        assert!(problems.is_empty(), "seed {seed}: {problems:#?}");
    }
    assert!(
        (10..=90).contains(&on),
        "{on} of 300 worlds answer at a lease's end"
    );
}
