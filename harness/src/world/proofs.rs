//! The user proofs the harness sent to the doors that spend a proof's
//! nonce whatever the request's body (`trust/create`, `trust/list`) of a
//! simulated instance, with what each was answered and which process of
//! its node answered: the node's generation when the request was sent and
//! when its answer came. The nonce set is one per process (decision 0017:
//! not persisted, one per node), so `proof_accepted_twice`
//! (`verify/proof_replays.rs`) judges two answers of one process only.
//!
//! Kept beside the transcript, not in it: a proof in every request line
//! would change every committed transcript.

use super::World;
use protocol::user_proof::HEADER;
use router::HttpRequest;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// At most this many proofs are kept (a world sends a few dozen); past it
/// the log keeps the first ones, which still judge what they saw.
pub const PROOFS_MAX: usize = 100_000;

/// The paths whose proof is checked, and its nonce spent, on every request
/// that reaches them with user auth on (PRIVATE commits are left out: a
/// paid one may be proven by its payer, with the proof unread).
const SPENDING_PATHS: [&str; 2] = ["/v1/trust/create", "/v1/trust/list"];

/// One request that carried a user proof, and its answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProofUse {
    pub instance: String,
    /// The node's host (one nonce set per node).
    pub host: String,
    /// The `X-User-Proof` value as sent.
    pub header: String,
    /// `None`: no answer (a transport error).
    pub status: Option<u16>,
    /// The node's process generation when the request was sent, and when
    /// its answer came.
    pub generations: (u64, u64),
    /// The transcript line of its answer.
    pub line: usize,
}

/// Shared by the world's steps; in the order the answers came.
#[derive(Debug, Clone, Default)]
pub struct ProofLog(Arc<Mutex<Vec<ProofUse>>>);

/// A request with a proof on its way: what to record with its answer.
pub struct Watched {
    instance: String,
    host: String,
    header: String,
    generation: Arc<AtomicU64>,
    sent: u64,
}

impl Watched {
    /// The request to watch, if it carries a proof to a spending door of a
    /// simulated node.
    pub fn of(world: &World, instance: &str, request: &HttpRequest, path: &str) -> Option<Self> {
        let door = path.split('?').next().unwrap_or_default();
        if !SPENDING_PATHS.contains(&door) {
            return None;
        }
        let header = (request.headers.iter())
            .find(|(k, _)| k.eq_ignore_ascii_case(HEADER))
            .map(|(_, v)| v.clone())?;
        let host = request.url.strip_prefix("http://")?.split('/').next()?;
        let node = world.nodes(instance).into_iter().find(|n| n.host == host)?;
        let generation = node.generation.clone();
        Some(Self {
            instance: instance.to_owned(),
            host: host.to_owned(),
            header,
            sent: generation.load(Ordering::SeqCst),
            generation,
        })
    }

    /// Records the answer (`None`: none came), logged as the transcript's
    /// last line.
    pub fn answered(self, world: &World, status: Option<u16>) {
        let answered = self.generation.load(Ordering::SeqCst);
        let mut log = world.proofs.0.lock().unwrap_or_else(|p| p.into_inner());
        if log.len() >= PROOFS_MAX {
            return;
        }
        log.push(ProofUse {
            instance: self.instance,
            host: self.host,
            header: self.header,
            status,
            generations: (self.sent, answered),
            line: world.transcript.len().saturating_sub(1),
        });
    }
}

impl ProofLog {
    /// Every proof sent, in the order the answers came.
    pub fn all(&self) -> Vec<ProofUse> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}
