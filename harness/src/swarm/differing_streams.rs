//! A stream that is not the output (sabotage
//! `stream-text-differs-from-output`), under the `streams` kind: a
//! streaming worker that already misbehaves (not honest) may also stream a
//! text of its output's length that is not its output and then answer with
//! the true output and a valid receipt (`deltas_differ`, a worker-sim
//! fault): a worker whose stream and answer come from two generations (a
//! retried sample, a cache in front of its model). The coordinator must
//! refuse the result (its deltas do not join to its output), and
//! `deltas_disagree_with_output` holds what every reader was shown to the
//! job's output.
//!
//! Drawn from a stream of the seed's own ([`STREAM`]), after every other
//! kind, and only on streaming workers that are not honest (the heal's
//! anchors stay as they were) nor `stream_retries`' staller (whose jobs
//! are lost mid-stream on purpose); a seed without `streams` keeps its
//! world exactly.

use super::spec::{JobFaultSpec, Kind, WorldSpec};
use super::stream_retries::STALLER;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// The seed's ChaCha stream this draw uses (the world's is 0).
const STREAM: u64 = 29;

/// Each streaming worker that is not honest streams another text too, with
/// probability 0.7, at 20 to 60 % of its jobs.
pub fn draw(world: &mut WorldSpec) {
    if !world.kinds.has(Kind::Streams) {
        return;
    }
    let mut rng = ChaCha20Rng::seed_from_u64(world.seed);
    rng.set_stream(STREAM);
    for worker in &mut world.workers {
        let fits = worker.stream && !worker.honest() && worker.name != STALLER;
        if !fits || !rng.gen_bool(0.7) {
            continue;
        }
        worker.faults.push(JobFaultSpec {
            toml: "kind = \"deltas_differ\"".into(),
            percent: rng.gen_range(20..=60),
        });
    }
}
