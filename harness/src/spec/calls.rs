//! The arguments of each step action (`http = { ... }`, `instance = { ... }`).

use super::names::chain_a;
use super::*;
use protocol::api::JobStatus;
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

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
    /// The client sending it, with its own address (per-client limits
    /// count it apart); by default the one shared scenario client.
    pub client: Option<String>,
    /// The node of a several-node instance it goes to (default 0).
    pub node: Option<u32>,
    /// Acts as a scenario user (`[users]`): sends an `X-User-Proof` over
    /// this request at the simulated clock.
    pub user_proof: Option<ProofSpec>,
    /// The request is malformed on purpose: the safety key
    /// `bad_input_mishandled` holds its answer to a 4xx with the API's JSON
    /// error (`world::malformed`).
    #[serde(default)]
    pub malformed: bool,
    /// A 429 answer is waited out for exactly its `Retry-After` seconds, then
    /// the request is sent once more; both are noted (`retry_after_refused`
    /// judges the retry).
    #[serde(default)]
    pub retry_after: bool,
}

/// `cancel`: `POST /v1/jobs/{job}/cancel` (decision 0022), answered like
/// an `http` step. With `held_poll`, a long poll of the job is held open
/// across the cancel, and the step fails unless it answers at the cancel's
/// instant with what the cancel left (logged as `held poll <`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelCall {
    #[serde(default = "chain_a")]
    pub instance: String,
    /// The job id (a template, usually `{{job}}`), or `latest`: the job of
    /// the latest 201 a step got from the instance (the nil id if none).
    pub job: String,
    pub client: Option<String>,
    pub node: Option<u32>,
    /// Acts as a scenario user, as an `http` step's `user_proof`.
    pub user_proof: Option<ProofSpec>,
    #[serde(default)]
    pub held_poll: bool,
}

impl CancelCall {
    /// The `http` call the cancel is.
    pub fn http(&self) -> HttpCall {
        HttpCall {
            instance: self.instance.clone(),
            method: "POST".into(),
            path: format!("/v1/jobs/{}/cancel", self.job),
            body: None,
            raw_body: None,
            headers: BTreeMap::new(),
            pay: None,
            client: self.client.clone(),
            node: self.node,
            user_proof: self.user_proof.clone(),
            malformed: false,
            retry_after: false,
        }
    }
}

/// `poll`: `GET /v1/jobs/{job}` (no wait), answered like an `http` step.
/// `job` as a `cancel`'s: a template, or `latest` (the job of the latest
/// 201 a step got from the instance; the nil id if none). The swarm reads
/// paid jobs with it while their settlement is slow or lost.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PollCall {
    #[serde(default = "chain_a")]
    pub instance: String,
    pub job: String,
    pub client: Option<String>,
    pub node: Option<u32>,
    /// A long poll (`?wait_ms=N`) held in the background: the step goes on
    /// at once; the answer is kept in the held-poll log
    /// (`world::held_polls`, not the transcript) and judged by the safety
    /// key `poll_not_woken`. The run waits for it before its end-of-run
    /// checks.
    #[serde(default)]
    pub hold_ms: Option<u64>,
    /// With `hold_ms`: this many such polls at once from the step's client
    /// (1 to [`HELD_POLLS_PER_STEP_MAX`]; a hoarder of held polls, the
    /// swarm's `poll_hoards` kind). Each is logged and judged as one.
    #[serde(default)]
    pub count: Option<u32>,
    /// An edge poll: sleeps until the job's pending deadline
    /// (`created_at + pending_timeout_ms`) plus this many ms (negative:
    /// before it), lets the instant's timers run, then polls
    /// (`run/edge.rs`). Judged by the safety key `expiry_off_edge`.
    #[serde(default)]
    pub edge_ms: Option<i64>,
}

/// The most held polls one `poll` step sends (`count`).
pub const HELD_POLLS_PER_STEP_MAX: u32 = 1_000;

impl PollCall {
    /// The `http` call the poll is.
    pub fn http(&self) -> HttpCall {
        HttpCall {
            instance: self.instance.clone(),
            method: "GET".into(),
            path: format!("/v1/jobs/{}", self.job),
            body: None,
            raw_body: None,
            headers: BTreeMap::new(),
            pay: None,
            client: self.client.clone(),
            node: self.node,
            user_proof: None,
            malformed: false,
            retry_after: false,
        }
    }
}

