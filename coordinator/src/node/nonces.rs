//! The payment gate's nonce store in cluster mode: reservations are rows of
//! the shared store.

use crate::cluster::{ClusterError, NodeId, SharedStore};
use std::sync::Arc;

/// The payment gate's nonce store in cluster mode: every reservation is a
/// row of the shared store, so one payment buys one job across nodes. The
/// spend is written with the job it bought (`Change::NonceSpent` rides in
/// the same batch), so `mark_spent` has nothing left to do.
pub struct SharedNonces {
    pub node: NodeId,
    pub shared: Arc<dyn SharedStore>,
}

impl SharedNonces {
    /// Runs a shared-store call from the gate's synchronous interface: on a
    /// multi-threaded runtime (a real process) by blocking this worker
    /// thread, as the SQLite store's nonce statements do; on the
    /// simulation's current-thread runtime the in-memory store answers at
    /// once.
    fn call<T>(&self, call: crate::cluster::Call<'_, T>) -> Result<T, ClusterError> {
        use tokio::runtime::{Handle, RuntimeFlavor};
        let handle = Handle::current();
        match handle.runtime_flavor() {
            RuntimeFlavor::CurrentThread => {
                let mut call = call;
                let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
                match call.as_mut().poll(&mut cx) {
                    std::task::Poll::Ready(out) => out,
                    std::task::Poll::Pending => Err(ClusterError::Unavailable(
                        "a blocking store call on a current-thread runtime".into(),
                    )),
                }
            }
            _ => tokio::task::block_in_place(|| handle.block_on(call)),
        }
    }
}

impl x402::NonceStore for SharedNonces {
    fn check_and_mark(
        &self,
        key: x402::NonceKey,
        valid_before: u64,
    ) -> Result<(), x402::NonceUsed> {
        match self.call(self.shared.reserve_nonce(&self.node, key, valid_before)) {
            Ok(true) => Ok(()),
            Ok(false) => Err(x402::NonceUsed),
            Err(e) => {
                // Refusing is safe: the payer may retry; accepting could
                // let one payment buy two jobs.
                tracing::error!(error = %e, "payment nonce reservation failed");
                Err(x402::NonceUsed)
            }
        }
    }

    fn mark_spent(&self, _key: &x402::NonceKey) {}

    fn release(&self, key: &x402::NonceKey) {
        if let Err(e) = self.call(self.shared.release_nonce(&self.node, *key)) {
            tracing::error!(error = %e, "payment nonce release failed");
        }
    }

    /// Expired rows are left to the operator's retention for now: a row is
    /// small and refusing an expired payment does not need it.
    fn purge_expired(&self, _now_seconds: u64) {}

    fn state(&self, _key: &x402::NonceKey) -> Option<x402::replay::NonceState> {
        None
    }
}
