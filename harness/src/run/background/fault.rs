//! `[[faults]]` (schema version 2): fault injectors running beside the
//! steps, each on its own seeded RNG stream, each a plan of timed events
//! applied in order on the paused clock:
//! - `attrition`: every `every` (drawn between half and one and a half of
//!   it) a random worker still up loses its connection and cannot reconnect
//!   for `for` (forever without it), as if killed and restarted with the
//!   same key; its job counter and RNG carry on.
//! - `reboot`: the instance crashes and restarts (as the `instance` step's
//!   `restart`) at `at`, or at `count` random times inside `window`,
//!   staying down `for` (0 by default).
//! - `partition`, `delay`, `hold`: the links between the two peers of
//!   `between` are cut (connects refused), delayed by `delay`, or held
//!   (bytes buffered, delivered at the repair), from `at` for `for`.
//! - `provider_errors`: a hosted-provider stub answers with `fault` (429,
//!   500, ...) from `at` for `for`, then returns to its declared default.
//!
//! Times count from the start of the run (the transcript's `+0.000s`).
//! When the steps end, every injector stops and repairs what it broke
//! (lost workers come back, instances down restart, links and stubs heal).

use crate::spec::fault::{FaultKind, FaultSpec, EVENTS_MAX};
use crate::world::transcript::Transcript;
use crate::world::SimInstance;
use rand::Rng;
use rand_chacha::ChaCha20Rng;
use simnet::LinkFault;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// What an injector acts on, handed over by the world.
pub enum Target {
    /// Attrition: the net, and each worker's peer name with the host it connects to.
    Workers {
        net: simnet::Net,
        workers: BTreeMap<String, String>,
    },
    Instance(Box<SimInstance>),
    /// A network fault between a peer and a host.
    Link {
        net: simnet::Net,
        peer: String,
        /// The host's name on the network (`chain-a.sim`).
        host: String,
        /// The host as the scenario names it (`chain_a`).
        label: String,
        fault: LinkFault,
    },
    Stub {
        stub: testkit::ProviderStub,
        /// The burst's answer.
        fault: testkit::StubFault,
        /// Its declared default, restored at the end of the burst.
        declared: Option<testkit::StubFault>,
    },
}

/// One timed event of a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Event {
    /// Attrition: lose a random worker still up.
    Lose,
    /// Attrition: a lost worker comes back.
    Back(String),
    Crash,
    Restart,
    Break,
    Repair,
}

/// A running injector.
pub struct Running {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Stops the injector and waits while it repairs what it broke.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

pub fn spawn(
    spec: FaultSpec,
    rng: ChaCha20Rng,
    target: Target,
    transcript: Transcript,
    run_start: Instant,
) -> Running {
    let (stop, stopped) = watch::channel(false);
    let task = tokio::spawn(run(spec, rng, target, transcript, run_start, stopped));
    Running { stop, task }
}

/// The injector: applies its events in time order until its plan ends or
/// it is stopped, then repairs.
async fn run(
    spec: FaultSpec,
    mut rng: ChaCha20Rng,
    target: Target,
    transcript: Transcript,
    run_start: Instant,
    mut stopped: watch::Receiver<bool>,
) {
    let mut injector = Injector {
        name: spec.name.clone(),
        target,
        transcript,
        down: BTreeSet::new(),
        broken: false,
    };
    let lasting = spec.lasting.as_ref().map(|d| d.duration);
    let window = spec.window.as_ref().map(|[a, b]| (a.duration, b.duration));
    let mut plan = Plan::of(&spec, &mut rng);
    let mut events = 0;
    while let Some((when, event)) = plan.pop() {
        tokio::select! {
            biased;
            _ = stopped.wait_for(|s| *s) => break,
            () = tokio::time::sleep_until(run_start + when) => {}
        }
        events += 1;
        let now = when;
        match event {
            Event::Lose => {
                let until = window.map_or(Duration::MAX, |w| w.1);
                if let Some(worker) = injector.lose(&mut rng) {
                    if let Some(lasting) = lasting {
                        plan.push(now + lasting, Event::Back(worker));
                    }
                }
                let next = now + gap(&spec, &mut rng);
                if next <= until && events < EVENTS_MAX {
                    plan.push(next, Event::Lose);
                }
            }
            event => injector.apply(event).await,
        }
    }
    // Wait for the stop, then repair.
    let _ = stopped.wait_for(|s| *s).await;
    injector.repair_all().await;
}

/// Events by (time from the run start, sequence): a plan, in order.
#[derive(Default)]
struct Plan {
    events: BTreeMap<(Duration, u64), Event>,
    seq: u64,
}

impl Plan {
    /// The injector's first events (attrition's first loss, the reboots,
    /// or the break and its repair), drawn from `rng` in that order.
    fn of(spec: &FaultSpec, rng: &mut ChaCha20Rng) -> Self {
        let mut plan = Plan::default();
        let lasting = spec.lasting.as_ref().map(|d| d.duration);
        let at = spec.at.as_ref().map_or(Duration::ZERO, |d| d.duration);
        let window = spec.window.as_ref().map(|[a, b]| (a.duration, b.duration));
        match spec.kind {
            FaultKind::Attrition => {
                let from = window.map_or(Duration::ZERO, |w| w.0);
                plan.push(from + gap(spec, rng), Event::Lose);
            }
            FaultKind::Reboot => {
                let mut times = Vec::new();
                match window {
                    Some((from, to)) => {
                        for _ in 0..spec.count.unwrap_or(1).min(EVENTS_MAX) {
                            let span =
                                u64::try_from((to.saturating_sub(from)).as_millis()).unwrap_or(0);
                            times.push(from + Duration::from_millis(rng.gen_range(0..=span)));
                        }
                    }
                    None => times.push(at),
                }
                times.sort();
                for t in times {
                    plan.push(t, Event::Crash);
                    plan.push(t + lasting.unwrap_or_default(), Event::Restart);
                }
            }
            _ => {
                plan.push(at, Event::Break);
                if let Some(lasting) = lasting {
                    plan.push(at + lasting, Event::Repair);
                }
            }
        }
        plan
    }

