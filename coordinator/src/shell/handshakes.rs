//! Places for unauthenticated connections: bounded in total and per client
//! address, so one client cannot lock every worker out of the handshake.

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

impl Coordinator {
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