/// `stream` (version 2): reads server-sent events as they come, either a
/// job's events (`GET /v1/jobs/{job}/events`) or a streamed chat
/// completion (`chat`: the body of `POST /v1/chat/completions`, sent with
/// `stream: true`). Every event is logged (`sse <`) and kept for the
/// safety keys `deltas_disagree_with_output` and `private_delta_leak`.
/// The answer is the read (`run/stream.rs`): `events`, `joined`,
/// `restarts`, `last_id`, `last`, `ended`, `ttft_ms`, `total_ms`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamCall {
    #[serde(default = "chain_a")]
    pub instance: String,
    /// The job whose events are read (a template, or `latest`: the job of
    /// the latest 201 a step got from the instance).
    pub job: Option<String>,
    /// A chat completion request instead (`stream: true` is added).
    pub chat: Option<Value>,
    pub client: Option<String>,
    pub node: Option<u32>,
    /// Sent as `Last-Event-ID` (a template).
    pub last_event_id: Option<String>,
    /// Drops the connection after this many events.
    pub cut_after: Option<u32>,
    /// With `cut_after`: waits this long, then reads on from the last event
    /// id to the end, as one read.
    pub resume_after: Option<SimDuration>,
    /// Waits this long after each event (a slow reader).
    pub pause: Option<SimDuration>,
    /// Reads beside the steps: the step returns at once and gives no
    /// answer; the read still counts for the safety keys.
    #[serde(default)]
    pub detach: bool,
}

/// The `X-User-Proof` an `http` step sends.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProofSpec {
    /// The user the proof names (its id is the proof's `user_id`);
    /// default: `key`'s user.
    pub user: Option<String>,
    /// The user whose key signs; default: `user`. Another user's key is a
    /// proof signed by the wrong key.
    pub key: Option<String>,
    /// Sends the last proof any step sent, unchanged (a replay), instead
    /// of signing a new one.
    #[serde(default)]
    pub replay: bool,
}

impl ProofSpec {
    /// `(user, key)`: who the proof names and whose key signs it; `None`
    /// for a replay.
    pub fn signer(&self) -> Result<Option<(&str, &str)>, String> {
        match (self.replay, self.user.as_deref(), self.key.as_deref()) {
            (true, None, None) => Ok(None),
            (true, _, _) => Err(
                "user_proof: replay sends the last proof as it was; it takes no user or key".into(),
            ),
            (false, None, None) => Err("user_proof needs user (or key), or replay = true".into()),
            (false, user, key) => {
                let user = user.or(key).unwrap_or_default();
                Ok(Some((user, key.unwrap_or(user))))
            }
        }
    }
}

/// `attack`: an attacker who holds none of the victim's keys tries to act
/// for the victim. Its answer says what the coordinator answered and
/// whether the attack got through: `{status, error, refused, paired}`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Attack {
    #[serde(default = "chain_a")]
    pub instance: String,
    pub kind: AttackKind,
    /// The user attacked (a `[users]` name).
    pub victim: String,
    /// The attacker (a `[users]` name): its key signs the wrong-key proofs.
    pub attacker: String,
    /// The attacker's worker: a code the attacker obtains is claimed for
    /// this worker's key (the pairing attacks need it).
    pub worker: Option<String>,
    /// With `d`, a `replay_create` waits until the replayed proof's issue time
    /// plus the instance's proof window plus `d` ms (`d` may be negative): a
    /// replay at the edge of the proof's validity.
    pub replay_edge_ms: Option<i64>,
}

/// `pair`: a user pairs a worker honestly, as an owner's tooling would:
/// `trust/create` with the user's own proof, bound to the worker's key, on
/// node 0, then `trust/claim` of the code for the worker on `node`. Unlike
/// two `http` steps it tolerates a create that fails (a crash cut it): no
/// claim is sent then. Its answer is `{status, paired}`: the status of the
/// last request sent, and whether the claim was answered 2xx (a pairing
/// the safety key `pairing_lost` then holds the instance to).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pair {
    #[serde(default = "chain_a")]
    pub instance: String,
    /// The user (a `[users]` name) whose proof signs the create.
    pub user: String,
    /// The worker whose key is paired.
    pub worker: String,
    /// The node of a several-node instance the claim goes to (default 0).
    pub node: Option<u32>,
    /// With `d`: the claim is sent at the code's `expires_at` plus `d` ms
    /// (`d` may be negative), an edge claim that `expiry_off_edge` judges.
    pub claim_edge_ms: Option<i64>,
    /// With `n` (2 to [`PAIR_CODES_MAX`]), `n` creates, each with its own
    /// proof, sent at once (one group commit may hold them all), then each code
    /// claimed.
    pub codes: Option<u32>,
    /// The instance crashes and restarts (as an `instance` step's
    /// `restart`) between the creates and the claims (simulation only).
    #[serde(default)]
    pub restart_before_claim: bool,
}

