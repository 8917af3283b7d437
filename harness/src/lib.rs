//! The harness: runs declarative TOML scenarios against the real coordinator,
//! simulated workers and hosted-provider stubs, under a seeded clock and RNG,
//! and proves each run replays byte for byte.
//!
//! Layout:
//! - [`scenario`]: the TOML format (`scenarios/README.md` documents it).
//! - [`check`]: `harness check`: every reference resolved before a run.
//! - [`transcript`]: timestamped lines and their rolling SHA-256 digest.
//! - [`matcher`]: expectations (`any_uuid`, `iso8601`, ...), captures and `{{var}}` templates.
//! - [`world`]: the peers of a run: coordinators, workers, stubs and the router.
//! - [`workload`], [`fault`], [`beside`]: commit streams and fault injectors
//!   running beside the steps (schema version 2).
//! - [`runner`]: executes a scenario's steps and invariants, simulated or live.
//! - [`report`]: `report.html`, the scenarios' transcripts drawn as swimlane timelines.

pub mod beside;
pub mod check;
mod check_beside;
pub mod fault;
pub mod live;
pub mod matcher;
pub mod report;
pub mod runner;
pub mod scenario;
pub mod transcript;
pub mod workload;
pub mod world;

pub use runner::{run_simulated, run_simulated_with, Outcome, RunReport};
pub use scenario::Scenario;
