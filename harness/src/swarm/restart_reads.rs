//! The `restart_reads` kind (sabotage `stream-generation-repeats-after-restart`):
//! a reader cut mid-stream comes back after its instance restarted, with
//! an event id of the earlier process, while the job's new attempt
//! streams. Decision 0023 numbers generations from the clock so that such
//! a cursor never matches by chance; a coordinator that numbered them from
//! 1 in each process would continue the old cursor in the new attempt's
//! text, a splice that no text check sees (every attempt of a job makes
//! the same output). At the end of the timeline, on an unpaid one-node
//! instance (paid jobs show no deltas before their end) with a lease long
//! enough for the job, every running worker stops, the instance restarts
//! (a fresh process: the job's first generation is its first), a
//! streaming worker of its own ([`WORKER`]: LLM only, one slot, a fixed
//! latency over which its deltas are spread) starts, and an LLM job is
//! committed. A reader cut after two events (holding text) is followed by
//! a second restart, which requeues the job; the worker reconnects and
//! streams it again, and the reader resumes while that attempt is part-way
//! through. `deltas_disagree_with_output` (`crate::verify::stream_resumes`)
//! judges the resume: text without a `restart` first is a splice.
//!
//! Drawn from a stream of the seed's own ([`STREAM`]) after every other
//! kind but `long_retention`, so a seed without it keeps its world exactly.

use super::spec::{Commit, Event, InstanceSpec, Kind, Timed, WorkerSpec, WorldSpec};
use super::streams::{ReadEvent, ReadStyle};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// The seed's ChaCha stream this kind draws from (the world's is 0).
const STREAM: u64 = 44;
/// The streaming worker that takes the read job.
pub const WORKER: &str = "restart-streamer";
/// Its latency (ms) is at least this, and at most [`LATENCY_MS_MAX`] and
/// four fifths of the instance's lease (a job outliving its lease is
/// retried, which is `stream_retries`' matter).
const LATENCY_MS_MIN: u64 = 1_500;
const LATENCY_MS_MAX: u64 = 8_000;
/// The commit's job index, apart from others'.
const INDEX: u32 = 44_000;
/// Its reader's index.
pub const READER: u32 = INDEX + 1;
/// How long the worker is given to connect after the first restart, ms.
const CONNECT_MS: u64 = 500;

/// Draws the kind for `world` (already drawn): whether it is on, its
/// worker, and its block of events at the end of the timeline.
pub fn draw(world: &mut WorldSpec) {
    let mut rng = ChaCha20Rng::seed_from_u64(world.seed);
    rng.set_stream(STREAM);
    let fit = |i: &InstanceSpec| fits(world, i);
    let Some(instance) = world.pick_instance(&mut rng, 0.5, fit) else {
        return;
    };
    world.kinds.0.push(Kind::RestartReads);
    let lease_ms = (world.instances.iter())
        .find(|i| i.name == instance)
        .map_or(0, |i| i.lease_ms);
    let latency_ms = rng.gen_range(LATENCY_MS_MIN..=(lease_ms * 4 / 5).min(LATENCY_MS_MAX));
    world.workers.push(WorkerSpec {
        name: WORKER.into(),
        instance,
        capabilities: vec!["LLM_INFER"],
        slots: 1,
        latency: latency_ms.to_string(),
        faults: vec![],
        heartbeat: None,
        key_of: None,
        node: None,
        stream: true,
    });
    let stop = Timed {
        after_ms: 0,
        event: Event::StopWorker(WORKER.into()),
    };
    world.events.insert(0, stop);
    let block = block(world, &mut rng, instance, latency_ms);
    world.events.extend(block);
}

/// An unpaid one-node instance whose lease outlasts the shortest latency,
/// without an armed crash (it would fire at a restart's writes), Sybils
/// (they would be offered the job) or the `edges` kind's polls (their job
/// must find no worker).
fn fits(world: &WorldSpec, i: &InstanceSpec) -> bool {
    let taken = (world.events.iter()).any(|t| match t.event {
        Event::CrashAfter { instance, .. } => instance == i.name,
        Event::Poll {
            instance,
            edge_ms: Some(_),
            ..
        } => instance == i.name,
        _ => false,
    });
    let long_lease = i.lease_ms * 4 / 5 >= LATENCY_MS_MIN;
    i.payment.is_none() && i.nodes == 1 && i.sybils.is_none() && long_lease && !taken
}