    fn push(&mut self, at: Duration, event: Event) {
        self.events.insert((at, self.seq), event);
        self.seq += 1;
    }

    /// The earliest event left, with its time.
    fn pop(&mut self) -> Option<(Duration, Event)> {
        self.events.pop_first().map(|((at, _), event)| (at, event))
    }
}

/// Attrition's next gap: uniform between half and one and a half of `every`.
fn gap(spec: &FaultSpec, rng: &mut ChaCha20Rng) -> Duration {
    let every = spec
        .every
        .as_ref()
        .map_or(1_000, |d| {
            u64::try_from(d.duration.as_millis()).unwrap_or(1_000)
        })
        .max(1);
    Duration::from_millis(rng.gen_range(every / 2..=every + every / 2).max(1))
}

struct Injector {
    name: String,
    target: Target,
    transcript: Transcript,
    /// Attrition: workers lost and not back yet.
    down: BTreeSet<String>,
    /// A network or stub fault in force, or an instance down.
    broken: bool,
}

impl Injector {
    fn log(&self, text: String) {
        self.transcript
            .log("harness", format!("fault {}: {text}", self.name));
    }

    /// Cuts a random worker still up off its instance; returns its name.
    fn lose(&mut self, rng: &mut ChaCha20Rng) -> Option<String> {
        let Target::Workers { net, workers } = &self.target else {
            return None;
        };
        let up: Vec<&String> = workers.keys().filter(|w| !self.down.contains(*w)).collect();
        if up.is_empty() {
            self.log("no worker left to lose".into());
            return None;
        }
        let worker = up[rng.gen_range(0..up.len())].clone();
        net.set_link_fault(&worker, &workers[&worker], &self.name, Some(LinkFault::Cut));
        self.down.insert(worker.clone());
        self.log(format!("{worker} lost"));
        Some(worker)
    }

    async fn apply(&mut self, event: Event) {
        match (&self.target, event) {
            (Target::Workers { net, workers }, Event::Back(worker)) => {
                net.set_link_fault(&worker, &workers[&worker], &self.name, None);
                self.down.remove(&worker);
                self.log(format!("{worker} back"));
            }
            (Target::Instance(sim), Event::Crash) => {
                self.log("crash".into());
                sim.crash();
                self.broken = true;
            }
            (Target::Instance(sim), Event::Restart) => {
                if let Err(e) = sim.rejoin().await {
                    self.log(format!("restart failed: {e}"));
                    return;
                }
                self.log("restarted".into());
                self.broken = false;
            }
            (
                Target::Link {
                    net,
                    peer,
                    host,
                    label,
                    fault,
                },
                Event::Break,
            ) => {
                net.set_link_fault(peer, host, &self.name, Some(*fault));
                let what = match fault {
                    LinkFault::Cut => "partition".to_owned(),
                    LinkFault::Delay(d) => format!("delay {}ms", d.as_millis()),
                    LinkFault::Hold => "hold".to_owned(),
                };
                self.log(format!("{what} between {peer} and {label}"));
                self.broken = true;
            }
            (
                Target::Link {
                    net,
                    peer,
                    host,
                    label,
                    ..
                },
                Event::Repair,
            ) => {
                net.set_link_fault(peer, host, &self.name, None);
                self.log(format!("repaired between {peer} and {label}"));
                self.broken = false;
            }
            (Target::Stub { stub, fault, .. }, Event::Break) => {
                stub.set_default_fault(Some(fault.clone()));
                self.log(format!("stub answers {}", fault.name()));
                self.broken = true;
            }
            (Target::Stub { stub, declared, .. }, Event::Repair) => {
                stub.set_default_fault(declared.clone());
                self.log("stub healed".into());
                self.broken = false;
            }
            _ => {}
        }
    }

    /// At the end of the steps: lost workers come back, an instance down
    /// restarts, links and stubs heal.
    async fn repair_all(&mut self) {
        let down: Vec<String> = self.down.iter().cloned().collect();
        for worker in down {
            self.apply(Event::Back(worker)).await;
        }
        if self.broken {
            let event = match self.target {
                Target::Instance(_) => Event::Restart,
                _ => Event::Repair,
            };
            self.apply(event).await;
        }
    }
}
