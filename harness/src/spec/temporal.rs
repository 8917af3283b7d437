//! Properties of the whole run (version 2), checked after the last step
//! against every worker frame recorded (`verify/temporal.rs`).
//!
//! ```toml
//! [[temporal]]                      # job X never reaches worker w2
//! kind = "never"
//! event = { worker = "w2", direction = "received", frame = { type = "assign", job_id = "{{job}}" } }
//!
//! [[temporal]]                      # every job of the run is accepted once
//! kind = "exactly_once"
//! per = "job"
//! event = { direction = "received", frame = { type = "result_accepted" } }
//!
//! [[temporal]]                      # the run reached a lease expiry (not vacuous)
//! kind = "at_least_once"
//! event = { direction = "received", frame = { type = "cancel" } }
//!
//! [[temporal]]                      # no result before its accept
//! kind = "before"
//! per = "job"
//! first = { direction = "sent", frame = { type = "accept" } }
//! event = { direction = "sent", frame = { type = "result" } }
//! ```
//!
//! - `never`: no recorded frame matches `event`.
//! - `exactly_once`: exactly one frame matches `event`; with `per = "job"`,
//!   exactly one per job, for every job of every instance's store and every
//!   job id seen in a frame (a job that never got one is a violation).
//! - `at_least_once`: some frame matches `event` (so a `never` beside it
//!   cannot hold vacuously); with `per`, at least one per job.
//! - `before`: every frame matching `event` comes after one matching
//!   `first`; with `per = "job"`, after one of the same `job_id`.
//!
//! `per = "acknowledged_job"` is `per = "job"` over only the jobs a harness
//! step was answered 201 for (`world::acknowledged`): a commit refused with a
//! 422 leaves a record with a `job_id`, which `per = "job"` counts.
//!
//! Templates in patterns are rendered with the variables at the end of the
//! run. A violation names the property, the job and the transcript line.

use super::frames::FramePattern;
use serde::Deserialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Never,
    ExactlyOnce,
    AtLeastOnce,
    Before,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Never => "never",
            Kind::ExactlyOnce => "exactly_once",
            Kind::AtLeastOnce => "at_least_once",
            Kind::Before => "before",
        }
    }
}

/// How events are grouped, by the frame's `job_id`: `job`, every job the
/// run knows of; `acknowledged_job`, only jobs answered 201.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Per {
    Job,
    AcknowledgedJob,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Temporal {
    /// Shown in a violation; the kind and pattern when absent.
    pub name: Option<String>,
    pub kind: Kind,
    pub event: FramePattern,
    /// `before` only: what must come first.
    pub first: Option<FramePattern>,
    pub per: Option<Per>,
}

impl Temporal {
    /// Load-time shape: `first` goes with `before` and only with it.
    pub fn shape_problem(&self) -> Option<String> {
        match (self.kind, &self.first) {
            (Kind::Before, None) => Some("kind = \"before\" needs first = { ... }".into()),
            (Kind::Before, Some(_)) => None,
            (kind, Some(_)) => Some(format!(
                "first goes with kind = \"before\", not {}",
                kind.as_str()
            )),
            (Kind::Never, None) if self.per.is_some() => {
                Some("per means nothing for kind = \"never\"".into())
            }
            _ => None,
        }
    }

    /// `temporal 2 (NAME)`, for the transcript and violations.
    pub fn title(&self, number: usize) -> String {
        let name = self
            .name
            .clone()
            .unwrap_or_else(|| format!("{} {}", self.kind.as_str(), self.event.describe()));
        format!("temporal {number} ({name})")
    }
}
