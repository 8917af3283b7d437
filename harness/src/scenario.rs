//! The scenario format. Every table rejects unknown keys, and a parse error
//! names the key and the line. `scenarios/README.md` documents it with a
//! complete example.

use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub schema_version: u32,
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub seed: u64,
    /// Simulated wall-clock start, RFC 3339.
    #[serde(default = "default_epoch")]
    pub epoch: String,
    /// Whether the scenario can run against live processes (no simulated
    /// time advances, no in-process faults).
    #[serde(default = "yes")]
    pub live: bool,
    /// Coordinator instances by name (`chain_a`, `chain_b`).
    #[serde(default)]
    pub instances: BTreeMap<String, Instance>,
    #[serde(default)]
    pub workers: Vec<WorkerSpec>,
    /// Hosted-provider stubs by route name (`provider_a`, `provider_b`).
    #[serde(default)]
    pub stubs: BTreeMap<String, StubSpec>,
    #[serde(default)]
    pub router: RouterSpec,
    #[serde(default)]
    pub steps: Vec<Step>,
    #[serde(default)]
    pub invariants: Invariants,
}

fn default_epoch() -> String {
    "2026-11-21T10:00:00.000Z".into()
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Instance {
    pub network: String,
    #[serde(default)]
    pub timing: TimingOverrides,
    #[serde(default)]
    pub limits: LimitOverrides,
    /// x402 payment gating of the commit endpoints; absent means off.
    pub payment: Option<PaymentSpec>,
    /// `sqlite` (the real SQLite store on an in-memory database, the
    /// default) or `memory`. A `restart` recovers from it.
    #[serde(default = "sqlite")]
    pub store: String,
}

fn sqlite() -> String {
    "sqlite".into()
}

/// Payments on Base Sepolia USDC settings, paid to `pay_to`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PaymentSpec {
    #[serde(default = "default_pay_to")]
    pub pay_to: String,
    /// `local` (verify only, `payment_ref` = `x402:<nonce>`) or a scripted
    /// in-process facilitator: `success`, `insufficient_funds`, `settle_failure`.
    #[serde(default = "local")]
    pub facilitator: String,
}

fn default_pay_to() -> String {
    "0x209693Bc6afc0C5328bA36FaF03C514EF312287C".into()
}

fn local() -> String {
    "local".into()
}

