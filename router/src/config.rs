//! Router configuration and how it is read from the environment.
//!
//! Reading goes through a lookup function so tests pass a map instead of
//! mutating the process environment.

use crate::breaker::BreakerConfig;
use crate::hosted::{ProviderSettings, RetryPolicy};
use crate::payment::PaymentClient;
use crate::route::{Chain, HostedProvider};
use std::collections::BTreeMap;
use std::sync::Arc;

pub const DEFAULT_COORDINATOR_URL_CHAIN_A: &str = "http://127.0.0.1:8080";
pub const DEFAULT_COORDINATOR_URL_CHAIN_B: &str = "http://127.0.0.1:8081";
pub const DEFAULT_OPENAI_BASE_URL: &str = "https://api.openai.com";
pub const DEFAULT_ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com";
pub const DEFAULT_OPENAI_MODEL: &str = "gpt-4o-mini";
pub const DEFAULT_ANTHROPIC_MODEL: &str = "claude-3-5-haiku-latest";

/// Base URL of each coordinator instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoordinatorUrls {
    pub chain_a: String,
    pub chain_b: String,
}

impl CoordinatorUrls {
    pub fn get(&self, chain: Chain) -> &str {
        match chain {
            Chain::ChainA => &self.chain_a,
            Chain::ChainB => &self.chain_b,
        }
    }
}

/// The payment client of each chain, if any (spec: `x402Clients`).
#[derive(Clone, Default)]
pub struct PaymentClients {
    pub chain_a: Option<Arc<dyn PaymentClient>>,
    pub chain_b: Option<Arc<dyn PaymentClient>>,
}

impl PaymentClients {
    pub fn get(&self, chain: Chain) -> Option<&Arc<dyn PaymentClient>> {
        match chain {
            Chain::ChainA => self.chain_a.as_ref(),
            Chain::ChainB => self.chain_b.as_ref(),
        }
    }
}

impl std::fmt::Debug for PaymentClients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PaymentClients")
            .field("chain_a", &self.chain_a.is_some())
            .field("chain_b", &self.chain_b.is_some())
            .finish()
    }
}

/// Poll cadence and timeouts of the decentralized flow (spec section 8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollConfig {
    /// Between polls when the coordinator does not hold polls open.
    pub poll_interval_ms: u64,
    /// Longest `wait_ms` asked of the coordinator (a long poll, held until
    /// the job changes status); 0 polls every `poll_interval_ms` instead.
    /// At most the coordinator's `poll_wait_ms_max` (30 000 by default):
    /// a coordinator refusing the wait is polled instead.
    pub wait_ms_max: u64,
    pub task_timeout_ms: u64,
    pub llm_timeout_ms: u64,
}

impl Default for PollConfig {
    fn default() -> Self {
        Self {
            poll_interval_ms: 500,
            wait_ms_max: 30_000,
            task_timeout_ms: 30_000,
            llm_timeout_ms: 60_000,
        }
    }
}

/// Bounds and reconnects of a streaming call (`ComputeRouter::stream_llm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamConfig {
    /// Longest line, and longest data of one event, of a server-sent event
    /// stream; a longer one ends the stream as malformed.
    pub event_bytes_max: usize,
    /// Most deltas one call forwards, over all its routes.
    pub deltas_max: u32,
    /// Most text one route may stream (the coordinator's results are at most 256 KiB).
    pub text_bytes_max: usize,
    /// Reconnects in a row to a coordinator's events, each without a new
    /// event, before the job is given up on (cancelled) and the next route runs.
    pub reconnects_max: u32,
    /// Wait before each reconnect.
    pub reconnect_delay_ms: u64,
    /// Events made ahead of a slow consumer before the router waits for it.
    pub buffer: usize,
}

impl Default for StreamConfig {
    fn default() -> Self {
        Self {
            event_bytes_max: 1024 * 1024,
            deltas_max: 16_384,
            text_bytes_max: 1024 * 1024,
            reconnects_max: 3,
            reconnect_delay_ms: 500,
            buffer: 64,
        }
    }
}

/// Settings of both hosted providers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostedConfig {
    /// `provider_a`, OpenAI-compatible Chat Completions.
    pub openai: ProviderSettings,
    /// `provider_b`, Anthropic Messages.
    pub anthropic: ProviderSettings,
    pub retry: RetryPolicy,
    /// `max_tokens` sent to a provider for a TASK job.
    pub task_max_tokens: u32,
}

