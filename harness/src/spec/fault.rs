//! `[[faults]]` (schema version 2) as data: the injectors a scenario
//! declares. How they run: `run/background/fault.rs`.

use super::SimDuration;
use serde::Deserialize;
use std::fmt;

/// Events one injector applies at most (a bound on `count` and on
/// attrition's losses).
pub const EVENTS_MAX: u32 = 10_000;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultSpec {
    pub name: String,
    pub kind: FaultKind,
    /// When it starts (reboot, partition, delay, hold, provider_errors).
    pub at: Option<SimDuration>,
    /// `[from, to]`: random reboot times, or attrition's active time.
    pub window: Option<[SimDuration; 2]>,
    /// Random reboots inside `window`.
    pub count: Option<u32>,
    /// Attrition: mean time between two losses.
    pub every: Option<SimDuration>,
    /// How long each fault lasts (absent: a lost worker or a network fault
    /// is never repaired; a reboot restarts at once).
    #[serde(rename = "for")]
    pub lasting: Option<SimDuration>,
    /// Attrition: the workers that may be lost (a `count` group's name
    /// stands for all of it); every worker by default.
    #[serde(default)]
    pub workers: Vec<String>,
    /// Reboot: the instance.
    pub instance: Option<String>,
    /// Network faults: a peer (worker, workload, `router`) and a host
    /// (instance or stub), in either order.
    pub between: Option<[String; 2]>,
    /// `delay`: added to every byte on the links.
    pub delay: Option<SimDuration>,
    /// `provider_errors`: the stub and its answer.
    pub stub: Option<String>,
    pub fault: Option<testkit::StubFault>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    Attrition,
    Reboot,
    Partition,
    Delay,
    Hold,
    ProviderErrors,
}

impl FaultKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FaultKind::Attrition => "attrition",
            FaultKind::Reboot => "reboot",
            FaultKind::Partition => "partition",
            FaultKind::Delay => "delay",
            FaultKind::Hold => "hold",
            FaultKind::ProviderErrors => "provider_errors",
        }
    }

    /// The keys a fault of this kind needs, and those it may have, beyond
    /// `name` and `kind`.
    pub fn keys(self) -> (&'static [&'static str], &'static [&'static str]) {
        match self {
            FaultKind::Attrition => (&["every"], &["window", "for", "workers"]),
            FaultKind::Reboot => (&["instance"], &["at", "window", "count", "for"]),
            FaultKind::Partition | FaultKind::Hold => (&["between", "at"], &["for"]),
            FaultKind::Delay => (&["between", "at", "delay"], &["for"]),
            FaultKind::ProviderErrors => (&["stub", "fault", "at"], &["for"]),
        }
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FaultSpec {
    /// The optional keys this fault sets.
    pub fn keys_set(&self) -> Vec<&'static str> {
        let mut keys = Vec::new();
        let mut add = |set: bool, key| {
            if set {
                keys.push(key)
            }
        };
        add(self.at.is_some(), "at");
        add(self.window.is_some(), "window");
        add(self.count.is_some(), "count");
        add(self.every.is_some(), "every");
        add(self.lasting.is_some(), "for");
        add(!self.workers.is_empty(), "workers");
        add(self.instance.is_some(), "instance");
        add(self.between.is_some(), "between");
        add(self.delay.is_some(), "delay");
        add(self.stub.is_some(), "stub");
        add(self.fault.is_some(), "fault");
        keys
    }
}
