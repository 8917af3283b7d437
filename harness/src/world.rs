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

use crate::scenario::{Instance, Scenario, WorkerSpec};
use crate::transcript::Transcript;
use coordinator::config::Config;
use coordinator::session::ChannelConnection;
use coordinator::store::{MemoryStore, Store};
use coordinator::{Coordinator, TokioClock};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;
use router::{
    ComputeRouter, CoordinatorUrls, HostedProvider, HttpTransport, ProviderSettings, RouterConfig,
};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use testkit::{InProcessTransport, ProviderKind, ProviderStub, StubConfig};
use tokio::task::JoinHandle;
use worker_sim::{ChannelConnector, Worker, WorkerConfig};

pub struct InstanceHandle {
    pub base_url: String,
    /// The scripted facilitator, when the instance settles through one.
    pub facilitator: Option<testkit::FacilitatorStub>,
    pub driver: Driver,
}

/// How an instance runs.
pub enum Driver {
    Sim(Box<SimInstance>),
    Live {
        ws_url: String,
        /// Killed when dropped.
        _process: Box<tokio::process::Child>,
    },
}

pub struct SimWorker {
    pub config: WorkerConfig,
    pub instance: String,
    pub public_key: String,
    trace: bool,
    start: bool,
    task: Option<JoinHandle<()>>,
}

impl SimWorker {
    /// Whether it connects when the run starts.
    pub fn starts(&self) -> bool {
        self.start
    }
}

pub struct World {
    pub transcript: Transcript,
    pub http: Arc<dyn HttpTransport>,
    /// The simulation's transport, to take instances down and up.
    in_process: Option<Arc<InProcessTransport>>,
    pub instances: BTreeMap<String, InstanceHandle>,
    pub workers: BTreeMap<String, SimWorker>,
    pub stubs: BTreeMap<String, ProviderStub>,
    pub router: ComputeRouter,
    /// Pays 402 answers of `pay` steps (and the router's, with `router.pay`).
    pub payer: x402::LocalEvmSigner,
    pub payer_rng: ChaCha20Rng,
    epoch_ms: i64,
    worker_clock: worker_sim::SharedClock,
}

/// `chain_a` -> `http://chain-a.sim`.
pub fn sim_url(name: &str) -> String {
    format!("http://{}.sim", name.replace('_', "-"))
}

