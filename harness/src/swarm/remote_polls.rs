//! The `remote_polls` kind (sabotage `remote-long-poll-answers-stale-status`):
//! a chain of two held polls sent to a node of a cluster that does not
//! hold their job, across the job's result on the node that does. Such a
//! poll reads the shared store and is woken by the node's remote watch
//! when the store shows another status; it must then read the job again
//! (docs/cluster.md, "What a client sees polling any node"). At the end of
//! the timeline, on a cluster that no node crash, store cut, lost answer,
//! restart or reboot reaches, every running worker stops and a worker of
//! its own ([`WORKER`]: one slot, both job types, honest, a fixed latency
//! of [`LATENCY_MS`]) starts on one node, and a job is committed on that
//! node, which it takes at once. A first poll on another node waits less
//! than the latency and is answered `running` at its deadline; the second,
//! sent right after, waits past the result. `poll_not_woken`
//! (`crate::verify::polls::check_early`, several nodes) judges the second:
//! answered before its deadline, it must show another status than
//! `running`.
//!
//! Not drawn with BUGGIFY (the poll checks are off there). Drawn from a
//! stream of the seed's own ([`STREAM`]) after every other kind but
//! `long_retention`, so a seed without it keeps its world exactly.

use super::held_polls::WAIT_MS_MAX;
use super::spec::{Event, Kind, Timed, WorkerSpec, WorldSpec};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;
use std::ops::RangeInclusive;

/// The seed's ChaCha stream this kind draws from (the world's is 0).
const STREAM: u64 = 42;
/// The worker that takes the polled job.
pub const WORKER: &str = "remote-worker";
/// Its latency, ms: long enough for the first poll to end before the
/// result.
const LATENCY_MS: RangeInclusive<u64> = 600..=1_500;
/// The commit's job index, apart from the timeline's and other kinds'.
const INDEX: u32 = 42_000;
/// How long the worker is given to connect, ms.
const CONNECT_MS: u64 = 500;
/// The first poll is sent this long after the commit's answer, ms: after
/// the worker's accept is in the shared store.
const FIRST_AFTER_MS: RangeInclusive<u64> = 100..=200;
/// The second poll's deadline comes at least this long after the result:
/// past the store's write and a few rounds of the remote watch.
const PAST_RESULT_MS: u64 = 2_000;
/// The worker stops this long after its result is due, ms.
const STOP_AFTER_RESULT_MS: u64 = 200;

/// Draws the kind for `world` (already drawn): whether it is on, its
/// worker, and its block of events at the end of the timeline.
pub fn draw(world: &mut WorldSpec) {
    let mut rng = ChaCha20Rng::seed_from_u64(world.seed);
    rng.set_stream(STREAM);
    // Undisturbed clusters are rare (the `several_nodes` kind gives each
    // world's clusters one to four crashes, cuts or lost answers): take
    // nearly every one.
    if !rng.gen_bool(0.9) || world.kinds.has(Kind::Buggify) {
        return;
    }
    let Some((instance, nodes)) = undisturbed_clusters(world).choose(&mut rng).copied() else {
        return;
    };
    world.kinds.0.push(Kind::RemotePolls);
    let latency_ms = rng.gen_range(LATENCY_MS);
    let owner = rng.gen_range(0..nodes);
    let poller = (owner + rng.gen_range(1..nodes)) % nodes;
    world.workers.push(WorkerSpec {
        name: WORKER.into(),
        instance,
        capabilities: vec![],
        slots: 1,
        latency: latency_ms.to_string(),
        faults: vec![],
        heartbeat: None,
        key_of: None,
        node: Some(owner),
        stream: false,
    });
    let stop = Timed {
        after_ms: 0,
        event: Event::StopWorker(WORKER.into()),
    };
    world.events.insert(0, stop);
    let block = block(world, &mut rng, instance, (owner, poller), latency_ms);
    world.events.extend(block);
}

