//! Which adapter ran a job: `decentralized:chain_a|chain_b` or
//! `hosted:provider_a|provider_b`, exactly as spec 4.8 spells them.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// One of the two coordinator instances.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
pub enum Chain {
    #[default]
    #[serde(rename = "chain_a")]
    ChainA,
    #[serde(rename = "chain_b")]
    ChainB,
}

/// One of the two hosted language-model providers.
///
/// `provider_a` speaks OpenAI Chat Completions, `provider_b` Anthropic
/// Messages.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
pub enum HostedProvider {
    #[default]
    #[serde(rename = "provider_a")]
    ProviderA,
    #[serde(rename = "provider_b")]
    ProviderB,
}

/// The adapter that handled (or failed) a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Route {
    Decentralized(Chain),
    Hosted(HostedProvider),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {value:?}; expected one of {expected}")]
pub struct ParseNameError {
    what: &'static str,
    value: String,
    expected: &'static str,
}

impl Chain {
    pub const ALL: [Chain; 2] = [Chain::ChainA, Chain::ChainB];

    /// The other instance.
    pub fn other(self) -> Self {
        match self {
            Chain::ChainA => Chain::ChainB,
            Chain::ChainB => Chain::ChainA,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Chain::ChainA => "chain_a",
            Chain::ChainB => "chain_b",
        }
    }
}

impl HostedProvider {
    pub fn as_str(self) -> &'static str {
        match self {
            HostedProvider::ProviderA => "provider_a",
            HostedProvider::ProviderB => "provider_b",
        }
    }

    pub fn other(self) -> Self {
        match self {
            HostedProvider::ProviderA => HostedProvider::ProviderB,
            HostedProvider::ProviderB => HostedProvider::ProviderA,
        }
    }

    /// The environment variable that holds this provider's API key.
    pub fn api_key_env(self) -> &'static str {
        match self {
            HostedProvider::ProviderA => "OPENAI_API_KEY",
            HostedProvider::ProviderB => "ANTHROPIC_API_KEY",
        }
    }
}

impl Route {
    pub fn as_str(self) -> &'static str {
        match self {
            Route::Decentralized(Chain::ChainA) => "decentralized:chain_a",
            Route::Decentralized(Chain::ChainB) => "decentralized:chain_b",
            Route::Hosted(HostedProvider::ProviderA) => "hosted:provider_a",
            Route::Hosted(HostedProvider::ProviderB) => "hosted:provider_b",
        }
    }
}

impl FromStr for Chain {
    type Err = ParseNameError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "chain_a" => Ok(Chain::ChainA),
            "chain_b" => Ok(Chain::ChainB),
            _ => Err(ParseNameError {
                what: "chain",
                value: s.into(),
                expected: "chain_a, chain_b",
            }),
        }
    }
}

impl FromStr for HostedProvider {
    type Err = ParseNameError;
    /// Accepts the spec names and the vendor names people actually type.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "provider_a" | "openai" => Ok(HostedProvider::ProviderA),
            "provider_b" | "anthropic" => Ok(HostedProvider::ProviderB),
            _ => Err(ParseNameError {
                what: "hosted provider",
                value: s.into(),
                expected: "provider_a (openai), provider_b (anthropic)",
            }),
        }
    }
}

impl FromStr for Route {
    type Err = ParseNameError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [
            Route::Decentralized(Chain::ChainA),
            Route::Decentralized(Chain::ChainB),
            Route::Hosted(HostedProvider::ProviderA),
            Route::Hosted(HostedProvider::ProviderB),
        ]
        .into_iter()
        .find(|r| r.as_str() == s)
        .ok_or_else(|| ParseNameError {
            what: "route",
            value: s.into(),
            expected: "decentralized:chain_a, decentralized:chain_b, hosted:provider_a, hosted:provider_b",
        })
    }
}

macro_rules! display_as_str {
    ($($t:ty),+) => {$(
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    )+};
}
display_as_str!(Chain, HostedProvider, Route);

impl Serialize for Route {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Route {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}
