//! Durations as written in a scenario (`500ms`, `10s`, `61m`, `2h`).

use serde::de::{self, Deserializer};
use serde::Deserialize;
use std::fmt;
use std::time::Duration;

pub use crate::expr::duration::parse_duration;

pub fn default_within() -> SimDuration {
    SimDuration {
        text: "60s".into(),
        duration: Duration::from_secs(60),
    }
}

/// A duration as written (`500ms`, `10s`, `61m`, `2h`), checked at load; the
/// transcript shows the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimDuration {
    pub text: String,
    pub duration: Duration,
}

impl<'de> Deserialize<'de> for SimDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        let duration = parse_duration(&text).map_err(de::Error::custom)?;
        Ok(SimDuration { text, duration })
    }
}

impl fmt::Display for SimDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}
