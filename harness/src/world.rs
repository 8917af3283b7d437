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

        let router = build_router(scenario, &http)?;
        let mut world = World {
            transcript,
            http,
            instances,
            workers,
            stubs,
            router,
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

    pub fn transport(&self) -> Arc<dyn HttpTransport> {
        self.http.clone()
    }
}

fn build_router(
    scenario: &Scenario,
    http: &Arc<InProcessTransport>,
) -> Result<ComputeRouter, String> {
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
    Ok(ComputeRouter::with_transport(config, http.clone()))
}