/// At most this many codes one `pair` step creates at once.
pub const PAIR_CODES_MAX: u32 = 3;

choice!(
    /// A `buggify` step: the fault points stop or fire again (a run's
    /// liveness phase turns them off, as FoundationDB's and VOPR's do).
    BuggifySwitch {
        On => "on",
        Off => "off",
    }
);

choice!(
    /// What an `attack` step tries.
    AttackKind {
        /// trust/create for the victim without a proof, then a claim.
        CreateWithoutProof => "create_without_proof",
        /// trust/create for the victim with a proof signed by the
        /// attacker's key, then a claim.
        CreateWithWrongKey => "create_with_wrong_key",
        /// trust/create for the victim with a valid proof of the
        /// attacker's own account (it names the attacker, not the
        /// victim), then a claim.
        CreateWithOwnProof => "create_with_own_proof",
        /// The victim's last trust/create sent again, proof and all, then
        /// a claim of the code it answers.
        ReplayCreate => "replay_create",
        /// A claim of the victim's last code (read over its shoulder) for
        /// the attacker's worker.
        ClaimVictimCode => "claim_victim_code",
        /// trust/list of the victim's workers without a proof.
        ListWithoutProof => "list_without_proof",
        /// A PRIVATE commit in the victim's name, signed by the attacker.
        CommitAsVictim => "commit_as_victim",
        /// A PRIVATE commit in the victim's name with no proof at all.
        CommitWithoutProof => "commit_without_proof",
    }
);

impl AttackKind {
    /// Whether it ends in a claim for the attacker's worker.
    pub fn pairs(self) -> bool {
        matches!(
            self,
            AttackKind::CreateWithoutProof
                | AttackKind::CreateWithWrongKey
                | AttackKind::CreateWithOwnProof
                | AttackKind::ReplayCreate
                | AttackKind::ClaimVictimCode
        )
    }
}

/// How the payer treats the 402 answer.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pay {
    /// Absent for a valid payment.
    #[serde(default)]
    pub alter: Option<Alter>,
    /// The x402 version to pay with (version 2 files): 1 reads the v1 body
    /// and sends `X-PAYMENT`, 2 reads `PAYMENT-REQUIRED` and sends
    /// `PAYMENT-SIGNATURE`. Absent: whatever the 402 answer offers first (2).
    pub version: Option<crate::spec::pricing::PayVersion>,
}

choice!(
    /// What a payment gets wrong on purpose.
    Alter {
        /// Nothing: a valid payment.
        Unaltered => "none",
        Recipient => "recipient",
        /// Underpays.
        Amount => "amount",
        /// Expires too soon.
        Window => "window",
        /// Not valid yet.
        Future => "future",
        Network => "network",
        Signature => "signature",
    }
);

fn get() -> String {
    "GET".into()
}

/// Changes an instance's facilitator script for the following payments.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FacilitatorControl {
    #[serde(default = "chain_a")]
    pub instance: String,
    pub script: FacilitatorScript,
}

/// Commits `count` jobs (`{{i}}` in the body is the job's index), then waits
/// until every one is completed or failed. Its answer is the count of jobs
/// by final status, e.g. `{"completed": 998, "failed": 2}`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommitMany {
    #[serde(default = "chain_a")]
    pub instance: String,
    #[serde(default = "fast")]
    pub tier: CommitTier,
    pub count: u32,
    pub body: Value,
    /// Simulated time between two commits.
    #[serde(default = "zero_ms")]
    pub interval: SimDuration,
    #[serde(default = "default_within")]
    pub within: SimDuration,
}

choice!(
    /// The commit endpoint, `/v1/jobs/commit/{tier}`.
    CommitTier {
        Fast => "fast",
        Cheap => "cheap",
    }
);

fn fast() -> CommitTier {
    CommitTier::Fast
}

