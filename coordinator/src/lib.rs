//! The compute-job coordinator: accepts jobs over HTTP, hands them to workers
//! connected by WebSocket, and returns results with worker-signed receipts.
//!
//! Layers, each importing only the ones after it:
//! `bin → server → connections → {api, worker} → node → retention → shell → {store, cluster, metrics} → core → config`.
//! - [`server`]: the composition root: one `start` that chooses the store,
//!   the tasks it owns, serving and shutdown.
//! - [`connections`]: serving TCP with a head deadline, a bounded head
//!   buffer and connection budgets (in all, per peer address).
//! - [`api`]: the HTTP API (`app()`), its OpenAPI document, request
//!   validation and every error response.
//! - [`worker`]: one worker's WebSocket session, over any
//!   `protocol::connection::FrameConnection`, and the check of its results.
//! - [`node`]: a node's runtime around its coordinator in cluster mode.
//! - [`retention`]: when finished jobs are deleted (by age, by the kept budget).
//! - [`shell`]: the [`Coordinator`]: lock, clock, store, session outboxes,
//!   held polls, the timer task.
//! - [`store`]: where one coordinator's records live (in memory, SQLite).
//! - [`cluster`]: what several nodes share in cluster mode
//!   (`--db postgres://…`): the shared-store seam, in memory and PostgreSQL.
//! - [`metrics`]: the Prometheus registry.
//! - [`core`]: the deterministic state machine (jobs, queues, workers,
//!   placement, trust, timers); plain code over state + event + `now_ms`.
//! - [`config`], [`clock`]: what is injected.
//! - [`buggify`]: fault points, `sometimes` states and the harness's
//!   witnesses, which fire and record only on a thread the simulation armed
//!   (decision 0024); used by every layer, imports none.
//!
//! Where to look: how jobs are placed, `core/dispatch.rs` (checked by
//! `core/invariants.rs`); a new endpoint, `api/` (registered once in
//! `api/mod.rs`) and `protocol/src/api.rs`; what a restart recovers,
//! `core/restore.rs`; the SQLite schema, `store/sqlite/schema.rs`.

pub mod api;
pub mod buggify;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod connections;
pub mod core;
pub mod metrics;
pub mod node;
pub mod resources;
pub mod retention;
pub mod server;
pub mod shell;
pub mod store;
pub mod worker;

pub use api::app;
pub use clock::{Clock, ManualClock, SystemClock, TokioClock};
pub use config::Config;
pub use shell::Coordinator;
