//! The `pairing_floods` kind (sabotage `rate-window-allows-one-more`): on
//! an instance with user auth off, a client of its own sends 11 to 15
//! pairing-code creates for names of its own (a script that pairs a fleet,
//! or an attacker hoarding codes) and 11 to 15 claims of codes that do not
//! exist (an attacker guessing codes), each burst within one instant: past
//! every per-minute limit of pairing (10 creates per client, 5 per user, 10
//! failed claims per client). `rate_limit_exceeded` judges the answers
//! against the limiter's fixed windows (`verify/rate_limits.rs`).
//!
//! In half the worlds with the kind (drawn from [`EDGE_STREAM`], so the
//! bursts themselves stay as they were), the first burst is sent again at
//! exactly the millisecond its windows end, 60,000 ms after it (sabotage
//! `rate-window-not-restarted-at-its-end`): a window must be over for the
//! event that counts in it as well as for the check, so the limits hold
//! there too.
//!
//! The kind draws from a stream of the seed's own ([`STREAM`]), after every
//! other kind but `long_retention`, so a seed without it keeps its world
//! exactly.

use super::spec::{Event, Kind, Timed, WorldSpec};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;
use std::fmt::Write as _;

/// The seed's ChaCha stream this kind draws from (the world's is 0).
const STREAM: u64 = 33;
/// The stream of whether the first burst comes again at its windows' end.
const EDGE_STREAM: u64 = 45;
/// Every per-minute window's length (`coordinator/src/core/rate.rs`).
const WINDOW_MS: u64 = coordinator::core::rate::WINDOW_MS.unsigned_abs();
/// The flooder's client address (its own: the limits are per client).
pub const CLIENT: &str = "pairing_flood";
/// Requests of each burst: past the limits of 10 (and of 5 per user).
const BURST: std::ops::RangeInclusive<u32> = 11..=15;
/// Names per burst of creates: three, so five per name reach the client's
/// limit of ten before every name has used its own.
const NAMES: u32 = 3;

/// One burst: creates, or claims of unknown codes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PairingFlood {
    pub instance: &'static str,
    pub claims: bool,
    pub count: u32,
    /// Numbers the burst's names and codes apart.
    pub index: u32,
    /// The burst is sent again exactly when the windows it opened end.
    pub again_at_window_end: bool,
}

/// Draws the kind for `world` (already drawn): in a third of the worlds
/// with user auth off, a burst of creates and one of claims, or one of
/// them, on one single-node instance.
pub fn draw(world: &mut WorldSpec) {
    let mut rng = ChaCha20Rng::seed_from_u64(world.seed);
    rng.set_stream(STREAM);
    if world.user_auth || !rng.gen_bool(0.3) {
        return;
    }
    let single: Vec<&'static str> = (world.instances.iter())
        .filter(|i| i.nodes <= 1)
        .map(|i| i.name)
        .collect();
    let Some(&instance) = single.choose(&mut rng) else {
        return;
    };
    let bursts: &[bool] = match rng.gen_range(0..3) {
        0 => &[false],
        1 => &[true],
        _ => &[false, true],
    };
    for (n, &claims) in bursts.iter().enumerate() {
        let flood = PairingFlood {
            instance,
            claims,
            count: rng.gen_range(BURST),
            index: n as u32,
            again_at_window_end: false,
        };
        let Some(at) = super::code_edges::before_a_commit(&mut rng, world) else {
            return;
        };
        let after_ms = rng.gen_range(0..2_000);
        let event = Event::PairingFlood(flood);
        world.events.insert(at, Timed { after_ms, event });
    }
    world.kinds.0.push(Kind::PairingFloods);
    draw_window_end(world);
}

/// In half the worlds with floods, the first burst comes again at exactly
/// the end of the windows it opened.
fn draw_window_end(world: &mut WorldSpec) {
    let mut rng = ChaCha20Rng::seed_from_u64(world.seed);
    rng.set_stream(EDGE_STREAM);
    if !rng.gen_bool(0.5) {
        return;
    }
    let first = world.events.iter_mut().find_map(|t| match &mut t.event {
        Event::PairingFlood(f) => Some(f),
        _ => None,
    });
    if let Some(flood) = first {
        flood.again_at_window_end = true;
    }
}

/// The burst's steps, from [`CLIENT`], none expecting an answer (the
/// limits answer 429 past them; the safety key judges).
pub fn render(f: &PairingFlood) -> String {
    let mut w = burst(f, f.index);
    if f.again_at_window_end {
        // The burst's requests are answered in the instant they are sent,
        // so its windows opened at that instant and end exactly here.
        let _ = writeln!(
            w,
            "\n[[steps]]\nname = \"pairing flood: at its windows' end\"\nadvance = \"{WINDOW_MS}ms\""
        );
        w.push_str(&burst(f, f.index + 2));
    }
    w
}

/// One burst's steps, its names and codes numbered by `index`.
fn burst(f: &PairingFlood, index: u32) -> String {
    let mut w = String::new();
    for k in 0..f.count {
        let (path, body) = if f.claims {
            // Codes are six hex digits; `ff` and the burst's numbers make
            // seven, so no code of the instance is ever guessed.
            let code = format!("ff{index:02x}{k:03x}");
            (
                "claim",
                format!("{{ pairing_code = \"{code}\", provider_pubkey = \"{PUBKEY}\" }}"),
            )
        } else {
            let user = format!("flood{index}-{}", k % NAMES);
            ("create", format!("{{ user_id = \"{user}\" }}"))
        };
        let _ = writeln!(
            w,
            "\n[[steps]]\nname = \"pairing flood: {path} {k}\"\nhttp = {{ instance = {:?}, method = \"POST\", path = \"/v1/trust/{path}\", body = {body}, client = \"{CLIENT}\" }}",
            f.instance
        );
    }
    w
}

/// A key on the curve that no worker of a swarm world holds (secp256k1's
/// generator): a claim with it is judged by its code, which is unknown.
pub(super) const PUBKEY: &str =
    "0x0279be667ef9dcbbac55a06295ce870b07029bfcdb2dce28d959f2815b16f81798";
