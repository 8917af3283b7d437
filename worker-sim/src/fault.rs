//! Scriptable misbehaviour. A scenario names faults per job index (the n-th
//! assignment this worker received, counted from 0 across reconnects), per
//! connection (heartbeats, handshake) or at random with a seeded probability.
//!
//! TOML form, as the harness scenarios write it:
//!
//! ```toml
//! heartbeat = { kind = "stop", after_ms = 0 }
//!
//! [[jobs]]
//! job = 0
//! kind = "reject"
//! reason = "busy"
//!
//! [[jobs]]
//! job = 2
//! kind = "crash"
//! restart_after_ms = 5000
//!
//! [[random]]
//! probability = 0.1
//! kind = "silent"
//! ```

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What goes wrong with one job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum JobFault {
    /// Send `reject` (by default without accepting first).
    Reject {
        #[serde(default = "default_reject_reason")]
        reason: String,
        #[serde(default)]
        accept_first: bool,
    },
    /// Accept, then never answer; the slot stays taken until `cancel`.
    Silent,
    /// Accept, then close the connection cleanly after the job's latency and
    /// reconnect with the normal backoff.
    Disconnect,
    /// Accept, then drop the connection abruptly after the job's latency,
    /// forget every job, wait `restart_after_ms`, and reconnect.
    Crash {
        #[serde(default = "default_restart_after_ms")]
        restart_after_ms: u64,
    },
    /// Answer `extra_ms` later than the drawn latency (e.g. past the lease).
    Slow { extra_ms: u64 },
    /// Accept, then send `reject` after the drawn latency instead of an
    /// answer: a worker that gives the job up when its own deadline for it
    /// passes (one set to the lease, say).
    GiveUp,
    /// Sign the receipt with a different key than `provider_pubkey`.
    BadSignature,
    /// A correctly signed receipt whose `output_hash` is over another output.
    WrongOutputHash,
    /// An output of the wrong shape for the job type, with a valid receipt.
    InvalidOutput,
    /// Answer with the output and the (correctly signed) receipt of this
    /// worker's previous result of the same shape: another job's receipt,
    /// which must be refused (`receipt.job_id` names the other job). With
    /// no such previous result, the job is answered honestly.
    OtherJobReceipt,
    /// Answer with this job's output and a correctly signed receipt for
    /// this job, bound to another payment: the `payment_ref` of the last
    /// paid job this worker was given before this one (or, having seen
    /// none, one it makes up). A worker that reuses a receipt template, or
    /// one that would tie its work to a payment it can settle elsewhere;
    /// it must be refused (`receipt.payment_ref` is not the job's).
    OtherPaymentRef,
    /// Answer with this job's output and a correctly signed receipt for
    /// this job that names no payment (`payment_ref` null): a worker that
    /// leaves the binding out. On a paid job it must be refused
    /// (`receipt.payment_ref` is not the job's); on an unpaid job it is the
    /// honest receipt.
    NoPaymentRef,
    /// Answer with this job's output and a receipt that names another key
    /// (this worker's `wrong_key`) and is signed by it, so it verifies on
    /// its own: a worker that signs with a key its owner never paired (a
    /// stolen or borrowed key, or a pool's shared one). It must be refused
    /// (`receipt.provider_pubkey` is not the session's key).
    ForeignKeyReceipt,
    /// On a streaming worker: stream a text of the output's length that is
    /// not the output (its characters rotated by one), then answer with
    /// the true output and a valid receipt: a worker whose stream and
    /// answer come from two generations (a retried sample, a cache). It
    /// must be refused (the deltas do not join to the output). A worker
    /// that does not stream answers honestly.
    DeltasDiffer,
    /// Send the (valid) `result` frame twice: the second must draw an
    /// error, never a second `result_accepted`.
    DuplicateResult,
    /// Send a malformed frame when the job arrives, then do the job normally.
    Malformed { frame: MalformedKind },
}

fn default_reject_reason() -> String {
    "scripted reject".to_owned()
}

fn default_restart_after_ms() -> u64 {
    1_000
}

impl JobFault {
    /// Short name for logs and transcripts.
    pub fn name(&self) -> &'static str {
        match self {
            JobFault::Reject { .. } => "reject",
            JobFault::Silent => "silent",
            JobFault::Disconnect => "disconnect",
            JobFault::Crash { .. } => "crash",
            JobFault::Slow { .. } => "slow",
            JobFault::GiveUp => "give_up",
            JobFault::BadSignature => "bad_signature",
            JobFault::WrongOutputHash => "wrong_output_hash",
            JobFault::InvalidOutput => "invalid_output",
            JobFault::OtherJobReceipt => "other_job_receipt",
            JobFault::OtherPaymentRef => "other_payment_ref",
            JobFault::NoPaymentRef => "no_payment_ref",
            JobFault::ForeignKeyReceipt => "foreign_key_receipt",
            JobFault::DeltasDiffer => "deltas_differ",
            JobFault::DuplicateResult => "duplicate_result",
            JobFault::Malformed { .. } => "malformed",
        }
    }
}

