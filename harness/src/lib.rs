//! The harness: runs declarative TOML scenarios against the real coordinator,
//! simulated workers and hosted-provider stubs, under a seeded clock and RNG,
//! and proves each run replays byte for byte.
//!
//! Layers, each a folder; imports run one way, top to bottom
//! (`main -> {swarm, report} -> run -> {world, verify, check} -> {spec, expr}`;
//! within a layer, `verify` reads `world` and `spec` renders with `expr`, never
//! back). A new step keyword is a row of `spec/step.rs`'s table, its arguments
//! in `spec/calls.rs`, its `run_*` in `run/steps.rs`, its references in
//! `check/refs.rs`.
//! - `main.rs`: the binary, clap subcommands `run` (with `--live`), `check`, `swarm`.
//! - [`swarm`]: `harness swarm`: random worlds per seed, shrunk failures.
//! - [`report`]: `report.html`, the scenarios' transcripts drawn as swimlane timelines;
//!   `report::junit`, JUnit XML for CI systems.
//! - [`run`]: executes a scenario's steps (one `run_*` per action), simulated
//!   or live, with what runs beside them (`run::background`: workloads, faults).
//! - [`world`]: the peers of a run: coordinators, workers, stubs and the
//!   router; its transcript (every peer writes it), its frame log and its
//!   stream log (`world::streams`: what each `stream` reader was shown).
//! - [`verify`]: end-of-run invariants, safety properties (`verify::streams`:
//!   the stream readers' keys) and temporal properties; a broken one is a
//!   typed [`verify::Broken`].
//! - [`check`]: `harness check`: every reference resolved before a run.
//! - [`spec`]: the scenario file as data (`scenarios/README.md` documents it);
//!   nothing of the runtime.
//! - [`expr`]: `{{var | filter}}` templates, matchers, captures, durations.

pub mod check;
pub mod expr;
pub mod report;
pub mod run;
pub mod spec;
pub mod swarm;
pub mod verify;
pub mod world;

pub use run::{run_simulated, run_simulated_with, Outcome, RunReport};
pub use spec::Scenario;