/// Coordinator timings to override; names as in `coordinator::config::Timing`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimingOverrides {
    pub pending_timeout_ms: Option<i64>,
    pub lease_ms: Option<i64>,
    pub attempts_max: Option<u32>,
    pub heartbeat_interval_ms: Option<u64>,
    pub heartbeat_timeout_ms: Option<u64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitOverrides {
    pub queue_len_max: Option<usize>,
    pub claims_per_minute_max: Option<u32>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerSpec {
    pub name: String,
    /// The instance it connects to.
    #[serde(default = "chain_a")]
    pub instance: String,
    /// Several identical workers named `name-0`, `name-1`, ...
    #[serde(default = "one")]
    pub count: u32,
    #[serde(default = "both_job_types")]
    pub capabilities: Vec<protocol::api::JobType>,
    #[serde(default = "one")]
    pub slots: u32,
    /// `MS`, `MIN..MAX` or `MEAN~STDDEV`.
    #[serde(default = "default_latency")]
    pub latency: String,
    #[serde(default)]
    pub faults: worker_sim::FaultPlan,
    /// Connect at the start (or only when a step starts it).
    #[serde(default = "yes")]
    pub start: bool,
    /// Log every frame of this worker in the transcript.
    #[serde(default = "yes")]
    pub trace: bool,
}

fn chain_a() -> String {
    "chain_a".into()
}

fn one() -> u32 {
    1
}

fn both_job_types() -> Vec<protocol::api::JobType> {
    vec![
        protocol::api::JobType::LlmInfer,
        protocol::api::JobType::Task,
    ]
}

fn default_latency() -> String {
    "50".into()
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StubSpec {
    #[serde(default)]
    pub faults: Vec<testkit::StubFaultRule>,
    pub default_fault: Option<testkit::StubFault>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouterSpec {
    /// `provider_a` (default) or `provider_b`.
    pub preferred_hosted: Option<String>,
    #[serde(default)]
    pub allow_private_hosted: bool,
    /// Providers whose API key the router lacks.
    #[serde(default)]
    pub missing_keys: Vec<String>,
    /// Give the router an x402 payer on both chains (the scenario payer key).
    #[serde(default)]
    pub pay: bool,
}

/// One step: exactly one action, then optional expectations and captures.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    #[serde(default)]
    pub name: Option<String>,
    // actions
    pub http: Option<HttpCall>,
    pub router: Option<RouterCall>,
    pub advance: Option<String>,
    pub wait_until: Option<WaitUntil>,
    pub worker: Option<Control>,
    pub instance: Option<Control>,
    pub stub: Option<StubControl>,
    pub commit_many: Option<CommitMany>,
    pub facilitator: Option<FacilitatorControl>,
    // checks
    pub expect: Option<Expect>,
    #[serde(default)]
    pub capture: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpCall {
    #[serde(default = "chain_a")]
    pub instance: String,
    #[serde(default = "get")]
    pub method: String,
    pub path: String,
    pub body: Option<Value>,
    /// Sent instead of `body`, byte for byte (for malformed-input steps).
    pub raw_body: Option<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Answer a 402 like a paying client: send, sign the requirements with
    /// the scenario payer, send again with the payment header. The header
    /// value is kept in `{{last_payment}}` (its name in `{{last_payment_header}}`).
    pub pay: Option<Pay>,
}

/// How the payer treats the 402 answer.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pay {
    /// `none` (a valid payment), `recipient`, `amount` (underpay), `window`
    /// (expires too soon), `future` (not valid yet), `network`, `signature`.
    #[serde(default)]
    pub alter: Option<String>,
}

fn get() -> String {
    "GET".into()
}

/// Changes an instance's facilitator script for the following payments.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FacilitatorControl {
    #[serde(default = "chain_a")]
    pub instance: String,
    /// `success`, `insufficient_funds` or `settle_failure`.
    pub script: String,
}

/// Commits `count` jobs (`{{i}}` in the body is the job's index), then waits
/// until every one is completed or failed. Its answer is the count of jobs
/// by final status, e.g. `{"completed": 998, "failed": 2}`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommitMany {
    #[serde(default = "chain_a")]
    pub instance: String,
    /// `fast` or `cheap`.
    #[serde(default = "fast")]
    pub tier: String,
    pub count: u32,
    pub body: Value,
    /// Simulated time between two commits.
    #[serde(default = "zero_ms")]
    pub interval: String,
    #[serde(default = "default_within")]
    pub within: String,
}

fn fast() -> String {
    "fast".into()
}

