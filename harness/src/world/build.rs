//! Building a world's peers: the simulated instances (`World::build`), and
//! what both drivers share (`assemble`: workers, stubs, the payer and the
//! router), drawing seeds from the master RNG in the documented order.

use super::settlements::SettleLedger;
use super::*;
use crate::spec::names::STUB_NAMES;

impl World {
    /// Builds every peer; must run inside the simulation runtime.
    pub async fn build(scenario: &Scenario, seed: u64) -> Result<Self, WorldError> {
        let epoch_ms = scenario.epoch_ms()?;
        let (clock, transcript, worker_clock) = clocks(epoch_ms);
        let net = simnet::Net::new();
        let mut master = ChaCha20Rng::seed_from_u64(seed);

        let mut instances = BTreeMap::new();
        for (name, spec) in &scenario.instances {
            let sim = SimPeers {
                clock: &clock,
                transcript: &transcript,
                net: &net,
            };
            let handle = sim_instance(name, spec, &mut master, sim).await?;
            instances.insert(name.clone(), handle);
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
                seed,
            },
            expose,
        )?;
        world.net = Some(net);
        world.start_workers()?;
        Ok(world)
    }
}

/// What every simulated instance of a world shares.
struct SimPeers<'a> {
    clock: &'a Arc<TokioClock>,
    transcript: &'a Transcript,
    net: &'a simnet::Net,
}

/// Starts simulated instance `name` (each of its nodes), drawing its seed
/// (and one per further node, in node order) from `master`.
async fn sim_instance(
    name: &str,
    spec: &Instance,
    master: &mut ChaCha20Rng,
    peers: SimPeers<'_>,
) -> Result<InstanceHandle, String> {
    let seed: u64 = master.gen();
    let facilitator = match spec.payment.as_ref().and_then(|p| p.facilitator.script()) {
        Some(script) => {
            let stub = testkit::FacilitatorStub::new(&spec.network);
            stub.set_script(facilitator_script(script));
            Some(stub)
        }
        None => None,
    };
    let (settings, settler) = sim_settings(name, spec, facilitator.as_ref())?;
    let settlements = settler.as_ref().map(|_| SettleLedger::default());
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
            transcript: peers.transcript.clone(),
        });
        let crashed = Arc::new(AtomicBool::new(false));
        let settler = recording(&settler, &settlements, &crashed, peers.clock);
        let mut settings = settings.clone();
        // Each node is published under its own host name.
        settings.config.public_urls = vec![format!("http://{}", node_host(name, i))];
        let sim = SimInstance {
            settings,
            settler,
            seed: if i == 0 { seed } else { master.gen() },
            generation: Arc::default(),
            clock: peers.clock.clone(),
            host: node_host(name, i),
            net: peers.net.clone(),
            process: Arc::default(),
            crashed,
            settlements: settlements.clone(),
            node,
            http_bounds: spec.http_bounds,
        };
        sim.start().await?;
        nodes.push(sim);
    }
    let first = nodes.remove(0);
    Ok(InstanceHandle {
        base_url: sim_url(name),
        poll_url: sim_url(name),
        facilitator,
        settlements,
        driver: Driver::Sim(Box::new(first)),
        more_nodes: nodes,
        shared,
        user_suffix: None,
    })
}

/// How long the `slow_settle` facilitator takes to answer a `/settle`, ms.
pub(super) const SLOW_SETTLE_MS: u64 = 20_000;

/// A node's settler: its settlements go through the instance's ledger,
/// and none leaves the node once it crashed.
fn recording(
    settler: &Option<Arc<dyn x402::Settler>>,
    settlements: &Option<SettleLedger>,
    crashed: &Arc<AtomicBool>,
    clock: &Arc<TokioClock>,
) -> Option<Arc<dyn x402::Settler>> {
    let inner = settler.clone()?;
    let ledger = settlements.clone().unwrap_or_default();
    let crashed = crashed.clone();
    let recorder = super::settlements::RecordingSettler {
        inner,
        ledger,
        crashed,
        clock: clock.clone(),
    };
    Some(Arc::new(recorder))
}

