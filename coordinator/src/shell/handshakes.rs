//! Places for unauthenticated connections: bounded in total and per client
//! address, so one client cannot lock every worker out of the handshake;
//! and places for established worker sessions, bounded per client address
//! in sessions and in slots (issue 29, finding 7: worker keys are free, so
//! the bound on one address's fake workers is the address's).

use super::Coordinator;
use crate::resources::Figure;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// One unauthenticated connection's place, in total and for its client;
/// given back when dropped (the handshake ended either way).
pub struct HandshakePermit {
    _global: tokio::sync::OwnedSemaphorePermit,
    client: String,
    counts: Arc<Mutex<BTreeMap<String, usize>>>,
}

impl Drop for HandshakePermit {
    fn drop(&mut self) {
        let mut counts = lock_counts(&self.counts);
        if let Some(count) = counts.get_mut(&self.client) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.client);
            }
        }
    }
}

fn lock_counts(m: &Mutex<BTreeMap<String, usize>>) -> MutexGuard<'_, BTreeMap<String, usize>> {
    // Plain counters: a panic elsewhere leaves them consistent.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl HandshakePermit {
    /// The client address (IPv6 by /64) the connection came from.
    pub fn client(&self) -> &str {
        &self.client
    }
}

/// One established worker session's place for its client address: one
/// session and its slots, given back when dropped (the session ended).
pub struct WorkerPlace {
    client: String,
    slots: u32,
    counts: Arc<Mutex<BTreeMap<String, (usize, u32)>>>,
}

impl Drop for WorkerPlace {
    fn drop(&mut self) {
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((sessions, slots)) = counts.get_mut(&self.client) {
            *sessions -= 1;
            *slots -= self.slots;
            if *sessions == 0 {
                counts.remove(&self.client);
            }
        }
    }
}

impl Coordinator {
    /// The places taken now, as accounted figures ([`Resources`]): open
    /// handshakes in all and of the busiest client address, and the worker
    /// sessions and slots of the busiest address, each against its cap.
    /// Bounded by construction (a place past a cap is refused); counted so
    /// the simulation's `resource_bound_exceeded` watches them as well.
    ///
    /// [`Resources`]: crate::resources::Resources
    pub(super) fn place_figures(&self) -> [Figure; 4] {
        let limits = &self.inner.config.limits;
        let open =
            (limits.handshakes_max).saturating_sub(self.inner.handshakes.available_permits());
        let by_client = lock_counts(&self.inner.handshakes_by_client);
        let busiest_handshakes = by_client.values().copied().max().unwrap_or(0);
        drop(by_client);
        let workers = self.inner.workers_by_client.lock();
        let workers = workers.unwrap_or_else(|p| p.into_inner());
        let busiest_sessions = workers.values().map(|(s, _)| *s).max().unwrap_or(0);
        let busiest_slots = workers
            .values()
            .map(|(_, s)| *s as usize)
            .max()
            .unwrap_or(0);
        let figure = |what: &str, value, bound| Figure {
            what: what.to_owned(),
            value,
            bound,
        };
        [
            figure("open handshakes", open, limits.handshakes_max),
            figure(
                "open handshakes of one client address",
                busiest_handshakes,
                limits.handshakes_per_client_max,
            ),
            figure(
                "worker sessions of one client address",
                busiest_sessions,
                limits.worker_sessions_per_client_max,
            ),
            figure(
                "worker slots of one client address",
                busiest_slots,
                limits.worker_slots_per_client_max as usize,
            ),
        ]
    }

    /// A place for one more worker session of `slots` from `client`, or
    /// why there is none.
    pub fn worker_place(&self, client: &str, slots: u32) -> Result<WorkerPlace, String> {
        let limits = &self.inner.config.limits;
        let counts = &self.inner.workers_by_client;
        let mut c = counts.lock().unwrap_or_else(|p| p.into_inner());
        let (sessions, used) = c.get(client).copied().unwrap_or((0, 0));
        if sessions >= limits.worker_sessions_per_client_max {
            return Err(format!(
                "this address already has {sessions} worker sessions, the most allowed"
            ));
        }
        if used.saturating_add(slots) > limits.worker_slots_per_client_max {
            return Err(format!(
                "this address's worker sessions already have {used} slots; at most {} in all",
                limits.worker_slots_per_client_max
            ));
        }
        c.insert(client.to_owned(), (sessions + 1, used + slots));
        Ok(WorkerPlace {
            client: client.to_owned(),
            slots,
            counts: counts.clone(),
        })
    }

    /// A place for one more unauthenticated connection from `client`, if
    /// there is one both in total and for that client.
    pub fn handshake_permit(&self, client: &str) -> Option<HandshakePermit> {
        let per_client_max = self.inner.config.limits.handshakes_per_client_max;
        let global = self.inner.handshakes.clone().try_acquire_owned().ok()?;
        let mut counts = lock_counts(&self.inner.handshakes_by_client);
        let count = counts.entry(client.to_owned()).or_insert(0);
        if *count >= per_client_max {
            return None;
        }
        *count += 1;
        // Bounded: every entry holds at least one global permit.
        debug_assert!(counts.len() <= self.inner.config.limits.handshakes_max);
        Some(HandshakePermit {
            _global: global,
            client: client.to_owned(),
            counts: self.inner.handshakes_by_client.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use protocol::clock::ManualClock;
    use std::sync::Arc;

    /// The places a client takes show in the accounted figures, and are
    /// given back when dropped.
    #[test]
    fn handshakes_and_worker_places_are_accounted_and_given_back() {
        let mut config = Config::default();
        config.limits.handshakes_per_client_max = 2;
        let c = crate::shell::test_coordinator(config, Arc::new(ManualClock::new(0)));
        let value = |what: &str| {
            let resources = c.resources();
            let figure = resources.figures.iter().find(|f| f.what == what);
            figure.map(|f| (f.value, f.bound)).expect("figure listed")
        };
        let a = c.handshake_permit("10.0.0.1").expect("a place");
        let b = c.handshake_permit("10.0.0.1").expect("a second place");
        assert!(c.handshake_permit("10.0.0.1").is_none(), "its cap is 2");
        let other = c
            .handshake_permit("10.0.0.2")
            .expect("another client's place");
        assert_eq!(value("open handshakes").0, 3);
        assert_eq!(value("open handshakes of one client address"), (2, 2));
        let place = c.worker_place("10.0.0.1", 8).expect("a session's place");
        assert_eq!(value("worker sessions of one client address").0, 1);
        assert_eq!(value("worker slots of one client address").0, 8);
        drop((a, b, other, place));
        assert_eq!(value("open handshakes").0, 0);
        assert_eq!(value("open handshakes of one client address").0, 0);
        assert_eq!(value("worker slots of one client address").0, 0);
        assert!(c.resources().exceeded().is_none());
    }
}
