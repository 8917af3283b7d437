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

use crate::scenario::{FacilitatorScript, Instance, Scenario, StoreKind, WorkerSpec};
use crate::transcript::Transcript;
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
use worker_sim::{Worker, WorkerConfig};

pub struct InstanceHandle {
    pub base_url: String,
    /// Where the harness polls a job's status (`wait_until`, `commit_many`):
    /// the last node of a live cluster, so those jobs are read on another
    /// node than the one they were committed on; else `base_url`.
    pub poll_url: String,
    /// The scripted facilitator, when the instance settles through one.
    pub facilitator: Option<testkit::FacilitatorStub>,
    pub driver: Driver,
    /// Nodes 1.. of a several-node simulated instance (node 0 is the
    /// driver's), with the store they share.
    pub more_nodes: Vec<SimInstance>,
    pub shared: Option<Arc<MemoryShared>>,
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

/// `harness --live --live-db postgres://… --live-nodes N`: each instance is
/// N coordinator nodes on that PostgreSQL (a schema of its own per
/// instance and run), one coordinator in cluster mode. HTTP steps go to
/// the first node, and the harness's own polls of a job's status
/// (`wait_until`, `commit_many`) to the last; workers are spread over the
/// nodes in name order, so jobs, pairings, payments and reads cross nodes.
#[derive(Debug, Clone)]
pub struct LiveCluster {
    pub db: String,
    pub nodes: usize,
}

/// A PostgreSQL schema no other instance of any run uses.
fn live_schema(instance: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::SeqCst);
    let instance: String = instance
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .take(24)
        .collect();
    format!("h{}_{n}_{instance}", std::process::id())
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
    pub frames: crate::frames::FrameLog,
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
    epoch_ms: i64,
    worker_clock: worker_sim::SharedClock,
    /// Workloads and fault injectors running beside the steps.
    pub beside: crate::beside::Beside,
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

pub fn coordinator_config(instance: &Instance) -> Config {
    let mut config = Config {
        network: instance.network.clone(),
        ..Config::default()
    };
    instance.prices.apply(&mut config.prices);
    let t = &instance.timing;
    let ct = &mut config.timing;
    if let Some(v) = t.pending_timeout_ms {
        ct.pending_timeout_ms = v;
    }
    if let Some(v) = t.lease_ms {
        ct.lease_ms = v;
    }
    if let Some(v) = t.attempts_max {
        ct.attempts_max = v;
    }
    if let Some(v) = t.heartbeat_interval_ms {
        ct.heartbeat_interval_ms = v;
    }
    if let Some(v) = t.heartbeat_timeout_ms {
        ct.heartbeat_timeout_ms = v;
    }
    if let Some(v) = instance.limits.queue_len_max {
        config.limits.queue_len_max = v;
    }
    if let Some(v) = instance.limits.handshakes_max {
        config.limits.handshakes_max = v;
    }
    if let Some(v) = instance.limits.handshakes_per_client_max {
        config.limits.handshakes_per_client_max = v;
    }
    if let Some(v) = instance.limits.held_polls_max {
        config.limits.held_polls_max = v;
    }
    if let Some(v) = instance.limits.finished_jobs_cached_max {
        config.limits.finished_jobs_cached_max = v;
    }
    if let Some(v) = instance.limits.kept_bytes_max {
        config.limits.kept_bytes_max = v;
    }
    if let Some(v) = instance.limits.claims_per_minute_max {
        config.limits.claim_failures_per_client_per_minute_max = v;
    }
    config
}

/// Expands a worker spec into named worker configs.
pub fn worker_configs(spec: &WorkerSpec, seeds: &mut impl FnMut() -> u64) -> Vec<WorkerConfig> {
    (0..spec.count)
        .map(|i| {
            let name = if spec.count == 1 {
                spec.name.clone()
            } else {
                format!("{}-{i}", spec.name)
            };
            WorkerConfig {
                name,
                seed: seeds(),
                capabilities: spec.capabilities.clone(),
                slots: spec.slots,
                latency: spec.latency.parse().expect("validated at parse"),
                faults: spec.faults.clone(),
                ..WorkerConfig::default()
            }
        })
        .collect()
}

pub fn stub_key(name: &str) -> String {
    format!("sk-sim-{name}")
}

impl World {
    /// Builds every peer; must run inside the simulation runtime.
    pub async fn build(scenario: &Scenario, seed: u64) -> Result<Self, String> {
        let epoch_ms = scenario.epoch_ms()?;
        let (clock, transcript, worker_clock) = clocks(epoch_ms);
        let net = simnet::Net::new();
        let mut master = ChaCha20Rng::seed_from_u64(seed);

        let mut instances = BTreeMap::new();
        for (name, spec) in &scenario.instances {
            let seed: u64 = master.gen();
            let facilitator = match spec.payment.as_ref().and_then(|p| p.facilitator.script()) {
                Some(script) => {
                    let stub = testkit::FacilitatorStub::new(&spec.network);
                    stub.set_script(facilitator_script(script));
                    Some(stub)
                }
                None => None,
            };
            let mut settings = Settings {
                config: Config {
                    // What its simulated workers dial: `ws://{sim_host}/...`.
                    public_urls: vec![sim_url(name)],
                    ..coordinator_config(spec)
                },
                db: match spec.store {
                    StoreKind::Sqlite => memdb_path(name),
                    // Plain memory: nothing survives a restart.
                    StoreKind::Memory => server::NO_STORE.into(),
                },
                payment: None,
                retention_hours: spec.retention_hours,
                ..Settings::default()
            };
            let mut settler = None;
            if let Some(payment) = &spec.payment {
                let (config, s) = payment_settings(payment, &spec.network, facilitator.as_ref())?;
                settings.payment = Some(config);
                settler = Some(s);
            }
            // Several nodes: one shared store kept across node generations,
            // and a seed per node after the instance's, in node order.
            let shared = spec.is_cluster().then(|| Arc::new(MemoryShared::default()));
            let mut nodes = Vec::new();
            for i in 0..spec.nodes {
                let node = shared.as_ref().map(|shared| SimNode {
                    shared: shared.clone(),
                    id: format!("{name}-{i}"),
                    lease_ms: spec
                        .node_lease_ms
                        .unwrap_or(coordinator::node::NODE_LEASE_MS),
                    transcript: transcript.clone(),
                });
                let mut settings = settings.clone();
                // Each node is published under its own host name.
                settings.config.public_urls = vec![format!("http://{}", node_host(name, i))];
                let sim = SimInstance {
                    settings,
                    settler: settler.clone(),
                    seed: if i == 0 { seed } else { master.gen() },
                    generation: Arc::default(),
                    clock: clock.clone(),
                    host: node_host(name, i),
                    net: net.clone(),
                    process: Arc::default(),
                    crashed: Arc::new(AtomicBool::new(false)),
                    node,
                    retention_cut_ms: Arc::default(),
                };
                sim.start().await?;
                nodes.push(sim);
            }
            let first = nodes.remove(0);
            instances.insert(
                name.clone(),
                InstanceHandle {
                    base_url: sim_url(name),
                    poll_url: sim_url(name),
                    facilitator,
                    driver: Driver::Sim(Box::new(first)),
                    more_nodes: nodes,
                    shared,
                },
            );
        }

        let serving = net.clone();
        let expose = |name: &str, router: axum::Router| {
            simnet::serve(&serving, &sim_host(name), router);
            Ok(sim_url(name))
        };
        let http: Arc<dyn HttpTransport> = Arc::new(simnet::SimHttp::new(&net, "router"));
        let mut world = assemble(
            scenario,
            Parts {
                master,
                transcript,
                http,
                instances,
                epoch_ms,
                worker_clock,
            },
            expose,
        )?;
        world.net = Some(net);
        world.start_workers()?;
        Ok(world)
    }

