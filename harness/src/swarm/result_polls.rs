//! The `result_polls` kind (sabotage `poll-waiters-dropped-on-same-status`):
//! a chain of two held polls of a paid job across its worker's result. A
//! paid job's result awaits its settlement in `running` (decision 0021),
//! so the result changes the job, not its status, and a held poll must
//! sleep through it until the settlement ends the job or its own deadline
//! comes. At the end of the timeline, on a paid one-node instance that no
//! restart reaches, every running worker stops and a worker of its own
//! ([`WORKER`]: one slot, both job types, honest, a fixed latency of
//! [`LATENCY_MS`]) starts; a paid job is committed, which it takes and
//! accepts at once. A first poll, sent a few ms later, waits less than
//! the latency and is answered `running` at its deadline; the second,
//! sent right after, waits past the result. `poll_not_woken`
//! (`crate::verify::polls::check_early`) judges the second: answered
//! before its deadline, it must show another status than `running`.
//!
//! Not drawn with BUGGIFY (its slow flushes stretch a poll's answer, so
//! the poll checks are off there). Drawn from a stream of the seed's own
//! ([`STREAM`]) after every other kind but `long_retention`, so a seed
//! without it keeps its world exactly.

use super::held_polls::WAIT_MS_MAX;
use super::spec::{Event, Kind, Timed, WorkerSpec, WorldSpec};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;
use std::ops::RangeInclusive;

/// The seed's ChaCha stream this kind draws from (the world's is 0).
const STREAM: u64 = 38;
/// The worker that takes the polled job.
pub const WORKER: &str = "result-worker";
/// Its latency, ms: long enough for the first poll to end before the
/// result.
const LATENCY_MS: RangeInclusive<u64> = 300..=1_500;
/// The commit's job index, apart from the timeline's and other kinds'.
const INDEX: u32 = 38_000;
/// How long the worker is given to connect, ms.
const CONNECT_MS: u64 = 500;
/// The first poll is sent this long after the commit's answer, ms: after
/// the worker's accept, in a later millisecond than the assign.
const FIRST_AFTER_MS: RangeInclusive<u64> = 5..=20;
/// The second poll's deadline comes at least this long after the result.
const PAST_RESULT_MS: u64 = 2_000;
/// The worker stops this long after its result is due, ms.
const STOP_AFTER_RESULT_MS: u64 = 200;

/// Draws the kind for `world` (already drawn): whether it is on, its
/// worker, and its block of events at the end of the timeline.
pub fn draw(world: &mut WorldSpec) {
    let mut rng = ChaCha20Rng::seed_from_u64(world.seed);
    rng.set_stream(STREAM);
    if !rng.gen_bool(0.6) || world.kinds.has(Kind::Buggify) {
        return;
    }
    let Some(instance) = undisturbed_paid(world).choose(&mut rng).copied() else {
        return;
    };
    world.kinds.0.push(Kind::ResultPolls);
    let latency_ms = rng.gen_range(LATENCY_MS);
    world.workers.push(WorkerSpec {
        name: WORKER.into(),
        instance,
        capabilities: vec![],
        slots: 1,
        latency: latency_ms.to_string(),
        faults: vec![],
        heartbeat: None,
        key_of: None,
        node: None,
        stream: false,
    });
    let stop = |name: &str| Timed {
        after_ms: 0,
        event: Event::StopWorker(name.into()),
    };
    world.events.insert(0, stop(WORKER));
    let block = block(world, &mut rng, instance, latency_ms);
    world.events.extend(block);
}

/// The paid one-node instances no restart, crash or reboot reaches.
fn undisturbed_paid(world: &WorldSpec) -> Vec<&'static str> {
    let restarted = |name: &str| {
        let controlled = (world.events.iter()).any(|t| match t.event {
            Event::Restart(i) | Event::GracefulRestart(i) => i == name,
            Event::CrashAfter { instance, .. } => instance == name,
            _ => false,
        });
        controlled || world.reboots.iter().any(|r| r.instance == name)
    };
    (world.instances.iter())
        .filter(|i| i.payment.is_some() && i.nodes == 1 && !restarted(i.name))
        .map(|i| i.name)
        .collect()
}

/// The block at the end of the timeline: the others stop, the worker
/// starts, the paid commit, the two polls, then the worker stops and the
/// others start again once its result is in.
fn block(
    world: &WorldSpec,
    rng: &mut ChaCha20Rng,
    instance: &'static str,
    latency_ms: u64,
) -> Vec<Timed> {
    let others = super::edges::running_workers(world, instance, world.events.len());
    let now = |event| Timed { after_ms: 0, event };
    let mut block = super::edges::stop_now(&others);
    block.push(now(Event::StartWorker(WORKER.into())));
    let commit = super::edges::public_commit(rng, instance, INDEX, Some("none"));
    block.push(Timed {
        after_ms: CONNECT_MS,
        event: Event::Commit(commit),
    });
    let first_after_ms = rng.gen_range(FIRST_AFTER_MS);
    // Odd waits, so a deadline rarely meets a timer of the coordinator's.
    let first_wait_ms = rng.gen_range(21..=latency_ms / 2) | 1;
    let second_low_ms = latency_ms + PAST_RESULT_MS;
    let second_wait_ms = rng.gen_range(second_low_ms..WAIT_MS_MAX) | 1;
    let poll = |after_ms, hold_ms| Timed {
        after_ms,
        event: Event::Poll {
            instance,
            node: 0,
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
    fn some_worlds_poll_a_paid_job_across_its_result_at_the_end() {
        let mut drawn = 0;
        for seed in 0..400 {
            let world = WorldSpec::generate(seed);
            if !world.kinds.has(Kind::ResultPolls) {
                continue;
            }
            drawn += 1;
            assert!(!world.kinds.has(Kind::Buggify), "seed {seed}");
            let worker = (world.workers.iter())
                .find(|w| w.name == WORKER)
                .expect("its worker");
            let latency_ms: u64 = worker.latency.parse().expect("a fixed latency");
            let polls: Vec<u64> = (world.events.iter())
                .filter_map(|t| match t.event {
                    Event::Poll { hold_ms, .. } => hold_ms,
                    _ => None,
                })
                .collect();
            let [.., first, second] = polls[..] else {
                panic!("seed {seed}: two held polls");
            };
            assert!(
                first < latency_ms && second >= latency_ms + PAST_RESULT_MS,
                "seed {seed}"
            );
            // The block: the worker starts after the other kinds' events
            // (only `store_blips`' cuts and `long_retention`'s polls may
            // come later), the commit follows, and it stops after them.
            let started = (world.events.iter())
                .rposition(|t| matches!(&t.event, Event::StartWorker(n) if n == WORKER))
                .expect("the worker starts");
            let stopped = (world.events.iter())
                .rposition(|t| matches!(&t.event, Event::StopWorker(n) if n == WORKER))
                .expect("the worker stops");
            assert!(started < stopped, "seed {seed}");
            assert!(
                matches!(&world.events[started + 1].event, Event::Commit(c) if c.index == INDEX),
                "seed {seed}"
            );
        }
        assert!(drawn > 5, "{drawn} worlds drew result_polls");
    }
}
