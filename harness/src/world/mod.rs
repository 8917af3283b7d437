//! The peers of a run. Simulated (`World::build`), all in one current-thread
//! runtime: each instance is the real coordinator (`Coordinator` + `app()`),
//! reached over HTTP through the router crate's in-process transport and by
//! workers through in-memory channels into the real session logic. Live
//! (`World::build_live`): each instance is a `coordinator` process on
//! loopback, reached over real HTTP and real WebSockets. Either way workers
//! are worker-sim workers, hosted providers are worker-sim stubs, and the
//! router is the real router crate.
//!
//! Randomness: one ChaCha RNG seeded from the scenario seed hands a child
//! seed to each component in a fixed order (instances by name, workers in
//! file order, stubs by name), so adding a draw in one component does not
//! shift the others.

pub mod acknowledged;
mod build;
pub mod codes;
mod error;
pub mod frames;
pub mod held_polls;
mod instance;
mod live;
pub mod malformed;
pub mod paid_commits;
pub mod proofs;
mod raw;
pub mod settlements;
pub mod streams;

use build::{assemble, clocks, Parts};
use instance::{memdb_path, SimNode};
pub mod transcript;
pub mod trust_lists;
pub mod users;

pub use build::{coordinator_config, facilitator_script, stub_key, worker_configs, PAYER_KEY};
pub use error::WorldError;
pub use instance::{SimInstance, DOWN_WAIT_MS};
pub use live::{LiveCluster, LiveTarget};
pub use raw::RawAnswer;

use crate::spec::{FacilitatorScript, Instance, Scenario, StoreKind, WorkerSpec};
use coordinator::cluster::MemoryShared;
use coordinator::config::Config;
use coordinator::server::{self, Server, Settings};
use coordinator::store::sqlite::{SqliteStore, StoreWrite};
use coordinator::TokioClock;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;
use router::{
    ComputeRouter, CoordinatorUrls, HostedProvider, HttpTransport, ProviderSettings, RouterConfig,
};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use testkit::{ProviderKind, ProviderStub, StubConfig};
use tokio::task::JoinHandle;
use transcript::Transcript;
use worker_sim::{Worker, WorkerConfig};

pub struct InstanceHandle {
    pub base_url: String,
    /// Where the harness polls a job's status (`wait_until`, `commit_many`):
    /// the last node of a live cluster, so those jobs are read on another
    /// node than the one they were committed on; else `base_url`.
    pub poll_url: String,
    /// The scripted facilitator, when the instance settles through one.
    pub facilitator: Option<testkit::FacilitatorStub>,
    /// Every payment a simulated paid instance settled (`settlements.rs`).
    pub settlements: Option<settlements::SettleLedger>,
    pub driver: Driver,
    /// Nodes 1.. of a several-node simulated instance (node 0 is the
    /// driver's), with the store they share.
    pub more_nodes: Vec<SimInstance>,
    pub shared: Option<Arc<MemoryShared>>,
    /// Against a coordinator the harness did not start (`--target`), which
    /// keeps every earlier run's pairings: appended to plain user ids the
    /// `http` steps send (and taken off the ids in answers), so each run has
    /// users of its own. `None` for coordinators the harness starts fresh.
    pub user_suffix: Option<String>,
}

/// How an instance runs.
pub enum Driver {
    Sim(Box<SimInstance>),
    Live {
        /// One per node: a single coordinator has one (see [`LiveCluster`]).
        ws_urls: Vec<String>,
        /// Killed when dropped.
        _processes: Vec<tokio::process::Child>,
    },
}

pub struct SimWorker {
    pub config: WorkerConfig,
    pub instance: String,
    pub public_key: String,
    trace: bool,
    start: bool,
    task: Option<JoinHandle<()>>,
    /// The seed its key derives from: its own, or that of the worker named
    /// by `key_of` (a second session with an existing worker's key).
    key_seed: u64,
    /// Frames of `send_frame` steps, into the running worker.
    outbox: Option<tokio::sync::mpsc::UnboundedSender<String>>,
    /// The node of a several-node instance it connects to (by default
    /// spread in name order).
    node: Option<u32>,
    /// The client address it dials from (`client`); `None`: its own.
    pub client: Option<String>,
}

