//! The draws of paid commits sent again with their payment (`paid_retries`
//! and `reused_payments`, streams 36 and 37): each retry sits where its
//! premise holds, is drawn in enough seeds, and renders to a scenario the
//! ordinary checks accept, sending its commit's body with the last payment.

use super::paid_retries::Retry;
use super::spec::{Event, WorldSpec};
use super::*;

/// Each retry of a world, with the event before it.
fn retries(world: &WorldSpec) -> Vec<(&Retry, &Event)> {
    (1..world.events.len())
        .filter_map(|k| match &world.events[k].event {
            Event::PaidRetry(r) => Some((r, &world.events[k - 1].event)),
            _ => None,
        })
        .collect()
}

fn renders(world: &WorldSpec) {
    let problems = super::tests::checked(world);
    assert!(problems.is_empty(), "seed {}: {problems:#?}", world.seed);
}

/// A same-body retry comes right after a restart of its commit's one-node
/// paid instance, and the last payment step before it was that commit.
#[test]
fn a_paid_retry_follows_a_restart_of_its_commits_instance() {
    let mut drawn = 0;
    for seed in 0..2000 {
        let world = WorldSpec::generate(seed);
        let mut found = false;
        for (retry, before) in retries(&world).into_iter().filter(|(r, _)| !r.other_prompt) {
            let instance = retry.commit.instance;
            let restarted =
                matches!(before, Event::Restart(i) | Event::GracefulRestart(i) if *i == instance);
            assert!(restarted, "seed {seed}: {before:?} before the retry");
            assert_eq!(world.nodes_of(instance), 1, "seed {seed}");
            assert_eq!(retry.commit.pay, Some("none"), "seed {seed}");
            assert!(!retry.commit.private, "seed {seed}");
            found = true;
        }
        if found {
            drawn += 1;
            if drawn <= 20 {
                renders(&world);
            }
        }
    }
    assert!(drawn > 40, "paid retries in {drawn} of 2000 seeds");
}

/// Another prompt's reuse comes right after its valid PUBLIC paid commit.
#[test]
fn a_reused_payment_follows_its_commit() {
    let mut drawn = 0;
    for seed in 0..2000 {
        let world = WorldSpec::generate(seed);
        let reuses: Vec<_> = (retries(&world).into_iter())
            .filter(|(r, _)| r.other_prompt)
            .collect();
        for (retry, before) in &reuses {
            let after_its_commit = **before == Event::Commit(retry.commit.clone())
                || matches!(before, Event::Poll { .. } | Event::Read(_));
            assert!(after_its_commit, "seed {seed}: {before:?} before the reuse");
            assert_eq!(retry.commit.pay, Some("none"), "seed {seed}");
            assert!(!retry.commit.private, "seed {seed}");
        }
        assert!(reuses.len() <= reused_payments::REUSES_MAX, "seed {seed}");
        if !reuses.is_empty() {
            drawn += 1;
            if drawn <= 20 {
                renders(&world);
            }
        }
    }
    assert!(drawn > 200, "reused payments in {drawn} of 2000 seeds");
}

/// A retry sends its commit's body (or, reused, another prompt) on its
/// tier with the last payment's header.
#[test]
fn a_retry_renders_its_commit_with_the_last_payment() {
    let world = (0..2000)
        .map(WorldSpec::generate)
        .find(|w| retries(w).iter().any(|(r, _)| !r.other_prompt))
        .expect("a seed with a paid retry");
    let text = render::render(&world, "retry", "test");
    let (retry, _) = retries(&world)[0];
    let c = &retry.commit;
    let step = (text.split("[[steps]]"))
        .find(|s| s.contains("name = \"retry a paid commit\"") || s.contains("another prompt"))
        .expect("the retry's step");
    assert!(
        step.contains(&format!("/v1/jobs/commit/{}", c.tier)),
        "{step}"
    );
    assert!(
        step.contains("\"{{last_payment_header}}\" = \"{{last_payment}}\""),
        "{step}"
    );
    let prompt = match retry.other_prompt {
        false => format!("job {}", c.index),
        true => format!("job {}", c.index + reused_payments::INDEX_OFFSET),
    };
    assert!(step.contains(&format!("\"{prompt}\"")), "{step}");
}
