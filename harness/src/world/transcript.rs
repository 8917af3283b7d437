//! The transcript: one line per observable event, stamped with simulated
//! time since the scenario epoch; its SHA-256 names a run's bytes.

use sha2::{Digest, Sha256};
use std::sync::{Arc, Mutex};

/// How much one run's transcript may hold. A world whose time never ends
/// (a request the store never answers while workers keep reconnecting)
/// logged without end: one shrink grew to 24 GB. Past either limit the
/// transcript keeps no more lines and the run ends as
/// `world_limit_exceeded` (`harness/src/run/limits.rs`). The largest scenario or
/// swarm world logs a few thousand lines; these are far above that.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TranscriptLimits {
    pub lines_max: usize,
    pub bytes_max: usize,
}

impl TranscriptLimits {
    pub const WORLD: Self = Self {
        lines_max: 400_000,
        bytes_max: 64 << 20,
    };
}

/// Shared by every peer of a run; clones append to the same transcript.
#[derive(Clone)]
pub struct Transcript {
    inner: Arc<Mutex<Lines>>,
    clock: Arc<dyn coordinator::Clock>,
    epoch_ms: i64,
    /// Woken once, when a limit is first reached.
    full: Arc<tokio::sync::Notify>,
}

struct Lines {
    lines: Vec<String>,
    bytes: usize,
    limits: TranscriptLimits,
    /// Which limit was reached and when, once one was.
    overflow: Option<String>,
}

impl Transcript {
    pub fn new(clock: Arc<dyn coordinator::Clock>, epoch_ms: i64) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Lines {
                lines: Vec::new(),
                bytes: 0,
                limits: TranscriptLimits::WORLD,
                overflow: None,
            })),
            clock,
            epoch_ms,
            full: Arc::new(tokio::sync::Notify::new()),
        }
    }

    /// Sets the limits (before the run's first line; tests lower them).
    pub fn set_limits(&self, limits: TranscriptLimits) {
        self.inner.lock().expect("transcript lock").limits = limits;
    }

    /// Which limit was reached, once one was.
    pub fn overflow(&self) -> Option<String> {
        self.inner.lock().expect("transcript lock").overflow.clone()
    }

    /// Waits until a limit is reached, and names it.
    pub async fn full(&self) -> String {
        loop {
            // `notify_one` keeps its permit, so a limit reached between
            // the check and the wait still wakes this.
            if let Some(overflow) = self.overflow() {
                return overflow;
            }
            self.full.notified().await;
        }
    }

    /// Appends `[+S.mmm] actor text`.
    /// The clock reading the transcript's `+0.000s` stands for.
    pub fn epoch_ms(&self) -> i64 {
        self.epoch_ms
    }

    pub fn log(&self, actor: &str, text: impl AsRef<str>) {
        let elapsed_ms = self.clock.now_ms() - self.epoch_ms;
        let line = format!(
            "[+{}.{:03}s] {actor} {}",
            elapsed_ms / 1000,
            elapsed_ms % 1000,
            text.as_ref()
        );
        let mut inner = self.inner.lock().expect("transcript lock");
        if inner.overflow.is_some() {
            return;
        }
        let limits = inner.limits;
        let reached = if inner.lines.len() >= limits.lines_max {
            Some(format!("{} lines", limits.lines_max))
        } else if inner.bytes + line.len() > limits.bytes_max {
            Some(format!("{} bytes", limits.bytes_max))
        } else {
            None
        };
        if let Some(limit) = reached {
            inner.overflow = Some(format!(
                "the transcript reached its limit of {limit} at +{}.{:03}s",
                elapsed_ms / 1000,
                elapsed_ms % 1000
            ));
            self.full.notify_one();
            return;
        }
        inner.bytes += line.len();
        inner.lines.push(line);
    }

    /// Lines so far (the last line's number, 1-based).
    pub fn len(&self) -> usize {
        self.inner.lock().expect("transcript lock").lines.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Runs `read` over the lines so far, without copying them; nothing
    /// may log meanwhile (the lock is held).
    pub fn with_lines<R>(&self, read: impl FnOnce(&[String]) -> R) -> R {
        read(&self.inner.lock().expect("transcript lock").lines)
    }

    /// Every line, taken out: the run is over (anything logged later
    /// starts an empty transcript nobody reads).
    pub fn take_lines(&self) -> Vec<String> {
        std::mem::take(&mut self.inner.lock().expect("transcript lock").lines)
    }

    pub fn elapsed_ms(&self) -> i64 {
        self.clock.now_ms() - self.epoch_ms
    }
}

/// The first line where two transcripts differ, as (line number from 1, left, right).
pub fn first_difference(a: &[String], b: &[String]) -> Option<(usize, String, String)> {
    let n = a.len().max(b.len());
    (0..n).find_map(|i| {
        let (x, y) = (a.get(i), b.get(i));
        (x != y).then(|| {
            (
                i + 1,
                x.cloned().unwrap_or_else(|| "<end>".into()),
                y.cloned().unwrap_or_else(|| "<end>".into()),
            )
        })
    })
}

