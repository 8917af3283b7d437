//! The scenario's top level: its instances, workers, stubs, router, steps
//! and invariants, and the checks `Scenario::parse` makes at load.

use super::names::chain_a;
use super::*;
use protocol::api::JobStatus;
use serde::de::{self, Deserializer};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

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
    /// Properties of the whole run, checked at the end (version 2).
    #[serde(default)]
    pub temporal: Vec<crate::spec::temporal::Temporal>,
    /// For each step, the index of the `[[steps]]` table it came from
    /// (several steps come from one table with `repeat` or `for_each`).
    #[serde(skip)]
    pub step_sources: Vec<usize>,
    /// Version 2: commit streams beside the steps (`crate::spec::workload`).
    #[serde(default)]
    pub workloads: Vec<crate::spec::workload::WorkloadSpec>,
    /// Version 2: fault injectors beside the steps (`crate::spec::fault`).
    #[serde(default)]
    pub faults: Vec<crate::spec::fault::FaultSpec>,
    /// Users with a key (`[users.alice]`): `{{user.alice}}` is the id
    /// their key proves, and `http` steps sign as them (`user_proof`).
    #[serde(default)]
    pub users: BTreeMap<String, UserSpec>,
    /// The coordinator's fault points fire in this run (BUGGIFY, decision
    /// 0024; simulation only): about half the sites on, chosen by the seed.
    #[serde(default)]
    pub buggify: bool,
}

/// A scenario user: a secp256k1 key derived from the seed and the name.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserSpec {
    /// Its id is the CAIP-10 account `eip155:<chain>:<address>` instead
    /// of the bare address.
    pub caip10_chain: Option<u64>,
}

impl Scenario {
    /// Each user's CAIP-10 chain, if its id is a CAIP-10 account.
    pub fn user_chains(&self) -> BTreeMap<String, Option<u64>> {
        self.users
            .iter()
            .map(|(name, u)| (name.clone(), u.caip10_chain))
            .collect()
    }
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
    /// A `restart` recovers from it.
    #[serde(default)]
    pub store: StoreKind,
    /// Prices per tier and job type (version 2); the others keep the defaults.
    #[serde(default)]
    pub prices: crate::spec::pricing::PriceOverrides,
    /// Coordinator nodes sharing one in-memory shared store (1 to
    /// [`NODES_MAX`]); 1 is the single coordinator on its own store.
    #[serde(default = "one")]
    pub nodes: u32,
    /// Several nodes: how long a node's lease lasts without renewal.
    pub node_lease_ms: Option<i64>,
    /// Runs the retention task, as the binary always does (`0`: no age
    /// limit, the kept budget's size limit only). Absent: no retention,
    /// nothing finished is ever deleted.
    pub retention_hours: Option<u64>,
    /// The instance's `--user-auth` (decision 0017). Off by default here,
    /// unlike the binary: scenarios name their users plainly and test the
    /// spec's literal flows; `on` needs users that are accounts with keys.
    #[serde(default)]
    pub user_auth: UserAuthSpec,
    /// Serve with the binary's connection bounds (decision 0019): the head
    /// deadline (`timing.http_head_timeout_ms`), the head size and the
    /// connection budgets (`limits.http_connections_*`). Off by default:
    /// see `coordinator::connections::Bounds::Off`.
    #[serde(default)]
    pub http_bounds: bool,
}

/// `user_auth = "off" | "on"` of an instance.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UserAuthSpec {
    #[default]
    Off,
    On,
}

impl UserAuthSpec {
    /// The coordinator's setting.
    pub fn config(self) -> coordinator::config::UserAuth {
        match self {
            UserAuthSpec::Off => coordinator::config::UserAuth::Off,
            UserAuthSpec::On => coordinator::config::UserAuth::On,
        }
    }

    /// The binary's flag value.
    pub fn flag(self) -> &'static str {
        match self {
            UserAuthSpec::Off => "off",
            UserAuthSpec::On => "on",
        }
    }
}