impl SimWorker {
    /// Whether it connects when the run starts.
    pub fn starts(&self) -> bool {
        self.start
    }
}

pub struct World {
    pub transcript: Transcript,
    /// Every worker frame, as data (for frame assertions).
    pub frames: frames::FrameLog,
    /// Every job a harness step was answered 201 for.
    pub acknowledged: acknowledged::AcknowledgedJobs,
    /// Every server-sent event stream a `stream` step read.
    pub streams: streams::StreamLog,
    /// Every held poll's answer (`poll_not_woken` judges them).
    pub held_polls: held_polls::HeldPollLog,
    /// The answers to requests sent malformed on purpose
    /// (`bad_input_mishandled` judges them).
    pub malformed: malformed::MalformedLog,
    /// The user proofs sent to the doors that spend them
    /// (`proof_accepted_twice` judges them), and the pairing codes created and
    /// claimed (`pairing_code_lost`).
    pub proofs: proofs::ProofLog,
    pub codes: codes::CodeLog,
    /// The pairing requests and their answers (`trust_list_not_durable` judges
    /// the lists).
    pub trust: trust_lists::TrustLog,
    /// Every commit sent with a payment header, and its answer
    /// (`payment_answered_other_submission` and `paid_retry_refused`).
    pub paid_commits: paid_commits::PaidCommitLog,
    /// The deadline each job's first edge poll aimed at, and whose it is
    /// (`pending`, `payment`, `lease`): the job's later edge polls aim at
    /// the same one, though the job has ended since.
    pub edge_deadlines: BTreeMap<String, (i64, &'static str)>,
    pub http: Arc<dyn HttpTransport>,
    /// The simulated network (`None` in live runs).
    net: Option<simnet::Net>,
    /// Half-open connections of `sockets` steps, held until the run ends.
    idle_sockets: Vec<Box<dyn Send + Sync>>,
    pub instances: BTreeMap<String, InstanceHandle>,
    pub workers: BTreeMap<String, SimWorker>,
    pub stubs: BTreeMap<String, ProviderStub>,
    pub router: ComputeRouter,
    /// Pays 402 answers of `pay` steps (and the router's, with `router.pay`).
    pub payer: x402::LocalEvmSigner,
    pub payer_rng: ChaCha20Rng,
    /// The scenario's users and what they proved (`users`).
    pub users: users::Users,
    epoch_ms: i64,
    worker_clock: worker_sim::SharedClock,
}

/// What a worker's events leave behind: its transcript lines (frames and
/// sleeps only when traced) and every frame, as data, in the frame log.
fn observer(
    transcript: Transcript,
    frames: frames::FrameLog,
    trace: bool,
) -> impl Fn(&worker_sim::WorkerEvent) + Send + Sync + 'static {
    move |event: &worker_sim::WorkerEvent| {
        use worker_sim::EventKind;
        let quiet = matches!(
            event.kind,
            EventKind::FrameIn { .. } | EventKind::FrameOut { .. } | EventKind::Sleeping { .. }
        );
        if trace || !quiet {
            transcript.log(&event.worker, event.kind.summary());
        }
        let (direction, frame) = match &event.kind {
            EventKind::FrameIn { frame } => (crate::spec::frames::Direction::Received, frame),
            EventKind::FrameOut { frame } => (crate::spec::frames::Direction::Sent, frame),
            _ => return,
        };
        frames.record(&event.worker, direction, frame, transcript.len());
    }
}

/// `chain_a` -> `chain-a.sim`, its host name on the simulated network.
pub fn sim_host(name: &str) -> String {
    format!("{}.sim", name.replace('_', "-"))
}