/// Kinds of bad frame; each should draw an `error` frame and leave the
/// connection open.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MalformedKind {
    /// Not JSON at all (`malformed_frame`).
    NotJson,
    /// JSON with an unknown `type` (`malformed_frame`).
    UnknownType,
    /// A frame of `bytes` bytes (`frame_too_large` when over the limit).
    Oversized { bytes: usize },
    /// A well-formed frame that makes no sense now: a second `hello` (`unexpected_frame`).
    Unexpected,
    /// A `result` for a job this worker was never given (`unknown_job`/`not_assigned`).
    ForeignResult,
}

/// Heartbeat misbehaviour for every session of the worker.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum HeartbeatFault {
    #[default]
    Normal,
    /// Heartbeat every `interval_ms` instead of the coordinator's interval.
    Slow { interval_ms: u64 },
    /// Stop heartbeating `after_ms` after `welcome` (0: never heartbeat).
    Stop {
        #[serde(default)]
        after_ms: u64,
    },
}

/// Handshake misbehaviour; the coordinator should answer with an `error`
/// frame and close, and the worker then stops.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HandshakeFault {
    /// Sign the challenge with another key (`auth_failed`).
    BadAuthSignature,
    /// Announce protocol version 999 (`unsupported_version`).
    WrongProtocolVersion,
    /// A `hello` with a malformed public key (`invalid_hello`).
    InvalidHello,
}

/// A fault for the job with index `job`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobFaultRule {
    pub job: u64,
    #[serde(flatten)]
    pub fault: JobFault,
}

/// A fault drawn for each job that has no explicit rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RandomFault {
    pub probability: f64,
    #[serde(flatten)]
    pub fault: JobFault,
}

/// Every fault scripted for one worker.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct FaultPlan {
    pub jobs: Vec<JobFaultRule>,
    pub random: Vec<RandomFault>,
    pub heartbeat: HeartbeatFault,
    pub handshake: Option<HandshakeFault>,
}

impl FaultPlan {
    pub fn none() -> Self {
        Self::default()
    }

    /// Adds a fault for job index `job` (builder style, for tests).
    pub fn on_job(mut self, job: u64, fault: JobFault) -> Self {
        self.jobs.push(JobFaultRule { job, fault });
        self
    }

    pub fn with_heartbeat(mut self, heartbeat: HeartbeatFault) -> Self {
        self.heartbeat = heartbeat;
        self
    }

    pub fn with_handshake(mut self, handshake: HandshakeFault) -> Self {
        self.handshake = Some(handshake);
        self
    }

    /// Explicit rules by job index; a later rule for the same index wins.
    pub fn by_job(&self) -> BTreeMap<u64, JobFault> {
        self.jobs.iter().map(|r| (r.job, r.fault.clone())).collect()
    }

    /// The fault for job `index`, drawing the random faults from `rng` (one
    /// draw per random rule, always, so the stream does not depend on which
    /// rule fired).
    pub fn pick(&self, index: u64, rng: &mut impl rand::Rng) -> Option<JobFault> {
        let mut drawn = None;
        for rule in &self.random {
            let p = if rule.probability.is_finite() {
                rule.probability.clamp(0.0, 1.0)
            } else {
                0.0
            };
            let hit = rng.gen_bool(p);
            if hit && drawn.is_none() {
                drawn = Some(rule.fault.clone());
            }
        }
        self.jobs
            .iter()
            .rev()
            .find(|r| r.job == index)
            .map(|r| r.fault.clone())
            .or(drawn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_toml() {
        let text = r#"
heartbeat = { kind = "stop", after_ms = 0 }
handshake = "bad_auth_signature"

[[jobs]]
job = 0
kind = "reject"
reason = "busy"

[[jobs]]
job = 2
kind = "crash"
restart_after_ms = 5000

[[jobs]]
job = 3
kind = "malformed"
frame = { oversized = { bytes = 2000000 } }

[[jobs]]
job = 4
kind = "malformed"
frame = "not_json"

[[random]]
probability = 0.1
kind = "silent"
"#;
        let plan: FaultPlan = toml::from_str(text).unwrap();
        assert_eq!(plan.heartbeat, HeartbeatFault::Stop { after_ms: 0 });
        assert_eq!(plan.handshake, Some(HandshakeFault::BadAuthSignature));
        let by_job = plan.by_job();
        assert_eq!(
            by_job[&0],
            JobFault::Reject {
                reason: "busy".into(),
                accept_first: false
            }
        );
        assert_eq!(
            by_job[&2],
            JobFault::Crash {
                restart_after_ms: 5000
            }
        );
        assert_eq!(
            by_job[&3],
            JobFault::Malformed {
                frame: MalformedKind::Oversized { bytes: 2_000_000 }
            }
        );
        assert_eq!(
            by_job[&4],
            JobFault::Malformed {
                frame: MalformedKind::NotJson
            }
        );
        assert_eq!(plan.random[0].fault, JobFault::Silent);
    }

    #[test]
    fn explicit_rule_beats_random() {
        use rand::SeedableRng;
        let plan = FaultPlan {
            random: vec![RandomFault {
                probability: 1.0,
                fault: JobFault::Silent,
            }],
            ..FaultPlan::none()
        }
        .on_job(1, JobFault::BadSignature);
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(1);
        assert_eq!(plan.pick(0, &mut rng), Some(JobFault::Silent));
        assert_eq!(plan.pick(1, &mut rng), Some(JobFault::BadSignature));
    }
}
