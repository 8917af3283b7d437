//! The peers of a simulated run, all in one current-thread runtime: each
//! instance is the real coordinator (`Coordinator` + `app()`), reached over
//! HTTP through the router crate's in-process transport and by workers
//! through in-memory channels into the real session logic; workers are
//! worker-sim workers; hosted providers are worker-sim stubs; the router is
//! the real router crate.
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
    ComputeRouter, CoordinatorUrls, HostedProvider, HttpTransport, InProcessTransport,
    ProviderSettings, RouterConfig,
};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::task::JoinHandle;
use worker_sim::stub::{ProviderKind, ProviderStub, StubConfig};
use worker_sim::{ChannelConnector, Worker, WorkerConfig};

pub struct SimInstance {
    pub coordinator: Coordinator,
    /// The scripted facilitator, when the instance settles through one.
    pub facilitator: Option<x402::FacilitatorStub>,
    pub store: Arc<MemoryStore>,
    pub base_url: String,
    app: axum::Router,
    up: Arc<AtomicBool>,
    connector: ChannelConnector,
}

pub struct SimWorker {
    pub config: WorkerConfig,
    pub instance: String,
    pub public_key: String,
    trace: bool,
    start: bool,
    task: Option<JoinHandle<()>>,
}

pub struct World {
    pub transcript: Transcript,
    pub http: Arc<InProcessTransport>,
    pub instances: BTreeMap<String, SimInstance>,
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
        let clock = Arc::new(TokioClock::new(epoch_ms));
        let transcript = Transcript::new(clock.clone(), epoch_ms);
        let http = Arc::new(InProcessTransport::new());
        let mut master = ChaCha20Rng::seed_from_u64(seed);
        let worker_clock: worker_sim::SharedClock = {
            let c = clock.clone();
            Arc::new(move || coordinator::Clock::now_ms(&*c))
        };

        let mut instances = BTreeMap::new();
        for (name, spec) in &scenario.instances {
            let store = Arc::new(MemoryStore::default());
            let coordinator = Coordinator::new(
                coordinator_config(spec),
                clock.clone(),
                ChaCha20Rng::seed_from_u64(master.gen()),
                store.clone() as Arc<dyn Store>,
            );
            let facilitator = match &spec.payment {
                None => None,
                Some(payment) => {
                    let (gate, stub) = payment_gate(payment, &spec.network)?;
                    coordinator
                        .enable_payments(gate)
                        .map_err(|e| e.to_string())?;
                    stub
                }
            };
            let app = coordinator::app(coordinator.clone());
            let base_url = sim_url(name);
            http.insert(&base_url, app.clone());
            let (connector, mut acceptor) = worker_sim::channel_connector();
            let up = Arc::new(AtomicBool::new(true));
            let (c, accepting) = (coordinator.clone(), up.clone());
            tokio::spawn(async move {
                while let Some(peer) = acceptor.accept().await {
                    // A stopped instance refuses connections: dropping the
                    // peer closes it as the worker sees it.
                    if accepting.load(Ordering::SeqCst) {
                        tokio::spawn(coordinator::session::run(
                            c.clone(),
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
                SimInstance {
                    coordinator,
                    facilitator,
                    store,
                    base_url,
                    app,
                    up,
                    connector,
                },
            );
        }

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
            http.insert(&sim_url(name), stub.router());
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
        let mut router_config = router_config(scenario)?;
        if scenario.router.pay {
            let payer: Arc<dyn router::PaymentClient> = Arc::new(router::X402Payer::new(
                payer.clone(),
                wall_clock(worker_clock.clone()),
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
        let mut world = World {
            transcript,
            http,
            instances,
            workers,
            stubs,
            router,
            payer,
            payer_rng,
            epoch_ms,
            worker_clock,
        };
        let starting: Vec<String> = world
            .workers
            .iter()
            .filter(|(_, w)| w.start)
            .map(|(name, _)| name.clone())
            .collect();
        for name in starting {
            world.start_worker(&name)?;
        }
        Ok(world)
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
        let connector = instance.connector.clone();
        w.task = Some(tokio::spawn(async move {
            let _ = worker.run(connector).await;
        }));
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
        i.up.store(up, Ordering::SeqCst);
        if up {
            self.http.insert(&i.base_url, i.app.clone());
        } else {
            self.http.remove(&i.base_url);
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

/// The scenario payer: anvil/hardhat account #0, a public test key.
pub const PAYER_KEY: &str = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";

/// A payment gate on USDC (Base Sepolia contract and domain) for `network`,
/// settling locally or through a scripted in-process facilitator.
fn payment_gate(
    spec: &crate::scenario::PaymentSpec,
    network: &str,
) -> Result<(x402::PaymentGate, Option<x402::FacilitatorStub>), String> {
    let pay_to = spec
        .pay_to
        .parse()
        .map_err(|e| format!("payment.pay_to: {e}"))?;
    let mut config = x402::PaymentConfig::base_sepolia_usdc(pay_to);
    config.network = network.to_owned();
    let nonces = Arc::new(x402::InMemoryNonceStore::default());
    if spec.facilitator == "local" {
        config.validate().map_err(|e| format!("payment: {e}"))?;
        let gate = x402::PaymentGate::new(config, nonces, Arc::new(x402::LocalSettler));
        return Ok((gate, None));
    }
    let stub = x402::FacilitatorStub::new(network);
    stub.set_script(facilitator_script(&spec.facilitator)?);
    // Only named so the settings validate; calls go to the in-process stub.
    config.facilitator_url = Some(sim_url("facilitator"));
    config.validate().map_err(|e| format!("payment: {e}"))?;
    let settler = x402::FacilitatorSettler::new(
        x402::settle::RouterTransport::new(stub.router()),
        std::time::Duration::from_secs(30),
    );
    let gate = x402::PaymentGate::new(config, nonces, Arc::new(settler));
    Ok((gate, Some(stub)))
}

pub fn facilitator_script(name: &str) -> Result<x402::StubScript, String> {
    match name {
        "success" => Ok(x402::StubScript::success()),
        "insufficient_funds" => Ok(x402::StubScript::insufficient_funds()),
        "settle_failure" => Ok(x402::StubScript::settle_failure("unexpected_settle_error")),
        other => Err(format!(
            "facilitator {other:?}: local, success, insufficient_funds or settle_failure"
        )),
    }
}

/// The router's HTTP as the transcript shows it: one line per request and
/// one per answer (status only; the router step logs the result).
struct TracedTransport {
    inner: Arc<InProcessTransport>,
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

/// The worker-sim clock as the router's wall clock.
fn wall_clock(clock: worker_sim::SharedClock) -> router::WallClock {
    Arc::new(move || clock.now_ms())
}

fn router_config(scenario: &Scenario) -> Result<RouterConfig, String> {
    let mut config = RouterConfig::new(CoordinatorUrls {
        chain_a: sim_url("chain_a"),
        chain_b: sim_url("chain_b"),
    });
    if let Some(p) = &scenario.router.preferred_hosted {
        config.preferred_hosted = p
            .parse::<HostedProvider>()
            .map_err(|e| format!("router.preferred_hosted: {e}"))?;
    }
    config.allow_private_hosted = scenario.router.allow_private_hosted;
    let settings = |name: &str, model: &str| {
        let s = ProviderSettings::new(sim_url(name), model);
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