/// Node `i` of a several-node instance: node 0 is `chain-a.sim`, as a
/// single coordinator, the others `chain-a-n1.sim`, `chain-a-n2.sim`.
pub fn node_host(name: &str, i: u32) -> String {
    match i {
        0 => sim_host(name),
        i => format!("{}-n{i}.sim", name.replace('_', "-")),
    }
}

/// `chain_a` -> `http://chain-a.sim`.
pub fn sim_url(name: &str) -> String {
    format!("http://{}", sim_host(name))
}

impl World {
    fn start_workers(&mut self) -> Result<(), WorldError> {
        let starting: Vec<String> = self
            .workers
            .iter()
            .filter(|(_, w)| w.start)
            .map(|(name, _)| name.clone())
            .collect();
        for name in starting {
            self.start_worker(&name)?;
        }
        Ok(())
    }

    /// The node of its instance a worker connects to: its `node`, or by
    /// default spread over the nodes in name order (live clusters too).
    fn worker_node(&self, name: &str, nodes: usize) -> usize {
        let index = self.workers.keys().position(|k| k == name).unwrap_or(0);
        match self.workers.get(name).and_then(|w| w.node) {
            Some(node) => node as usize,
            None => index % nodes.max(1),
        }
    }

    /// The simulated host a worker dials: its node's (`chain-a-n1.sim`), so
    /// network faults on the worker's link hit the node it is connected to.
    pub fn worker_host(&self, name: &str) -> Option<String> {
        let w = self.workers.get(name)?;
        let instance = self.instances.get(&w.instance)?;
        let node = self.worker_node(name, 1 + instance.more_nodes.len());
        Some(node_host(&w.instance, node as u32))
    }

    pub fn start_worker(&mut self, name: &str) -> Result<(), WorldError> {
        // The node it dials: of the simulated instance, or of a live cluster.
        let nodes = self
            .workers
            .get(name)
            .and_then(|w| self.instances.get(&w.instance))
            .map_or(1, |i| match &i.driver {
                Driver::Sim(_) => 1 + i.more_nodes.len(),
                Driver::Live { ws_urls, .. } => ws_urls.len(),
            });
        let node = self.worker_node(name, nodes);
        let w = self
            .workers
            .get_mut(name)
            .ok_or_else(|| WorldError::NoWorker(name.to_owned()))?;
        if w.task.is_some() {
            return Err(WorldError::WorkerRunning(name.to_owned()));
        }
        let instance = self
            .instances
            .get(&w.instance)
            .ok_or_else(|| WorldError::NoInstance(w.instance.clone()))?;
        let observer = observer(self.transcript.clone(), self.frames.clone(), w.trace);
        let (outbox, scripted) = tokio::sync::mpsc::unbounded_channel();
        w.outbox = Some(outbox);
        let mut worker = Worker::new(w.config.clone(), self.worker_clock.clone())
            .map_err(|e| e.to_string())?
            .with_keypair(
                worker_sim::KeySource::Seed
                    .load(w.key_seed)
                    .map_err(|e| e.to_string())?,
            )
            .with_outbox(scripted)
            .with_observer(Arc::new(observer));
        w.task = Some(match &instance.driver {
            Driver::Sim(first) => {
                let sim = match node {
                    0 => &**first,
                    n => &instance.more_nodes[n - 1],
                };
                let url = format!("ws://{}/v1/workers/ws", sim.host);
                let from = w.client.as_deref().unwrap_or(name);
                let connector = simnet::SimWsConnector::new(&sim.net, from, url);
                tokio::spawn(async move {
                    let _ = worker.run(connector).await;
                })
            }
            Driver::Live { ws_urls, .. } => {
                let ws_url = ws_urls[node].clone();
                let connector = worker_sim::WsConnector::new(ws_url);
                tokio::spawn(async move {
                    let _ = worker.run(connector).await;
                })
            }
        });
        Ok(())
    }

