//! Live conformance mode (placeholder until the live runner lands).

use crate::Scenario;
use std::path::Path;
use std::process::ExitCode;

pub fn main(_scenarios: &[Scenario], _bin: Option<&Path>) -> ExitCode {
    eprintln!("error: --live is not implemented yet");
    ExitCode::from(2)
}
