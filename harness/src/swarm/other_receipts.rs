//! Another job's receipt, under the `forged_receipt` kind: a worker that
//! forges receipts (`bad_signature`) may also answer a job with the output
//! and the correctly signed receipt of its previous result
//! (`other_job_receipt`, a worker-sim fault). The receipt verifies against
//! its output and key; only its `job_id` names the other job, so the
//! coordinator must refuse it, and `receipt_invalid` (`check_store`) holds
//! every stored receipt to its own job's id.
//!
//! Drawn from a stream of the seed's own ([`STREAM`]), after every other
//! kind, and only on workers that already forge receipts (so the honest
//! workers, the heal's anchors, stay as they were); a seed without
//! `forged_receipt` keeps its world exactly.

use super::spec::{JobFaultSpec, Kind, WorldSpec};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// The seed's ChaCha stream this draw uses (the world's is 0).
const STREAM: u64 = 21;
const FORGED: &str = "kind = \"bad_signature\"";

/// Each worker that forges receipts also answers with another job's
/// receipt, with probability 0.7, at 20 to 60 % of its jobs.
pub fn draw(world: &mut WorldSpec) {
    add_to_forgers(world, STREAM, "kind = \"other_job_receipt\"");
}

/// Gives each worker that forges receipts the fault `fault` too, with
/// probability 0.7, at 20 to 60 % of its jobs, drawn from the seed's
/// stream `stream`; nothing outside `forged_receipt` worlds.
pub(super) fn add_to_forgers(world: &mut WorldSpec, stream: u64, fault: &str) {
    if !world.kinds.has(Kind::ForgedReceipt) {
        return;
    }
    let mut rng = ChaCha20Rng::seed_from_u64(world.seed);
    rng.set_stream(stream);
    for worker in &mut world.workers {
        if !worker.faults.iter().any(|f| f.toml == FORGED) || !rng.gen_bool(0.7) {
            continue;
        }
        worker.faults.push(JobFaultSpec {
            toml: fault.into(),
            percent: rng.gen_range(20..=60),
        });
    }
}
