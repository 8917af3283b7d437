//! The `streams` kind (issue 31, item 6; decision 0023): some workers
//! stream (they announce `deltas` and send each output as deltas over its
//! latency), and readers follow jobs' events beside the timeline, each
//! detached, while the world's worker deaths, link faults and restarts
//! happen: some read at their pace, some slowly (a pause after every
//! event), some are cut after a few events and resume from their last
//! event id; on instances without payments some stream a chat completion.
//! Every reader resumes after a break (a restart cuts its link). The
//! always-on safety keys `deltas_disagree_with_output` and
//! `private_delta_leak` judge what they were shown.
//!
//! The kind draws from a stream of the seed's own ([`STREAM`]), after
//! every other kind, so a seed without it keeps its world exactly; one
//! with it keeps its instances, workers and timeline, with readers
//! inserted and some workers streaming.

use super::spec::{Event, Kind, Timed, WorldSpec};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// The seed's ChaCha stream this kind draws from (the world's is 0,
/// `cancels`' 5, `settlement_faults`' 6).
const STREAM: u64 = 7;
/// At most this many readers in one world.
pub const READERS_MAX: usize = 6;

/// How a reader reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadStyle {
    /// At its pace, to the end.
    Follow,
    /// Waits `pause_ms` after every event.
    Slow { pause_ms: u64 },
    /// Drops the link after `after` events, reads on `resume_ms` later.
    Cut { after: u32, resume_ms: u64 },
    /// Streams a chat completion (a job of its own) on an unpaid instance.
    Chat,
}

/// A reader of the latest job committed on an instance (or of a chat).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadEvent {
    pub instance: &'static str,
    pub node: u32,
    pub style: ReadStyle,
    pub index: u32,
}

/// Draws the kind for `world` (already drawn): whether it is on, which
/// workers stream, and its readers in the timeline.
pub fn draw(world: &mut WorldSpec) {
    let mut rng = ChaCha20Rng::seed_from_u64(world.seed);
    rng.set_stream(STREAM);
    if !rng.gen_bool(0.3) {
        return;
    }
    world.kinds.0.push(Kind::Streams);
    for worker in &mut world.workers {
        worker.stream = rng.gen_bool(0.6);
    }
    for index in 0..rng.gen_range(1..=READERS_MAX) {
        let Some(instance) = world.instances.choose(&mut rng) else {
            return;
        };
        let (name, node) = (instance.name, rng.gen_range(0..instance.nodes.max(1)));
        let style = match rng.gen_range(0..4) {
            0 => ReadStyle::Follow,
            1 => ReadStyle::Slow {
                pause_ms: rng.gen_range(100..3_000),
            },
            2 => ReadStyle::Cut {
                after: rng.gen_range(1..=4),
                resume_ms: rng.gen_range(0..3_000),
            },
            _ if instance.payment.is_none() => ReadStyle::Chat,
            _ => ReadStyle::Follow,
        };
        let at = rng.gen_range(0..=world.events.len());
        let after_ms = rng.gen_range(0..2_000);
        let event = Event::Read(ReadEvent {
            instance: name,
            node,
            style,
            index: index as u32,
        });
        world.events.insert(at, Timed { after_ms, event });
    }
}

/// The `stream` step of a reader (detached: it reads beside the steps).
pub fn render(r: &ReadEvent, node_key: &str) -> String {
    let how = match r.style {
        ReadStyle::Follow | ReadStyle::Chat => String::new(),
        ReadStyle::Slow { pause_ms } => format!(", pause = \"{pause_ms}ms\""),
        ReadStyle::Cut { after, resume_ms } => {
            format!(", cut_after = {after}, resume_after = \"{resume_ms}ms\"")
        }
    };
    let what = match r.style {
        ReadStyle::Chat => format!(
            "chat = {{ model = \"sim\", max_tokens = 8, user = \"reader{}\", messages = [{{ role = \"user\", content = \"chat {}\" }}] }}",
            r.index, r.index
        ),
        _ => "job = \"latest\"".into(),
    };
    // Every reader follows through a restart (which cuts its link).
    let resume = if matches!(r.style, ReadStyle::Cut { .. } | ReadStyle::Chat) {
        ""
    } else {
        ", resume_after = \"500ms\""
    };
    format!(
        "\n[[steps]]\nname = \"reader {}\"\nstream = {{ instance = {:?}{node_key}, {what}{how}{resume}, detach = true }}\n",
        r.index, r.instance
    )
}
