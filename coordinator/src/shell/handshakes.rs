//! Places for unauthenticated connections: bounded in total and per client
//! address, so one client cannot lock every worker out of the handshake;
//! and places for established worker sessions, bounded per client address
//! in sessions and in slots (issue 29, finding 7: worker keys are free, so
//! the bound on one address's fake workers is the address's).

use super::Coordinator;
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
