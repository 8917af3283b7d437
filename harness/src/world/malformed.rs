//! The answers to requests sent malformed on purpose (`http` and
//! `raw_request` steps with `malformed = true`), kept as data beside the
//! transcript: the safety key `bad_input_mishandled` judges them
//! (harness/src/verify/bad_input.rs). Steps run one at a time, so the answer of
//! each is its own, whatever else the instance logs meanwhile.

/// Answers kept per run at most (a world draws a few dozen).
pub const ANSWERS_MAX: usize = 10_000;

/// How one malformed request was answered.
#[derive(Debug, Clone, PartialEq)]
pub struct MalformedAnswer {
    pub instance: String,
    /// The request's method and path (`raw` for a `raw_request`).
    pub request: String,
    /// The transcript line (0-based) that logged its answer.
    pub line: usize,
    /// `None`: no answer (the instance was down, the connection cut).
    pub status: Option<u16>,
    /// The answer's body as JSON (`{"non_json_body": ...}` when it was not).
    pub body: serde_json::Value,
}

/// A run's malformed requests' answers, in the order they were sent.
#[derive(Debug, Clone, Default)]
pub struct MalformedLog(Vec<MalformedAnswer>);

impl MalformedLog {
    pub fn record(&mut self, answer: MalformedAnswer) {
        if self.0.len() < ANSWERS_MAX {
            self.0.push(answer);
        }
    }

    pub fn all(&self) -> &[MalformedAnswer] {
        &self.0
    }
}