/// The most nodes a simulated instance may have.
pub const NODES_MAX: u32 = 3;

impl Instance {
    /// Whether it is several nodes on a shared store.
    pub fn is_cluster(&self) -> bool {
        self.nodes > 1
    }

    fn check(&self, name: &str, live: bool) -> Result<(), String> {
        if !(1..=NODES_MAX).contains(&self.nodes) {
            return Err(format!("instance {name}: nodes must be 1 to {NODES_MAX}"));
        }
        if self.is_cluster() && live {
            return Err(format!(
                "instance {name}: nodes > 1 only in the simulation (live: --live-nodes)"
            ));
        }
        if self.node_lease_ms.is_some() && !self.is_cluster() {
            return Err(format!("instance {name}: node_lease_ms needs nodes > 1"));
        }
        if self
            .node_lease_ms
            .is_some_and(|ms| !(100..=600_000).contains(&ms))
        {
            return Err(format!(
                "instance {name}: node_lease_ms must be 100 to 600000"
            ));
        }
        Ok(())
    }
}

choice!(
    /// The store under a simulated instance.
    #[derive(Default)]
    StoreKind {
        /// The real SQLite store on an in-memory database.
        #[default]
        Sqlite => "sqlite",
        Memory => "memory",
    }
);

/// Payments on Base Sepolia USDC settings, paid to `pay_to`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PaymentSpec {
    #[serde(default = "default_pay_to")]
    pub pay_to: String,
    #[serde(default)]
    pub facilitator: Settlement,
    /// The token paid in and its EIP-712 domain (version 2); USDC on Base
    /// Sepolia by default.
    pub asset: Option<String>,
    pub asset_name: Option<String>,
    pub asset_version: Option<String>,
    /// The authorization window a payment must allow (default 300 s).
    pub max_timeout_seconds: Option<u64>,
}

/// How an instance settles payments: `local` (verify only, `payment_ref` =
/// `x402:<nonce>`) or through a scripted in-process facilitator.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Settlement {
    #[default]
    Local,
    Facilitator(FacilitatorScript),
}

/// The spellings of [`Settlement`]: `local`, then every facilitator script.
const SETTLEMENTS: &[&str] = &[
    "local",
    "success",
    "insufficient_funds",
    "settle_failure",
    "refuse_settle",
    "slow_settle",
    "lose_settle",
    "spent_elsewhere",
];

impl Settlement {
    /// The facilitator's script, when payments settle through one.
    pub fn script(self) -> Option<FacilitatorScript> {
        match self {
            Settlement::Local => None,
            Settlement::Facilitator(script) => Some(script),
        }
    }
}

impl<'de> Deserialize<'de> for Settlement {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        if text == "local" {
            return Ok(Settlement::Local);
        }
        FacilitatorScript::parse(&text)
            .map(Settlement::Facilitator)
            .ok_or_else(|| de::Error::unknown_variant(&text, SETTLEMENTS))
    }
}

choice!(
    /// What the scripted facilitator answers.
    FacilitatorScript {
        Success => "success",
        InsufficientFunds => "insufficient_funds",
        SettleFailure => "settle_failure",
        /// `/verify` passes, `/settle` refuses `insufficient_funds`: the
        /// payer's balance vanished between verify and settle.
        RefuseSettle => "refuse_settle",
        /// `/settle` answers after 20 s.
        SlowSettle => "slow_settle",
        /// The next `/settle` answer is lost (503, nothing settled).
        LoseSettle => "lose_settle",
        /// The next payment sent to `/settle` for the first time is refused
        /// `nonce_already_used`: its payer spent it elsewhere (a front-run).
        SpentElsewhere => "spent_elsewhere",
    }
);

fn default_pay_to() -> String {
    "0x209693Bc6afc0C5328bA36FaF03C514EF312287C".into()
}