/// The settings every node of simulated instance `name` starts from, and
/// how it settles payments.
fn sim_settings(
    name: &str,
    spec: &Instance,
    facilitator: Option<&testkit::FacilitatorStub>,
) -> Result<(Settings, Option<Arc<dyn x402::Settler>>), String> {
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
        let (config, s) = payment_settings(payment, &spec.network, facilitator)?;
        settings.payment = Some(config);
        settler = Some(s);
    }
    Ok((settings, settler))
}

pub fn coordinator_config(instance: &Instance) -> Config {
    let mut config = Config {
        network: instance.network.clone(),
        user_auth: instance.user_auth.config(),
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
    if let Some(v) = t.pairing_code_ttl_ms {
        ct.pairing_code_ttl_ms = v;
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
    if let Some(v) = instance.limits.held_polls_per_client_max {
        config.limits.held_polls_per_client_max = v;
    }
    if let Some(v) = instance.limits.finished_jobs_cached_max {
        config.limits.finished_jobs_cached_max = v;
    }
    if let Some(v) = instance.limits.kept_bytes_max {
        config.limits.kept_bytes_max = v;
    }
    if let Some(v) = instance.limits.kept_share_per_client_percent {
        config.limits.kept_share_per_client_percent = v;
    }
    if let Some(v) = instance.limits.queued_bytes_max {
        config.limits.queued_bytes_max = v;
    }
    if let Some(v) = instance.limits.queued_bytes_per_client_max {
        config.limits.queued_bytes_per_client_max = v;
    }
    if let Some(v) = instance.limits.claims_per_minute_max {
        config.limits.claim_failures_per_client_per_minute_max = v;
    }
    http_bounds(instance, &mut config);
    config
}

/// The connection bounds an `http_bounds` instance serves with, and the
/// per-address worker sessions of any instance.
fn http_bounds(instance: &Instance, config: &mut Config) {
    if let Some(v) = instance.timing.http_head_timeout_ms {
        config.timing.http_head_timeout_ms = v;
    }
    if let Some(v) = instance.limits.http_connections_max {
        config.limits.http_connections_max = v;
    }
    if let Some(v) = instance.limits.http_connections_per_client_max {
        config.limits.http_connections_per_client_max = v;
    }
    if let Some(v) = instance.limits.worker_sessions_per_client_max {
        config.limits.worker_sessions_per_client_max = v;
    }
    if let Some(v) = instance.limits.worker_slots_per_client_max {
        config.limits.worker_slots_per_client_max = v;
    }
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
                stream: spec.stream,
                ..WorkerConfig::default()
            }
        })
        .collect()
}

pub fn stub_key(name: &str) -> String {
    format!("sk-sim-{name}")
}

/// Every peer's clock reads `epoch_ms` plus tokio's elapsed time: simulated
/// under a paused runtime, wall time when `epoch_ms` is now and time runs.
pub(super) fn clocks(epoch_ms: i64) -> (Arc<TokioClock>, Transcript, worker_sim::SharedClock) {
    let clock = Arc::new(TokioClock::new(epoch_ms));
    let transcript = Transcript::new(clock.clone(), epoch_ms);
    let shared: worker_sim::SharedClock = clock.clone();
    (clock, transcript, shared)
}

/// What both drivers have built before the shared assembly.
pub(super) struct Parts {
    pub(super) master: ChaCha20Rng,
    pub(super) transcript: Transcript,
    pub(super) http: Arc<dyn HttpTransport>,
    pub(super) instances: BTreeMap<String, InstanceHandle>,
    pub(super) epoch_ms: i64,
    pub(super) worker_clock: worker_sim::SharedClock,
    /// The run's seed: user keys derive from it (`users`), not from `master`.
    pub(super) seed: u64,
}

/// Workers, stubs (exposed by `expose`, which returns their base URL), the
/// payer and the router, drawing seeds in the documented order.
pub(super) fn assemble(
    scenario: &Scenario,
    parts: Parts,
    expose: impl FnMut(&str, axum::Router) -> Result<String, String>,
) -> Result<World, String> {
    let Parts {
        mut master,
        transcript,
        http,
        instances,
        epoch_ms,
        worker_clock,
        seed,
    } = parts;
    let workers = sim_workers(scenario, &mut master)?;
    let (stubs, stub_bases) = provider_stubs(scenario, &mut master, &worker_clock, expose)?;
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
        frames: frames::FrameLog::default(),
        acknowledged: Default::default(),
        streams: Default::default(),
        held_polls: Default::default(),
        malformed: Default::default(),
        proofs: Default::default(),
        trust: Default::default(),
        codes: Default::default(),
        paid_commits: Default::default(),
        edge_deadlines: BTreeMap::new(),
        http,
        net: None,
        idle_sockets: Vec::new(),
        instances,
        workers,
        stubs,
        router,
        payer,
        payer_rng,
        users: users::Users::new(seed, &scenario.user_chains()),
        epoch_ms,
        worker_clock,
    };
    Ok(world)
}