/// What a transcript line shows, for `-v --show KINDS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LineKind {
    /// HTTP requests and answers (scenario clients and the router).
    Http,
    /// WebSocket frames a worker sent (`->`) or received (`<-`).
    Frames,
    /// Worker events (`{"event": ...}`) and router results.
    Events,
    /// The router's own lines.
    Router,
    /// The harness: steps, faults, restarts, invariants.
    Harness,
}

impl LineKind {
    pub const NAMES: [&'static str; 5] = ["http", "frames", "events", "router", "harness"];

    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "http" => LineKind::Http,
            "frames" => LineKind::Frames,
            "events" => LineKind::Events,
            "router" => LineKind::Router,
            "harness" => LineKind::Harness,
            _ => return None,
        })
    }

    /// Classifies `[+S.mmm] ACTOR TEXT`.
    pub fn of(line: &str) -> Self {
        let rest = line.split_once("] ").map_or(line, |(_, r)| r);
        let (actor, text) = rest.split_once(' ').unwrap_or((rest, ""));
        if text.starts_with("-> ") || text.starts_with("<- ") {
            LineKind::Frames
        } else if text.starts_with("> ") || text.starts_with("< ") || text.starts_with("http ") {
            LineKind::Http
        } else if actor == "harness" || actor == "payer" {
            LineKind::Harness
        } else if actor == "router" {
            LineKind::Router
        } else {
            LineKind::Events
        }
    }
}

/// Which lines `-v` prints: the kinds in `show` (all when empty), minus
/// lines containing any of the `hide` words.
#[derive(Debug, Clone, Default)]
pub struct LineFilter {
    pub show: Vec<LineKind>,
    pub hide: Vec<String>,
}

impl LineFilter {
    /// From `--show a,b` and `--hide x,y`; an unknown kind names the valid ones.
    pub fn parse(show: Option<&str>, hide: Option<&str>) -> Result<Self, String> {
        let words = |s: Option<&str>| -> Vec<String> {
            s.map(|s| {
                s.split(',')
                    .map(|w| w.trim().to_owned())
                    .filter(|w| !w.is_empty())
                    .collect()
            })
            .unwrap_or_default()
        };
        let show = words(show)
            .iter()
            .map(|k| {
                LineKind::parse(k).ok_or_else(|| {
                    format!("--show {k:?}: kinds are {}", LineKind::NAMES.join(", "))
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            show,
            hide: words(hide),
        })
    }

    pub fn shows(&self, line: &str) -> bool {
        (self.show.is_empty() || self.show.contains(&LineKind::of(line)))
            && !self.hide.iter().any(|w| line.contains(w.as_str()))
    }
}

/// Hex SHA-256 over `lines`, each followed by `\n`: computed when a digest
/// is shown, not while the run logs (two runs are compared line by line).
pub fn digest_of(lines: &[String]) -> String {
    let mut digest = Sha256::new();
    for line in lines {
        digest.update(line.as_bytes());
        digest.update(b"\n");
    }
    hex::encode(digest.finalize())
}

#[cfg(test)]
mod filter_tests {
    use super::*;

    #[test]
    fn lines_are_classified_by_their_shape() {
        assert_eq!(
            LineKind::of("[+0.001s] chain_a > GET /v1/health "),
            LineKind::Http
        );
        assert_eq!(
            LineKind::of("[+0.001s] router http > GET http://a"),
            LineKind::Http
        );
        assert_eq!(
            LineKind::of("[+5.000s] w -> {\"type\":\"heartbeat\"}"),
            LineKind::Frames
        );
        assert_eq!(
            LineKind::of("[+0.000s] w {\"event\":\"connecting\"}"),
            LineKind::Events
        );
        assert_eq!(
            LineKind::of("[+0.000s] harness step 1: x"),
            LineKind::Harness
        );
        assert_eq!(
            LineKind::of("[+0.1s] router < {\"route\":\"x\"}"),
            LineKind::Http
        );
    }

    #[test]
    fn show_and_hide_combine() {
        let f = LineFilter::parse(Some("frames,harness"), Some("heartbeat")).unwrap();
        assert!(f.shows("[+5.000s] w -> {\"type\":\"accept\"}"));
        assert!(!f.shows("[+5.000s] w -> {\"type\":\"heartbeat\"}"));
        assert!(!f.shows("[+0.001s] chain_a > GET /v1/health "));
        assert!(f.shows("[+0.000s] harness step 1: x"));
        let err = LineFilter::parse(Some("frame"), None).unwrap_err();
        assert!(
            err.contains("kinds are http, frames, events, router, harness"),
            "{err}"
        );
    }
}
