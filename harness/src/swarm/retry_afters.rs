//! The `retry_afters` kind (sabotage `pairing-retry-after-rounds-down`): at
//! the end of the timeline, a client of its own fails as many pairing
//! claims at once as its per-minute limit allows (codes that do not exist),
//! waits a time off the whole second, has its next claim refused 429, then
//! waits exactly the answered `Retry-After` and claims once more (an `http`
//! step with `retry_after = true`). The 429 comes with part of a second of
//! its window left, so a `Retry-After` rounded down sends the retry into
//! the same window; `retry_after_refused` (`verify/retry_afters.rs`) judges
//! the retry. No other step waits out a 429.
//!
//! The kind draws from a stream of the seed's own ([`STREAM`]), after every
//! other kind but `long_retention`, so a seed without it keeps its world
//! exactly. Only one-node instances.

use super::spec::{Event, Kind, Timed, WorldSpec};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;
use std::fmt::Write as _;

/// The seed's ChaCha stream this kind draws from (the world's is 0).
const STREAM: u64 = 41;
/// The client's address (its own: the limit is per client).
pub const CLIENT: &str = "retry_after";

/// One burst of failed claims, a wait, the refused claim and its retry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryWait {
    pub instance: &'static str,
    /// From the burst to the refused claim, in ms: never a whole second.
    pub wait_ms: u64,
}

/// Draws the kind for `world` (already drawn): in a fifth of the worlds
/// with a one-node instance.
pub fn draw(world: &mut WorldSpec) {
    let mut rng = ChaCha20Rng::seed_from_u64(world.seed);
    rng.set_stream(STREAM);
    if !rng.gen_bool(0.2) {
        return;
    }
    let single: Vec<&'static str> = (world.instances.iter())
        .filter(|i| i.nodes <= 1)
        .map(|i| i.name)
        .collect();
    let Some(&instance) = single.choose(&mut rng) else {
        return;
    };
    // Inside the window, and off the second: 1 ms to 50 s less 1 ms.
    let wait_ms = rng.gen_range(0..50) * 1_000 + rng.gen_range(1..1_000);
    let after_ms = rng.gen_range(0..2_000);
    let event = Event::RetryAfter(RetryWait { instance, wait_ms });
    world.events.push(Timed { after_ms, event });
    world.kinds.0.push(Kind::RetryAfters);
}

/// The burst (as many failed claims as the default limit lets through),
/// the wait, and the claim that waits out its 429.
pub fn render(r: &RetryWait) -> String {
    let burst = coordinator::config::Limits::default().claim_failures_per_client_per_minute_max;
    let mut w = String::new();
    for k in 0..=burst {
        if k == burst {
            let _ = writeln!(w, "\n[[steps]]\nadvance = \"{}ms\"", r.wait_ms);
        }
        // Seven hex digits: no code of the instance is ever guessed.
        let code = format!("fe{k:05x}");
        let retry = if k == burst {
            ", retry_after = true"
        } else {
            ""
        };
        let _ = writeln!(
            w,
            "\n[[steps]]\nname = \"retry after: claim {k}\"\nhttp = {{ instance = {:?}, method = \"POST\", path = \"/v1/trust/claim\", body = {{ pairing_code = \"{code}\", provider_pubkey = \"{}\" }}, client = \"{CLIENT}\"{retry} }}",
            r.instance,
            super::pairing_floods::PUBKEY,
        );
    }
    w
}