/// The simulated workers, each config's seeds drawn from `master` in file order.
fn sim_workers(
    scenario: &Scenario,
    master: &mut ChaCha20Rng,
) -> Result<BTreeMap<String, SimWorker>, String> {
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
                    client: spec.client.clone(),
                },
            );
        }
    }
    Ok(workers)
}

/// The hosted-provider stubs (`provider_a` speaks OpenAI, `provider_b`
/// Anthropic), each exposed by `expose`, which returns its base URL.
type Stubs = (BTreeMap<String, ProviderStub>, BTreeMap<String, String>);

fn provider_stubs(
    scenario: &Scenario,
    master: &mut ChaCha20Rng,
    worker_clock: &worker_sim::SharedClock,
    mut expose: impl FnMut(&str, axum::Router) -> Result<String, String>,
) -> Result<Stubs, String> {
    let mut stubs = BTreeMap::new();
    let mut stub_bases = BTreeMap::new();
    for name in STUB_NAMES {
        let spec = scenario.stubs.get(name);
        let kind = if name == STUB_NAMES[0] {
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
            return Err(format!(
                "stub {name:?}: must be {}",
                STUB_NAMES.join(" or ")
            ));
        }
    }
    Ok((stubs, stub_bases))
}

/// The scenario payer: anvil/hardhat account #0, a public test key.
pub const PAYER_KEY: &str = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";

/// A payment gate on USDC (Base Sepolia contract and domain) for `network`,
/// settling locally or through the scripted in-process facilitator `stub`.
pub(super) fn payment_settings(
    spec: &crate::spec::PaymentSpec,
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

pub fn facilitator_script(script: FacilitatorScript) -> testkit::StubScript {
    match script {
        FacilitatorScript::Success => testkit::StubScript::success(),
        FacilitatorScript::InsufficientFunds => testkit::StubScript::insufficient_funds(),
        FacilitatorScript::SettleFailure => {
            testkit::StubScript::settle_failure("unexpected_settle_error")
        }
        FacilitatorScript::RefuseSettle => {
            testkit::StubScript::settle_failure("insufficient_funds")
        }
        FacilitatorScript::SlowSettle => {
            testkit::StubScript::settle_delay(std::time::Duration::from_millis(SLOW_SETTLE_MS))
        }
        FacilitatorScript::LoseSettle => testkit::StubScript::settle_lost_once(),
        FacilitatorScript::SpentElsewhere => testkit::StubScript::settle_spent_elsewhere_once(),
    }
}

/// The router's HTTP as the transcript shows it: one line per request and
/// one per answer (status only; the router step logs the result).
pub(super) struct TracedTransport {
    pub(super) inner: Arc<dyn HttpTransport>,
    pub(super) transcript: Transcript,
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

pub(super) fn router_config(
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A finished world frees its instances' stores: nothing the store
    /// keeps (its crash hooks) may hold the instance that keeps the store,
    /// or every world of a swarm leaks (about 2 MB a seed).
    #[test]
    fn a_dropped_world_frees_its_store() {
        let scenario = crate::spec::Scenario::parse(
            r#"
schema_version = 2
name = "frees"
seed = 1
live = false
buggify = true

[instances.chain_a]
network = "eip155:84532"
payment = { facilitator = "success" }

[[steps]]
advance = "1ms"
"#,
        )
        .expect("a valid scenario");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("a runtime");
        let store = runtime.block_on(async {
            let mut world = World::build(&scenario, 1).await.expect("a world");
            world
                .crash_after("chain_a", StoreWrite::Commit)
                .await
                .expect("armed");
            let sim = world.node("chain_a", 0).expect("one node");
            let store = std::sync::Arc::downgrade(&sim.store().expect("a store"));
            drop((sim, world));
            store
        });
        drop(runtime);
        assert!(store.upgrade().is_none(), "the store outlived its world");
    }
}
