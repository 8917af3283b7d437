//! Frames of the worker WebSocket protocol at `GET /v1/workers/ws`.
//!
//! Every frame is one JSON text message tagged by `type`. The full exchange,
//! with examples, is in `docs/worker-protocol.md`:
//!
//! ```text
//! worker                                  coordinator
//!   hello {protocol_version, coordinator, provider_pubkey, capabilities, slots} ->
//!                                      <- challenge {nonce, network}
//!   auth {signature over challenge_message(coordinator, network, nonce)} ->
//!                                      <- welcome {session_id, heartbeat_interval_ms, ...}
//!   heartbeat ->            (every heartbeat_interval_ms)
//!                                      <- assign {job_id, job_type, payload, ...}
//!   accept {job_id} ->                    (job becomes `running`)
//!   delta {job_id, seq, text} ->          (0 or more; `deltas` feature only)
//!   result {job_id, output, receipt} ->   or reject {job_id, reason}
//!                                      <- result_accepted {job_id}
//!                                      <- cancel {job_id, reason}  (lease expired)
//!                                      <- error {code, message, job_id?}
//! ```

use crate::api::{JobType, Payload, PrivacyClass};
use crate::receipt::Receipt;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The protocol version this build speaks; `hello` must carry it. Version 2
/// added `coordinator` to `hello` and to the signed text; a coordinator
/// refuses any other version with `unsupported_version`.
pub const PROTOCOL_VERSION: u32 = 2;

/// The feature a worker names in its hello's `features` to send `delta`
/// frames (decision 0023). Additive within version 2: a hello without
/// `features` is the version-2 hello of before, and a coordinator ignores
/// feature names it does not know, so either side may be older.
pub const FEATURE_DELTAS: &str = "deltas";

/// Frames a worker sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum WorkerFrame {
    Hello {
        protocol_version: u32,
        /// The origin of the coordinator the worker dialled
        /// ([`crate::origin::worker_origin`] of its configured URL), which
        /// its auth signature covers. Required since version 2; optional
        /// here only so a version-1 hello, which has none, is answered
        /// `unsupported_version` rather than `malformed_frame`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        coordinator: Option<String>,
        provider_pubkey: String,
        capabilities: Vec<JobType>,
        slots: u32,
        /// Free text naming the worker software, for operators' logs.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        agent: Option<String>,
        /// Optional protocol features the worker speaks, e.g.
        /// [`FEATURE_DELTAS`]; unknown names are ignored.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        features: Vec<String>,
    },
    Auth {
        signature: String,
    },
    Heartbeat,
    Accept {
        job_id: Uuid,
    },
    /// A piece of a text output, before its `result`: `seq` counts from 0
    /// per assignment, and the pieces in order join to exactly the
    /// result's output (decision 0023). Only after `accept`, only from a
    /// worker whose hello named [`FEATURE_DELTAS`].
    Delta {
        job_id: Uuid,
        seq: u32,
        text: String,
    },
    Result {
        job_id: Uuid,
        output: serde_json::Value,
        receipt: Receipt,
    },
    Reject {
        job_id: Uuid,
        reason: String,
    },
}

/// A job handed to a worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assignment {
    pub job_id: Uuid,
    pub job_type: JobType,
    pub payload: Payload,
    pub privacy_class: PrivacyClass,
    /// Goes into the receipt verbatim.
    pub payment_ref: Option<String>,
    /// The worker must deliver a result within this many milliseconds of the assign.
    pub lease_ms: u64,
}

/// Frames the coordinator sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum CoordinatorFrame {
    Challenge {
        nonce: String,
        network: String,
    },
    Welcome {
        session_id: u64,
        heartbeat_interval_ms: u64,
        heartbeat_timeout_ms: u64,
    },
    Assign(Assignment),
    ResultAccepted {
        job_id: Uuid,
    },
    Cancel {
        job_id: Uuid,
        reason: String,
    },
    Error {
        code: ErrorCode,
        message: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        job_id: Option<Uuid>,
    },
}

/// Machine-readable reason of an `error` frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    MalformedFrame,
    FrameTooLarge,
    UnexpectedFrame,
    UnsupportedVersion,
    InvalidHello,
    AuthFailed,
    AuthTimeout,
    HeartbeatTimeout,
    Replaced,
    UnknownJob,
    NotAssigned,
    InvalidReceipt,
    InvalidOutput,
    ShuttingDown,
}

/// The text a worker signs (EIP-191) to prove it holds its key, one field a
/// line. `coordinator` is the origin the worker dialled, filled in from its
/// own configuration and never from the challenge: a server that relays a
/// real coordinator's challenge gets a signature naming the relay, which
/// the real coordinator refuses. The network keeps a signature for one
/// chain's instance useless on another's; the nonce makes it single-use.
pub fn challenge_message(coordinator: &str, network: &str, nonce: &str) -> String {
    format!(
        "compute-coordinator worker auth v{PROTOCOL_VERSION}\ncoordinator: {coordinator}\nnetwork: {network}\nnonce: {nonce}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn frames_are_tagged_snake_case() {
        let f: WorkerFrame = serde_json::from_value(json!({"type": "heartbeat"})).unwrap();
        assert_eq!(f, WorkerFrame::Heartbeat);
        let e = CoordinatorFrame::Error {
            code: ErrorCode::NotAssigned,
            message: "m".into(),
            job_id: None,
        };
        assert_eq!(
            serde_json::to_value(&e).unwrap(),
            json!({"type": "error", "code": "not_assigned", "message": "m"})
        );
    }

    #[test]
    fn the_signed_text_names_the_coordinator_network_and_nonce() {
        assert_eq!(
            challenge_message("wss://coord.example.com", "eip155:8453", "0xab"),
            "compute-coordinator worker auth v2\ncoordinator: wss://coord.example.com\n\
             network: eip155:8453\nnonce: 0xab"
        );
    }

    #[test]
    fn a_version_1_hello_still_parses_so_it_can_be_refused_by_version() {
        let f: WorkerFrame = serde_json::from_value(json!({"type": "hello", "protocol_version": 1,
            "provider_pubkey": "0x02", "capabilities": ["TASK"], "slots": 1}))
        .unwrap();
        assert!(matches!(
            f,
            WorkerFrame::Hello {
                protocol_version: 1,
                coordinator: None,
                ..
            }
        ));
    }

    #[test]
    fn features_are_optional_and_omitted_when_empty() {
        let old = json!({"type": "hello", "protocol_version": 2, "coordinator": "ws://c",
            "provider_pubkey": "0x02", "capabilities": ["TASK"], "slots": 1});
        let f: WorkerFrame = serde_json::from_value(old.clone()).unwrap();
        assert_eq!(
            serde_json::to_value(&f).unwrap(),
            old,
            "an old hello is unchanged"
        );
        let d: WorkerFrame = serde_json::from_value(
            json!({"type": "delta", "job_id": uuid::Uuid::nil(), "seq": 0, "text": "Hi"}),
        )
        .unwrap();
        assert!(matches!(d, WorkerFrame::Delta { seq: 0, .. }));
    }

    #[test]
    fn unknown_fields_are_refused() {
        let r: Result<WorkerFrame, _> =
            serde_json::from_value(json!({"type": "accept", "job_id": uuid::Uuid::nil(), "x": 1}));
        assert!(r.is_err());
    }
}
