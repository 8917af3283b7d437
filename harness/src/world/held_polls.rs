//! The answers of held polls (`poll` steps with `hold_ms`), kept as data
//! beside the transcript, not in it: the safety key `poll_not_woken`
//! judges them. A held poll's answer is not a function of the seed alone
//! where its instance restarts while it is held: the restart's drain may
//! answer it (early, to make room) or cut its connection first, whichever
//! task tokio's scheduler runs first in that instant. The transcript, which
//! the two runs of a world compare, logs only that the poll was sent.

use std::sync::{Arc, Mutex};

/// Answers kept per run at most (a world draws at most a handful of held
/// polls; a scenario may hold more, and those beyond are not judged).
pub const ANSWERS_MAX: usize = 10_000;

/// How one held poll ended.
#[derive(Debug, Clone, PartialEq)]
pub struct HeldAnswer {
    pub instance: String,
    /// The `wait_ms` it asked for.
    pub wait_ms: u64,
    /// The transcript line (0-based) that logged it being sent.
    pub line: usize,
    /// The client that sent it (`None`: the shared scenario client).
    pub client: Option<String>,
    /// When it was sent, ms since the transcript's `+0.000s`.
    pub sent_ms: i64,
    /// Its answer's HTTP status (0 when the exchange failed).
    pub status: u16,
    /// Its answer: the time it was held, and the job as answered; `None`
    /// when the exchange failed (a cut connection).
    pub answer: Option<(u64, serde_json::Value)>,
}

/// Shared by a run's held polls; clones record into the same log.
#[derive(Clone, Default)]
pub struct HeldPollLog {
    inner: Arc<Mutex<Vec<HeldAnswer>>>,
}

impl HeldPollLog {
    pub fn record(&self, answer: HeldAnswer) {
        let mut inner = self.inner.lock().expect("held poll log lock");
        if inner.len() < ANSWERS_MAX {
            inner.push(answer);
        }
    }

    /// The answers of `instance`'s held polls, in the order they were sent.
    pub fn of(&self, instance: &str) -> Vec<HeldAnswer> {
        let mut answers: Vec<HeldAnswer> = (self.inner.lock().expect("held poll log lock"))
            .iter()
            .filter(|a| a.instance == instance)
            .cloned()
            .collect();
        answers.sort_by_key(|a| a.line);
        answers
    }
}
