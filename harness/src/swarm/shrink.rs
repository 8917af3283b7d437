//! Shrinking: a failing world is reduced, one simplification at a time,
//! while it still fails the same invariant. Greedy and deterministic: the
//! passes below run in a fixed order until none makes progress or the run
//! budget is spent; every candidate is normalized (so it renders as a
//! consistent scenario) and must keep an honest worker per instance.

use super::spec::{Event, Kind, WorldSpec};

/// How many candidate worlds one shrink may run at most.
pub const RUNS_MAX: usize = 600;

/// Reduces `world` while `fails` holds (the same invariant still breaks);
/// returns the smallest world found and the runs spent.
pub fn shrink(world: WorldSpec, mut fails: impl FnMut(&WorldSpec) -> bool) -> (WorldSpec, usize) {
    let mut best = world;
    let mut runs = 0;
    let mut try_candidate = |best: &mut WorldSpec, mut candidate: WorldSpec, runs: &mut usize| {
        candidate.normalize();
        if candidate == *best || !candidate.has_anchors() || *runs >= RUNS_MAX {
            return false;
        }
        *runs += 1;
        if fails(&candidate) {
            *best = candidate;
            true
        } else {
            false
        }
    };
    loop {
        let before = best.clone();
        one_pass(&mut best, &mut |b, c| try_candidate(b, c, &mut runs));
        if best == before || runs >= RUNS_MAX {
            return (best, runs);
        }
    }
}

/// One pass of every simplification, in a fixed order.
fn one_pass(best: &mut WorldSpec, attempt: &mut Try<'_>) {
    remove_large_parts(best, attempt);
    remove_parts(best, attempt);
    simplify_workers(best, attempt);
    simplify_instances(best, attempt);
    simplify_events(best, attempt);
    if best.kinds.has(Kind::Buggify) {
        // Without the fault points, if it fails without them.
        let mut c = best.clone();
        c.kinds.0.retain(|k| *k != Kind::Buggify);
        attempt(best, c);
    }
    for fewer in [0, 1] {
        if best.heal && best.heal_commits > fewer {
            let mut c = best.clone();
            c.heal_commits = fewer;
            attempt(best, c);
        }
    }
}

/// Cheap, large steps first: the heal, the second instance, fewer nodes.
fn remove_large_parts(best: &mut WorldSpec, attempt: &mut Try<'_>) {
    if best.heal {
        let mut c = best.clone();
        c.heal = false;
        attempt(best, c);
    }
    for index in (0..best.instances.len()).rev() {
        if best.instances.len() > 1 {
            let mut c = best.clone();
            c.instances.remove(index);
            attempt(best, c);
        }
    }
    // Fewer nodes, a single coordinator first (normalizing drops the
    // crashes and store cuts of the nodes that are gone).
    for index in 0..best.instances.len() {
        for fewer in 1..best.instances[index].nodes {
            let mut c = best.clone();
            c.instances[index].nodes = fewer;
            if attempt(best, c) {
                break;
            }
        }
    }
}

/// Chunks of events, then one worker, link fault, load, reboot or pairing
/// at a time.
fn remove_parts(best: &mut WorldSpec, attempt: &mut Try<'_>) {
    remove_event_chunks(best, attempt);
    for_each_index(
        best,
        |w| w.workers.len(),
        |w, i| {
            w.workers.remove(i);
        },
        attempt,
    );
    for_each_index(
        best,
        |w| w.link_faults.len(),
        |w, i| {
            w.link_faults.remove(i);
        },
        attempt,
    );
    for_each_index(
        best,
        |w| w.loads.len(),
        |w, i| {
            w.loads.remove(i);
        },
        attempt,
    );
    for_each_index(
        best,
        |w| w.reboots.len(),
        |w, i| {
            w.reboots.remove(i);
        },
        attempt,
    );
    for_each_index(
        best,
        |w| w.pairings.len(),
        |w, i| {
            w.pairings.remove(i);
        },
        attempt,
    );
}

type Try<'a> = dyn FnMut(&mut WorldSpec, WorldSpec) -> bool + 'a;

