//! The pairing requests the harness sent to a simulated node
//! (`trust/create`, `trust/claim`, `trust/list`), each with its answer,
//! which process of its node was up when it was sent and when it was
//! answered, and the transcript lines of both. `trust_list_not_durable`
//! (`verify/trust_lists.rs`) judges the lists' answers across restarts; the
//! claims tell it when trust could have changed in between.
//!
//! Kept beside the transcript, not in it, so no committed transcript
//! changes.

use super::World;
use router::HttpRequest;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// At most this many requests are kept (a world sends a few dozen); past
/// it the log keeps the first ones, which still judge what they saw.
pub const TRUST_USES_MAX: usize = 100_000;

/// One pairing request and its answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustUse {
    pub instance: String,
    /// `create`, `claim` or `list`.
    pub door: String,
    /// The query as sent (a list's `user_id=...`).
    pub query: String,
    /// `None`: no answer (a transport error).
    pub status: Option<u16>,
    /// The answer's body as the transcript shows it (canonical JSON).
    pub body: String,
    /// The node's process generation when the request was sent, and when
    /// its answer came.
    pub generations: (u64, u64),
    /// The transcript lines of the request and of its answer.
    pub sent_line: usize,
    pub answered_line: usize,
}

/// Shared by the world's steps; in the order the answers came.
#[derive(Debug, Clone, Default)]
pub struct TrustLog(Arc<Mutex<Vec<TrustUse>>>);

/// A pairing request on its way: what to record with its answer.
pub struct Watched {
    instance: String,
    door: String,
    query: String,
    generation: Arc<AtomicU64>,
    sent: u64,
    sent_line: usize,
}

impl Watched {
    /// The request to watch, if it goes to a pairing door of a simulated
    /// node; call right after its request line is logged.
    pub fn of(world: &World, instance: &str, request: &HttpRequest, path: &str) -> Option<Self> {
        let (door, query) = path.split_once('?').unwrap_or((path, ""));
        let door = door.strip_prefix("/v1/trust/")?;
        let host = request.url.strip_prefix("http://")?.split('/').next()?;
        let node = world.nodes(instance).into_iter().find(|n| n.host == host)?;
        let generation = node.generation.clone();
        Some(Self {
            instance: instance.to_owned(),
            door: door.to_owned(),
            query: query.to_owned(),
            sent: generation.load(Ordering::SeqCst),
            generation,
            sent_line: world.transcript.len().saturating_sub(1),
        })
    }

    /// Records the answer (`None`: none came), logged as the transcript's
    /// last line.
    pub fn answered(self, world: &World, status: Option<u16>, body: String) {
        let answered = self.generation.load(Ordering::SeqCst);
        let mut log = world.trust.0.lock().unwrap_or_else(|p| p.into_inner());
        if log.len() >= TRUST_USES_MAX {
            return;
        }
        log.push(TrustUse {
            instance: self.instance,
            door: self.door,
            query: self.query,
            status,
            body,
            generations: (self.sent, answered),
            sent_line: self.sent_line,
            answered_line: world.transcript.len().saturating_sub(1),
        });
    }
}

impl TrustLog {
    /// Every pairing request sent, in the order the answers came.
    pub fn all(&self) -> Vec<TrustUse> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}
