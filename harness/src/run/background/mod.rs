//! What runs beside the steps (schema version 2): the workloads and the
//! fault injectors of a scenario, started with the world and stopped when
//! the steps end, and the `wait_until = { workload }` step.
//!
//! Seeds: each workload and each injector draws from its own ChaCha20
//! stream of the run seed, chosen by its kind and name (`workload/load`,
//! `fault/attrition`), never from the master stream the instances, workers
//! and stubs draw from. So adding, removing or reordering workloads and
//! faults changes no other component's draws, and no existing transcript.

pub mod fault;
pub mod workload;

use crate::spec::fault::{FaultKind, FaultSpec};
use crate::spec::{Scenario, WaitWorkload};
use crate::world::{sim_host, World};
use fault::Target;
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::time::Instant;

/// The workloads and injectors of a run, owned by the runner (not by the
/// world: they act on the world, and the world knows nothing of them).
#[derive(Default)]
pub struct Background {
    workloads: BTreeMap<String, workload::Running>,
    faults: Vec<fault::Running>,
    /// Long polls held by `poll` steps with `hold_ms`: each ends by its
    /// wait, so the run waits for them before it is judged.
    held_polls: Vec<tokio::task::JoinHandle<()>>,
}

impl Background {
    /// Keeps a held poll's task until the steps end.
    pub fn hold(&mut self, task: tokio::task::JoinHandle<()>) {
        self.held_polls.push(task);
    }
}

/// A stream of the run seed of its own, named by `label`.
pub fn stream_rng(seed: u64, label: &str) -> ChaCha20Rng {
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    rng.set_stream(fnv1a(label));
    rng
}

/// FNV-1a: a stable hash of a name (the standard hasher may change).
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Starts every workload and injector of `scenario`, in file order.
pub fn start(scenario: &Scenario, world: &World, seed: u64) -> Result<Background, String> {
    let mut background = Background::default();
    if scenario.workloads.is_empty() && scenario.faults.is_empty() {
        return Ok(background);
    }
    let run_start = Instant::now()
        - Duration::from_millis(u64::try_from(world.transcript.elapsed_ms()).unwrap_or(0));
    let bases: BTreeMap<String, String> = world
        .instances
        .iter()
        .map(|(name, i)| (name.clone(), i.base_url.clone()))
        .collect();
    for spec in &scenario.workloads {
        let running = workload::spawn(workload::Setup {
            spec: spec.clone(),
            rng: stream_rng(seed, &format!("workload/{}", spec.name)),
            transport: world.client(&spec.name),
            bases: bases.clone(),
            transcript: world.transcript.clone(),
            acknowledged: world.acknowledged.clone(),
            payer: world.payer.clone(),
            epoch_ms: world.epoch_ms(),
            run_start,
        });
        background.workloads.insert(spec.name.clone(), running);
    }
    for spec in &scenario.faults {
        let target = target(scenario, world, spec)?;
        let rng = stream_rng(seed, &format!("fault/{}", spec.name));
        let running = fault::spawn(
            spec.clone(),
            rng,
            target,
            world.transcript.clone(),
            run_start,
        );
        background.faults.push(running);
    }
    Ok(background)
}

/// What the injector `spec` acts on.
fn target(scenario: &Scenario, world: &World, spec: &FaultSpec) -> Result<Target, String> {
    let net = || world.net().ok_or("faults run only in the simulation");
    Ok(match spec.kind {
        FaultKind::Attrition => {
            let mut workers = BTreeMap::new();
            for w in scenario
                .workers
                .iter()
                .filter(|w| spec.workers.is_empty() || spec.workers.contains(&w.name))
            {
                for name in w.names() {
                    let host = world.worker_host(&name);
                    workers.insert(name, host.unwrap_or_else(|| sim_host(&w.instance)));
                }
            }
            for name in &spec.workers {
                if let Some(host) = world.worker_host(name) {
                    workers.insert(name.clone(), host);
                }
            }
            Target::Workers {
                net: net()?,
                workers,
            }
        }
        FaultKind::Reboot => {
            let name = spec.instance.as_deref().unwrap_or_default();
            Target::Instance(Box::new(world.instance_handle(name)?))
        }
        FaultKind::Partition | FaultKind::Delay | FaultKind::Hold => {
            link_target(scenario, world, spec)?
        }
        FaultKind::ProviderErrors => {
            let name = spec.stub.as_deref().unwrap_or_default();
            let stub = world
                .stubs
                .get(name)
                .ok_or_else(|| format!("no stub {name:?}"))?
                .clone();
            Target::Stub {
                stub,
                fault: spec.fault.clone().ok_or("fault is required")?,
                declared: scenario
                    .stubs
                    .get(name)
                    .and_then(|s| s.default_fault.clone()),
            }
        }
    })
}

/// A network fault's target: the link between the peer and the host of
/// `between` (a worker's link goes to the node it is connected to).
fn link_target(scenario: &Scenario, world: &World, spec: &FaultSpec) -> Result<Target, String> {
    let [a, b] = spec.between.clone().ok_or("between is required")?;
    let is_host = |n: &str| scenario.instances.contains_key(n) || world.stubs.contains_key(n);
    let (peer, host) = if is_host(&b) { (a, b) } else { (b, a) };
    let fault = match spec.kind {
        FaultKind::Partition => simnet::LinkFault::Cut,
        FaultKind::Hold => simnet::LinkFault::Hold,
        _ => simnet::LinkFault::Delay(spec.delay.as_ref().map_or(Duration::ZERO, |d| d.duration)),
    };
    // A worker's link goes to the node it is connected to.
    let dialled = world
        .workers
        .get(&peer)
        .filter(|w| w.instance == host)
        .and_then(|_| world.worker_host(&peer));
    Ok(Target::Link {
        net: world.net().ok_or("faults run only in the simulation")?,
        host: dialled.unwrap_or_else(|| sim_host(&host)),
        peer,
        label: host,
        fault,
    })
}

/// When the steps end: every injector stops and repairs what it broke, in
/// file order; workloads still running stop.
pub async fn stop(background: Background) {
    for running in background.faults {
        running.stop().await;
    }
    for running in background.workloads.values() {
        running.abort();
    }
    for held in background.held_polls {
        let _ = held.await;
    }
}

/// Waits for the workload `name` to finish; the answer counts its commits,
/// answers and job ends.
pub async fn wait(background: &mut Background, wait: &WaitWorkload) -> Result<Value, String> {
    let running = background
        .workloads
        .get_mut(&wait.workload)
        .ok_or_else(|| format!("no workload {:?}", wait.workload))?;
    running.wait(&wait.within).await
}