/// Coordinator timings to override; names as in `coordinator::config::Timing`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimingOverrides {
    pub pending_timeout_ms: Option<i64>,
    pub lease_ms: Option<i64>,
    pub attempts_max: Option<u32>,
    pub heartbeat_interval_ms: Option<u64>,
    pub heartbeat_timeout_ms: Option<u64>,
    /// Time to send a request head (with `http_bounds`).
    pub http_head_timeout_ms: Option<u64>,
    /// How long a pairing code can be claimed (the swarm claims codes at its
    /// edge, so it shortens it to seconds).
    pub pairing_code_ttl_ms: Option<i64>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitOverrides {
    pub queue_len_max: Option<usize>,
    pub claims_per_minute_max: Option<u32>,
    /// WebSocket connections still in hello/auth at once (503 beyond).
    pub handshakes_max: Option<usize>,
    /// Of those, from one client address (503 beyond).
    pub handshakes_per_client_max: Option<usize>,
    /// Job polls held at once (`wait_ms`); beyond it a poll is answered at once.
    pub held_polls_max: Option<usize>,
    /// Of those, by one client address (beyond it that client's poll is
    /// answered at once).
    pub held_polls_per_client_max: Option<usize>,
    /// Finished jobs the coordinator keeps in memory; older ones it reads
    /// from its store when polled.
    pub finished_jobs_cached_max: Option<usize>,
    /// Bytes of finished jobs kept for polling; with `retention_hours` set,
    /// the oldest are deleted past 90 % of it.
    pub kept_bytes_max: Option<usize>,
    /// Share of it (per cent) one client address may hold before its own
    /// results go first, at any age (decision 0018; 100: no owner is ever
    /// over its share, so no result younger than the minimum keep time is
    /// deleted for room).
    pub kept_share_per_client_percent: Option<usize>,
    /// Plain HTTP connections open at once, in all and from one client
    /// address (with `http_bounds`; beyond them a connection is closed
    /// unanswered).
    pub http_connections_max: Option<usize>,
    pub http_connections_per_client_max: Option<usize>,
    /// Established worker sessions from one client address (beyond it
    /// the handshake is refused).
    pub worker_sessions_per_client_max: Option<usize>,
    /// Slots of those sessions together, from one client address (beyond
    /// it the handshake is refused).
    pub worker_slots_per_client_max: Option<u32>,
    /// Bytes of non-terminal jobs held at once (503 beyond).
    pub queued_bytes_max: Option<usize>,
    /// Of those, one client address's share (503 beyond).
    pub queued_bytes_per_client_max: Option<usize>,
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
    /// Announce the `deltas` feature and send each text output as deltas
    /// spread over the job's latency before its `result` (decision 0023).
    #[serde(default)]
    pub stream: bool,
    /// Use the key of this earlier worker (version 2): a second session
    /// with an existing worker's key.
    pub key_of: Option<String>,
    /// The node of a several-node instance it connects to; by default the
    /// workers are spread over the nodes in name order.
    pub node: Option<u32>,
    /// The client address it dials from, by a client's name (version 2;
    /// simulation only): workers that name the same client share one
    /// address, as Sybil sessions from one host do. By default its own.
    pub client: Option<String>,
}

