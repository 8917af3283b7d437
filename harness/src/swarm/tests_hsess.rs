//! The draws of the held-out misses (branch `hsess`, streams 26 and 27):
//! each is on only where it should be, keeps every other seed's world, and
//! renders to a scenario the ordinary checks accept.

use super::spec::{Kind, WorldSpec};
use super::*;
use std::path::Path;

fn problems(world: &WorldSpec) -> Vec<String> {
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

/// `other_payment_ref` goes only to workers that already forge receipts,
/// in `forged_receipt` worlds, is drawn in some of them, and renders to a
/// worker fault `harness check` accepts.
#[test]
fn another_payments_receipt_is_drawn_only_for_workers_that_forge() {
    let mut drawn = 0;
    for seed in 0..300 {
        let world = WorldSpec::generate(seed);
        let before = drawn;
        for worker in &world.workers {
            let has = |kind: &str| worker.faults.iter().any(|f| f.toml.contains(kind));
            if has("other_payment_ref") {
                assert!(world.kinds.has(Kind::ForgedReceipt), "seed {seed}");
                assert!(has("bad_signature"), "seed {seed}: {}", worker.name);
                drawn += 1;
            }
        }
        if drawn > before {
            let problems = problems(&world);
            assert!(problems.is_empty(), "seed {seed}: {problems:#?}");
        }
    }
    assert!(
        drawn > 10,
        "other_payment_ref drawn {drawn} times in 300 seeds"
    );
}
