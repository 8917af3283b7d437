//! What runs beside the steps (schema version 2): the workloads and the
//! fault injectors of a scenario, started with the world and stopped when
//! the steps end, and the `wait_until = { workload }` step.
//!
//! Seeds: each workload and each injector draws from its own ChaCha20
//! stream of the run seed, chosen by its kind and name (`workload/load`,
//! `fault/attrition`), never from the master stream the instances, workers
//! and stubs draw from. So adding, removing or reordering workloads and
//! faults changes no other component's draws, and no existing transcript.

use crate::fault::{self, FaultKind, FaultSpec, Target};
use crate::scenario::{Scenario, SimDuration};
use crate::workload;
use crate::world::{sim_host, World};
use protocol::api::JobStatus;
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::time::Instant;

/// The workloads and injectors of a run.
#[derive(Default)]
pub struct Beside {
    workloads: BTreeMap<String, workload::Running>,
    faults: Vec<fault::Running>,
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
pub fn start(scenario: &Scenario, world: &mut World, seed: u64) -> Result<(), String> {
    if scenario.workloads.is_empty() && scenario.faults.is_empty() {
        return Ok(());
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
            payer: world.payer.clone(),
            epoch_ms: world.epoch_ms(),
            run_start,
        });
        world.beside.workloads.insert(spec.name.clone(), running);
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
        world.beside.faults.push(running);
    }
    Ok(())
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
                for name in crate::check::worker_names(w) {
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
            let [a, b] = spec.between.clone().ok_or("between is required")?;
            let is_host =
                |n: &str| scenario.instances.contains_key(n) || world.stubs.contains_key(n);
            let (peer, host) = if is_host(&b) { (a, b) } else { (b, a) };
            let fault = match spec.kind {
                FaultKind::Partition => simnet::LinkFault::Cut,
                FaultKind::Hold => simnet::LinkFault::Hold,
                _ => simnet::LinkFault::Delay(
                    spec.delay.as_ref().map_or(Duration::ZERO, |d| d.duration),
                ),
            };
            // A worker's link goes to the node it is connected to.
            let dialled = world
                .workers
                .get(&peer)
                .filter(|w| w.instance == host)
                .and_then(|_| world.worker_host(&peer));
            Target::Link {
                net: net()?,
                host: dialled.unwrap_or_else(|| sim_host(&host)),
                peer,
                label: host,
                fault,
            }
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

/// When the steps end: every injector stops and repairs what it broke, in
/// file order; workloads still running stop.
pub async fn stop(world: &mut World) {
    let beside = std::mem::take(&mut world.beside);
    for running in beside.faults {
        running.stop().await;
    }
    for running in beside.workloads.values() {
        running.abort();
    }
}

/// Waits for the workload `name` to finish; the answer counts its commits,
/// answers and job ends.
pub async fn wait(world: &mut World, wait: &WaitWorkload) -> Result<Value, String> {
    let running = world
        .beside
        .workloads
        .get_mut(&wait.workload)
        .ok_or_else(|| format!("no workload {:?}", wait.workload))?;
    running.wait(&wait.within).await
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
    pub fn into_action(self) -> Result<crate::scenario::Action, String> {
        use crate::scenario::{Action, WaitUntil};
        let within = self.within.unwrap_or_else(crate::scenario::default_within);
        match (self.workload, self.job, self.status) {
            (Some(workload), None, None) if self.instance.is_none() => {
                Ok(Action::WaitWorkload(WaitWorkload { workload, within }))
            }
            (Some(_), _, _) => Err(
                "wait_until takes a workload, or a job and a status (and an instance), not both"
                    .into(),
            ),
            (None, Some(job), Some(status)) => Ok(Action::WaitUntil(WaitUntil {
                instance: self.instance.unwrap_or_else(|| "chain_a".into()),
                job,
                status,
                within,
            })),
            (None, None, _) => Err("wait_until needs job (and status) or workload".into()),
            (None, Some(_), None) => Err("wait_until needs status with job".into()),
        }
    }
}