fn zero_ms() -> SimDuration {
    SimDuration {
        text: "0ms".into(),
        duration: Duration::ZERO,
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouterCall {
    pub call: RouterFn,
    /// The request, as `router::LlmRequest` / `router::TaskRequest` fields.
    pub request: Value,
}

choice!(
    /// The router entry point a `router` step calls.
    RouterFn {
        RunLlm => "run_llm",
        RunTask => "run_task",
    }
);

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaitUntil {
    #[serde(default = "chain_a")]
    pub instance: String,
    pub job: String,
    pub status: JobStatus,
    /// Longest wait, e.g. `30s`.
    #[serde(default = "default_within")]
    pub within: SimDuration,
}

/// Stops or starts a worker or an instance by name.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Control<A> {
    pub name: String,
    pub action: A,
}

choice!(
    WorkerAction {
        Stop => "stop",
        Start => "start",
        /// The worker stops reading and writing its socket, which stays
        /// open (its process frozen, as by SIGSTOP): bytes to and from it
        /// are held on its links (`simnet::LinkFault::Hold`), up to the
        /// link's bound, after which the coordinator's sends block.
        Freeze => "freeze",
        /// A frozen worker runs again: held bytes are delivered.
        Thaw => "thaw",
    }
);

choice!(
    InstanceAction {
        Stop => "stop",
        Start => "start",
        /// Crash and recover from the store.
        Restart => "restart",
        /// Stop gracefully (as on SIGTERM) and start again on the store.
        GracefulRestart => "graceful_restart",
        /// Arm a crash right after the instance's next store write of
        /// kind `write`; the instance restarts at the next step.
        CrashAfter => "crash_after",
        /// Cut one node of a several-node instance from the shared store
        /// for `duration_ms`: its lease lapses, it fences itself and
        /// crashes, and it rejoins once the store is back.
        Partition => "partition",
        /// Crash one node of a several-node instance (`node`); its
        /// supervisor starts it again after `duration_ms`.
        Crash => "crash",
        /// The next write of one node of a several-node instance to the
        /// shared store commits, but its answer is lost (a connection
        /// dropped after the commit): the node retries it.
        LoseAnswer => "lose_answer",
    }
);

/// An instance action; `write` goes with `crash_after` and only with it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstanceControl {
    pub name: String,
    pub action: InstanceAction,
    pub write: Option<StoreWriteKind>,
    /// The node of a several-node instance it acts on (`restart`,
    /// `graceful_restart`, `partition`, `crash`).
    pub node: Option<u32>,
    /// How long a `partition` lasts, or a `crash` stays down.
    pub duration_ms: Option<u64>,
}

choice!(
    /// A write of the coordinator's store (for `crash_after`).
    StoreWriteKind {
        NonceReserved => "nonce_reserved",
        NonceSpent => "nonce_spent",
        NonceReleased => "nonce_released",
        /// A commit of jobs, pairings and trust.
        Commit => "commit",
    }
);

/// Opens WebSocket connections to an instance's worker endpoint that
/// complete the HTTP upgrade and then say nothing (half-open handshakes,
/// as a flood would hold them). They stay open until the run ends.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sockets {
    #[serde(default = "chain_a")]
    pub instance: String,
    pub count: u32,
    /// The client opening them; each client has its own address.
    #[serde(default = "idle_client")]
    pub client: String,
}

/// `slow_heads`: a slowloris attacker (review hole (c), decision 0019).
/// Opens `count` plain HTTP connections to an instance from one client
/// that send an unfinished request head (`head = "partial"`) or nothing
/// (`"none"`), then wait; each stays open until the instance closes it.
/// Answers how many it opened.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlowHeads {
    #[serde(default = "chain_a")]
    pub instance: String,
    pub count: u32,
    /// The client opening them; each client has its own address.
    #[serde(default = "slow_client")]
    pub client: String,
    #[serde(default)]
    pub head: SlowHead,
}

choice!(
    /// What a `slow_heads` connection sends before it waits.
    #[derive(Default)]
    SlowHead {
        #[default]
        Partial => "partial",
        Nothing => "none",
    }
);