    /// Builds a live run: one `coordinator` process per instance on
    /// loopback (from `bin`), stubs served on loopback ports, real HTTP and
    /// real WebSockets. Must run in a runtime with I/O enabled.
    pub async fn build_live(
        scenario: &Scenario,
        seed: u64,
        bin: &std::path::Path,
        cluster: Option<&LiveCluster>,
    ) -> Result<Self, String> {
        let epoch_ms = coordinator::Clock::now_ms(&coordinator::SystemClock);
        let (_, transcript, worker_clock) = clocks(epoch_ms);
        let mut master = ChaCha20Rng::seed_from_u64(seed);
        let mut instances = BTreeMap::new();
        for (name, spec) in &scenario.instances {
            let instance_seed: u64 = master.gen();
            let mut args: Vec<String> = vec![
                "--listen".into(),
                "127.0.0.1:0".into(),
                "--network".into(),
                spec.network.clone(),
            ];
            let t = &spec.timing;
            let flags: [(&str, Option<String>); 10] = [
                (
                    "--pending-timeout-ms",
                    t.pending_timeout_ms.map(|v| v.to_string()),
                ),
                ("--lease-ms", t.lease_ms.map(|v| v.to_string())),
                ("--attempts-max", t.attempts_max.map(|v| v.to_string())),
                (
                    "--heartbeat-interval-ms",
                    t.heartbeat_interval_ms.map(|v| v.to_string()),
                ),
                (
                    "--heartbeat-timeout-ms",
                    t.heartbeat_timeout_ms.map(|v| v.to_string()),
                ),
                (
                    "--queue-len-max",
                    spec.limits.queue_len_max.map(|v| v.to_string()),
                ),
                (
                    "--claims-per-minute-max",
                    spec.limits.claims_per_minute_max.map(|v| v.to_string()),
                ),
                (
                    "--finished-jobs-cached-max",
                    spec.limits.finished_jobs_cached_max.map(|v| v.to_string()),
                ),
                (
                    "--kept-bytes-max",
                    spec.limits.kept_bytes_max.map(|v| v.to_string()),
                ),
                (
                    "--retention-hours",
                    spec.retention_hours.map(|v| v.to_string()),
                ),
            ];
            for (flag, value) in flags {
                if let Some(v) = value {
                    args.push(flag.into());
                    args.push(v);
                }
            }
            let mut facilitator = None;
            if let Some(payment) = &spec.payment {
                args.extend([
                    "--payment-required".into(),
                    "--pay-to".into(),
                    payment.pay_to.clone(),
                ]);
                if let Some(script) = payment.facilitator.script() {
                    let stub = testkit::FacilitatorStub::new(&spec.network);
                    stub.set_script(facilitator_script(script));
                    let url = serve_on_loopback(stub.router()).await?;
                    args.extend(["--facilitator-url".into(), url]);
                    facilitator = Some(stub);
                }
            }
            let schema = cluster.map(|_| live_schema(name));
            let mut processes = Vec::new();
            let mut addrs = Vec::new();
            for node in 0..cluster.map_or(1, |c| c.nodes.max(1)) {
                let mut args = args.clone();
                // Nodes draw their ids from seeds of their own.
                let seed = instance_seed.wrapping_add(node as u64).to_string();
                args.extend(["--seed".into(), seed]);
                match (cluster, &schema) {
                    (Some(c), Some(schema)) => args.extend([
                        "--db".into(),
                        c.db.clone(),
                        "--db-schema".into(),
                        schema.clone(),
                        "--node-id".into(),
                        format!("{name}-{node}"),
                    ]),
                    _ => args.extend(["--db".into(), ":memory:".into()]),
                }
                let (process, addr) = start_coordinator(bin, &args).await?;
                let node_name = match cluster {
                    Some(_) => format!("{name} node {node}"),
                    None => name.clone(),
                };
                transcript.log(
                    "harness",
                    format!("started coordinator {node_name} on {addr}"),
                );
                processes.push(process);
                addrs.push(addr);
            }
            instances.insert(
                name.clone(),
                InstanceHandle {
                    base_url: format!("http://{}", addrs[0]),
                    poll_url: format!("http://{}", addrs[addrs.len() - 1]),
                    facilitator,
                    driver: Driver::Live {
                        ws_urls: addrs
                            .iter()
                            .map(|addr| format!("ws://{addr}/v1/workers/ws"))
                            .collect(),
                        _processes: processes,
                    },
                    more_nodes: Vec::new(),
                    shared: None,
                },
            );
        }
        // Stubs get ports before the world exists; `expose` hands out their URLs.
        let mut stub_urls = BTreeMap::new();
        for name in ["provider_a", "provider_b"] {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
            stub_urls.insert(name.to_owned(), listener);
        }
        let http: Arc<dyn HttpTransport> = Arc::new(router::ReqwestTransport::new(30_000));
        let expose = |name: &str, router: axum::Router| {
            let listener = stub_urls
                .remove(name)
                .ok_or_else(|| format!("no port for {name}"))?;
            let addr = listener.local_addr().map_err(|e| e.to_string())?;
            listener.set_nonblocking(true).map_err(|e| e.to_string())?;
            let listener =
                tokio::net::TcpListener::from_std(listener).map_err(|e| e.to_string())?;
            tokio::spawn(async move {
                let _ = axum::serve(listener, router).await;
            });
            Ok(format!("http://{addr}"))
        };
        let mut world = assemble(
            scenario,
            Parts {
                master,
                transcript,
                http,
                instances,
                epoch_ms,
                worker_clock,
            },
            expose,
        )?;
        world.start_workers()?;
        Ok(world)
    }

