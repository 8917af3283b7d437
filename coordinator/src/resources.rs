//! The coordinator's accounted memory (issue 33): what it holds for
//! others, counted in bytes and places by its own bookkeeping (never by an
//! allocator, so the figures are deterministic), and the bound each figure
//! stays under, derived from the configuration (docs/security.md,
//! "Accounted memory"):
//!
//! | figure | bound |
//! |---|---|
//! | a worker session's outbox (frames queued, not yet taken by its task) | `slots × (body_bytes_max + 3 KiB)`: one assign and two control frames a slot |
//! | held polls | `held_polls_max`; of one client, `held_polls_per_client_max` |
//! | queued job bytes (non-terminal jobs) | `queued_bytes_max`, plus one largest job (`body_bytes_max + 1 KiB`) per paid commit between its admission and its creation |
//! | kept result bytes | `kept_bytes_max + Q + (Q / 1 KiB) × output_bytes_max`, Q the queued bound: admission counts only finished results, so the jobs queued when the ledger passes its budget may all end there with an output of their own |
//! | kept failure bytes | `failed_kept_bytes_max + Q` |
//! | open handshakes; of one client address | `handshakes_max`; `handshakes_per_client_max` |
//! | worker sessions and slots of one client address | `worker_sessions_per_client_max`; `worker_slots_per_client_max` |
//!
//! The shell enforces the outbox's bound (a frame that would pass it closes
//! the session instead: its jobs go back to the queue), the core the
//! others (503, answered at once). A client's share of the queued budget
//! (`queued_bytes_per_client_max`) is judged apart, at each refusal. [`Resources`] is the accessor; in the
//! simulation the shell checks it after every event and notes a figure
//! past its bound in this thread's [`watch`], which the harness's
//! `resource_bound_exceeded` reads. The core notes each commit refused for
//! capacity with the heaviest other client's queued bytes
//! ([`note_refusal`]), which `honest_starved` judges.
//!
//! Nothing here imports the rest of the crate but the configuration, so
//! every layer may note into it.

use crate::config::Limits;
use std::cell::RefCell;

/// Bytes an assign carries beyond its payload (ids, type, payment
/// reference, lease), and a control frame at most (a cancel, a result's
/// acknowledgement, an error with its message cut short).
pub const FRAME_OVERHEAD_BYTES: usize = 1024;

/// A job's fixed overhead in the byte budgets (`core::JOB_OVERHEAD_BYTES`).
const JOB_OVERHEAD_BYTES: usize = 1024;

/// At most this many notes of each kind per watched world.
const NOTES_MAX: usize = 10_000;

/// One accounted figure and its bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Figure {
    /// What is counted, e.g. `outbox of worker session 3 (bytes)`.
    pub what: String,
    pub value: usize,
    pub bound: usize,
}

impl Figure {
    pub fn exceeded(&self) -> bool {
        self.value > self.bound
    }
}

/// Every accounted figure of one coordinator now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resources {
    pub figures: Vec<Figure>,
}

impl Resources {
    /// The first figure past its bound.
    pub fn exceeded(&self) -> Option<&Figure> {
        self.figures.iter().find(|f| f.exceeded())
    }
}

/// The bound of a worker session's outbox with `slots` slots.
pub fn outbox_bytes_max(limits: &Limits, slots: u32) -> usize {
    let per_slot = limits.body_bytes_max + 3 * FRAME_OVERHEAD_BYTES;
    (slots as usize).max(1).saturating_mul(per_slot)
}

/// The largest job's bytes in the budgets.
fn job_bytes_max(limits: &Limits) -> usize {
    limits.body_bytes_max + JOB_OVERHEAD_BYTES
}

/// The bound of the queued job bytes with `paid_in_flight` paid commits
/// between admission and creation (see the module's table).
pub fn queued_bytes_bound(limits: &Limits, paid_in_flight: usize) -> usize {
    limits.queued_bytes_max + paid_in_flight.saturating_mul(job_bytes_max(limits))
}

/// The bound of the kept result bytes, given the queued bound `queued`.
pub fn kept_bytes_bound(limits: &Limits, queued: usize) -> usize {
    let jobs = queued / JOB_OVERHEAD_BYTES;
    limits
        .kept_bytes_max
        .saturating_add(queued)
        .saturating_add(jobs.saturating_mul(limits.output_bytes_max))
}

