//! A paid commit retried across a restart (sabotage
//! `restart-forgets-paid-index`): a client that lost the 201 of a paid
//! commit sends it again, with the same payment, after the instance
//! restarted. Decision 0008 promises 201 with the job the payment bought; a
//! coordinator that rebuilt its jobs but not the index of which payment
//! bought which job refuses it 402 `nonce_already_used`, and
//! `paid_retry_refused` (`verify/paid_retries.rs`) judges that. The swarm's
//! other retries of a paid commit send another body (`payment_replay`, the
//! cut replays), never the same one, so none reaches the window.
//!
//! Drawn from a stream of the seed's own ([`STREAM`]), after every other
//! kind but `long_retention`, only where the world already restarts a
//! one-node paid instance right after a valid paid commit to it (nothing
//! in between sets `{{last_payment}}` again): the retry follows the
//! restart. A seed without such a restart keeps its world exactly.

use super::spec::{Commit, Event, Timed, WorldSpec};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// The seed's ChaCha stream this draw uses (the world's is 0).
const STREAM: u64 = 36;
/// A retry comes at most this long after its restart.
const AFTER_MS_MAX: u64 = 1_000;
/// At most this many retries in one world.
pub const RETRIES_MAX: usize = 4;

/// A paid commit sent again with the last payment header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retry {
    /// The commit as first sent (its instance, node, tier and body).
    pub commit: Commit,
    /// With another prompt (`super::reused_payments`): the payment bought
    /// a job for the first one, so this must be refused.
    pub other_prompt: bool,
}

/// After each restart of a one-node paid instance whose last paid step was
/// a valid PUBLIC commit to it, with probability 0.7, that commit again.
pub fn draw(world: &mut WorldSpec) {
    let mut rng = ChaCha20Rng::seed_from_u64(world.seed);
    rng.set_stream(STREAM);
    let mut drawn = 0;
    let mut k = 0;
    while k < world.events.len() && drawn < RETRIES_MAX {
        let restarted = match world.events[k].event {
            Event::Restart(i) | Event::GracefulRestart(i) => Some(i),
            _ => None,
        };
        let retried = restarted.and_then(|i| last_paid(world, k, i));
        if let Some(commit) = retried.filter(|_| rng.gen_bool(0.7)) {
            let after_ms = rng.gen_range(0..=AFTER_MS_MAX);
            insert_after(world, k, after_ms, commit, false);
            drawn += 1;
            k += 1;
        }
        k += 1;
    }
}

/// Puts a retry of `commit` right after event `k`, `after_ms` after it.
pub fn insert_after(
    world: &mut WorldSpec,
    k: usize,
    after_ms: u64,
    commit: Commit,
    other_prompt: bool,
) {
    let event = Event::PaidRetry(Retry {
        commit,
        other_prompt,
    });
    world.events.insert(k + 1, Timed { after_ms, event });
}

/// The valid PUBLIC paid commit to one-node paid instance `instance` that
/// the last payment step before event `k` sent, if the last one was such a
/// commit: every event between it and `k` leaves `{{last_payment}}` as it
/// was.
fn last_paid(world: &WorldSpec, k: usize, instance: &str) -> Option<Commit> {
    let paid =
        (world.instances.iter()).any(|i| i.name == instance && i.payment.is_some() && i.nodes == 1);
    if !paid {
        return None;
    }
    for t in world.events[..k].iter().rev() {
        match &t.event {
            Event::Commit(c) if c.pay.is_some() => {
                let valid = c.pay == Some("none") && !c.private && c.instance == instance;
                return valid.then(|| c.clone());
            }
            e if keeps_last_payment(e) => {}
            _ => return None,
        }
    }
    None
}

/// Whether an event's steps leave `{{last_payment}}` as it was: none of
/// them is a `pay` step. Commits are judged by the caller; anything not
/// named here (attacks, pairings, floods, garbage) counts as a change.
pub fn keeps_last_payment(event: &Event) -> bool {
    matches!(
        event,
        Event::Commit(Commit { pay: None, .. })
            | Event::Replay { .. }
            | Event::PaidRetry(_)
            | Event::StopWorker(_)
            | Event::StartWorker(_)
            | Event::Restart(_)
            | Event::GracefulRestart(_)
            | Event::CrashAfter { .. }
            | Event::Facilitator { .. }
            | Event::ProviderFault(_)
            | Event::NodeCrash { .. }
            | Event::StorePartition { .. }
            | Event::LostAnswer { .. }
            | Event::Cancel { .. }
            | Event::Poll { .. }
            | Event::Freeze { .. }
    )
}