/// The block: the others stop, a restart, the worker starts, the commit,
/// its reader (cut after two events), a second restart, then the worker
/// stops and the others start again once the retried job is done.
fn block(
    world: &WorldSpec,
    rng: &mut ChaCha20Rng,
    instance: &'static str,
    latency_ms: u64,
) -> Vec<Timed> {
    let others = super::edges::running_workers(world, instance, world.events.len());
    let now = |event| Timed { after_ms: 0, event };
    let mut block = super::edges::stop_now(&others);
    block.push(now(Event::Restart(instance)));
    block.push(now(Event::StartWorker(WORKER.into())));
    block.push(Timed {
        after_ms: CONNECT_MS,
        event: Event::Commit(Commit {
            instance,
            tier: if rng.gen_bool(0.5) { "fast" } else { "cheap" },
            job_type: "LLM_INFER",
            user: format!("u{}", rng.gen_range(0..4)),
            private: false,
            pay: None,
            index: INDEX,
            node: 0,
        }),
    });
    // Its eight words come a ninth of the latency apart: the reader
    // opens after about three, the restart follows, and the reader comes
    // back when the new attempt (after the worker's reconnect) has sent
    // as many and not yet ended.
    let read_ms = latency_ms * rng.gen_range(30..=40) / 100;
    let restart_ms = latency_ms / 20;
    let resume_ms = restart_ms + latency_ms * rng.gen_range(65..=75) / 100;
    let style = ReadStyle::Cut {
        after: 2,
        resume_ms,
    };
    block.push(Timed {
        after_ms: read_ms,
        event: Event::Read(ReadEvent {
            instance,
            node: 0,
            style,
            index: READER,
        }),
    });
    block.push(Timed {
        after_ms: restart_ms,
        event: Event::Restart(instance),
    });
    block.push(Timed {
        after_ms: latency_ms + 2_000,
        event: Event::StopWorker(WORKER.into()),
    });
    block.extend(others.into_iter().map(Event::StartWorker).map(now));
    block
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where drawn: the worker streams, its latency fits the lease, and
    /// the block ends the timeline's own events with two restarts around
    /// the commit and its cut reader.
    #[test]
    fn some_worlds_resume_a_reader_across_a_restart() {
        let mut drawn = 0;
        for seed in 0..300 {
            let world = WorldSpec::generate(seed);
            let worker = world.workers.iter().find(|w| w.name == WORKER);
            if !world.kinds.has(Kind::RestartReads) {
                assert!(worker.is_none(), "seed {seed}");
                continue;
            }
            drawn += 1;
            let worker = worker.expect("its worker");
            assert!(worker.stream, "seed {seed}");
            let i = (world.instances.iter())
                .find(|i| i.name == worker.instance)
                .expect("its instance");
            let latency_ms: u64 = worker.latency.parse().expect("a fixed latency");
            assert!(latency_ms <= i.lease_ms * 4 / 5, "seed {seed}");
            assert!(i.payment.is_none() && i.nodes == 1, "seed {seed}");
            let commit = (world.events.iter())
                .position(|t| matches!(&t.event, Event::Commit(c) if c.index == INDEX))
                .expect("its commit");
            let restarts = (world.events.iter().enumerate())
                .filter(|(_, t)| matches!(t.event, Event::Restart(n) if n == i.name))
                .map(|(k, _)| k)
                .filter(|k| *k + 3 >= commit)
                .count();
            assert_eq!(restarts, 2, "seed {seed}");
            let read = &world.events[commit + 1].event;
            assert!(
                matches!(read, Event::Read(r) if matches!(r.style, ReadStyle::Cut { after: 2, .. })),
                "seed {seed}"
            );
        }
        assert!(drawn > 10, "{drawn} of 300 worlds resume across a restart");
    }
}
