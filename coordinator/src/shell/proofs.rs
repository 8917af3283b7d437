//! The nonces of user proofs accepted within the proof window: each
//! (address, nonce) is accepted once (decision 0017).
//!
//! Held in memory, bounded: when full of unexpired nonces a new proof is
//! refused (503) rather than an old nonce forgotten early, which would let
//! its proof be replayed. Not kept across a restart, and one set per node
//! (docs/security.md, "User proofs").

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

/// Why a proof's nonce was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NonceRefused {
    /// Accepted before, within the window.
    Replayed,
    /// The set is full of unexpired nonces.
    Full,
}

#[derive(Default)]
pub(super) struct ProofNonces {
    inner: Mutex<Nonces>,
}

#[derive(Default)]
struct Nonces {
    /// (address, nonce) → when it may be forgotten.
    seen: BTreeMap<(String, String), i64>,
    /// The same entries by when they may be forgotten.
    by_expiry: BTreeSet<(i64, String, String)>,
}

impl ProofNonces {
    /// Accepts `nonce` of `address` once; remembered until `forget_at_ms`
    /// (the issue time plus the window: after it, the proof is expired anyway).
    pub(super) fn accept(
        &self,
        address: &str,
        nonce: &str,
        forget_at_ms: i64,
        now_ms: i64,
        max: usize,
    ) -> Result<(), NonceRefused> {
        let mut n = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        while let Some((at, _, _)) = n.by_expiry.first() {
            if *at >= now_ms {
                break;
            }
            let (_, a, k) = n.by_expiry.pop_first().expect("looked at first");
            n.seen.remove(&(a, k));
        }
        let key = (address.to_owned(), nonce.to_owned());
        if n.seen.contains_key(&key) {
            return Err(NonceRefused::Replayed);
        }
        if n.seen.len() >= max {
            return Err(NonceRefused::Full);
        }
        n.by_expiry
            .insert((forget_at_ms, key.0.clone(), key.1.clone()));
        n.seen.insert(key, forget_at_ms);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nonce_is_accepted_once_until_it_expires_and_the_set_is_bounded() {
        let n = ProofNonces::default();
        assert_eq!(n.accept("0xa", "01", 100, 0, 2), Ok(()));
        assert_eq!(
            n.accept("0xa", "01", 100, 50, 2),
            Err(NonceRefused::Replayed)
        );
        assert_eq!(n.accept("0xb", "01", 100, 50, 2), Ok(()));
        assert_eq!(n.accept("0xc", "01", 300, 50, 2), Err(NonceRefused::Full));
        // Past 100 both are forgotten: room again.
        assert_eq!(n.accept("0xc", "01", 300, 101, 2), Ok(()));
    }
}
