//! The harness: runs declarative TOML scenarios against the real coordinator,
//! simulated workers and hosted-provider stubs, under a seeded clock and RNG,
//! and proves each run replays byte for byte.
//!
//! Layout:
//! - [`scenario`]: the TOML format (`scenarios/README.md` documents it).
//! - [`check`]: `harness check`: every reference resolved before a run.
//! - [`transcript`]: timestamped lines and their rolling SHA-256 digest.
//! - [`matcher`]: expectations (`any_uuid`, `iso8601`, ...), captures and `{{var}}` templates.
//! - [`template`]: `{{var | filter}}` expressions.
//! - [`matrix`]: `repeat` and `for_each`, expanded at load.
//! - [`frames`]: worker frames as data; frame and call-count steps, scripted frames.
//! - [`temporal`]: `never`, `exactly_once`, `before` over the whole run.
//! - [`terms`]: per-instance prices, payment asset, x402 version of a paying step.
//! - [`world`]: the peers of a run: coordinators, workers, stubs and the router.
//! - [`workload`], [`fault`], [`beside`]: commit streams and fault injectors
//!   running beside the steps (schema version 2).
//! - [`runner`]: executes a scenario's steps and invariants, simulated or live.
//! - [`swarm`]: `harness swarm`: random worlds per seed, shrunk failures.
//! - [`safety`]: properties every simulated run keeps, checked over transcript and stores.
//! - [`report`]: `report.html`, the scenarios' transcripts drawn as swimlane timelines.

pub mod beside;
pub mod check;
mod check_beside;
pub mod check_v2;
pub mod fault;
pub mod frames;
pub mod live;
pub mod matcher;
pub mod matrix;
pub mod report;
pub mod runner;
pub mod safety;
pub mod scenario;
pub mod swarm;
pub mod template;
pub mod temporal;
pub mod terms;
pub mod transcript;
pub mod workload;
pub mod world;

pub use runner::{run_simulated, run_simulated_with, Outcome, RunReport};
pub use scenario::Scenario;