    fn start_workers(&mut self) -> Result<(), String> {
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

    pub fn start_worker(&mut self, name: &str) -> Result<(), String> {
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
            .ok_or_else(|| format!("no worker {name:?}"))?;
        if w.task.is_some() {
            return Err(format!("worker {name} is already running"));
        }
        let instance = self
            .instances
            .get(&w.instance)
            .ok_or_else(|| format!("no instance {:?}", w.instance))?;
        let transcript = self.transcript.clone();
        let frames = self.frames.clone();
        let trace = w.trace;
        let observer = move |event: &worker_sim::WorkerEvent| {
            use worker_sim::EventKind;
            let quiet = matches!(
                event.kind,
                EventKind::FrameIn { .. } | EventKind::FrameOut { .. } | EventKind::Sleeping { .. }
            );
            if trace || !quiet {
                transcript.log(&event.worker, event.kind.summary());
            }
            let (direction, frame) = match &event.kind {
                EventKind::FrameIn { frame } => (crate::frames::Direction::Received, frame),
                EventKind::FrameOut { frame } => (crate::frames::Direction::Sent, frame),
                _ => return,
            };
            frames.record(&event.worker, direction, frame, transcript.len());
        };
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
                let connector = simnet::SimWsConnector::new(&sim.net, name, url);
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
    pub fn send_scripted(&self, name: &str, text: String) -> Result<(), String> {
        let w = self
            .workers
            .get(name)
            .ok_or_else(|| format!("no worker {name:?}"))?;
        match (&w.task, &w.outbox) {
            (Some(_), Some(outbox)) => outbox
                .send(text)
                .map_err(|_| format!("worker {name} has stopped")),
            _ => Err(format!("worker {name} is not running")),
        }
    }

    /// A receipt for a scripted `result` frame: over its `job_id` and
    /// `output`, signed with the worker's key, completed now.
    pub fn sign_receipt(
        &self,
        name: &str,
        frame: &serde_json::Value,
    ) -> Result<serde_json::Value, String> {
        let w = self
            .workers
            .get(name)
            .ok_or_else(|| format!("no worker {name:?}"))?;
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
        serde_json::to_value(&receipt).map_err(|e| e.to_string())
    }

    /// Kills a worker's task: its connection drops as in a crash.
    pub fn stop_worker(&mut self, name: &str) -> Result<(), String> {
        let w = self
            .workers
            .get_mut(name)
            .ok_or_else(|| format!("no worker {name:?}"))?;
        match w.task.take() {
            Some(task) => {
                task.abort();
                Ok(())
            }
            None => Err(format!("worker {name} is not running")),
        }
    }

    /// A stopped instance answers no HTTP (connection refused) and refuses
    /// new worker connections; connections already open stay open.
    pub fn set_instance_up(&mut self, name: &str, up: bool) -> Result<(), String> {
        let sim = self.sim_instance(name)?;
        sim.net.set_refusing(&sim.host, !up);
        Ok(())
    }

    /// Crashes and restarts a simulated instance on the same database: the
    /// old process writes nothing more and its connections end (as with
    /// `kill -9`), and a new one recovers from what was committed. Workers
    /// reconnect by themselves.
    pub async fn restart_instance(&mut self, name: &str) -> Result<(), String> {
        self.restart_node(name, 0).await
    }

    /// Crashes and restarts node `node` of an instance (0 for a single
    /// coordinator): a node rejoins the shared store under its id and
    /// recovers the jobs it still holds.
    pub async fn restart_node(&mut self, name: &str, node: u32) -> Result<(), String> {
        let sim = self.node(name, node)?;
        sim.crash();
        sim.rejoin().await
    }

    /// Node `node` of an instance: 0 is the driver's.
    pub fn node(&self, name: &str, node: u32) -> Result<SimInstance, String> {
        let first = self.instance_handle(name)?;
        match node {
            0 => Ok(first),
            n => self.instances[name]
                .more_nodes
                .get(n as usize - 1)
                .cloned()
                .ok_or_else(|| format!("instance {name} has no node {n}")),
        }
    }

    /// The base URL of node `node` of an instance.
    pub fn node_url(&self, name: &str, node: u32) -> Result<String, String> {
        match node {
            0 => self.base_url(name),
            n => Ok(format!("http://{}", self.node(name, n)?.host)),
        }
    }

    /// Cuts node `node` from the instance's shared store for `duration_ms`
    /// (then heals it). The node's lease lapses, it fences itself, the
    /// harness crashes it, and it rejoins once the store answers again.
    pub fn partition_node(&self, name: &str, node: u32, duration_ms: u64) -> Result<(), String> {
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
    pub fn lose_answer(&self, name: &str, node: u32) -> Result<(), String> {
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
    ) -> Result<(Arc<MemoryShared>, String), String> {
        let sim = self.node(name, node)?;
        let shared = self.instances[name]
            .shared
            .clone()
            .ok_or_else(|| format!("instance {name} is a single node"))?;
        let id = sim.node.as_ref().map(|n| n.id.clone()).unwrap_or_default();
        Ok((shared, id))
    }

    /// Crashes node `node` of an instance; its supervisor starts it again
    /// `down_ms` later (the others take over its jobs if its lease lapses
    /// meanwhile).
    pub fn crash_node(&self, name: &str, node: u32, down_ms: u64) -> Result<(), String> {
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
    pub async fn graceful_restart_instance(&mut self, name: &str) -> Result<(), String> {
        self.graceful_restart_node(name, 0).await
    }

    /// A graceful restart of one node of an instance.
    pub async fn graceful_restart_node(&mut self, name: &str, node: u32) -> Result<(), String> {
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
    pub async fn crash_after(&mut self, name: &str, write: StoreWrite) -> Result<(), String> {
        let sim = self.sim_instance(name)?;
        let (net, host, crashed) = (sim.net.clone(), sim.host.clone(), sim.crashed.clone());
        sim.wait_running().await?;
        let store = sim.store().ok_or("instance has no database")?;
        store.crash_after(write, move || {
            // Within the write itself: nothing the process does after it
            // reaches a peer.
            net.crash(&host);
            crashed.store(true, Ordering::SeqCst);
        });
        Ok(())
    }

    /// Restarts the instances whose armed crash has fired.
    pub async fn restart_crashed(&mut self) -> Result<(), String> {
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
    ) -> Result<(u32, u32), String> {
        let net = self
            .net
            .clone()
            .ok_or("idle sockets only in the simulation")?;
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

    /// Another handle on a simulated instance, for the fault injectors.
    pub fn instance_handle(&self, name: &str) -> Result<SimInstance, String> {
        match self.instances.get(name).map(|i| &i.driver) {
            Some(Driver::Sim(sim)) => Ok((**sim).clone()),
            Some(Driver::Live { .. }) => Err("faults run only in the simulation".into()),
            None => Err(format!("no instance {name:?}")),
        }
    }

    /// The simulated network (`None` in live runs).
    pub fn net(&self) -> Option<simnet::Net> {
        self.net.clone()
    }

    fn sim_instance(&mut self, name: &str) -> Result<&mut SimInstance, String> {
        let i = self
            .instances
            .get_mut(name)
            .ok_or_else(|| format!("no instance {name:?}"))?;
        match &mut i.driver {
            Driver::Sim(sim) => Ok(sim),
            Driver::Live { .. } => {
                Err("instances can be stopped and restarted only in the simulation".into())
            }
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

    pub fn base_url(&self, instance: &str) -> Result<String, String> {
        self.instances
            .get(instance)
            .map(|i| i.base_url.clone())
            .ok_or_else(|| format!("no instance {instance:?}"))
    }

    /// Where the harness polls a job's status (see [`InstanceHandle::poll_url`]).
    pub fn poll_url(&self, instance: &str) -> Result<String, String> {
        self.instances
            .get(instance)
            .map(|i| i.poll_url.clone())
            .ok_or_else(|| format!("no instance {instance:?}"))
    }

    pub fn epoch_ms(&self) -> i64 {
        self.epoch_ms
    }

    pub fn transport(&self) -> Arc<dyn HttpTransport> {
        self.http.clone()
    }
}

/// Every peer's clock reads `epoch_ms` plus tokio's elapsed time: simulated
/// under a paused runtime, wall time when `epoch_ms` is now and time runs.
fn clocks(epoch_ms: i64) -> (Arc<TokioClock>, Transcript, worker_sim::SharedClock) {
    let clock = Arc::new(TokioClock::new(epoch_ms));
    let transcript = Transcript::new(clock.clone(), epoch_ms);
    let shared: worker_sim::SharedClock = clock.clone();
    (clock, transcript, shared)
}

/// What both drivers have built before the shared assembly.
struct Parts {
    master: ChaCha20Rng,
    transcript: Transcript,
    http: Arc<dyn HttpTransport>,
    instances: BTreeMap<String, InstanceHandle>,
    epoch_ms: i64,
    worker_clock: worker_sim::SharedClock,
}

/// Workers, stubs (exposed by `expose`, which returns their base URL), the
/// payer and the router, drawing seeds in the documented order.
fn assemble(
    scenario: &Scenario,
    parts: Parts,
    mut expose: impl FnMut(&str, axum::Router) -> Result<String, String>,
) -> Result<World, String> {
    let Parts {
        mut master,
        transcript,
        http,
        instances,
        epoch_ms,
        worker_clock,
    } = parts;
    let mut workers = BTreeMap::new();
    for spec in &scenario.workers {
        let mut seeds = || master.gen::<u64>();
        let network = scenario
            .instances
            .get(&spec.instance)
            .map(|instance| instance.network.clone())
            .ok_or_else(|| format!("worker {} names no instance", spec.name))?;
        for mut config in worker_configs(spec, &mut seeds) {
            // A worker serves the network of the instance it joins.
            config.network = network.clone();
            let key_seed = match &spec.key_of {
                None => config.seed,
                Some(other) => workers
                    .get(other)
                    .map(|w: &SimWorker| w.key_seed)
                    .ok_or_else(|| {
                        format!(
                            "worker {}: key_of {other:?} is not an earlier worker",
                            config.name
                        )
                    })?,
            };
            let public_key = worker_sim::KeySource::Seed
                .load(key_seed)
                .map_err(|e| e.to_string())?
                .public_key_hex();
            if workers.contains_key(&config.name) {
                return Err(format!("two workers are named {}", config.name));
            }
            workers.insert(
                config.name.clone(),
                SimWorker {
                    config,
                    instance: spec.instance.clone(),
                    public_key,
                    trace: spec.trace,
                    start: spec.start,
                    node: spec.node,
                    task: None,
                    key_seed,
                    outbox: None,
                },
            );
        }
    }

    let mut stubs = BTreeMap::new();
    let mut stub_bases = BTreeMap::new();
    for name in ["provider_a", "provider_b"] {
        let spec = scenario.stubs.get(name);
        let kind = if name == "provider_a" {
            ProviderKind::OpenAi
        } else {
            ProviderKind::Anthropic
        };
        let stub = ProviderStub::new(
            kind,
            StubConfig {
                seed: master.gen(),
                api_key: stub_key(name),
                faults: spec.map(|s| s.faults.clone()).unwrap_or_default(),
                default_fault: spec.and_then(|s| s.default_fault.clone()),
                ..StubConfig::default()
            },
            worker_clock.clone(),
        );
        let url = expose(name, stub.router())?;
        stub_bases.insert(name.to_owned(), url);
        stubs.insert(name.to_owned(), stub);
    }
    for name in scenario.stubs.keys() {
        if !stubs.contains_key(name) {
            return Err(format!("stub {name:?}: must be provider_a or provider_b"));
        }
    }

    let payer = x402::LocalEvmSigner::from_secret_hex(PAYER_KEY).expect("constant key");
    let payer_rng = ChaCha20Rng::seed_from_u64(master.gen());
    let router_payer_rng = ChaCha20Rng::seed_from_u64(master.gen());
    let coordinator_urls = CoordinatorUrls {
        chain_a: instances
            .get("chain_a")
            .map_or_else(|| sim_url("chain_a"), |i| i.base_url.clone()),
        chain_b: instances
            .get("chain_b")
            .map_or_else(|| sim_url("chain_b"), |i| i.base_url.clone()),
    };
    let mut router_config = router_config(scenario, coordinator_urls, &stub_bases)?;
    if scenario.router.pay {
        let payer: Arc<dyn router::PaymentClient> = Arc::new(router::X402Payer::new(
            payer.clone(),
            worker_clock.clone(),
            router_payer_rng,
        ));
        router_config.payment_clients.chain_a = Some(payer.clone());
        router_config.payment_clients.chain_b = Some(payer);
    }
    let traced = Arc::new(TracedTransport {
        inner: http.clone(),
        transcript: transcript.clone(),
    });
    let router = ComputeRouter::with_transport(router_config, traced);
    let world = World {
        transcript,
        frames: crate::frames::FrameLog::default(),
        http,
        net: None,
        idle_sockets: Vec::new(),
        instances,
        workers,
        stubs,
        router,
        payer,
        payer_rng,
        epoch_ms,
        worker_clock,
        beside: Default::default(),
    };
    Ok(world)
}

/// The scenario payer: anvil/hardhat account #0, a public test key.
pub const PAYER_KEY: &str = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";

/// A payment gate on USDC (Base Sepolia contract and domain) for `network`,
/// settling locally or through the scripted in-process facilitator `stub`.
fn payment_settings(
    spec: &crate::scenario::PaymentSpec,
    network: &str,
    stub: Option<&testkit::FacilitatorStub>,
) -> Result<(x402::PaymentConfig, Arc<dyn x402::Settler>), String> {
    let pay_to = spec
        .pay_to
        .parse()
        .map_err(|e| format!("payment.pay_to: {e}"))?;
    let mut config = x402::PaymentConfig::base_sepolia_usdc(pay_to);
    config.network = network.to_owned();
    spec.apply_asset(&mut config)?;
    let settler: Arc<dyn x402::Settler> = match stub {
        None => Arc::new(x402::LocalSettler),
        Some(stub) => {
            // Only named so the settings validate; calls go to the in-process stub.
            config.facilitator_url = Some(sim_url("facilitator"));
            Arc::new(x402::FacilitatorSettler::new(
                testkit::RouterTransport::new(stub.router()),
                std::time::Duration::from_secs(30),
            ))
        }
    };
    config.validate().map_err(|e| format!("payment: {e}"))?;
    Ok((config, settler))
}

/// A simulated instance: the real coordinator, started through the
/// composition root on an in-memory SQLite database that outlives each
/// process generation, served on the simulated network. Cloning gives
/// another handle on the same instance (fault injectors running beside the
/// steps crash and restart it through theirs).
#[derive(Clone)]
pub struct SimInstance {
    settings: Settings,
    settler: Option<Arc<dyn x402::Settler>>,
    seed: u64,
    generation: Arc<AtomicU64>,
    clock: Arc<TokioClock>,
    host: String,
    net: simnet::Net,
    /// Never held across an await.
    process: Arc<Mutex<Process>>,
    /// Set by an armed crash (`crash_after`).
    crashed: Arc<AtomicBool>,
    /// A node of a several-node instance: started on the shared store.
    node: Option<SimNode>,
    /// The latest retention cut of the generations that ended: finished
    /// jobs created before it may be gone (the safety check's allowance).
    retention_cut_ms: Arc<Mutex<Option<i64>>>,
}

/// What makes a simulated instance one node of several.
#[derive(Clone)]
struct SimNode {
    shared: Arc<MemoryShared>,
    /// `{instance}-{i}`, kept across generations: a restarted node
    /// recovers what it still holds.
    id: String,
    lease_ms: i64,
    /// Where its supervisor says what it did.
    transcript: Transcript,
}

/// How often a fenced node's supervisor tries to start it again (it cannot
/// join while the store is out of reach).
const REJOIN_RETRY_MS: u64 = 1_000;

#[derive(Default)]
struct Process {
    /// The running generation; `None` between a crash and the restart.
    server: Option<Server>,
    /// A crashed generation's store, kept until the next generation has
    /// opened the database (an in-memory database lives while a
    /// connection to it is open).
    keeper: Option<Arc<SqliteStore>>,
    /// A generation is being started (see [`SimInstance::start`]).
    starting: bool,
}

impl SimInstance {
    fn process(&self) -> std::sync::MutexGuard<'_, Process> {
        self.process.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts a generation: a seeded RNG stream of its own, recovery from
    /// the database, serving on the instance's host name.
    /// Starting an instance that runs, or that another caller is starting
    /// (a `reboot` fault's restart beside a step's), does nothing: there is
    /// never more than one generation, as a supervisor keeps one process.
    pub async fn start(&self) -> Result<(), String> {
        {
            let mut process = self.process();
            if process.server.is_some() || process.starting {
                return Ok(());
            }
            process.starting = true;
        }
        let started = self.start_generation().await;
        self.process().starting = false;
        started
    }

    async fn start_generation(&self) -> Result<(), String> {
        let mut rng = ChaCha20Rng::seed_from_u64(self.seed);
        rng.set_stream(self.generation.fetch_add(1, Ordering::SeqCst));
        let parts = server::Parts {
            clock: self.clock.clone(),
            rng,
            runtime: server::Runtime::Simulation,
            settler: self.settler.clone(),
        };
        let mut started = match &self.node {
            None => server::start(self.settings.clone(), parts).await,
            Some(node) => {
                let cluster = coordinator::node::ClusterSettings {
                    url: "memory".into(),
                    schema: None,
                    node_id: node.id.clone(),
                    node_lease_ms: node.lease_ms,
                };
                let shared: Arc<dyn coordinator::cluster::SharedStore> = node.shared.clone();
                server::start_node(self.settings.clone(), parts, cluster, shared).await
            }
        }
        .map_err(|e| e.to_string())?;
        started.serve(self.net.listen(&self.host), |_| {});
        if let Some(fenced) = started.fenced() {
            tokio::spawn(self.clone().supervise(fenced));
        }
        let mut process = self.process();
        process.server = Some(started);
        process.keeper = None;
        self.crashed.store(false, Ordering::SeqCst);
        Ok(())
    }

    /// Kills the running generation: its store writes nothing more, its
    /// tasks stop, and every connection it serves is cut.
    pub fn crash(&self) {
        self.net.crash(&self.host);
        let mut process = self.process();
        if let Some(server) = process.server.take() {
            process.keeper = server.store().cloned();
            self.note_retention_cut(&server);
            server.crash();
        }
    }

    /// Keeps the retention cut of a generation that is ending.
    fn note_retention_cut(&self, server: &Server) {
        let cut = server.coordinator().read(|core| core.retention_cut_ms());
        let mut kept = self
            .retention_cut_ms
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        *kept = (*kept).max(cut);
    }

    /// The latest retention cut of any generation of this instance.
    pub fn retention_cut_ms(&self) -> Option<i64> {
        let running = self
            .process()
            .server
            .as_ref()
            .and_then(|s| s.coordinator().read(|core| core.retention_cut_ms()));
        let ended = *self
            .retention_cut_ms
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        ended.max(running)
    }

    /// A node's supervisor: once the shared store fences the generation,
    /// crashes it (a real node exits) and starts a new one as soon as it
    /// can join again.
    /// (Boxed: it starts generations, which spawn it.)
    fn supervise(
        self,
        fenced: Arc<tokio::sync::Notify>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        Box::pin(async move {
            fenced.notified().await;
            self.crash();
            self.log("fenced by the shared store; crashed");
            tokio::time::sleep(std::time::Duration::from_millis(REJOIN_RETRY_MS)).await;
            // However long the partition lasts.
            while self.rejoin().await.is_err() {}
            self.log("rejoined the shared store");
        })
    }

    /// Starts a generation; a node that cannot join yet (the store is out
    /// of reach, or its own id's lease has not lapsed) is tried again every
    /// [`REJOIN_RETRY_MS`], as a supervisor restarts a process that exited,
    /// for at most [`DOWN_WAIT_MS`].
    pub async fn rejoin(&self) -> Result<(), String> {
        let mut waited_ms = 0;
        loop {
            match self.start().await {
                Err(e) if self.node.is_some() && waited_ms < DOWN_WAIT_MS => {
                    tracing::debug!(error = %e, "node cannot join yet");
                    tokio::time::sleep(std::time::Duration::from_millis(REJOIN_RETRY_MS)).await;
                    waited_ms += REJOIN_RETRY_MS;
                }
                done => return done,
            }
        }
    }

    /// Logs a node's line under its id (nothing for a single coordinator).
    fn log(&self, line: &str) {
        if let Some(node) = &self.node {
            node.transcript.log(&node.id, line);
        }
    }

    /// Stops the running generation gracefully, then ends it as its
    /// process would exit: the store writes nothing more and every
    /// connection still open is cut.
    pub async fn shutdown(&self) {
        let server = {
            let mut process = self.process();
            let server = process.server.take();
            // The in-memory database must outlive the generation.
            process.keeper = server.as_ref().and_then(|s| s.store().cloned());
            server
        };
        let Some(server) = server else { return };
        self.note_retention_cut(&server);
        server.shutdown().await;
        if let Some(store) = &self.process().keeper {
            store.halt();
        }
        self.net.crash(&self.host);
    }

    /// Waits until a generation is running: one that a `reboot` fault
    /// crashed comes back when its downtime ends.
    async fn wait_running(&self) -> Result<(), String> {
        for _ in 0..DOWN_WAIT_MS {
            if self.is_running() {
                return Ok(());
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        Err(format!("instance is not running after {DOWN_WAIT_MS} ms"))
    }

    /// Whether a generation is running.
    pub fn is_running(&self) -> bool {
        self.process().server.is_some()
    }

    /// The current generation's store.
    pub fn store(&self) -> Option<Arc<SqliteStore>> {
        self.process()
            .server
            .as_ref()
            .and_then(|s| s.store().cloned())
    }

    /// The whole-state check of the running generation's core. After each
    /// event the core checks only what the event changed (and the whole
    /// state every few hundred events); a run ends with the whole check.
    pub fn check_core(&self) -> Result<(), String> {
        let Some(c) = self.coordinator() else {
            return Ok(());
        };
        c.read(|core| core.check_invariants(c.now_ms()))
            .map_err(|v| format!("core invariant broken at the end of the run: {v}"))
    }

    /// The current generation's coordinator.
    pub fn coordinator(&self) -> Option<coordinator::Coordinator> {
        self.process()
            .server
            .as_ref()
            .map(|s| s.coordinator().clone())
    }
}

/// The longest an instance action waits for an instance to come back.
pub const DOWN_WAIT_MS: u64 = 60_000;

/// A process-wide unique in-memory database for one instance of one run
/// (runs may share a process, and tests run in parallel threads). The
/// number never reaches a transcript.
fn memdb_path(instance: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("file:/sim-{n}-{instance}?vfs=memdb")
}

pub fn facilitator_script(script: FacilitatorScript) -> testkit::StubScript {
    match script {
        FacilitatorScript::Success => testkit::StubScript::success(),
        FacilitatorScript::InsufficientFunds => testkit::StubScript::insufficient_funds(),
        FacilitatorScript::SettleFailure => {
            testkit::StubScript::settle_failure("unexpected_settle_error")
        }
    }
}

/// The router's HTTP as the transcript shows it: one line per request and
/// one per answer (status only; the router step logs the result).
struct TracedTransport {
    inner: Arc<dyn HttpTransport>,
    transcript: Transcript,
}

impl HttpTransport for TracedTransport {
    fn send(
        &self,
        request: router::HttpRequest,
    ) -> futures_util::future::BoxFuture<'_, Result<router::HttpResponse, router::TransportError>>
    {
        Box::pin(async move {
            let paid = request.headers.iter().any(|(k, _)| {
                k.eq_ignore_ascii_case("x-payment") || k.eq_ignore_ascii_case("payment-signature")
            });
            let note = if paid { " [paid]" } else { "" };
            self.transcript.log(
                "router",
                format!("http > {} {}{note}", request.method, request.url),
            );
            let answer = self.inner.send(request).await;
            match &answer {
                Ok(r) => self
                    .transcript
                    .log("router", format!("http < {}", r.status)),
                Err(e) => self
                    .transcript
                    .log("router", format!("http < transport error: {e}")),
            }
            answer
        })
    }
}

fn router_config(
    scenario: &Scenario,
    coordinator_urls: CoordinatorUrls,
    stub_bases: &BTreeMap<String, String>,
) -> Result<RouterConfig, String> {
    let mut config = RouterConfig::new(coordinator_urls);
    if let Some(p) = &scenario.router.preferred_hosted {
        config.preferred_hosted = p
            .parse::<HostedProvider>()
            .map_err(|e| format!("router.preferred_hosted: {e}"))?;
    }
    config.allow_private_hosted = scenario.router.allow_private_hosted;
    let settings = |name: &str, model: &str| {
        let base = stub_bases
            .get(name)
            .cloned()
            .unwrap_or_else(|| sim_url(name));
        let s = ProviderSettings::new(base, model);
        if scenario.router.missing_keys.iter().any(|k| k == name) {
            s
        } else {
            s.with_api_key(stub_key(name))
        }
    };
    config.hosted.openai = settings("provider_a", "stub-model");
    config.hosted.anthropic = settings("provider_b", "stub-model");
    Ok(config)
}

/// Serves `router` on a free loopback port; returns its base URL.
async fn serve_on_loopback(router: axum::Router) -> Result<String, String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    Ok(format!("http://{addr}"))
}

/// Starts a coordinator process and reads the address it listens on from
/// its first log line; the process is killed when the handle drops.
async fn start_coordinator(
    bin: &std::path::Path,
    args: &[String],
) -> Result<(tokio::process::Child, String), String> {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let mut child = tokio::process::Command::new(bin)
        .args(args)
        .env("RUST_LOG", "warn,coordinator=info")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("starting {}: {e}", bin.display()))?;
    let stderr = child.stderr.take().ok_or("no stderr")?;
    let mut lines = BufReader::new(stderr).lines();
    let wait = async {
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(rest) = line.split("listening on http://").nth(1) {
                let addr: String = rest.chars().take_while(|c| !c.is_whitespace()).collect();
                return Some(addr);
            }
        }
        None
    };
    let addr = tokio::time::timeout(std::time::Duration::from_secs(20), wait)
        .await
        .map_err(|_| "the coordinator did not start within 20 s".to_owned())?
        .ok_or("the coordinator exited before listening")?;
    // Keep draining its log so it never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok((child, addr))
}