/// The bound of the kept failure bytes, given the queued bound `queued`.
pub fn failed_bytes_bound(limits: &Limits, queued: usize) -> usize {
    limits.failed_kept_bytes_max.saturating_add(queued)
}

/// A figure past its bound, as the shell noted it after an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exceeded {
    /// The coordinator's network (instances of one world differ by it).
    pub network: String,
    /// The coordinator's clock, ms since the epoch.
    pub at_ms: i64,
    pub figure: Figure,
}

/// A commit refused for capacity (503), as the core noted it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub at_ms: i64,
    /// The refused client (its address).
    pub owner: String,
    /// The other client with the most queued bytes then, and those bytes.
    pub heaviest_other: Option<(String, usize)>,
    /// A client's share of the queued budget (`queued_bytes_per_client_max`).
    pub share_bytes: usize,
}

#[derive(Default)]
struct Watched {
    exceeded: Vec<Exceeded>,
    refusals: Vec<Refusal>,
}

thread_local! {
    static WATCH: RefCell<Option<Watched>> = const { RefCell::new(None) };
}

/// Stops watching this thread when dropped.
#[must_use = "the thread stops watching when the guard drops"]
pub struct Guard(());

impl Drop for Guard {
    fn drop(&mut self) {
        WATCH.with(|w| *w.borrow_mut() = None);
    }
}

/// Watches this thread's coordinators for one simulated world: figures
/// past their bounds and refusals are noted until the guard drops. Only
/// the harness calls this; the binary never does, so nothing is counted
/// there beyond the figures themselves.
pub fn watch() -> Guard {
    WATCH.with(|w| *w.borrow_mut() = Some(Watched::default()));
    Guard(())
}

/// Whether this thread is watched (the shell then checks its figures
/// after every event).
pub fn watching() -> bool {
    WATCH.with(|w| w.borrow().is_some())
}

/// Notes a figure past its bound; free when unwatched.
pub fn note_exceeded(exceeded: Exceeded) {
    WATCH.with(|w| {
        if let Some(w) = w.borrow_mut().as_mut() {
            if w.exceeded.len() < NOTES_MAX {
                w.exceeded.push(exceeded);
            }
        }
    });
}

/// Notes a commit refused for capacity; free when unwatched.
pub fn note_refusal(refusal: Refusal) {
    WATCH.with(|w| {
        if let Some(w) = w.borrow_mut().as_mut() {
            if w.refusals.len() < NOTES_MAX {
                w.refusals.push(refusal);
            }
        }
    });
}

/// The figures noted past their bounds in this thread's watched world.
pub fn exceeded() -> Vec<Exceeded> {
    WATCH.with(|w| {
        w.borrow()
            .as_ref()
            .map_or(Vec::new(), |w| w.exceeded.clone())
    })
}

/// The refusals noted in this thread's watched world.
pub fn refusals() -> Vec<Refusal> {
    WATCH.with(|w| {
        w.borrow()
            .as_ref()
            .map_or(Vec::new(), |w| w.refusals.clone())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_are_kept_only_while_watched() {
        let figure = Figure {
            what: "x".into(),
            value: 2,
            bound: 1,
        };
        let exceeded = Exceeded {
            network: "n".into(),
            at_ms: 0,
            figure,
        };
        note_exceeded(exceeded.clone());
        assert!(!watching() && super::exceeded().is_empty());
        {
            let _guard = watch();
            note_exceeded(exceeded.clone());
            assert_eq!(super::exceeded(), vec![exceeded.clone()]);
        }
        assert!(!watching() && super::exceeded().is_empty());
    }

    #[test]
    fn bounds_grow_with_what_they_allow() {
        let limits = Limits::default();
        assert!(outbox_bytes_max(&limits, 2) > 2 * limits.body_bytes_max);
        assert!(outbox_bytes_max(&limits, 2) < 3 * limits.body_bytes_max);
        let q = queued_bytes_bound(&limits, 0);
        assert_eq!(q, limits.queued_bytes_max);
        assert!(queued_bytes_bound(&limits, 1) > q + limits.body_bytes_max);
        assert!(kept_bytes_bound(&limits, q) > limits.kept_bytes_max + q);
        assert_eq!(
            failed_bytes_bound(&limits, q),
            limits.failed_kept_bytes_max + q
        );
    }
}