    /// Hands a frame to a running worker, which sends it as it is.
    pub fn send_scripted(&self, name: &str, text: String) -> Result<(), WorldError> {
        let w = self
            .workers
            .get(name)
            .ok_or_else(|| WorldError::NoWorker(name.to_owned()))?;
        match (&w.task, &w.outbox) {
            (Some(_), Some(outbox)) => outbox
                .send(text)
                .map_err(|_| WorldError::WorkerStopped(name.to_owned())),
            _ => Err(WorldError::WorkerNotRunning(name.to_owned())),
        }
    }

    /// A receipt for a scripted `result` frame: over its `job_id` and
    /// `output`, signed with the worker's key, completed now.
    pub fn sign_receipt(
        &self,
        name: &str,
        frame: &serde_json::Value,
    ) -> Result<serde_json::Value, WorldError> {
        let w = self
            .workers
            .get(name)
            .ok_or_else(|| WorldError::NoWorker(name.to_owned()))?;
        let key = worker_sim::KeySource::Seed
            .load(w.key_seed)
            .map_err(|e| e.to_string())?;
        let job_id = frame["job_id"]
            .as_str()
            .and_then(|id| uuid::Uuid::parse_str(id).ok())
            .ok_or("a signed receipt needs the frame's job_id to be a UUID")?;
        let completed_at = protocol::time::format_ms(self.epoch_ms + self.transcript.elapsed_ms());
        let receipt = protocol::receipt::ReceiptBody::new(
            job_id,
            key.public_key_hex(),
            &frame["output"],
            completed_at,
            None,
        )
        .sign(&key);
        serde_json::to_value(&receipt).map_err(|e| WorldError::Failed(e.to_string()))
    }

    /// Kills a worker's task: its connection drops as in a crash.
    pub fn stop_worker(&mut self, name: &str) -> Result<(), WorldError> {
        let w = self
            .workers
            .get_mut(name)
            .ok_or_else(|| WorldError::NoWorker(name.to_owned()))?;
        match w.task.take() {
            Some(task) => {
                task.abort();
                Ok(())
            }
            None => Err(WorldError::WorkerNotRunning(name.to_owned())),
        }
    }

    /// Freezes (`true`) or thaws worker `name`: its links to the node it
    /// dials hold every byte both ways until the thaw, as a process
    /// stopped by SIGSTOP keeps its sockets open and reads nothing.
    pub fn freeze_worker(&mut self, name: &str, frozen: bool) -> Result<(), WorldError> {
        let host = self
            .worker_host(name)
            .ok_or_else(|| WorldError::NoWorker(name.to_owned()))?;
        let net = self
            .net
            .clone()
            .ok_or(WorldError::SimulationOnly("freeze"))?;
        let hold = frozen.then_some(simnet::LinkFault::Hold);
        net.set_link_fault(name, &host, "freeze", hold);
        Ok(())
    }

    /// A stopped instance answers no HTTP (connection refused) and refuses
    /// new worker connections; connections already open stay open.
    pub fn set_instance_up(&mut self, name: &str, up: bool) -> Result<(), WorldError> {
        let sim = self.sim_instance(name)?;
        sim.net.set_refusing(&sim.host, !up);
        Ok(())
    }

    /// Crashes and restarts a simulated instance on the same database: the
    /// old process writes nothing more and its connections end (as with
    /// `kill -9`), and a new one recovers from what was committed. Workers
    /// reconnect by themselves.
    pub async fn restart_instance(&mut self, name: &str) -> Result<(), WorldError> {
        self.restart_node(name, 0).await
    }

    /// Crashes and restarts node `node` of an instance (0 for a single
    /// coordinator): a node rejoins the shared store under its id and
    /// recovers the jobs it still holds.
    pub async fn restart_node(&mut self, name: &str, node: u32) -> Result<(), WorldError> {
        let sim = self.node(name, node)?;
        sim.crash();
        sim.rejoin().await
    }

