//! The `garbage` kind: malformed and control-character input in every
//! field. Mid-timeline, between the honest commits and while their jobs are
//! live, an attacker ([`CLIENT`], an address of its own) sends bursts of
//! malformed requests drawn from a catalogue: commits that are not JSON,
//! have fields of the wrong type or missing, control characters (NUL,
//! U+0001, ESC, DEL, U+0085, U+2028, U+200B) or lone surrogates in every
//! string field, overlong strings, numbers past every bound; poll, cancel
//! and event paths with malformed (percent-encoded) job ids; bad `wait_ms`
//! and quote queries; pairing calls with malformed bodies; on instances
//! with user auth, user proofs that are garbage; on paid instances, payment
//! headers that are not base64, base64 of what is not JSON, JSON of the
//! wrong shape; the OpenAI-compatible door with malformed bodies; and
//! request heads no HTTP client sends (`raw_request`).
//!
//! Each request is one ordinary step (`http` or `raw_request` with
//! `malformed = true`), so a failure shrinks to the one request and
//! replays. Judged by `bad_input_mishandled` (`crate::verify::bad_input`):
//! each is answered 4xx with the API's JSON error, and no instance holds a
//! job with a control character the validators refuse; the honest jobs
//! beside them are held to ending by the keys that always judge them.
//!
//! The kind draws from a stream of the seed's own ([`STREAM`]), after the
//! rest of the world is drawn, so a seed without it keeps its world
//! exactly.

use super::spec::{Event, Kind, Timed, WorldSpec};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// The seed's ChaCha stream this kind draws from (the world's is 0).
const STREAM: u64 = 19;
/// The attacker's client name (its own address).
pub const CLIENT: &str = "garbage";
/// At most this many bursts in one world.
pub const BURSTS_MAX: usize = 3;
/// At most this many requests in one burst.
pub const BURST_MAX: usize = 10;

/// What a request needs of its instance to be malformed (and not merely
/// refused for another reason, or accepted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needs {
    Nothing,
    /// Payments on: the body is valid, the payment header is garbage.
    Payments,
    /// User auth on: the body is valid, the user proof is garbage.
    UserAuth,
}

/// One malformed request (an `http` step, or a `raw_request` when `raw`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GarbageRequest {
    pub instance: &'static str,
    /// What is wrong with it (the step's name).
    pub what: String,
    pub method: &'static str,
    /// May hold `{latest}`: the instance's latest acknowledged job.
    pub path: String,
    /// Sent byte for byte (`raw_body`).
    pub raw_body: Option<String>,
    /// A TOML inline table sent as the JSON body (`body`), for bodies that
    /// name a scenario user (`{{user.u0}}`).
    pub body_toml: Option<String>,
    pub headers: Vec<(&'static str, String)>,
    pub needs: Needs,
    /// The bytes of a `raw_request` instead of all of the above.
    pub raw: Option<String>,
}

/// Draws the kind for `world` (already drawn).
pub fn draw(world: &mut WorldSpec) {
    let mut rng = ChaCha20Rng::seed_from_u64(world.seed);
    rng.set_stream(STREAM);
    let Some(instance) = world.pick_instance(&mut rng, 0.25, |_| true) else {
        return;
    };
    world.kinds.0.push(Kind::Garbage);
    let paid = (world.instances.iter()).any(|i| i.name == instance && i.payment.is_some());
    let user_auth = world.user_auth;
    for _ in 0..rng.gen_range(1..=BURSTS_MAX) {
        let count = rng.gen_range(3..=BURST_MAX);
        let burst: Vec<GarbageRequest> = (0..count)
            .map(|_| super::garbage_catalogue::draw(&mut rng, instance, paid, user_auth))
            .collect();
        let at = super::floods::insertion_point(world, rng.gen_range(0..=world.events.len()));
        let after_ms = rng.gen_range(0..2_000);
        let timed = burst.into_iter().enumerate().map(|(k, r)| Timed {
            after_ms: if k == 0 { after_ms } else { 0 },
            event: Event::Garbage(r),
        });
        world.events.splice(at..at, timed);
    }
}

/// Whether `r` still makes sense in `world` (shrunk): its instance is
/// there, and paid or with user auth where it needs either.
pub fn keeps(world: &WorldSpec, r: &GarbageRequest) -> bool {
    let Some(spec) = world.instances.iter().find(|i| i.name == r.instance) else {
        return false;
    };
    match r.needs {
        Needs::Nothing => true,
        Needs::Payments => spec.payment.is_some(),
        Needs::UserAuth => world.user_auth,
    }
}

/// The step of one request.
pub fn render(r: &GarbageRequest) -> String {
    let name = format!("{CLIENT}: {}", r.what);
    if let Some(bytes) = &r.raw {
        return format!(
            "\n[[steps]]\nname = {}\nraw_request = {{ instance = {:?}, client = \"{CLIENT}\", bytes = {}, malformed = true }}\n",
            toml_str(&name),
            r.instance,
            toml_str(bytes)
        );
    }
    let mut fields = format!(
        "instance = {:?}, method = {:?}, path = {}",
        r.instance,
        r.method,
        toml_str(&r.path)
    );
    if let Some(body) = &r.raw_body {
        fields.push_str(&format!(", raw_body = {}", toml_str(body)));
    }
    if let Some(body) = &r.body_toml {
        fields.push_str(&format!(", body = {body}"));
    }
    if !r.headers.is_empty() {
        let headers: Vec<String> = (r.headers.iter())
            .map(|(k, v)| format!("{k} = {}", toml_str(v)))
            .collect();
        fields.push_str(&format!(", headers = {{ {} }}", headers.join(", ")));
    }
    format!(
        "\n[[steps]]\nname = {}\nhttp = {{ {fields}, client = \"{CLIENT}\", malformed = true }}\n",
        toml_str(&name)
    )
}

/// `s` as a TOML basic string: quotes and backslashes escaped, and every
/// character outside printable ASCII as `\uXXXX` (controls must be; the
/// rest stays readable).
pub fn toml_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            ' '..='~' => out.push(c),
            c if u32::from(c) <= 0xffff => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push_str(&format!("\\U{:08X}", u32::from(c))),
        }
    }
    out.push('"');
    out
}

/// One of `items`, drawn from `rng`.
pub(super) fn pick<T: Copy>(rng: &mut ChaCha20Rng, items: &[T]) -> T {
    *items.choose(rng).expect("a non-empty list")
}
