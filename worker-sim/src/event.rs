//! What a worker did, reported to an [`Observer`] as it happens so the
//! harness can put it into a transcript (times come from the injected clock).

use serde::Serialize;
use std::sync::{Arc, Mutex};
use uuid::Uuid;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WorkerEvent {
    pub worker: String,
    pub at_ms: i64,
    #[serde(flatten)]
    pub kind: EventKind,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum EventKind {
    /// Connection attempt `attempt` (1-based, reset after each welcome).
    Connecting {
        attempt: u32,
    },
    ConnectFailed {
        attempt: u32,
        error: String,
    },
    /// Authenticated; session `session` of this worker (0-based).
    Welcomed {
        session: u32,
        session_id: u64,
    },
    FrameOut {
        frame: String,
    },
    FrameIn {
        frame: String,
    },
    FaultFired {
        job_index: u64,
        job_id: Uuid,
        fault: String,
    },
    /// A frame from the coordinator that the worker could not use.
    Unparsable {
        frame: String,
    },
    JobDropped {
        job_id: Uuid,
        reason: String,
    },
    /// The session ended; `reason` says why.
    Disconnected {
        reason: String,
    },
    Sleeping {
        ms: u64,
        reason: String,
    },
    Stopped {
        reason: String,
    },
}

impl EventKind {
    /// One line for logs; frames are logged whole (they hold no secrets:
    /// signatures and public keys are public).
    pub fn summary(&self) -> String {
        match self {
            EventKind::FrameOut { frame } => format!("-> {frame}"),
            EventKind::FrameIn { frame } => format!("<- {frame}"),
            other => serde_json::to_string(other).unwrap_or_default(),
        }
    }
}

/// Receives every event of a worker, in order.
pub trait Observer: Send + Sync {
    fn on_event(&self, event: &WorkerEvent);
}

impl<F> Observer for F
where
    F: Fn(&WorkerEvent) + Send + Sync,
{
    fn on_event(&self, event: &WorkerEvent) {
        self(event)
    }
}

/// Ignores everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct NullObserver;

impl Observer for NullObserver {
    fn on_event(&self, _event: &WorkerEvent) {}
}

/// Keeps every event in memory; clones share the log.
#[derive(Debug, Clone, Default)]
pub struct EventLog {
    events: Arc<Mutex<Vec<WorkerEvent>>>,
}

impl EventLog {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn events(&self) -> Vec<WorkerEvent> {
        self.events.lock().expect("event log poisoned").clone()
    }

    /// Frames only, as `-> frame` / `<- frame` lines.
    pub fn frame_lines(&self) -> Vec<String> {
        self.events()
            .iter()
            .filter(|e| {
                matches!(
                    e.kind,
                    EventKind::FrameIn { .. } | EventKind::FrameOut { .. }
                )
            })
            .map(|e| e.kind.summary())
            .collect()
    }

    /// Every event as a JSON line, for transcripts.
    pub fn json_lines(&self) -> Vec<String> {
        self.events()
            .iter()
            .map(|e| serde_json::to_string(e).unwrap_or_default())
            .collect()
    }
}

impl Observer for EventLog {
    fn on_event(&self, event: &WorkerEvent) {
        self.events
            .lock()
            .expect("event log poisoned")
            .push(event.clone());
    }
}

/// Logs through `tracing` (frames at debug, the rest at info).
#[derive(Debug, Clone, Copy, Default)]
pub struct TracingObserver;

impl Observer for TracingObserver {
    fn on_event(&self, event: &WorkerEvent) {
        match &event.kind {
            EventKind::FrameIn { .. } | EventKind::FrameOut { .. } => {
                tracing::debug!(worker = %event.worker, "{}", event.kind.summary())
            }
            EventKind::ConnectFailed { .. }
            | EventKind::Disconnected { .. }
            | EventKind::Stopped { .. }
            | EventKind::FaultFired { .. } => {
                tracing::warn!(worker = %event.worker, "{}", event.kind.summary())
            }
            _ => tracing::info!(worker = %event.worker, "{}", event.kind.summary()),
        }
    }
}
