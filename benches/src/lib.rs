//! Benchmark fixtures shared by the criterion benches (`benches/*.rs`) and
//! the `loadgen` load tool (`src/bin/loadgen/`).
//!
//! - [`fixtures`]: job submissions, keys and pre-signed receipts.
//! - [`rig`]: the core (and the core behind the coordinator shell) kept
//!   busy with a deep queue, advanced one commit → assign → accept →
//!   complete cycle at a time.
//! - [`sim`]: the in-memory simulation (coordinator + worker-sim over
//!   channels) under a paused tokio runtime.
//! - [`stats`], [`procfs`], [`plot`]: what the load tool reports with.
//!
//! Everything here measures, so wall time is read where noted; the
//! deterministic-core rules (clippy.toml) still hold for what is measured.

pub mod fixtures;
pub mod plot;
pub mod procfs;
pub mod rig;
pub mod sim;
pub mod stats;
