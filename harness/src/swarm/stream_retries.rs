//! The `stream_retries` kind: a streamed job whose attempt dies after it
//! sent deltas, retried on another streaming worker and completed there,
//! read by readers who follow it across the retry and by readers who come
//! back with an event id of the dead attempt. On a streaming world's unpaid
//! one-node instance (paid jobs show no deltas before their end, decision
//! 0021) a worker of its own ([`STALLER`], LLM only) streams every job it
//! takes over two to three leases and so loses it mid-stream when its lease
//! lapses: a GPU worker that hangs part-way through a generation. Every
//! worker of the instance streams, its lease is 1 or 3 s, and its jobs get
//! at least three attempts. Each of 1 to 3 rounds commits an LLM job (the
//! staller takes it when it wins the tie among idle workers, the lowest
//! session: not always, as a worker's session follows its connection, not
//! its name; measured:
//! benches/results/held-out-2026-11-29-misses-streams.md) and reads it
//! three ways: at its pace, slowly (a pause of one to three leases after
//! each event, across the lapse and the retry), and cut after one to three
//! events and resumed one to three leases later with its last event id. The
//! always-on `deltas_disagree_with_output` judges what they were shown
//! (`verify::stream_gens`).
//!
//! The kind draws from a stream of the seed's own ([`STREAM`]), after the
//! rest of the world is drawn, so a seed without it keeps its world
//! exactly. It is drawn only where the `streams` kind is on, and not on
//! an instance of the `edges` kind's polls (their job must find no worker).

use super::spec::{Commit, Event, JobFaultSpec, Kind, Timed, WorkerSpec, WorldSpec};
use super::streams::{ReadEvent, ReadStyle};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// The seed's ChaCha stream this kind draws from (the world's is 0).
const STREAM: u64 = 25;
/// The worker that loses every job mid-stream ("a" first: it is started
/// first, so it often has the lowest session and wins ties among idle
/// workers).
pub const STALLER: &str = "a-staller";
/// Leases it may draw (ms).
const LEASES_MS: [u64; 2] = [1_000, 3_000];
/// Commits (and readers) number from here, apart from every other kind's.
pub const INDEX_BASE: u32 = 60_000;

/// Draws the kind for `world` (already drawn).
pub fn draw(world: &mut WorldSpec) {
    let mut rng = ChaCha20Rng::seed_from_u64(world.seed);
    rng.set_stream(STREAM);
    if !world.kinds.has(Kind::Streams) {
        return;
    }
    // Not where the `edges` kind stops every worker around a job none may
    // take: the staller would take it.
    let edged = |name: &str| {
        (world.events.iter()).any(|t| {
            matches!(t.event, Event::Poll { instance, edge_ms: Some(_), .. } if instance == name)
        })
    };
    let fit = |i: &super::spec::InstanceSpec| i.payment.is_none() && i.nodes == 1 && !edged(i.name);
    let Some(instance) = world.pick_instance(&mut rng, 0.5, fit) else {
        return;
    };
    world.kinds.0.push(Kind::StreamRetries);
    let spec = (world.instances.iter_mut())
        .find(|i| i.name == instance)
        .expect("an eligible instance");
    spec.lease_ms = spec
        .lease_ms
        .min(*LEASES_MS.choose(&mut rng).expect("leases"));
    spec.attempts_max = spec.attempts_max.max(3);
    let lease_ms = spec.lease_ms;
    for worker in world.workers.iter_mut().filter(|w| w.instance == instance) {
        worker.stream = true;
    }
    // Its output's pieces come over latency + extra: a third to a half of
    // them before the lease lapses.
    let extra_ms = lease_ms * rng.gen_range(2..=3);
    world.workers.push(WorkerSpec {
        name: STALLER.into(),
        instance,
        capabilities: vec!["LLM_INFER"],
        slots: 1,
        latency: "100".into(),
        faults: vec![JobFaultSpec {
            toml: format!("kind = \"slow\", extra_ms = {extra_ms}"),
            percent: 100,
        }],
        heartbeat: None,
        key_of: None,
        node: None,
        stream: true,
    });
    let mut at = super::floods::insertion_point(world, rng.gen_range(0..=world.events.len()));
    for round in 0..rng.gen_range(1..=3u32) {
        for (k, (after_ms, event)) in round_events(&mut rng, instance, lease_ms, round)
            .into_iter()
            .enumerate()
        {
            world.events.insert(at + k, Timed { after_ms, event });
        }
        at += 4;
    }
}

/// One round: a commit and its three readers, the first after the
/// previous round's job had time to end.
fn round_events(
    rng: &mut ChaCha20Rng,
    instance: &'static str,
    lease_ms: u64,
    round: u32,
) -> Vec<(u64, Event)> {
    let index = INDEX_BASE + round * 10;
    let commit = Event::Commit(Commit {
        instance,
        tier: "fast",
        job_type: "LLM_INFER",
        user: "u0".into(),
        private: false,
        pay: None,
        index,
        node: 0,
    });
    let read = |style, k: u32| {
        Event::Read(ReadEvent {
            instance,
            node: 0,
            style,
            index: index + k,
        })
    };
    let slow = ReadStyle::Slow {
        pause_ms: rng.gen_range(lease_ms..=3 * lease_ms),
    };
    let cut = ReadStyle::Cut {
        after: rng.gen_range(1..=3),
        resume_ms: rng.gen_range(lease_ms..=3 * lease_ms),
    };
    let gap_ms = if round == 0 { 0 } else { 5 * lease_ms };
    vec![
        (gap_ms, commit),
        (0, read(ReadStyle::Follow, 1)),
        (0, read(slow, 2)),
        (0, read(cut, 3)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A world with the kind has the staller on an unpaid one-node
    /// instance whose workers all stream, a short lease, room for a retry,
    /// and three readers per commit; without it, no staller and no reader
    /// of its own; on only where `streams` is.
    #[test]
    fn a_stream_retry_world_has_a_staller_and_readers_across_its_lapses() {
        let mut on = 0;
        for seed in 0..300 {
            let world = WorldSpec::generate(seed);
            let staller = world.workers.iter().find(|w| w.name == STALLER);
            let own = |t: &&Timed| matches!(&t.event, Event::Read(r) if r.index >= INDEX_BASE);
            let reads = world.events.iter().filter(own).count();
            if !world.kinds.has(Kind::StreamRetries) {
                assert!(staller.is_none() && reads == 0, "seed {seed}");
                continue;
            }
            on += 1;
            assert!(world.kinds.has(Kind::Streams), "seed {seed}");
            let staller = staller.expect("the staller");
            let i = (world.instances.iter())
                .find(|i| i.name == staller.instance)
                .expect("its instance");
            assert!(i.payment.is_none() && i.nodes == 1, "seed {seed}");
            assert!(i.lease_ms <= 3_000 && i.attempts_max >= 3, "seed {seed}");
            let mine = world.workers.iter().filter(|w| w.instance == i.name);
            assert!(mine.clone().all(|w| w.stream), "seed {seed}");
            assert!((3..=9).contains(&reads) && reads % 3 == 0, "seed {seed}");
            let text = super::super::render::render(&world, "w", "test");
            assert!(text.contains("name = \"a-staller\""), "seed {seed}");
        }
        assert!((10..=80).contains(&on), "{on} of 300 worlds retry streams");
    }
}