impl Default for HostedConfig {
    fn default() -> Self {
        Self {
            openai: ProviderSettings::new(DEFAULT_OPENAI_BASE_URL, DEFAULT_OPENAI_MODEL),
            anthropic: ProviderSettings::new(DEFAULT_ANTHROPIC_BASE_URL, DEFAULT_ANTHROPIC_MODEL),
            retry: RetryPolicy::default(),
            task_max_tokens: 1024,
        }
    }
}

impl HostedConfig {
    pub fn settings(&self, provider: HostedProvider) -> &ProviderSettings {
        match provider {
            HostedProvider::ProviderA => &self.openai,
            HostedProvider::ProviderB => &self.anthropic,
        }
    }
}

/// Everything [`crate::ComputeRouter::new`] needs.
#[derive(Debug, Clone)]
pub struct RouterConfig {
    pub coordinator_urls: CoordinatorUrls,
    pub preferred_hosted: HostedProvider,
    pub payment_clients: PaymentClients,
    /// Off by default: a PRIVATE prompt must not leave the user's trusted
    /// workers. When on, PRIVATE jobs fall back to hosted providers too.
    pub allow_private_hosted: bool,
    pub hosted: HostedConfig,
    pub poll: PollConfig,
    /// `max_tokens` of an LLM job whose request leaves it out; the commit
    /// body requires one.
    pub default_max_tokens: u32,
    /// When a chain's coordinator is skipped for a while (`crate::breaker`).
    pub breaker: BreakerConfig,
    /// Off by default (spec 4.8: the selected chain, then the hosted
    /// providers). On: the other chain's coordinator is tried after the
    /// selected one and before any hosted provider.
    pub try_other_chain: bool,
    /// Proves the user on PRIVATE commits (`X-User-Proof`), which a
    /// coordinator with `--user-auth on` (its default) requires. Code, not
    /// environment, like the payment clients.
    pub user_signer: Option<Arc<dyn crate::user::UserSigner>>,
    /// Bounds of streaming calls.
    pub stream: StreamConfig,
}

impl RouterConfig {
    /// Defaults for everything but the coordinator URLs.
    pub fn new(coordinator_urls: CoordinatorUrls) -> Self {
        Self {
            coordinator_urls,
            preferred_hosted: HostedProvider::default(),
            payment_clients: PaymentClients::default(),
            allow_private_hosted: false,
            hosted: HostedConfig::default(),
            poll: PollConfig::default(),
            default_max_tokens: 256,
            breaker: BreakerConfig::default(),
            try_other_chain: false,
            user_signer: None,
            stream: StreamConfig::default(),
        }
    }

    /// Reads the process environment; see [`RouterConfig::from_lookup`].
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads the variables from a map instead of the process environment.
    pub fn from_env_map(vars: &BTreeMap<String, String>) -> Result<Self, ConfigError> {
        Self::from_lookup(|name| vars.get(name).cloned())
    }

    /// Reads the configuration through `lookup`; an empty value counts as
    /// unset. Variables (README has the table): `COORDINATOR_URL_CHAIN_A`,
    /// `COORDINATOR_URL_CHAIN_B`, `PREFERRED_HOSTED_PROVIDER`,
    /// `OPENAI_API_KEY`, `OPENAI_BASE_URL`, `OPENAI_MODEL`,
    /// `ANTHROPIC_API_KEY`, `ANTHROPIC_BASE_URL`, `ANTHROPIC_MODEL`,
    /// `ROUTER_ALLOW_PRIVATE_HOSTED`, `ROUTER_POLL_INTERVAL_MS`, `ROUTER_POLL_WAIT_MS_MAX`,
    /// `ROUTER_TASK_TIMEOUT_MS`, `ROUTER_LLM_TIMEOUT_MS`,
    /// `ROUTER_DEFAULT_MAX_TOKENS`, `ROUTER_BREAKER_FAILURES_MAX`,
    /// `ROUTER_BREAKER_COOLDOWN_MS`, `ROUTER_TRY_OTHER_CHAIN`. Payment clients are code, not
    /// environment: set [`RouterConfig::payment_clients`] afterwards.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let text = |name: &str, default: &str| get(name).unwrap_or_else(|| default.to_owned());

