//! Replay protection: one payment buys one job.
//!
//! Verification does not consume the nonce on chain, so without this store
//! a single signed payment could be presented again and again. A nonce is
//! *reserved* when its payment verifies, *spent* once settlement succeeds,
//! and *released* if settlement fails (so the payer may retry with the same
//! authorization). Entries are kept until the authorization's `validBefore`;
//! after that the payment is refused as expired anyway.

use crate::evm::{Address, Bytes32};
use std::collections::BTreeMap;
use std::sync::Mutex;

/// The identity of a payment: for EVM, the authorization as the token
/// contract sees it; for other networks, `chain_id` 0 and a hash of the
/// payload as `nonce` (see `gate`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct NonceKey {
    pub chain_id: u64,
    pub asset: Address,
    pub from: Address,
    pub nonce: Bytes32,
}

/// Where a nonce stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NonceState {
    /// Verified, settlement in progress.
    Reserved,
    /// Settled: it paid for a job.
    Spent,
}

/// The nonce was seen before (reserved or spent) and has not expired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("payment nonce already used")]
pub struct NonceUsed;

/// Remembers nonces until they expire. Implementations must make
/// [`NonceStore::check_and_mark`] atomic: of two concurrent calls with one
/// key, exactly one succeeds.
pub trait NonceStore: Send + Sync {
    /// Reserves `key` until `valid_before` (Unix seconds), or fails if it is
    /// already reserved or spent.
    fn check_and_mark(&self, key: NonceKey, valid_before: u64) -> Result<(), NonceUsed>;
    /// Settlement succeeded: the reservation becomes permanent (until expiry).
    fn mark_spent(&self, key: &NonceKey);
    /// Settlement failed: forget a reservation. A spent nonce is never released.
    fn release(&self, key: &NonceKey);
    /// Forgets entries whose `valid_before` is before `now_seconds`.
    fn purge_expired(&self, now_seconds: u64);
    /// The state of `key`, if remembered.
    fn state(&self, key: &NonceKey) -> Option<NonceState>;
}

/// A process-local store. Not durable: a restart forgets spent nonces, so
/// an unexpired authorization could be replayed once after a restart when
/// settlement is local (a facilitator would refuse it on chain).
#[derive(Debug, Default)]
pub struct InMemoryNonceStore {
    entries: Mutex<BTreeMap<NonceKey, (NonceState, u64)>>,
}

impl InMemoryNonceStore {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<NonceKey, (NonceState, u64)>> {
        // A panic while holding the lock cannot leave the map half-updated
        // (every update is a single insert or remove), so poisoning is ignored.
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl NonceStore for InMemoryNonceStore {
    fn check_and_mark(&self, key: NonceKey, valid_before: u64) -> Result<(), NonceUsed> {
        let mut entries = self.lock();
        if entries.contains_key(&key) {
            return Err(NonceUsed);
        }
        entries.insert(key, (NonceState::Reserved, valid_before));
        Ok(())
    }

    fn mark_spent(&self, key: &NonceKey) {
        if let Some(entry) = self.lock().get_mut(key) {
            entry.0 = NonceState::Spent;
        }
    }

    fn release(&self, key: &NonceKey) {
        let mut entries = self.lock();
        if matches!(entries.get(key), Some((NonceState::Reserved, _))) {
            entries.remove(key);
        }
    }

    fn purge_expired(&self, now_seconds: u64) {
        self.lock()
            .retain(|_, (_, valid_before)| *valid_before >= now_seconds);
    }

    fn state(&self, key: &NonceKey) -> Option<NonceState> {
        self.lock().get(key).map(|(s, _)| *s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u8) -> NonceKey {
        NonceKey {
            chain_id: 84532,
            asset: Address([1; 20]),
            from: Address([2; 20]),
            nonce: Bytes32([n; 32]),
        }
    }

    #[test]
    fn one_nonce_one_job() {
        let s = InMemoryNonceStore::new();
        assert_eq!(s.check_and_mark(key(1), 100), Ok(()));
        assert_eq!(s.check_and_mark(key(1), 100), Err(NonceUsed));
        assert_eq!(s.check_and_mark(key(2), 100), Ok(()));
        s.mark_spent(&key(1));
        s.release(&key(1));
        assert_eq!(s.state(&key(1)), Some(NonceState::Spent));
        assert_eq!(s.check_and_mark(key(1), 100), Err(NonceUsed));
    }

    #[test]
    fn release_allows_retry() {
        let s = InMemoryNonceStore::new();
        s.check_and_mark(key(1), 100).unwrap();
        s.release(&key(1));
        assert_eq!(s.state(&key(1)), None);
        assert_eq!(s.check_and_mark(key(1), 100), Ok(()));
    }

    #[test]
    fn same_nonce_other_payer_or_chain_is_distinct() {
        let s = InMemoryNonceStore::new();
        s.check_and_mark(key(1), 100).unwrap();
        let mut other = key(1);
        other.from = Address([3; 20]);
        assert_eq!(s.check_and_mark(other, 100), Ok(()));
        other.chain_id = 8453;
        assert_eq!(s.check_and_mark(other, 100), Ok(()));
    }

    #[test]
    fn purge_keeps_until_valid_before() {
        let s = InMemoryNonceStore::new();
        s.check_and_mark(key(1), 100).unwrap();
        s.check_and_mark(key(2), 200).unwrap();
        s.purge_expired(100);
        assert_eq!(s.len(), 2);
        s.purge_expired(101);
        assert_eq!(s.len(), 1);
        assert_eq!(s.state(&key(2)), Some(NonceState::Reserved));
    }
}
