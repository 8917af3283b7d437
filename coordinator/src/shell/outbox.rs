//! Worker session outboxes, counted: each frame's bytes are added when the
//! shell queues it and taken off when the session's task takes it, and a
//! frame that would take an outbox past its bound
//! ([`crate::resources::outbox_bytes_max`]) closes the session instead of
//! queueing (issue 33). A worker that stops reading is closed by its
//! send deadline; with leases shorter than that deadline the core frees
//! its slots and assigns it new jobs meanwhile, so its outbox, unbounded
//! before, grew by a slot's worth of assigns at every lease. Also the
//! accessor of every accounted figure ([`Coordinator::resources`]) and its
//! check after every event in a watched (simulated) world.

use super::{Coordinator, State};
use crate::core::Outbound;
use crate::resources::{self, Exceeded, Figure, Resources};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::mpsc;

/// The sending end of a worker session's outbox, held by the shell.
pub(super) struct Outbox {
    tx: mpsc::UnboundedSender<(usize, Box<Outbound>)>,
    queued: Arc<AtomicUsize>,
    bound: usize,
}

/// The receiving end, held by the session's task.
///
/// Frames travel boxed: a channel allocates its first block of 32 slots when
/// it is made, one per connected worker, so slots the size of a pointer
/// instead of an [`Outbound`] (88 bytes) keep about 2.3 KiB less per worker,
/// busy or idle, for one allocation per frame sent.
pub struct OutboxRx {
    rx: mpsc::UnboundedReceiver<(usize, Box<Outbound>)>,
    queued: Arc<AtomicUsize>,
}

/// A frame the outbox refused: queueing it would pass the bound.
pub(super) struct OverBound;

/// An outbox of `bound` bytes and its receiving end.
pub(super) fn outbox(bound: usize) -> (Outbox, OutboxRx) {
    let (tx, rx) = mpsc::unbounded_channel();
    let queued = Arc::new(AtomicUsize::new(0));
    let rx = OutboxRx {
        rx,
        queued: Arc::clone(&queued),
    };
    (Outbox { tx, queued, bound }, rx)
}

/// A frame's bytes as the outbox counts them: its JSON, as sent.
fn frame_bytes(out: &Outbound) -> usize {
    match out {
        Outbound::Frame(frame) => crate::core::json_len(frame),
        Outbound::Close(_, message) => message.len() + resources::FRAME_OVERHEAD_BYTES,
    }
}

impl Outbox {
    /// Queues `out`, unless it would take the outbox past its bound. A
    /// close always goes (it ends the session; nothing follows it). A closed
    /// receiver (the session is ending) drops it.
    pub(super) fn send(&self, out: Outbound) -> Result<(), OverBound> {
        let bytes = frame_bytes(&out);
        let close = matches!(out, Outbound::Close(..));
        let queued = self.queued.load(Ordering::SeqCst);
        if !close && queued + bytes > self.bound {
            return Err(OverBound);
        }
        self.queued.fetch_add(bytes, Ordering::SeqCst);
        if self.tx.send((bytes, Box::new(out))).is_err() {
            self.queued.fetch_sub(bytes, Ordering::SeqCst);
        }
        Ok(())
    }

    fn figure(&self, session: u64) -> Figure {
        Figure {
            what: format!("outbox of worker session {session} (bytes)"),
            value: self.queued.load(Ordering::SeqCst),
            bound: self.bound,
        }
    }
}

impl OutboxRx {
    /// The next frame; `None` once the shell dropped the outbox.
    pub async fn recv(&mut self) -> Option<Box<Outbound>> {
        let (bytes, out) = self.rx.recv().await?;
        self.queued.fetch_sub(bytes, Ordering::SeqCst);
        Some(out)
    }

    /// Whether no frame is queued.
    pub fn is_empty(&self) -> bool {
        self.rx.is_empty()
    }

    /// The next frame if one is queued.
    pub fn try_recv(&mut self) -> Result<Box<Outbound>, mpsc::error::TryRecvError> {
        let (bytes, out) = self.rx.try_recv()?;
        self.queued.fetch_sub(bytes, Ordering::SeqCst);
        Ok(out)
    }
}

/// Paid commits between their admission and their job's creation: each
/// may take the queued bytes past `queued_bytes_max` by one job (a paid
/// job is admitted before its payment is settled and never refused after).
#[derive(Default)]
pub(super) struct PaidInFlight(AtomicUsize);

/// Held while a paid commit is between admission and creation.
pub struct PaidCommit(Coordinator);