pub fn coordinator_config(instance: &Instance) -> Config {
    let mut config = Config {
        network: instance.network.clone(),
        ..Config::default()
    };
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
    if let Some(v) = instance.limits.claims_per_minute_max {
        config.limits.claims_per_minute_max = v;
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
    pub fn build(scenario: &Scenario, seed: u64) -> Result<Self, String> {
        let epoch_ms = scenario.epoch_ms()?;
        let (clock, transcript, worker_clock) = clocks(epoch_ms);
        let http = Arc::new(InProcessTransport::new());
        let mut master = ChaCha20Rng::seed_from_u64(seed);

        let mut instances = BTreeMap::new();
        for (name, spec) in &scenario.instances {
            let seed: u64 = master.gen();
            let (store, nonces): (Arc<dyn Store>, Arc<dyn x402::NonceStore>) =
                match spec.store.as_str() {
                    "memory" => (
                        Arc::new(MemoryStore::default()),
                        Arc::new(x402::InMemoryNonceStore::default()),
                    ),
                    _ => {
                        let db = Arc::new(
                            coordinator::sqlite::SqliteStore::open_in_memory()
                                .map_err(|e| format!("{name}: {e}"))?,
                        );
                        (db.clone(), db)
                    }
                };
            let facilitator = match &spec.payment {
                Some(payment) if payment.facilitator != "local" => {
                    let stub = testkit::FacilitatorStub::new(&spec.network);
                    stub.set_script(facilitator_script(&payment.facilitator)?);
                    Some(stub)
                }
                _ => None,
            };
            let fence = Arc::new(Fenced::new(store.clone()));
            let config = coordinator_config(spec);
            let coordinator = Coordinator::new(
                config.clone(),
                clock.clone(),
                ChaCha20Rng::seed_from_u64(seed),
                fence.clone(),
            );
            if let Some(payment) = &spec.payment {
                let gate =
                    payment_gate(payment, &spec.network, nonces.clone(), facilitator.as_ref())?;
                coordinator
                    .enable_payments(gate)
                    .map_err(|e| e.to_string())?;
            }
            let app = coordinator::app(coordinator.clone());
            let base_url = sim_url(name);
            http.insert(&base_url, app.clone());
            let (connector, mut acceptor) = worker_sim::channel_connector();
            let up = Arc::new(AtomicBool::new(true));
            let current = Arc::new(std::sync::Mutex::new(coordinator));
            let (serving, accepting) = (current.clone(), up.clone());
            tokio::spawn(async move {
                while let Some(peer) = acceptor.accept().await {
                    // A stopped instance refuses connections: dropping the
                    // peer closes it as the worker sees it.
                    if accepting.load(Ordering::SeqCst) {
                        let c = serving.lock().expect("instance lock").clone();
                        tokio::spawn(coordinator::session::run(
                            c,
                            ChannelConnection {
                                from_worker: peer.from_worker,
                                to_worker: peer.to_worker,
                            },
                        ));
                    }
                }
            });
            instances.insert(
                name.clone(),
                InstanceHandle {
                    base_url,
                    facilitator,
                    driver: Driver::Sim(Box::new(SimInstance {
                        config,
                        payment: spec.payment.clone(),
                        seed,
                        generation: 0,
                        clock: clock.clone(),
                        store,
                        nonces,
                        fence,
                        current,
                        app,
                        up,
                        connector,
                    })),
                },
            );
        }

        let in_process = http.clone();
        let expose = |name: &str, router: axum::Router| {
            let url = sim_url(name);
            in_process.insert(&url, router);
            Ok(url)
        };
        let mut world = assemble(
            scenario,
            Parts {
                master,
                transcript,
                http: http.clone(),
                instances,
                epoch_ms,
                worker_clock,
            },
            expose,
        )?;
        world.in_process = Some(http);
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
                "--db".into(),
                ":memory:".into(),
                "--seed".into(),
                instance_seed.to_string(),
            ];
            let t = &spec.timing;
            let flags: [(&str, Option<String>); 7] = [
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
                if payment.facilitator != "local" {
                    let stub = testkit::FacilitatorStub::new(&spec.network);
                    stub.set_script(facilitator_script(&payment.facilitator)?);
                    let url = serve_on_loopback(stub.router()).await?;
                    args.extend(["--facilitator-url".into(), url]);
                    facilitator = Some(stub);
                }
            }
            let (process, addr) = start_coordinator(bin, &args).await?;
            transcript.log("harness", format!("started coordinator {name} on {addr}"));
            instances.insert(
                name.clone(),
                InstanceHandle {
                    base_url: format!("http://{addr}"),
                    facilitator,
                    driver: Driver::Live {
                        ws_url: format!("ws://{addr}/v1/workers/ws"),
                        _process: Box::new(process),
                    },
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

    pub fn start_worker(&mut self, name: &str) -> Result<(), String> {
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
        };
        let mut worker = Worker::new(w.config.clone(), self.worker_clock.clone())
            .map_err(|e| e.to_string())?
            .with_observer(Arc::new(observer));
        w.task = Some(match &instance.driver {
            Driver::Sim(sim) => {
                let connector = sim.connector.clone();
                tokio::spawn(async move {
                    let _ = worker.run(connector).await;
                })
            }
            Driver::Live { ws_url, .. } => {
                let connector = worker_sim::WsConnector::new(ws_url.clone());
                tokio::spawn(async move {
                    let _ = worker.run(connector).await;
                })
            }
        });
        Ok(())
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
    /// new worker connections; sessions already open stay open.
    pub fn set_instance_up(&mut self, name: &str, up: bool) -> Result<(), String> {
        let i = self
            .instances
            .get(name)
            .ok_or_else(|| format!("no instance {name:?}"))?;
        let (Driver::Sim(sim), Some(http)) = (&i.driver, &self.in_process) else {
            return Err("instances can be stopped only in the simulation".into());
        };
        sim.up.store(up, Ordering::SeqCst);
        if up {
            http.insert(&i.base_url, sim.app.clone());
        } else {
            http.remove(&i.base_url);
        }
        Ok(())
    }

    /// Crashes and restarts a simulated instance on the same store: the old
    /// coordinator writes nothing more (as a killed process), its worker
    /// sessions close, and a new one recovers from the store. Workers
    /// reconnect by themselves.
    pub async fn restart_instance(&mut self, name: &str) -> Result<(), String> {
        let i = self
            .instances
            .get_mut(name)
            .ok_or_else(|| format!("no instance {name:?}"))?;
        let Driver::Sim(sim) = &mut i.driver else {
            return Err("instances can be restarted only in the simulation".into());
        };
        let app = sim.restart(i.facilitator.as_ref()).await?;
        if let (true, Some(http)) = (sim.up.load(Ordering::SeqCst), &self.in_process) {
            http.insert(&i.base_url, app);
        }
        Ok(())
    }

    pub fn base_url(&self, instance: &str) -> Result<String, String> {
        self.instances
            .get(instance)
            .map(|i| i.base_url.clone())
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
        for config in worker_configs(spec, &mut seeds) {
            let public_key = Worker::new(config.clone(), worker_clock.clone())
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
                    task: None,
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
        http,
        in_process: None,
        instances,
        workers,
        stubs,
        router,
        payer,
        payer_rng,
        epoch_ms,
        worker_clock,
    };
    Ok(world)
}

/// The scenario payer: anvil/hardhat account #0, a public test key.
pub const PAYER_KEY: &str = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";

/// A payment gate on USDC (Base Sepolia contract and domain) for `network`,
/// settling locally or through the scripted in-process facilitator `stub`.
fn payment_gate(
    spec: &crate::scenario::PaymentSpec,
    network: &str,
    nonces: Arc<dyn x402::NonceStore>,
    stub: Option<&testkit::FacilitatorStub>,
) -> Result<x402::PaymentGate, String> {
    let pay_to = spec
        .pay_to
        .parse()
        .map_err(|e| format!("payment.pay_to: {e}"))?;
    let mut config = x402::PaymentConfig::base_sepolia_usdc(pay_to);
    config.network = network.to_owned();
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
    Ok(x402::PaymentGate::new(config, nonces, settler))
}

/// A simulated instance: the real coordinator over a store that outlives
/// it, so a restart recovers what the crashed generation made durable.
pub struct SimInstance {
    config: Config,
    payment: Option<crate::scenario::PaymentSpec>,
    seed: u64,
    generation: u64,
    clock: Arc<TokioClock>,
    /// What every generation opens (SQLite in memory unless `store = "memory"`).
    pub store: Arc<dyn Store>,
    nonces: Arc<dyn x402::NonceStore>,
    /// The current generation's way to the store.
    fence: Arc<Fenced>,
    current: Arc<std::sync::Mutex<Coordinator>>,
    app: axum::Router,
    up: Arc<AtomicBool>,
    connector: ChannelConnector,
}

impl SimInstance {
    async fn restart(
        &mut self,
        facilitator: Option<&testkit::FacilitatorStub>,
    ) -> Result<axum::Router, String> {
        // A killed process writes nothing more; its sessions' clean-up is lost with it.
        self.fence.alive.store(false, Ordering::SeqCst);
        let old = self.current.lock().expect("instance lock").clone();
        old.shutdown();
        self.generation += 1;
        let mut rng = ChaCha20Rng::seed_from_u64(self.seed);
        rng.set_stream(self.generation);
        let fence = Arc::new(Fenced::new(self.store.clone()));
        let new = Coordinator::open(self.config.clone(), self.clock.clone(), rng, fence.clone())
            .await
            .map_err(|e| format!("restart: {e}"))?;
        if let Some(payment) = &self.payment {
            let gate = payment_gate(
                payment,
                &self.config.network,
                self.nonces.clone(),
                facilitator,
            )?;
            new.enable_payments(gate).map_err(|e| e.to_string())?;
        }
        self.fence = fence;
        *self.current.lock().expect("instance lock") = new.clone();
        self.app = coordinator::app(new);
        Ok(self.app.clone())
    }
}

/// A store that stops writing when its coordinator generation crashes.
struct Fenced {
    inner: Arc<dyn Store>,
    alive: AtomicBool,
}

impl Fenced {
    fn new(inner: Arc<dyn Store>) -> Self {
        Self {
            inner,
            alive: AtomicBool::new(true),
        }
    }
}

impl Store for Fenced {
    fn apply(
        &self,
        changes: &[coordinator::core::Change],
    ) -> Result<(), coordinator::store::StoreError> {
        if self.alive.load(Ordering::SeqCst) {
            self.inner.apply(changes)
        } else {
            Ok(())
        }
    }

    fn flush(
        &self,
    ) -> std::pin::Pin<
        Box<
            dyn std::future::Future<Output = Result<(), coordinator::store::StoreError>>
                + Send
                + '_,
        >,
    > {
        self.inner.flush()
    }

    fn load(&self) -> Result<coordinator::store::Snapshot, coordinator::store::StoreError> {
        self.inner.load()
    }
}

pub fn facilitator_script(name: &str) -> Result<testkit::StubScript, String> {
    match name {
        "success" => Ok(testkit::StubScript::success()),
        "insufficient_funds" => Ok(testkit::StubScript::insufficient_funds()),
        "settle_failure" => Ok(testkit::StubScript::settle_failure(
            "unexpected_settle_error",
        )),
        other => Err(format!(
            "facilitator {other:?}: local, success, insufficient_funds or settle_failure"
        )),
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
