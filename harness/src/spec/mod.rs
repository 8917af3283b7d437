//! The scenario file as data: what `harness run` and `harness check` read,
//! and nothing of the runtime (no world, no runner). Every table rejects
//! unknown keys, and a parse error names the key and the line.
//! `scenarios/README.md` documents the format with a complete example.
//!
//! - [`scenario`]: the file's top level, its peers, `Scenario::parse`.
//! - [`step`]: a step and its action, with the one keyword table of actions.
//! - [`calls`]: each action's arguments.
//! - [`duration`]: durations as written (`500ms`, `10s`).
//! - [`names`]: the fixed peer names (`chain_a`, `provider_a`, ...).
//! - [`frames`], [`temporal`]: frame patterns and the run's temporal properties.
//! - [`workload`], [`fault`]: what runs beside the steps (version 2).
//! - [`pricing`]: per-instance prices, payment asset, x402 version.
//! - [`matrix`]: `repeat` and `for_each`, expanded at load.

/// The newest schema version; version 1 files keep running unchanged.
/// Version 2 adds `[[workloads]]`, `[[faults]]`, `wait_until = { workload }`
/// and the features listed in `matrix::V2_FEATURES` (a version-1 file
/// that uses one is refused).
pub const SCHEMA_VERSION: u32 = 2;
pub const SCHEMA_VERSIONS: [u32; 2] = [1, 2];

/// A closed set of TOML spellings: a typo fails the load with an error that
/// names the valid ones; `as_str` gives the spelling back for the transcript.
macro_rules! choice {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, ::serde::Deserialize)]
        pub enum $name {
            $($(#[$vmeta])* #[serde(rename = $text)] $variant),+
        }

        impl $name {
            pub const NAMES: &'static [&'static str] = &[$($text),+];

            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }

            pub fn parse(text: &str) -> Option<Self> {
                match text { $($text => Some($name::$variant),)+ _ => None }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

pub mod calls;
pub mod duration;
pub mod fault;
pub mod frames;
pub mod matrix;
pub mod names;
pub mod pricing;
pub mod scenario;
pub mod step;
pub mod temporal;
pub mod workload;

pub use calls::*;
pub use duration::*;
pub use scenario::*;
pub use step::*;