    /// Node `node` of an instance: 0 is the driver's.
    pub fn node(&self, name: &str, node: u32) -> Result<SimInstance, WorldError> {
        let first = self.instance_handle(name)?;
        match node {
            0 => Ok(first),
            n => self.instances[name]
                .more_nodes
                .get(n as usize - 1)
                .cloned()
                .ok_or_else(|| WorldError::NoNode {
                    name: name.to_owned(),
                    node: n,
                }),
        }
    }

    /// The base URL of node `node` of an instance.
    pub fn node_url(&self, name: &str, node: u32) -> Result<String, WorldError> {
        match node {
            0 => self.base_url(name),
            n => Ok(format!("http://{}", self.node(name, n)?.host)),
        }
    }

    /// Cuts node `node` from the instance's shared store for `duration_ms`
    /// (then heals it). The node's lease lapses, it fences itself, the
    /// harness crashes it, and it rejoins once the store answers again.
    pub fn partition_node(
        &self,
        name: &str,
        node: u32,
        duration_ms: u64,
    ) -> Result<(), WorldError> {
        let (shared, id) = self.shared_store_of(name, node)?;
        shared.cut(&id);
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(duration_ms)).await;
            shared.heal(&id);
        });
        Ok(())
    }

    /// Makes node `node`'s next write to the instance's shared store
    /// commit but answer as failed, so the node retries it.
    pub fn lose_answer(&self, name: &str, node: u32) -> Result<(), WorldError> {
        let (shared, id) = self.shared_store_of(name, node)?;
        shared.lose_next_answer(&id);
        Ok(())
    }

    /// The shared store of a several-node instance, and node `node`'s id
    /// in it.
    fn shared_store_of(
        &self,
        name: &str,
        node: u32,
    ) -> Result<(Arc<MemoryShared>, String), WorldError> {
        let sim = self.node(name, node)?;
        let shared = self.instances[name]
            .shared
            .clone()
            .ok_or_else(|| WorldError::SingleNode(name.to_owned()))?;
        let id = sim.node.as_ref().map(|n| n.id.clone()).unwrap_or_default();
        Ok((shared, id))
    }

    /// Crashes node `node` of an instance; its supervisor starts it again
    /// `down_ms` later (the others take over its jobs if its lease lapses
    /// meanwhile).
    pub fn crash_node(&self, name: &str, node: u32, down_ms: u64) -> Result<(), WorldError> {
        let sim = self.node(name, node)?;
        sim.crash();
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(down_ms)).await;
            if sim.rejoin().await.is_ok() {
                sim.log("started again");
            }
        });
        Ok(())
    }

    /// What the shared store of a several-node instance holds.
    pub fn cluster_snapshot(&self, name: &str) -> Option<coordinator::store::Snapshot> {
        self.instances
            .get(name)?
            .shared
            .as_ref()
            .map(|s| s.snapshot())
    }

    /// Every node of an instance, node 0 first (simulation only).
    pub fn nodes(&self, name: &str) -> Vec<SimInstance> {
        let Some(instance) = self.instances.get(name) else {
            return Vec::new();
        };
        let Driver::Sim(first) = &instance.driver else {
            return Vec::new();
        };
        let mut all = vec![(**first).clone()];
        all.extend(instance.more_nodes.iter().cloned());
        all
    }

    /// Stops a simulated instance as SIGTERM stops the binary (the same
    /// `Server::shutdown`: no new connections, sessions asked to close in
    /// session order, held polls answered, serving drained, what is pending
    /// committed), then the process exits and a new one starts on the same
    /// database. Workers reconnect by themselves.
    pub async fn graceful_restart_instance(&mut self, name: &str) -> Result<(), WorldError> {
        self.graceful_restart_node(name, 0).await
    }

    /// A graceful restart of one node of an instance.
    pub async fn graceful_restart_node(&mut self, name: &str, node: u32) -> Result<(), WorldError> {
        let sim = self.node(name, node)?;
        sim.shutdown().await;
        sim.rejoin().await
    }

    /// Arms a crash of `name` right after its store's next write of kind
    /// `write`; the instance is restarted at the next step boundary
    /// ([`World::restart_crashed`]), as a supervisor would restart it.
    /// An instance a `reboot` fault holds down is waited for (up to
    /// [`DOWN_WAIT_MS`] of simulated time), as an operator's command would
    /// wait for the supervisor to bring it back.
    pub async fn crash_after(&mut self, name: &str, write: StoreWrite) -> Result<(), WorldError> {
        let sim = self.sim_instance(name)?;
        sim.wait_running().await?;
        let store = sim.store().ok_or("instance has no database")?;
        // Within the write itself: nothing the process does after it
        // reaches a peer.
        store.crash_after(write, sim.killer());
        Ok(())
    }

    /// Restarts the instances whose armed crash has fired.
    pub async fn restart_crashed(&mut self) -> Result<(), WorldError> {
        let names: Vec<String> = self
            .instances
            .iter()
            .filter(|(_, i)| match &i.driver {
                Driver::Sim(sim) => sim.crashed.load(Ordering::SeqCst),
                Driver::Live { .. } => false,
            })
            .map(|(name, _)| name.clone())
            .collect();
        for name in names {
            self.transcript.log(
                "harness",
                format!("{name} crashed at its armed store write; restarting"),
            );
            self.restart_instance(&name).await?;
        }
        Ok(())
    }

    /// Waits until every simulated instance's store has committed what it
    /// was handed, so end-of-run checks read the final state.
    pub async fn settle(&self) {
        for name in self.instances.keys() {
            for sim in self.nodes(name) {
                if let Some(coordinator) = sim.coordinator() {
                    let _ = coordinator.durable().await;
                }
            }
        }
    }

    /// Opens `count` worker connections from `client` that complete the
    /// WebSocket upgrade and then send nothing; they stay open until the
    /// run ends. Returns how many were upgraded and how many refused.
    pub async fn open_idle_sockets(
        &mut self,
        instance: &str,
        count: u32,
        client: &str,
    ) -> Result<(u32, u32), WorldError> {
        let net = self
            .net
            .clone()
            .ok_or(WorldError::SimulationOnly("idle sockets"))?;
        let url = format!("ws://{}/v1/workers/ws", sim_host(instance));
        let (mut opened, mut refused) = (0, 0);
        for _ in 0..count {
            let mut connector = simnet::SimWsConnector::new(&net, client, url.clone());
            match protocol::connection::Connector::connect(&mut connector).await {
                Ok(socket) => {
                    opened += 1;
                    self.idle_sockets.push(Box::new(socket));
                }
                Err(_) => refused += 1,
            }
        }
        Ok((opened, refused))
    }

    /// Opens `count` plain HTTP connections from `client` to `instance`
    /// that send an unfinished request head (or nothing) and then wait;
    /// each is held until the instance closes it. Returns how many links
    /// opened (a connection over a budget is opened, then closed). When
    /// each closed is not logged: connections the instance closes in
    /// one instant (a restart's) end in tokio's wake order, which differs
    /// between a world's two runs (swarm seed 53); the safety keys read
    /// the closes from the accept loop's own accounting instead.
    pub async fn open_slow_heads(
        &mut self,
        instance: &str,
        count: u32,
        client: &str,
        head: crate::spec::SlowHead,
    ) -> Result<u32, WorldError> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let net = (self.net.clone()).ok_or(WorldError::SimulationOnly("slow heads"))?;
        let (host, from) = (sim_host(instance), net.peer_addr(client));
        let bytes: &[u8] = match head {
            // A head that never ends: no blank line after the last header.
            crate::spec::SlowHead::Partial => b"GET /v1/health HTTP/1.1\r\nhost: slow\r\nx-wait: ",
            crate::spec::SlowHead::Nothing => b"",
        };
        let mut opened = 0;
        for _ in 0..count {
            let Ok(mut link) = net.connect(from, &host) else {
                continue;
            };
            opened += 1;
            let held = tokio::spawn(async move {
                let _ = link.write_all(bytes).await;
                let mut buf = [0u8; 512];
                // Until the server closes it (or the run ends).
                while matches!(link.read(&mut buf).await, Ok(n) if n > 0) {}
            });
            self.idle_sockets.push(Box::new(held));
        }
        self.transcript.log(
            client,
            format!("opened {opened} slow heads ({head}) to {instance}"),
        );
        Ok(opened)
    }

    /// The addresses a simulated instance's nodes serve (empty for a live
    /// one), as its accept loop names them (`buggify::ConnectionSpan`).
    pub fn served_addrs(&self, name: &str) -> Vec<String> {
        (self.nodes(name).iter())
            .filter_map(|node| self.net.as_ref()?.host_addr(&node.host))
            .map(|addr| addr.to_string())
            .collect()
    }

    /// The rate-limit key of simulated client `name` (its address), as
    /// the coordinator counts it.
    pub fn client_key(&self, name: &str) -> Option<String> {
        let addr = self.net.as_ref()?.peer_addr(name);
        Some(coordinator::api::rate_limit_key(addr.ip()))
    }

    /// Another handle on a simulated instance, for the fault injectors.
    pub fn instance_handle(&self, name: &str) -> Result<SimInstance, WorldError> {
        match self.instances.get(name).map(|i| &i.driver) {
            Some(Driver::Sim(sim)) => Ok((**sim).clone()),
            Some(Driver::Live { .. }) => Err(WorldError::SimulationOnly("faults run")),
            None => Err(WorldError::NoInstance(name.to_owned())),
        }
    }

    /// The simulated network (`None` in live runs).
    pub fn net(&self) -> Option<simnet::Net> {
        self.net.clone()
    }

    fn sim_instance(&mut self, name: &str) -> Result<&mut SimInstance, WorldError> {
        let i = self
            .instances
            .get_mut(name)
            .ok_or_else(|| WorldError::NoInstance(name.to_owned()))?;
        match &mut i.driver {
            Driver::Sim(sim) => Ok(sim),
            Driver::Live { .. } => Err(WorldError::SimulationOnly(
                "instances can be stopped and restarted",
            )),
        }
    }

    /// The transport of a client with its own address (per-client limits
    /// see it apart from every other client).
    pub fn client(&self, name: &str) -> Arc<dyn HttpTransport> {
        match &self.net {
            Some(net) => Arc::new(simnet::SimHttp::new(net, name)),
            None => self.http.clone(),
        }
    }

    /// The streaming HTTP client of `name` (the router's address when
    /// `None`); `None` in live runs.
    pub fn stream_client(&self, name: Option<&str>) -> Option<simnet::SimHttp> {
        let net = self.net.as_ref()?;
        Some(simnet::SimHttp::new(net, name.unwrap_or("router")))
    }

    pub fn base_url(&self, instance: &str) -> Result<String, WorldError> {
        self.instances
            .get(instance)
            .map(|i| i.base_url.clone())
            .ok_or_else(|| WorldError::NoInstance(instance.to_owned()))
    }

    /// Where the harness polls a job's status (see [`InstanceHandle::poll_url`]).
    pub fn poll_url(&self, instance: &str) -> Result<String, WorldError> {
        self.instances
            .get(instance)
            .map(|i| i.poll_url.clone())
            .ok_or_else(|| WorldError::NoInstance(instance.to_owned()))
    }

    pub fn epoch_ms(&self) -> i64 {
        self.epoch_ms
    }

    pub fn transport(&self) -> Arc<dyn HttpTransport> {
        self.http.clone()
    }
}
