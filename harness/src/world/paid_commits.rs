//! Every commit a step sent with a payment header (`http` steps: a `pay`
//! step's paid request, a replay or retry of `{{last_payment}}`), with the
//! answer it got, kept as data beside the transcript: `verify::paid_retries`
//! judges them by decision 0008 (a payment that bought a job answers a
//! retry of the same submission with that job, and no other submission).
//! Steps run one at a time, so each answer is its own request's, whatever
//! else the instance logs meanwhile.

/// Paid commits kept per run at most (a world sends a few dozen).
pub const COMMITS_MAX: usize = 10_000;

/// One paid commit and its answer.
#[derive(Debug, Clone, PartialEq)]
pub struct PaidCommit {
    pub instance: String,
    /// The tier of the commit path (`/v1/jobs/commit/{tier}`).
    pub tier: String,
    /// The request body as sent (JSON; `Null` when it was none).
    pub body: serde_json::Value,
    /// The payment header's value: one value is one payment.
    pub payment: String,
    /// `None`: no answer (the instance was down, the connection cut).
    pub status: Option<u16>,
    /// The answer's `job_id`, when it named one.
    pub job_id: Option<String>,
    /// The answer's `error`, when it gave one (a 402's x402 reason).
    pub error: Option<String>,
    /// The transcript line (0-based) that logged the answer.
    pub line: usize,
}

/// A run's paid commits, in the order they were sent.
#[derive(Debug, Clone, Default)]
pub struct PaidCommitLog(Vec<PaidCommit>);

impl PaidCommitLog {
    pub fn record(&mut self, commit: PaidCommit) {
        if self.0.len() < COMMITS_MAX {
            self.0.push(commit);
        }
    }

    pub fn all(&self) -> &[PaidCommit] {
        &self.0
    }
}