/// Removes events in chunks of halving size (delta debugging's reduce
/// step), from the end first: later events are less often the cause.
fn remove_event_chunks(best: &mut WorldSpec, attempt: &mut Try<'_>) {
    let mut size = best.events.len().div_ceil(2);
    while size >= 1 {
        let mut start = best.events.len().saturating_sub(size);
        loop {
            if start < best.events.len() {
                let mut c = best.clone();
                let end = (start + size).min(c.events.len());
                // Keep the time the removed events took, so what follows
                // still happens when it did.
                let gap: u64 = c.events[start..end].iter().map(|t| t.after_ms).sum();
                c.events.drain(start..end);
                if let Some(next) = c.events.get_mut(start) {
                    next.after_ms += gap;
                }
                attempt(best, c);
            }
            if start == 0 {
                break;
            }
            start = start.saturating_sub(size);
        }
        if size == 1 {
            break;
        }
        size = size.div_ceil(2);
    }
}

/// Tries removing each element of one list, last first.
fn for_each_index(
    best: &mut WorldSpec,
    len: impl Fn(&WorldSpec) -> usize,
    remove: impl Fn(&mut WorldSpec, usize),
    attempt: &mut Try<'_>,
) {
    let mut i = len(best);
    while i > 0 {
        i -= 1;
        if i < len(best) {
            let mut c = best.clone();
            remove(&mut c, i);
            attempt(best, c);
        }
    }
}

fn simplify_workers(best: &mut WorldSpec, attempt: &mut Try<'_>) {
    for i in 0..best.workers.len() {
        for f in (0..best.workers.get(i).map_or(0, |w| w.faults.len())).rev() {
            let mut c = best.clone();
            c.workers[i].faults.remove(f);
            attempt(best, c);
        }
        let w = &best.workers[i];
        let mut simpler = Vec::new();
        if w.heartbeat.is_some() {
            let mut c = best.clone();
            c.workers[i].heartbeat = None;
            simpler.push(c);
        }
        if w.slots != 1 {
            let mut c = best.clone();
            c.workers[i].slots = 1;
            simpler.push(c);
        }
        if w.latency != "50" {
            let mut c = best.clone();
            c.workers[i].latency = "50".into();
            simpler.push(c);
        }
        if !w.capabilities.is_empty() {
            let mut c = best.clone();
            c.workers[i].capabilities.clear();
            simpler.push(c);
        }
        for c in simpler {
            attempt(best, c);
        }
    }
}

fn simplify_instances(best: &mut WorldSpec, attempt: &mut Try<'_>) {
    for i in 0..best.instances.len() {
        let mut simpler = Vec::new();
        if best.instances[i].payment.is_some() {
            let mut c = best.clone();
            c.instances[i].payment = None;
            simpler.push(c);
        }
        if best.instances[i].payment == Some("success") {
            let mut c = best.clone();
            c.instances[i].payment = Some("local");
            simpler.push(c);
        }
        if best.instances[i].heartbeat_timeout_ms.is_some() {
            let mut c = best.clone();
            c.instances[i].heartbeat_timeout_ms = None;
            simpler.push(c);
        }
        for c in simpler {
            attempt(best, c);
        }
    }
}

/// Makes commits plain (PUBLIC, valid payment) and delays shorter.
fn simplify_events(best: &mut WorldSpec, attempt: &mut Try<'_>) {
    for i in 0..best.events.len() {
        let Some(t) = best.events.get(i) else { break };
        let mut simpler = Vec::new();
        if let Event::Commit(commit) = &t.event {
            if commit.private {
                let mut c = best.clone();
                if let Event::Commit(x) = &mut c.events[i].event {
                    x.private = false;
                }
                simpler.push(c);
            }
            if commit.pay.is_some_and(|p| p != "none") {
                let mut c = best.clone();
                if let Event::Commit(x) = &mut c.events[i].event {
                    x.pay = Some("none");
                }
                simpler.push(c);
            }
        }
        if t.after_ms > 1 {
            let mut c = best.clone();
            c.events[i].after_ms = 0;
            simpler.push(c);
        }
        for c in simpler {
            attempt(best, c);
        }
    }
}