/// The clusters no node crash, store cut, lost answer, restart, crash or
/// reboot reaches, with their node counts.
fn undisturbed_clusters(world: &WorldSpec) -> Vec<(&'static str, u32)> {
    let disturbed = |name: &str| {
        let controlled = (world.events.iter()).any(|t| match t.event {
            Event::Restart(i) | Event::GracefulRestart(i) => i == name,
            Event::CrashAfter { instance, .. }
            | Event::NodeCrash { instance, .. }
            | Event::StorePartition { instance, .. }
            | Event::LostAnswer { instance, .. } => instance == name,
            _ => false,
        });
        controlled || world.reboots.iter().any(|r| r.instance == name)
    };
    (world.instances.iter())
        .filter(|i| i.nodes > 1 && !disturbed(i.name))
        .map(|i| (i.name, i.nodes))
        .collect()
}

/// The block at the end of the timeline: the others stop, the worker
/// starts, the commit on its node, the two polls on another, then the
/// worker stops and the others start again once its result is in.
fn block(
    world: &WorldSpec,
    rng: &mut ChaCha20Rng,
    instance: &'static str,
    (owner, poller): (u32, u32),
    latency_ms: u64,
) -> Vec<Timed> {
    let others = super::edges::running_workers(world, instance, world.events.len());
    let now = |event| Timed { after_ms: 0, event };
    let mut block = super::edges::stop_now(&others);
    block.push(now(Event::StartWorker(WORKER.into())));
    let paid = (world.instances.iter()).any(|i| i.name == instance && i.payment.is_some());
    let mut commit = super::edges::public_commit(rng, instance, INDEX, paid.then_some("none"));
    commit.node = owner;
    block.push(Timed {
        after_ms: CONNECT_MS,
        event: Event::Commit(commit),
    });
    let first_after_ms = rng.gen_range(FIRST_AFTER_MS);
    // Odd waits, so a deadline rarely meets a timer of the coordinator's.
    let first_wait_ms = rng.gen_range(21..=latency_ms / 2 - FIRST_AFTER_MS.end()) | 1;
    let second_low_ms = latency_ms + PAST_RESULT_MS;
    let second_wait_ms = rng.gen_range(second_low_ms..WAIT_MS_MAX) | 1;
    let poll = |after_ms, hold_ms| Timed {
        after_ms,
        event: Event::Poll {
            instance,
            node: poller,
            hold_ms: Some(hold_ms),
            edge_ms: None,
        },
    };
    block.push(poll(first_after_ms, first_wait_ms));
    block.push(poll(first_wait_ms + 1, second_wait_ms.min(WAIT_MS_MAX - 1)));
    block.push(Timed {
        after_ms: latency_ms + STOP_AFTER_RESULT_MS,
        event: Event::StopWorker(WORKER.into()),
    });
    block.extend(others.into_iter().map(Event::StartWorker).map(now));
    block
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn some_worlds_poll_a_job_on_a_node_that_does_not_hold_it() {
        let mut drawn = 0;
        for seed in 0..400 {
            let world = WorldSpec::generate(seed);
            if !world.kinds.has(Kind::RemotePolls) {
                continue;
            }
            drawn += 1;
            assert!(!world.kinds.has(Kind::Buggify), "seed {seed}");
            let worker = (world.workers.iter())
                .find(|w| w.name == WORKER)
                .expect("its worker");
            let latency_ms: u64 = worker.latency.parse().expect("a fixed latency");
            let commit = (world.events.iter())
                .find_map(|t| match &t.event {
                    Event::Commit(c) if c.index == INDEX => Some(c.clone()),
                    _ => None,
                })
                .expect("its commit");
            assert_eq!(Some(commit.node), worker.node, "seed {seed}");
            let polls: Vec<(u32, u64)> = (world.events.iter())
                .filter_map(|t| match t.event {
                    Event::Poll {
                        instance,
                        node,
                        hold_ms: Some(hold_ms),
                        ..
                    } if instance == worker.instance => Some((node, hold_ms)),
                    _ => None,
                })
                .collect();
            let [.., (first_node, first), (second_node, second)] = polls[..] else {
                panic!("seed {seed}: two held polls");
            };
            assert!(first_node == second_node && Some(first_node) != worker.node);
            assert!(
                first + FIRST_AFTER_MS.end() < latency_ms / 2 + 1
                    && second >= latency_ms + PAST_RESULT_MS,
                "seed {seed}"
            );
        }
        assert!(drawn >= 4, "{drawn} worlds drew remote_polls");
    }
}