/// `raw_request`: `bytes` sent as they are on a new connection from
/// `client` to node 0 of `instance`, for request heads no HTTP client
/// sends (a control character in a header or the request line, a
/// malformed request line); answered as an `http` step (status, JSON
/// body). Live too: the bytes go to the target's address.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRequest {
    #[serde(default = "chain_a")]
    pub instance: String,
    pub bytes: String,
    #[serde(default = "raw_client")]
    pub client: String,
    /// As an `http` step's: judged by `bad_input_mishandled`.
    #[serde(default)]
    pub malformed: bool,
}

fn raw_client() -> String {
    "raw".into()
}

fn slow_client() -> String {
    "slowloris".into()
}

/// `expect_store`: the job `job` (a template) as instance `instance`'s store
/// holds it, read inside the simulation rather than through the API.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreRead {
    #[serde(default = "chain_a")]
    pub instance: String,
    pub job: String,
}

impl InstanceControl {
    /// `write` names the crash point of `crash_after` and means nothing
    /// for the other actions.
    pub(crate) fn check(&self, instances: &BTreeMap<String, Instance>) -> Result<(), String> {
        let nodes = instances.get(&self.name).map_or(1, |i| i.nodes);
        let node_action = matches!(
            self.action,
            InstanceAction::Restart
                | InstanceAction::GracefulRestart
                | InstanceAction::Partition
                | InstanceAction::Crash
                | InstanceAction::LoseAnswer
        );
        let timed = matches!(
            self.action,
            InstanceAction::Partition | InstanceAction::Crash
        );
        let shared = timed || self.action == InstanceAction::LoseAnswer;
        match self.node {
            Some(_) if !node_action => {
                return Err(format!(
                    "node goes with restart, graceful_restart, partition, crash or lose_answer, not with {}",
                    self.action
                ))
            }
            Some(n) if n >= nodes => {
                return Err(format!(
                    "node {n}: instance {} has {nodes} node(s)",
                    self.name
                ))
            }
            None if shared => return Err(format!("{} needs node", self.action)),
            _ => {}
        }
        if shared && nodes < 2 {
            return Err(format!(
                "{} needs an instance with nodes > 1; {} has 1",
                self.action, self.name
            ));
        }
        if self.action == InstanceAction::CrashAfter && nodes > 1 {
            return Err("crash_after needs a single-node instance (it arms a SQLite write)".into());
        }
        match self.duration_ms {
            None if timed => return Err(format!("{} needs duration_ms", self.action)),
            Some(ms) if timed && (ms == 0 || ms > 3_600_000) => {
                return Err("duration_ms must be 1 to 3600000".into())
            }
            Some(_) if !timed => {
                return Err(format!(
                    "duration_ms goes with partition or crash, not with {}",
                    self.action
                ))
            }
            _ => {}
        }
        match (self.action, self.write) {
            (InstanceAction::CrashAfter, None) => Err(format!(
                "crash_after needs write = one of {}",
                StoreWriteKind::NAMES.join(", ")
            )),
            (InstanceAction::CrashAfter, Some(_)) | (_, None) => Ok(()),
            (action, Some(_)) => Err(format!("write goes with crash_after, not with {action}")),
        }
    }
}

fn idle_client() -> String {
    "idle".into()
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

/// `wait_until = { workload = "load", within = "10m" }`.
#[derive(Debug, Clone)]
pub struct WaitWorkload {
    pub workload: String,
    pub within: SimDuration,
}

/// The keys of a `wait_until` table: a job and a status, or a workload.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaitSpec {
    instance: Option<String>,
    job: Option<String>,
    status: Option<JobStatus>,
    within: Option<SimDuration>,
    workload: Option<String>,
}

impl WaitSpec {
    /// The step's action: waiting for a job's status, or for a workload.
    pub fn into_action(self) -> Result<Action, String> {
        let within = self.within.unwrap_or_else(default_within);
        match (self.workload, self.job, self.status) {
            (Some(workload), None, None) if self.instance.is_none() => {
                Ok(Action::WaitWorkload(WaitWorkload { workload, within }))
            }
            (Some(_), _, _) => Err(
                "wait_until takes a workload, or a job and a status (and an instance), not both"
                    .into(),
            ),
            (None, Some(job), Some(status)) => Ok(Action::WaitUntil(WaitUntil {
                instance: self.instance.unwrap_or_else(chain_a),
                job,
                status,
                within,
            })),
            (None, None, _) => Err("wait_until needs job (and status) or workload".into()),
            (None, Some(_), None) => Err("wait_until needs status with job".into()),
        }
    }
}
