//! A payment replayed during a store cut (sabotage
//! `nonce-reservation-fails-open`), under the `nodes` kind: a client that
//! sends the last authorization again, with another body, to a node of a
//! paid cluster while that node is cut from the shared store (a client
//! retrying through an outage, or one trying its luck then). The node
//! cannot reserve the nonce, so it must refuse the payment; had it taken
//! it as new, its job is dispatched before the store's own check fences the
//! node, and `payment_bought_two_jobs` (`verify/paid_assigns.rs`) sees two
//! jobs assigned with one payment. The `payment_replay` kind's replays
//! land in a cut only by chance.
//!
//! Drawn from `front_runs`' stream (30), after its front-runs, in `nodes`
//! worlds: a seed without it keeps its world exactly.

use super::spec::{Event, Kind, Timed, WorldSpec};
use rand::Rng;
use rand_chacha::ChaCha20Rng;

/// Replays number from here, apart from every other kind's commits.
pub const INDEX_BASE: u32 = 70_000;
/// A replay comes at most this long after its cut began (a cut lasts at
/// least 200 ms, `nodes`' shortest disruption).
const WITHIN_MS: u64 = 1_000;

/// After each store cut of a node whose instance the last paid commit
/// before it went to, with probability 0.5, a replay to that node within
/// the cut.
pub fn draw(world: &mut WorldSpec, rng: &mut ChaCha20Rng) {
    if !world.kinds.has(Kind::Nodes) {
        return;
    }
    let mut index = INDEX_BASE;
    let mut k = 0;
    while k < world.events.len() {
        if let Event::StorePartition {
            instance,
            node,
            for_ms,
        } = world.events[k].event
        {
            let last_paid = (world.events[..k].iter().rev()).find_map(|t| match &t.event {
                Event::Commit(c) if c.pay.is_some() => Some(c.instance),
                _ => None,
            });
            if last_paid == Some(instance) && rng.gen_bool(0.5) {
                let after_ms = rng.gen_range(0..for_ms.min(WITHIN_MS));
                let event = Event::Replay {
                    instance,
                    node,
                    index,
                };
                world.events.insert(k + 1, Timed { after_ms, event });
                index += 1;
                k += 1;
            }
        }
        k += 1;
    }
}
