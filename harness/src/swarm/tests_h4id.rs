//! The draw added for the held-out set 4's identity misses (branch
//! `h4id`): it touches only the worlds it is on in, and renders to a
//! scenario the ordinary checks accept.

use super::spec::{Event, Kind, WorldSpec};
use super::tests::checked;
use super::*;

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
