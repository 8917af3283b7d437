//! The pairing codes the harness's steps created and what their claims
//! were answered, as data: a create answered 201 (its code, the worker key
//! it was bound to, its `expires_at`) and every claim with an answer (its
//! code, key, answer and when it came). `pairing_code_lost`
//! (`verify/codes_kept.rs`) judges the claims against the creates.
//!
//! Kept beside the transcript: concurrent creates interleave their lines
//! there, so which answer belongs to which request is known only here.

use std::sync::{Arc, Mutex};

/// At most this many creates and claims are kept each (a world sends a few
/// dozen); past it the first ones are kept.
pub const CODES_MAX: usize = 100_000;

/// A create answered 201.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Created {
    pub instance: String,
    /// In lowercase.
    pub code: String,
    /// The worker key the create named (lowercase), if any.
    pub bound_to: Option<String>,
    /// Its `expires_at`, in ms since the Unix epoch.
    pub expires_ms: i64,
}

/// A claim and its answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    pub instance: String,
    /// As sent, trimmed and in lowercase (as the coordinator reads it).
    pub code: String,
    /// In lowercase.
    pub key: String,
    pub status: u16,
    /// The answer's `error`, if any.
    pub error: Option<String>,
    /// When the answer came, in ms since the Unix epoch: the coordinator
    /// read its clock no later.
    pub answered_ms: i64,
    /// The transcript line of its answer.
    pub line: usize,
}

#[derive(Debug, Default)]
struct Ledger {
    created: Vec<Created>,
    claims: Vec<Claimed>,
}

/// Shared by the world's steps, in the order the answers came.
#[derive(Debug, Clone, Default)]
pub struct CodeLog(Arc<Mutex<Ledger>>);

impl CodeLog {
    fn lock(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn created(&self, created: Created) {
        let mut ledger = self.lock();
        if ledger.created.len() < CODES_MAX {
            ledger.created.push(created);
        }
    }

    pub fn claimed(&self, claimed: Claimed) {
        let mut ledger = self.lock();
        if ledger.claims.len() < CODES_MAX {
            ledger.claims.push(claimed);
        }
    }

    /// Every create answered 201, and every claim answered, in order.
    pub fn all(&self) -> (Vec<Created>, Vec<Claimed>) {
        let ledger = self.lock();
        (ledger.created.clone(), ledger.claims.clone())
    }
}