impl Drop for PaidCommit {
    fn drop(&mut self) {
        self.0.inner.paid_in_flight.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Coordinator {
    /// Marks a paid commit admitted until the mark drops (see
    /// [`crate::resources`], the queued bytes' bound).
    pub fn paid_commit(&self) -> PaidCommit {
        self.inner.paid_in_flight.0.fetch_add(1, Ordering::SeqCst);
        PaidCommit(self.clone())
    }

    /// Every accounted figure now, with its bound (see [`crate::resources`]).
    pub fn resources(&self) -> Resources {
        self.resources_of(&self.lock())
    }

    pub(super) fn resources_of(&self, state: &State) -> Resources {
        let limits = &self.inner.config.limits;
        let paid = self.inner.paid_in_flight.0.load(Ordering::SeqCst);
        let queued_bound = resources::queued_bytes_bound(limits, paid);
        let (queued, _) = state.core.job_bytes();
        let (kept, failed) = state.core.kept_bytes_by_ledger();
        let (held, heaviest_held) = state.held.counts();
        let figure = |what: &str, value, bound| Figure {
            what: what.to_owned(),
            value,
            bound,
        };
        let mut figures = vec![
            figure("queued job bytes", queued, queued_bound),
            figure(
                "kept result bytes",
                kept,
                resources::kept_bytes_bound(limits, queued_bound),
            ),
            figure(
                "kept failure bytes",
                failed,
                resources::failed_bytes_bound(limits, queued_bound),
            ),
            figure("held polls", held, limits.held_polls_max),
            figure(
                "held polls of one client",
                heaviest_held,
                limits.held_polls_per_client_max,
            ),
        ];
        figures.extend(self.place_figures());
        let outboxes = state.outboxes.iter();
        figures.extend(outboxes.map(|(session, out)| out.figure(*session)));
        Resources { figures }
    }

    /// In a watched world, after every event: notes the first figure past
    /// its bound (`resource_bound_exceeded`).
    pub(super) fn check_resources(&self, state: &State) {
        if !resources::watching() {
            return;
        }
        if let Some(figure) = self.resources_of(state).exceeded() {
            resources::note_exceeded(Exceeded {
                network: self.inner.config.network.clone(),
                at_ms: self.inner.clock.now_ms(),
                figure: figure.clone(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use protocol::api::{JobSubmission, JobType, Payload, PrivacyClass, TaskType, Tier};
    use protocol::clock::ManualClock;

    /// A worker that reads nothing while its leases lapse (shorter than its
    /// send deadline): each lapse frees its slot and the core assigns it a
    /// new job. Before issue 33 every assign was queued, past any bound
    /// (the swarm's `resource_bound_exceeded`, seed 59 with
    /// `outbox-without-byte-cap.patch`); now the outbox stays within its
    /// bound and is closed when a frame would pass it.
    #[test]
    fn a_worker_that_reads_nothing_while_leases_lapse_keeps_a_bounded_outbox() {
        let mut config = Config::default();
        config.timing.lease_ms = 1_000;
        config.timing.attempts_max = 100;
        let clock = ManualClock::new(0);
        let c = crate::shell::test_coordinator(config.clone(), Arc::new(clock.clone()));
        let (_session, mut rx) = c
            .register_worker(&format!("0x02{:064x}", 1), vec![JobType::Task], 2)
            .expect("registered");
        let input = "x".repeat(200 * 1024);
        let submission = JobSubmission {
            job_type: JobType::Task,
            user_id: "u".into(),
            payload: Payload::Task {
                task_type: TaskType::Summarize,
                input,
            },
            privacy_class: PrivacyClass::Public,
        };
        for _ in 0..20 {
            c.with(|core, now| core.commit(submission.clone(), Tier::Cheap, None, now))
                .expect("committed");
        }
        let bound = resources::outbox_bytes_max(&config.limits, 2);
        for _ in 0..10 {
            clock.advance(1_001);
            c.with(|core, now| core.tick(now));
            let outbox = c
                .resources()
                .figures
                .into_iter()
                .find(|f| f.what.starts_with("outbox"));
            assert!(
                outbox.as_ref().is_none_or(|f| f.value <= f.bound),
                "{outbox:?}"
            );
        }
        // Closed at its bound: what was queued is still there, then the end.
        let mut bytes = 0;
        while let Ok(out) = rx.try_recv() {
            bytes += frame_bytes(&out);
        }
        assert!(bytes <= bound, "{bytes} queued, bound {bound}");
        assert!(
            matches!(rx.try_recv(), Err(mpsc::error::TryRecvError::Disconnected)),
            "the outbox was closed at its bound"
        );
    }
}