impl WorkerSpec {
    /// The names of the workers it declares: its name, or `name-0`,
    /// `name-1`, ... with `count`.
    pub fn names(&self) -> Vec<String> {
        if self.count == 1 {
            return vec![self.name.clone()];
        }
        (0..self.count)
            .map(|i| format!("{}-{i}", self.name))
            .collect()
    }
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
    pub job_counts: BTreeMap<String, BTreeMap<JobStatus, usize>>,
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
        let mut scenario: Scenario = toml::from_str(text).map_err(|e| e.to_string())?;
        if !SCHEMA_VERSIONS.contains(&scenario.schema_version) {
            return Err(format!(
                "schema_version {} is not supported; this harness reads 1 or 2",
                scenario.schema_version
            ));
        }
        crate::spec::matrix::expand(text, &mut scenario)?;
        scenario.check_version_2()?;
        scenario.epoch_ms()?;
        for (i, step) in scenario.steps.iter().enumerate() {
            if scenario.live && step.action.simulation_only() {
                return Err(format!(
                    "step {} advances simulated time or injects a fault; set live = false",
                    i + 1
                ));
            }
            if let Action::Instance(control) = &step.action {
                control
                    .check(&scenario.instances)
                    .map_err(|e| format!("step {}: {e}", i + 1))?;
            }
            if let Action::Http(call) = &step.action {
                let nodes = scenario
                    .instances
                    .get(&call.instance)
                    .map_or(1, |i| i.nodes);
                if call.node.is_some_and(|n| n >= nodes) {
                    return Err(format!(
                        "step {}: instance {} has {nodes} node(s)",
                        i + 1,
                        call.instance
                    ));
                }
            }
        }
        for (name, instance) in &scenario.instances {
            instance.check(name, scenario.live)?;
        }
        for w in &scenario.workers {
            w.latency
                .parse::<worker_sim::Latency>()
                .map_err(|e| format!("worker {}: {e}", w.name))?;
            let Some(instance) = scenario.instances.get(&w.instance) else {
                return Err(format!("worker {}: no instance {:?}", w.name, w.instance));
            };
            if w.node.is_some_and(|n| n >= instance.nodes) {
                return Err(format!(
                    "worker {}: instance {} has {} node(s)",
                    w.name, w.instance, instance.nodes
                ));
            }
        }
        Ok(scenario)
    }

    /// Version-2 features need `schema_version = 2`, and the simulation.
    fn check_version_2(&self) -> Result<(), String> {
        let waits_for_workload = self
            .steps
            .iter()
            .position(|s| matches!(s.action, Action::WaitWorkload(_)));
        let uses = if !self.workloads.is_empty() {
            Some("[[workloads]]".to_owned())
        } else if !self.faults.is_empty() {
            Some("[[faults]]".to_owned())
        } else if self.buggify {
            Some("buggify = true".to_owned())
        } else {
            waits_for_workload.map(|i| format!("step {} (wait_until a workload)", i + 1))
        };
        match uses {
            Some(what) if self.schema_version < 2 => {
                Err(format!("{what} needs schema_version = 2"))
            }
            Some(what) if self.live => Err(format!(
                "{what} runs only in the simulation; set live = false"
            )),
            _ => Ok(()),
        }
    }

    pub fn epoch_ms(&self) -> Result<i64, String> {
        protocol::time::parse_ms(&self.epoch)
            .ok_or_else(|| format!("epoch {:?} is not an RFC 3339 timestamp", self.epoch))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::step::STEP_KEYS;
    use std::time::Duration;

    const HEAD: &str = "schema_version = 1\nname = \"x\"\nlive = false\n\n[instances.chain_a]\nnetwork = \"n\"\n\n";

    /// The load error of a scenario with `tail` after a fixed 7-line head.
    fn load_error(tail: &str) -> String {
        Scenario::parse(&format!("{HEAD}{tail}")).unwrap_err()
    }

    fn assert_error(err: &str, line: usize, message: &str) {
        assert!(err.contains(&format!("line {line},")), "{err}");
        assert!(err.contains(message), "{err}");
    }

    fn only_step(tail: &str) -> Step {
        let scenario = Scenario::parse(&format!("{HEAD}[[steps]]\n{tail}")).unwrap();
        assert_eq!(scenario.steps.len(), 1);
        scenario.steps[0].clone()
    }

    #[test]
    fn unknown_keys_are_named_with_their_line() {
        let err = load_error("[[steps]]\nadvanse = \"1s\"\n");
        // Every key a step table may hold, from the keyword table.
        let keys: Vec<String> = crate::spec::step::STEP_KEYS
            .iter()
            .map(|k| format!("`{k}`"))
            .collect();
        assert_eq!(
            &crate::spec::step::STEP_KEYS[..4],
            ["name", "http", "router", "advance"]
        );
        assert_error(
            &err,
            9,
            &format!(
                "unknown field `advanse`, expected one of {}",
                keys.join(", ")
            ),
        );
        let err = load_error("[[steps]]\nhttp = { path = \"/\", bogus = 1 }\n");
        assert_error(&err, 9, "unknown field `bogus`");
    }

    #[test]
    fn several_nodes_are_checked_at_load() {
        let file = |instance: &str, rest: &str| {
            format!(
                "schema_version = 1\nname = \"n\"\nseed = 1\nlive = false\n\
                 [instances.chain_a]\nnetwork = \"eip155:84532\"\n{instance}\n{rest}"
            )
        };
        let err = |instance: &str, rest: &str| Scenario::parse(&file(instance, rest)).unwrap_err();
        let ok = |instance: &str, rest: &str| Scenario::parse(&file(instance, rest)).unwrap();
        let step = |s: &str| format!("[[steps]]\ninstance = {{ name = \"chain_a\", {s} }}\n");
        assert_eq!(
            ok("", "").instances["chain_a"].nodes,
            1,
            "one node by default"
        );
        assert!(err("nodes = 4", "").contains("nodes must be 1 to 3"));
        assert!(err("node_lease_ms = 500", "").contains("needs nodes > 1"));
        let partition = step("action = \"partition\", node = 1, duration_ms = 5000");
        ok("nodes = 2", &partition);
        assert!(err("", &partition).contains("has 1 node"));
        assert!(err("nodes = 2", &step("action = \"partition\", node = 1"))
            .contains("partition needs duration_ms"));
        assert!(err(
            "nodes = 2",
            &step("action = \"crash\", node = 2, duration_ms = 1")
        )
        .contains("node 2: instance chain_a has 2 node(s)"));
        assert!(err("nodes = 2", &step("action = \"stop\", node = 1"))
            .contains("node goes with restart"));
        let lose = step("action = \"lose_answer\", node = 1");
        ok("nodes = 2", &lose);
        assert!(err("", &lose).contains("has 1 node"));
        assert!(
            err("nodes = 2", &step("action = \"lose_answer\"")).contains("lose_answer needs node")
        );
        assert!(err(
            "nodes = 2",
            &step("action = \"lose_answer\", node = 1, duration_ms = 1")
        )
        .contains("duration_ms goes with partition or crash"));
        assert!(
            err("nodes = 2", &step("action = \"restart\", duration_ms = 1"))
                .contains("duration_ms goes with partition or crash")
        );
        assert!(err(
            "nodes = 2",
            "[[workers]]\nname = \"w\"\nnode = 2\n[[steps]]\nadvance = \"1s\"\n"
        )
        .contains("worker w: instance chain_a has 2 node(s)"));
        assert!(err(
            "nodes = 2",
            "[[steps]]\nhttp = { path = \"/v1/health\", node = 5 }\n"
        )
        .contains("instance chain_a has 2 node(s)"));
    }

    #[test]
    fn a_step_without_an_action_is_refused_at_its_table() {
        let err = load_error("[[steps]]\nname = \"nothing\"\n");
        // The refusal lists every keyword of the table, so a new keyword
        // changes the message but not this test.
        let every = crate::spec::ActionKey::NAMES.join(", ");
        assert!(every.starts_with("http, router, advance, wait_until, "));
        assert_error(
            &err,
            8,
            &format!("a step needs exactly one action: {every} (it has none)"),
        );
    }

    #[test]
    fn a_second_action_is_refused_at_its_key() {
        let err = load_error(
            "[[steps]]\nadvance = \"1s\"\nwait_until = { job = \"j\", status = \"completed\" }\n",
        );
        let every = crate::spec::ActionKey::NAMES.join(", ");
        assert_error(
            &err,
            10,
            &format!("a step needs exactly one action: {every} (it has advance and wait_until)"),
        );
    }

    #[test]
    fn expect_or_capture_on_a_step_without_an_answer_is_a_load_error() {
        let err = load_error("[[steps]]\nadvance = \"1s\"\nexpect = { status = 200 }\n");
        assert_error(
            &err,
            8,
            "`advance` gives no answer to expect or capture from",
        );
        let err = load_error(
            "[[steps]]\ncapture = { x = \"$\" }\nworker = { name = \"w\", action = \"stop\" }\n",
        );
        assert_error(
            &err,
            8,
            "`worker` gives no answer to expect or capture from",
        );
    }

    #[test]
    fn a_bad_duration_is_a_load_error_at_its_value() {
        let err = load_error("[[steps]]\nadvance = \"1d\"\n");
        assert_error(&err, 9, "\"1d\": unit must be ms, s, m or h");
        // A bare number is milliseconds, in every duration field alike.
        assert_eq!(parse_duration("2"), Ok(Duration::from_millis(2)));
        assert_eq!(parse_duration("2ms"), parse_duration("2"));
        assert_eq!(parse_duration("61m"), Ok(Duration::from_secs(61 * 60)));
        let err = load_error(
            "[[steps]]\nwait_until = { job = \"j\", status = \"failed\", within = \"s\" }\n",
        );
        assert_error(&err, 9, "\"s\" is not a duration");
    }

    #[test]
    fn an_unknown_job_status_lists_the_valid_ones() {
        let valid = "expected one of `pending`, `assigned`, `running`, `completed`, `failed`";
        let err = load_error("[[steps]]\nwait_until = { job = \"j\", status = \"complete\" }\n");
        assert_error(&err, 9, &format!("unknown variant `complete`, {valid}"));
        let err = load_error("[invariants]\njob_counts = { chain_a = { done = 1 } }\n");
        assert_error(&err, 9, &format!("unknown variant `done`, {valid}"));
    }

    #[test]
    fn unknown_choices_list_the_valid_ones() {
        let cases = [
            (
                "[[steps]]\nworker = { name = \"w\", action = \"restart\" }\n",
                "unknown variant `restart`, expected one of `stop`, `start`, `freeze`, `thaw`",
            ),
            (
                "[[steps]]\ninstance = { name = \"chain_a\", action = \"reboot\" }\n",
                "unknown variant `reboot`, expected one of `stop`, `start`, `restart`",
            ),
            (
                "[[steps]]\nhttp = { path = \"/\", pay = { alter = \"amout\" } }\n",
                "unknown variant `amout`, expected one of `none`, `recipient`, `amount`, \
                 `window`, `future`, `network`, `signature`",
            ),
            (
                "[[steps]]\nrouter = { call = \"run\", request = {} }\n",
                "unknown variant `run`, expected `run_llm` or `run_task`",
            ),
            (
                "[[steps]]\nfacilitator = { script = \"local\" }\n",
                "unknown variant `local`, expected one of `success`, `insufficient_funds`, \
                 `settle_failure`",
            ),
            (
                "[[steps]]\ncommit_many = { tier = \"FAST\", count = 1, body = {} }\n",
                "unknown variant `FAST`, expected `fast` or `cheap`",
            ),
        ];
        for (tail, message) in cases {
            assert_error(&load_error(tail), 9, message);
        }
        let instance = |key: &str| {
            Scenario::parse(&format!(
                "schema_version = 1\nname = \"x\"\n[instances.chain_a]\nnetwork = \"n\"\n{key}\n"
            ))
            .unwrap_err()
        };
        assert_error(
            &instance("store = \"mem\""),
            5,
            "unknown variant `mem`, expected `sqlite` or `memory`",
        );
        assert_error(
            &instance("payment = { facilitator = \"locl\" }"),
            5,
            "unknown variant `locl`, expected one of `local`, `success`, \
             `insufficient_funds`, `settle_failure`",
        );
    }

    #[test]
    fn a_live_scenario_refuses_simulation_only_steps() {
        let err =
            Scenario::parse("schema_version = 1\nname = \"x\"\n[[steps]]\nadvance = \"1s\"\n")
                .unwrap_err();
        assert_eq!(
            err,
            "step 1 advances simulated time or injects a fault; set live = false"
        );
    }

    #[test]
    fn toml_spellings_read_into_typed_values() {
        let Action::WaitUntil(wait) =
            only_step("wait_until = { job = \"j\", status = \"running\" }").action
        else {
            panic!("not a wait_until");
        };
        assert_eq!(wait.status, JobStatus::Running);
        assert_eq!(wait.within.duration, Duration::from_secs(60));
        assert_eq!(wait.within.to_string(), "60s");
        let Action::Instance(control) =
            only_step("instance = { name = \"chain_a\", action = \"restart\" }").action
        else {
            panic!("not an instance step");
        };
        assert_eq!(control.action, InstanceAction::Restart);
        let Action::Http(call) =
            only_step("http = { path = \"/\", pay = { alter = \"none\" } }").action
        else {
            panic!("not an http step");
        };
        assert_eq!(call.pay.unwrap().alter, Some(Alter::Unaltered));
        let Action::CommitMany(many) = only_step(
            "commit_many = { tier = \"cheap\", count = 2, body = {}, interval = \"2ms\" }",
        )
        .action
        else {
            panic!("not a commit_many step");
        };
        assert_eq!(
            (many.tier, many.interval.duration),
            (CommitTier::Cheap, Duration::from_millis(2))
        );
        let scenario = Scenario::parse(&format!(
            "{HEAD}payment = {{ facilitator = \"settle_failure\" }}\nstore = \"memory\"\n\
             [invariants]\njob_counts = {{ chain_a = {{ completed = 2 }} }}\n"
        ))
        .unwrap();
        let instance = &scenario.instances["chain_a"];
        assert_eq!(instance.store, StoreKind::Memory);
        assert_eq!(
            instance.payment.as_ref().unwrap().facilitator,
            Settlement::Facilitator(FacilitatorScript::SettleFailure)
        );
        assert_eq!(
            scenario.invariants.job_counts["chain_a"],
            BTreeMap::from([(JobStatus::Completed, 2)])
        );
    }

    #[test]
    fn key_lists_match_their_enums() {
        assert_eq!(SETTLEMENTS[0], "local");
        assert_eq!(&SETTLEMENTS[1..], FacilitatorScript::NAMES);
        let mut keys = vec!["name"];
        keys.extend(ActionKey::NAMES);
        keys.extend(["expect", "capture", "repeat", "for_each"]);
        assert_eq!(STEP_KEYS, keys.as_slice());
    }

    #[test]
    fn buggify_needs_version_2_and_the_simulation() {
        let v1 = HEAD.replace("live = false", "live = false\nbuggify = true");
        let err = Scenario::parse(&v1).unwrap_err();
        assert!(
            err.contains("buggify = true needs schema_version = 2"),
            "{err}"
        );
        let v2 = v1.replace("schema_version = 1", "schema_version = 2");
        let live = v2.replace("live = false", "live = true");
        let err = Scenario::parse(&live).unwrap_err();
        assert!(err.contains("runs only in the simulation"), "{err}");
        let ok = Scenario::parse(&format!("{v2}[[steps]]\nbuggify = \"off\"\n"));
        assert!(ok.unwrap().buggify);
    }

    #[test]
    fn crash_after_needs_its_write_and_only_it_takes_one() {
        let err =
            load_error("[[steps]]\ninstance = { name = \"chain_a\", action = \"crash_after\" }\n");
        assert!(err.contains("crash_after needs write = one of nonce_reserved, nonce_spent, nonce_released, commit"), "{err}");
        let err = load_error(
            "[[steps]]\ninstance = { name = \"chain_a\", action = \"restart\", write = \"commit\" }\n",
        );
        assert!(
            err.contains("write goes with crash_after, not with restart"),
            "{err}"
        );
        let err = load_error(
            "[[steps]]\ninstance = { name = \"chain_a\", action = \"crash_after\", write = \"nonce_spnt\" }\n",
        );
        assert_error(&err, 9, "nonce_spent");
    }
}