fn zero_ms() -> String {
    "0ms".into()
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouterCall {
    /// `run_llm` or `run_task`.
    pub call: String,
    /// The request, as `router::LlmRequest` / `router::TaskRequest` fields.
    pub request: Value,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaitUntil {
    #[serde(default = "chain_a")]
    pub instance: String,
    pub job: String,
    pub status: String,
    /// Longest wait, e.g. `30s`.
    #[serde(default = "default_within")]
    pub within: String,
}

fn default_within() -> String {
    "60s".into()
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Control {
    pub name: String,
    /// `stop` or `start`; for instances also `restart` (crash and recover from the store).
    pub action: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StubControl {
    pub name: String,
    /// The fault for every following call; absent to heal the stub.
    pub default_fault: Option<testkit::StubFault>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    pub status: Option<u16>,
    /// Subset match with matchers (see `matcher`).
    pub body: Option<Value>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

/// End-of-run checks. Safety checks (receipts verify; PRIVATE results come
/// from trusted workers) always run; these add liveness checks.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Invariants {
    /// Every job of every instance is completed or failed at the end.
    #[serde(default)]
    pub all_jobs_terminal: bool,
    /// Every job of every instance completed.
    #[serde(default)]
    pub all_jobs_completed: bool,
    /// Exact count of jobs per instance, by status.
    #[serde(default)]
    pub job_counts: BTreeMap<String, BTreeMap<String, usize>>,
    /// Exact count of calls each hosted-provider stub received.
    #[serde(default)]
    pub stub_calls: BTreeMap<String, usize>,
}

#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
}

impl Scenario {
    pub fn load(path: &Path) -> Result<Self, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|e| ScenarioError::Invalid {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        Self::parse(&text).map_err(|message| ScenarioError::Invalid {
            path: path.display().to_string(),
            message,
        })
    }

    /// Parses and checks a scenario; errors name the key and line.
    pub fn parse(text: &str) -> Result<Self, String> {
        let scenario: Scenario = toml::from_str(text).map_err(|e| e.to_string())?;
        if scenario.schema_version != SCHEMA_VERSION {
            return Err(format!(
                "schema_version {} is not supported; this harness reads {SCHEMA_VERSION}",
                scenario.schema_version
            ));
        }
        scenario.epoch_ms()?;
        for (i, step) in scenario.steps.iter().enumerate() {
            let actions = [
                step.http.is_some(),
                step.router.is_some(),
                step.advance.is_some(),
                step.wait_until.is_some(),
                step.worker.is_some(),
                step.instance.is_some(),
                step.stub.is_some(),
                step.commit_many.is_some(),
                step.facilitator.is_some(),
            ]
            .iter()
            .filter(|a| **a)
            .count();
            if actions != 1 {
                return Err(format!(
                    "step {} must have exactly one of http, router, advance, wait_until, worker, instance, stub, commit_many, facilitator (has {actions})",
                    i + 1
                ));
            }
            if let Some(a) = &step.advance {
                parse_duration(a).map_err(|e| format!("step {}: advance: {e}", i + 1))?;
            }
            if let Some(m) = &step.commit_many {
                parse_duration(&m.within).map_err(|e| format!("step {}: within: {e}", i + 1))?;
                parse_duration(&m.interval)
                    .map_err(|e| format!("step {}: interval: {e}", i + 1))?;
            }
            if let Some(w) = &step.wait_until {
                parse_duration(&w.within).map_err(|e| format!("step {}: within: {e}", i + 1))?;
            }
            let sim_only = step.advance.is_some()
                || step.worker.is_some()
                || step.instance.is_some()
                || step.stub.is_some()
                || step.facilitator.is_some();
            if scenario.live && sim_only {
                return Err(format!(
                    "step {} advances simulated time or injects a fault; set live = false",
                    i + 1
                ));
            }
        }
        for (name, i) in &scenario.instances {
            if !matches!(i.store.as_str(), "sqlite" | "memory") {
                return Err(format!("instance {name}: store must be sqlite or memory"));
            }
        }
        for w in &scenario.workers {
            w.latency
                .parse::<worker_sim::Latency>()
                .map_err(|e| format!("worker {}: {e}", w.name))?;
            if !scenario.instances.contains_key(&w.instance) {
                return Err(format!("worker {}: no instance {:?}", w.name, w.instance));
            }
        }
        Ok(scenario)
    }

    pub fn epoch_ms(&self) -> Result<i64, String> {
        protocol::time::parse_ms(&self.epoch)
            .ok_or_else(|| format!("epoch {:?} is not an RFC 3339 timestamp", self.epoch))
    }
}

/// `500ms`, `10s`, `61m`, `2h`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("{text:?} needs a unit: ms, s, m or h"))?;
    let (num, unit) = text.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{text:?} is not a duration"))?;
    let ms = match unit {
        "ms" => n,
        "s" => n * 1_000,
        "m" => n * 60_000,
        "h" => n * 3_600_000,
        _ => return Err(format!("{text:?}: unit must be ms, s, m or h")),
    };
    Ok(Duration::from_millis(ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("61m").unwrap(), Duration::from_secs(3660));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert!(parse_duration("5").is_err());
        assert!(parse_duration("5d").is_err());
    }

    #[test]
    fn unknown_keys_are_named_with_their_line() {
        let err =
            Scenario::parse("schema_version = 1\nname = \"x\"\n\n[[steps]]\nadvanse = \"1s\"\n")
                .unwrap_err();
        assert!(err.contains("advanse"), "{err}");
        assert!(err.contains("line 5"), "{err}");
    }

    #[test]
    fn a_step_has_exactly_one_action() {
        let err = Scenario::parse("schema_version = 1\nname = \"x\"\n[[steps]]\nadvance = \"1s\"\nwait_until = { job = \"j\", status = \"completed\" }\n").unwrap_err();
        assert!(err.contains("exactly one"), "{err}");
    }
}
