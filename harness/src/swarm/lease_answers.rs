//! The `lease_answers` kind: a worker whose work on a job ends at the very
//! end of its lease. The `edges` kind's lease edge holds a job without
//! answering; here the holder ([`ANSWERER`]) ends its job exactly
//! `lease_ms` after taking it, or 1 ms later, while a second worker
//! ([`TAKER`], honest) is free to take the retried job. It ends it with a
//! result (a `slow` fault) or gives it up (`give_up`: a `reject` when its
//! own deadline, set to the lease, passes). A real worker does this when
//! its work takes about as long as its lease (a long generation, a lease
//! set close to the model's speed, a backend timeout equal to the lease):
//! its frame and the coordinator's lapse race. The session refuses a
//! `result` of a job whose `cancel` it sent; a `reject` (or `accept`) it
//! hands to the core, which must refuse it from a worker that no longer
//! holds the job. The core's own invariants (a worker counts only jobs it
//! holds), `result_accepted_twice` and `receipt_key_not_holder` judge it: a
//! stale holder's frame that moves a job the taker now holds leaves the
//! taker counting a job it lost.
//!
//! Appended to the end of the timeline on an unpaid one-node instance
//! whose jobs get more than one attempt: both workers are stopped from the
//! start; then every running worker of the instance stops, the answerer
//! starts, a job is committed (it takes it), the taker starts, and once
//! the lease has passed the answerer stops and the others start again.
//! Drawn from a stream of the seed's own ([`STREAM`]) after every other
//! kind, so a seed without it keeps its world exactly.

use super::edges::{public_commit, running_workers, stop_now};
use super::spec::{Event, JobFaultSpec, Kind, Timed, WorkerSpec, WorldSpec};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// The seed's ChaCha stream this kind draws from (the world's is 0).
const STREAM: u64 = 27;
/// The worker that answers at its lease's end.
pub const ANSWERER: &str = "lease_answer";
/// The worker free to take the job once the lease lapses.
pub const TAKER: &str = "lease_taker";
/// The commit's index (its body's `input`), apart from the timeline's.
const INDEX: u32 = 9_200;
/// How long the answerer is given to connect and prove its key, ms.
const CONNECT_MS: u64 = 500;
/// How long after the commit the taker starts: the answerer holds the job.
const TAKER_AFTER_MS: u64 = 100;
/// How long past the lease's end the block lasts: the taker's answer.
const AFTER_LEASE_MS: u64 = 1_000;

/// Draws the kind for `world` (already drawn).
pub fn draw(world: &mut WorldSpec) {
    let mut rng = ChaCha20Rng::seed_from_u64(world.seed);
    rng.set_stream(STREAM);
    if !rng.gen_bool(0.3) {
        return;
    }
    // Not where `stream_retries` made every worker stream (its staller
    // takes retried jobs there, and its readers expect streamed output).
    let retried = |name: &str| {
        (world.workers.iter())
            .any(|w| w.instance == name && w.name == super::stream_retries::STALLER)
    };
    let fit = (world.instances.iter())
        .filter(|i| i.payment.is_none() && i.nodes == 1 && i.attempts_max > 1 && !retried(i.name))
        .map(|i| (i.name, i.lease_ms));
    let Some((instance, lease_ms)) = fit.collect::<Vec<_>>().choose(&mut rng).copied() else {
        return;
    };
    let edge_ms: u64 = rng.gen_range(0..=1);
    let gives_up = rng.gen_bool(0.5);
    let worker = |name: &str, latency: u64, faults| WorkerSpec {
        name: name.into(),
        instance,
        capabilities: vec![],
        slots: 1,
        latency: latency.to_string(),
        faults,
        heartbeat: None,
        key_of: None,
        node: None,
        stream: false,
    };
    let toml = match gives_up {
        true => "kind = \"give_up\"".to_owned(),
        false => format!("kind = \"slow\", extra_ms = {edge_ms}"),
    };
    let latency = lease_ms + if gives_up { edge_ms } else { 0 };
    let ends = JobFaultSpec { toml, percent: 100 };
    let stopped = [ANSWERER, TAKER].map(|name| Timed {
        after_ms: 0,
        event: Event::StopWorker(name.into()),
    });
    world.events.splice(0..0, stopped);
    let block = block(world, &mut rng, instance, lease_ms);
    world.workers.push(worker(ANSWERER, latency, vec![ends]));
    world.workers.push(worker(TAKER, 50, vec![]));
    world.events.extend(block);
    world.kinds.0.push(Kind::LeaseAnswers);
}

/// The kind's events, to follow the timeline's.
fn block(
    world: &WorldSpec,
    rng: &mut ChaCha20Rng,
    instance: &'static str,
    lease_ms: u64,
) -> Vec<Timed> {
    let others = running_workers(world, instance, world.events.len());
    let at = |after_ms, event| Timed { after_ms, event };
    let mut block = stop_now(&others);
    block.push(at(0, Event::StartWorker(ANSWERER.into())));
    let commit = public_commit(rng, instance, INDEX, None);
    block.push(at(CONNECT_MS, Event::Commit(commit)));
    block.push(at(TAKER_AFTER_MS, Event::StartWorker(TAKER.into())));
    let stop = Event::StopWorker(ANSWERER.into());
    block.push(at(lease_ms + AFTER_LEASE_MS, stop));
    block.extend(others.into_iter().map(|w| at(0, Event::StartWorker(w))));
    block
}
