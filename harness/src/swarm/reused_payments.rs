//! A payment reused for another prompt (sabotage
//! `paid-retry-ignores-submission`): right after a valid paid commit, the
//! same client sends the same commit with another prompt (same user, job
//! type and tier, so the same price) and the same payment. The payment
//! bought a job for the first prompt, so decision 0008 promises 402
//! `nonce_already_used`; a coordinator that matches a retry by its tier
//! alone answers 201 with the first job, and the second prompt silently
//! never runs: `payment_answered_other_submission`
//! (`verify/paid_retries.rs`). The swarm's other replays send another body
//! too, but only that key judges a 201 that names a job its payment bought
//! before.
//!
//! Drawn from a stream of the seed's own ([`STREAM`]), after
//! [`super::paid_retries`], on every paid instance; a seed without a valid
//! PUBLIC paid commit keeps its world exactly.

use super::spec::{Event, WorldSpec};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// The seed's ChaCha stream this draw uses (the world's is 0).
const STREAM: u64 = 37;
/// Another prompt's index is its commit's plus this, apart from every
/// kind's own indices (the prompt is `job {index}`).
pub const INDEX_OFFSET: u32 = 90_000;
/// A reuse comes at most this long after its commit.
const AFTER_MS_MAX: u64 = 500;
/// At most this many reuses in one world.
pub const REUSES_MAX: usize = 3;

/// After each valid PUBLIC paid commit, with probability 0.25, the same
/// commit with another prompt and the payment just made.
pub fn draw(world: &mut WorldSpec) {
    let mut rng = ChaCha20Rng::seed_from_u64(world.seed);
    rng.set_stream(STREAM);
    let mut drawn = 0;
    let mut k = 0;
    while k < world.events.len() && drawn < REUSES_MAX {
        let commit = match &world.events[k].event {
            Event::Commit(c) if c.pay == Some("none") && !c.private => Some(c.clone()),
            _ => None,
        };
        if let Some(commit) = commit.filter(|_| rng.gen_bool(0.25)) {
            let after_ms = rng.gen_range(0..=AFTER_MS_MAX);
            // After the polls and reads of the commit's job that other
            // kinds put right after it (they must still follow it).
            while matches!(
                world.events.get(k + 1).map(|t| &t.event),
                Some(Event::Poll { .. } | Event::Read(_))
            ) {
                k += 1;
            }
            super::paid_retries::insert_after(world, k, after_ms, commit, true);
            drawn += 1;
            k += 1;
        }
        k += 1;
    }
}