        let mut config = Self::new(CoordinatorUrls {
            chain_a: text("COORDINATOR_URL_CHAIN_A", DEFAULT_COORDINATOR_URL_CHAIN_A),
            chain_b: text("COORDINATOR_URL_CHAIN_B", DEFAULT_COORDINATOR_URL_CHAIN_B),
        });
        if let Some(value) = get("PREFERRED_HOSTED_PROVIDER") {
            config.preferred_hosted =
                value.parse().map_err(|e: crate::route::ParseNameError| {
                    ConfigError::invalid("PREFERRED_HOSTED_PROVIDER", &value, e.to_string())
                })?;
        }
        config.hosted.openai = ProviderSettings {
            api_key: get("OPENAI_API_KEY").map(ApiKey::new),
            base_url: text("OPENAI_BASE_URL", DEFAULT_OPENAI_BASE_URL),
            model: text("OPENAI_MODEL", DEFAULT_OPENAI_MODEL),
        };
        config.hosted.anthropic = ProviderSettings {
            api_key: get("ANTHROPIC_API_KEY").map(ApiKey::new),
            base_url: text("ANTHROPIC_BASE_URL", DEFAULT_ANTHROPIC_BASE_URL),
            model: text("ANTHROPIC_MODEL", DEFAULT_ANTHROPIC_MODEL),
        };
        if let Some(value) = get("ROUTER_ALLOW_PRIVATE_HOSTED") {
            config.allow_private_hosted = parse_bool("ROUTER_ALLOW_PRIVATE_HOSTED", &value)?;
        }
        let number = |name: &'static str, default: u64| -> Result<u64, ConfigError> {
            match get(name) {
                None => Ok(default),
                Some(v) => v
                    .trim()
                    .parse()
                    .map_err(|_| ConfigError::invalid(name, &v, "expected a whole number")),
            }
        };
        config.poll.poll_interval_ms =
            number("ROUTER_POLL_INTERVAL_MS", config.poll.poll_interval_ms)?;
        config.poll.wait_ms_max = number("ROUTER_POLL_WAIT_MS_MAX", config.poll.wait_ms_max)?;
        config.poll.task_timeout_ms =
            number("ROUTER_TASK_TIMEOUT_MS", config.poll.task_timeout_ms)?;
        config.poll.llm_timeout_ms = number("ROUTER_LLM_TIMEOUT_MS", config.poll.llm_timeout_ms)?;
        let max_tokens = number(
            "ROUTER_DEFAULT_MAX_TOKENS",
            config.default_max_tokens.into(),
        )?;
        config.default_max_tokens = u32::try_from(max_tokens).map_err(|_| {
            ConfigError::invalid(
                "ROUTER_DEFAULT_MAX_TOKENS",
                &max_tokens.to_string(),
                "too large",
            )
        })?;
        config.read_fallback(&get)?;
        Ok(config)
    }

    /// The breaker's and the fallback order's variables.
    fn read_fallback(&mut self, get: &dyn Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
        let number = |name: &'static str| -> Result<Option<u64>, ConfigError> {
            get(name)
                .map(|v| {
                    v.trim()
                        .parse()
                        .map_err(|_| ConfigError::invalid(name, &v, "expected a whole number"))
                })
                .transpose()
        };
        if let Some(n) = number("ROUTER_BREAKER_FAILURES_MAX")? {
            self.breaker.failures_max = u32::try_from(n).map_err(|_| {
                ConfigError::invalid("ROUTER_BREAKER_FAILURES_MAX", &n.to_string(), "too large")
            })?;
        }
        if let Some(ms) = number("ROUTER_BREAKER_COOLDOWN_MS")? {
            self.breaker.cooldown_ms = ms;
        }
        if let Some(value) = get("ROUTER_TRY_OTHER_CHAIN") {
            self.try_other_chain = parse_bool("ROUTER_TRY_OTHER_CHAIN", &value)?;
        }
        Ok(())
    }
}

fn parse_bool(name: &'static str, value: &str) -> Result<bool, ConfigError> {
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(ConfigError::invalid(name, value, "expected true or false")),
    }
}

/// An environment variable with a value the router cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("{var}={value:?}: {reason}")]
    InvalidValue {
        var: &'static str,
        value: String,
        reason: String,
    },
}

impl ConfigError {
    fn invalid(var: &'static str, value: &str, reason: impl Into<String>) -> Self {
        ConfigError::InvalidValue {
            var,
            value: value.to_owned(),
            reason: reason.into(),
        }
    }
}

/// A provider API key. Its `Debug` never shows the secret, so configs can be
/// logged.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    pub fn new(key: impl Into<String>) -> Self {
        Self(key.into())
    }

    /// The secret, for the one place that puts it in a request header.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}
