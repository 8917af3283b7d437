//! The `range_edges` kind (sabotage `poll-wait-at-its-maximum-refused`):
//! requests at the inclusive ends of documented ranges, not only inside
//! them. Every other kind draws a long poll's `wait_ms` odd and below the
//! largest wait (so a deadline rarely meets a coordinator timer), so no
//! swarm world ever asked for exactly `wait_ms=30000`, which the spec allows
//! ("0 to 30000"). Here one held poll of the latest job of a one-node
//! instance asks for exactly the largest wait, right after a random commit
//! to it. `held_polls_over_cap` (`crate::verify::polls::check_caps`)
//! judges its answer: a held poll is answered 200 with the job or 404, never
//! refused. And (`worker-with-most-slots-refused`) a worker of its own,
//! [`WORKER`], says hello with exactly the largest slot count
//! (`limits.slots_max`, 64; docs/worker-protocol.md: "slots is 1 to 64"),
//! where every other kind draws 1 to 4. It is stopped at the start and
//! started at the end of the timeline, so no other kind's block (which
//! stops the workers it knows) meets it; honest, on an address of its own,
//! so no cap of the address refuses it. `in_range_refused`
//! (`crate::verify::range_edges`) judges its session: never `invalid_hello`.
//!
//! Not drawn with BUGGIFY (the poll checks are off there). Drawn from a
//! stream of the seed's own ([`STREAM`]) after every other kind but
//! `long_retention`, so a seed without it keeps its world exactly.

use super::held_polls::WAIT_MS_MAX;
use super::spec::{Event, Kind, Timed, WorkerSpec, WorldSpec};
use crate::verify::range_edges::WORKER;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// The seed's ChaCha stream this kind draws from (the world's is 0).
const STREAM: u64 = 47;

/// The largest slot count of a worker's hello (the coordinator's default
/// `limits.slots_max`).
pub const SLOTS_MAX: u32 = 64;

/// Draws the kind for `world` (already drawn): whether it is on, and its
/// poll in the timeline.
pub fn draw(world: &mut WorldSpec) {
    let mut rng = ChaCha20Rng::seed_from_u64(world.seed);
    rng.set_stream(STREAM);
    if !rng.gen_bool(0.3) || world.kinds.has(Kind::Buggify) {
        return;
    }
    // Not where `slot_caps` caps an address's slots (perhaps below the
    // largest slot count, which would rightly refuse the worker).
    let capped = |i: &super::spec::InstanceSpec| i.sybils.is_some_and(|s| s.slot_cap.is_some());
    let one_node: Vec<&'static str> = (world.instances.iter())
        .filter(|i| i.nodes == 1 && !capped(i))
        .map(|i| i.name)
        .collect();
    let Some(instance) = one_node.choose(&mut rng).copied() else {
        return;
    };
    // Right after a commit to the instance (its latest job is then that
    // commit's), so no other kind's block is split between two events
    // that must follow each other (a restart and its retry).
    let commits: Vec<usize> = (world.events.iter().enumerate())
        .filter(|(_, t)| matches!(&t.event, Event::Commit(c) if c.instance == instance))
        .map(|(at, _)| at + 1)
        .collect();
    let Some(at) = commits.choose(&mut rng).copied() else {
        return;
    };
    world.kinds.0.push(Kind::RangeEdges);
    // No pause before it: a held poll takes no time of the timeline, so
    // the events around it (perhaps another kind's block) keep their times.
    let poll = Timed {
        after_ms: 0,
        event: Event::Poll {
            instance,
            node: 0,
            hold_ms: Some(WAIT_MS_MAX),
            edge_ms: None,
        },
    };
    world.events.insert(at, poll);
    add_worker(world, instance);
}

/// [`WORKER`] on `instance`: stopped first, started last; it streams
/// its outputs where every other worker of the instance does (a kind
/// such as `stream_retries` needs every attempt streamed).
fn add_worker(world: &mut WorldSpec, instance: &'static str) {
    let mut theirs = world.workers.iter().filter(|w| w.instance == instance);
    let stream = theirs.clone().next().is_some() && theirs.all(|w| w.stream);
    world.workers.push(WorkerSpec {
        name: WORKER.into(),
        instance,
        capabilities: vec![],
        slots: SLOTS_MAX,
        latency: "50".into(),
        faults: vec![],
        heartbeat: None,
        key_of: None,
        node: None,
        stream,
    });
    let now = |event| Timed { after_ms: 0, event };
    world
        .events
        .insert(0, now(Event::StopWorker(WORKER.into())));
    world.events.push(now(Event::StartWorker(WORKER.into())));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The polls of `world` that ask for exactly the largest wait.
    fn at_the_largest_wait(world: &WorldSpec) -> Vec<&'static str> {
        (world.events.iter())
            .filter_map(|t| match t.event {
                Event::Poll {
                    instance,
                    hold_ms: Some(WAIT_MS_MAX),
                    ..
                } => Some(instance),
                _ => None,
            })
            .collect()
    }

    /// Only this kind asks for the largest wait, once, on a one-node
    /// instance, without BUGGIFY, and adds a worker of the largest slot
    /// count there, stopped first and started last; it is on in about
    /// 30 % of the worlds that have a one-node instance and no BUGGIFY.
    #[test]
    fn one_poll_at_the_largest_wait_only_in_worlds_with_the_kind() {
        let mut on = 0;
        for seed in 0..300 {
            let world = WorldSpec::generate(seed);
            let others = (world.workers.iter()).filter(|w| w.name != WORKER);
            assert!(others.clone().all(|w| w.slots < SLOTS_MAX), "seed {seed}");
            let polls = at_the_largest_wait(&world);
            if !world.kinds.has(Kind::RangeEdges) {
                assert!(polls.is_empty(), "seed {seed}");
                continue;
            }
            on += 1;
            assert!(!world.kinds.has(Kind::Buggify), "seed {seed}");
            assert_eq!(polls.len(), 1, "seed {seed}");
            let instance = (world.instances.iter()).find(|i| i.name == polls[0]);
            assert_eq!(instance.map(|i| i.nodes), Some(1), "seed {seed}");
            let capped = instance.and_then(|i| i.sybils?.slot_cap);
            assert!(capped.is_none(), "seed {seed}");
            let worker = world.workers.iter().find(|w| w.name == WORKER);
            assert!(worker.is_some_and(|w| w.slots == SLOTS_MAX && w.honest()));
            assert_eq!(worker.map(|w| w.instance), Some(polls[0]), "seed {seed}");
            let first = &world.events[0].event;
            assert_eq!(first, &Event::StopWorker(WORKER.into()), "seed {seed}");
            let start = Event::StartWorker(WORKER.into());
            let starts: Vec<usize> = (world.events.iter().enumerate())
                .filter(|(_, t)| t.event == start)
                .map(|(at, _)| at)
                .collect();
            assert_eq!(starts.len(), 1, "seed {seed}");
        }
        assert!((30..=120).contains(&on), "{on} of 300 worlds have the kind");
    }
}
