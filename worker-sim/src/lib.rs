//! Simulated compute workers (and workers on a real OpenAI-compatible backend).
//!
//! Layout:
//! - [`clock`]: the injected time source (`Clock`); no module here reads the system clock.
//! - [`transport`]: the text-frame `Transport`/`Connector` traits, in-memory channels and WebSocket.
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
pub mod transport;
pub mod worker;

pub use backend::{Backend, BackendError, OpenAiBackend, SimBackend};
pub use clock::{Clock, FixedClock, SharedClock, TokioClock};
pub use config::{worker_seed, KeySource, Latency, ReconnectPolicy, WorkerConfig};
pub use event::{EventKind, EventLog, Observer, WorkerEvent};
pub use fault::{FaultPlan, HandshakeFault, HeartbeatFault, JobFault, MalformedKind};
pub use transport::{
    channel_connector, channel_pair, ChannelAcceptor, ChannelConnector, ChannelPeer,
    ChannelTransport, Connector, Transport, TransportError, WsConnector, WsTransport,
};
pub use worker::{Worker, WorkerError, WorkerExit};
