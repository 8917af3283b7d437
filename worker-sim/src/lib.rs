//! Simulated compute workers (and workers on a real OpenAI-compatible backend).
//!
//! Layout:
//! - [`clock`]: the injected time source (`Clock`); no module here reads the system clock.
//! - [`ws`]: the WebSocket client as a `protocol::connection::FrameConnection`, and its `Connector`.
//! - [`config`]: `WorkerConfig`, latency distributions, reconnect policy, key derivation.
//! - [`fault`]: scriptable misbehaviour of a worker (`FaultPlan`, `JobFault`, ...).
//! - [`backend`]: how a job is executed: simulated, or an OpenAI-compatible server.
//! - [`event`]: what a worker did, for logs and simulation transcripts.
//! - [`worker`]: the worker itself: handshake, heartbeats, slots, jobs, reconnects.
//! - [`owner`]: the owner's one-off commands: make a key file, claim a pairing code.

pub mod backend;
pub mod clock;
pub mod config;
pub mod event;
pub mod fault;
pub mod owner;
pub mod worker;
pub mod ws;

pub use backend::{Backend, BackendError, DeltaSink, OpenAiBackend, SimBackend};
pub use clock::{Clock, FixedClock, SharedClock, TokioClock};
pub use config::{worker_seed, KeySource, Latency, ReconnectPolicy, WorkerConfig, DEFAULT_NETWORK};
pub use event::{EventKind, EventLog, Observer, WorkerEvent};
pub use fault::{FaultPlan, HandshakeFault, HeartbeatFault, JobFault, MalformedKind};
pub use worker::{Worker, WorkerError, WorkerExit};
pub use ws::{WsConnection, WsConnector};
