//! The compute-job coordinator: accepts jobs over HTTP, hands them to workers
//! connected by WebSocket, and returns results with worker-signed receipts.
//!
//! Layout:
//! - [`core`]: the deterministic state machine (jobs, queues, workers, timers);
//!   plain code over state + event + `now_ms`.
//! - [`trust`]: pairing codes and trusted-worker lists, owned by the core.
//! - [`coordinator`]: the shell around the core: lock, clock, store, session
//!   outboxes, the timer task.
//! - [`http`]: the HTTP API (`app()`), [`error`]: every error response.
//! - [`session`]: one worker's WebSocket session, over any `protocol::connection::FrameConnection`.
//! - [`validate`]: request body validation.
//! - [`config`], [`clock`], [`store`]: what is injected; [`sqlite`]: the durable store.
//! - [`retention`]: when finished jobs are deleted (by age, by the kept budget).
//! - [`cluster`]: what several nodes share in cluster mode (`--db postgres://…`).

pub mod clock;
pub mod cluster;
pub mod config;
pub mod coordinator;
pub mod core;
pub mod error;
pub mod http;
pub mod metrics;
pub mod node;
pub mod openapi;
pub mod pg;
pub mod rate;
pub mod retention;
pub mod server;
pub mod session;
pub mod sqlite;
pub mod store;
pub mod trust;
pub mod validate;

pub use clock::{Clock, ManualClock, SystemClock, TokioClock};
pub use config::Config;
pub use coordinator::Coordinator;
pub use http::app;
