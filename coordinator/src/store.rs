//! Persistence behind a trait. The core hands over every record it changes,
//! one `apply` call per event, in the order the events happened; a store
//! writes them and `load` gives back the latest version of each.
//!
//! `MemoryStore` keeps them in memory for tests and the simulation; the
//! durable [`crate::sqlite::SqliteStore`] implements the same trait.

use crate::core::{Change, Job};
use crate::trust::{Pairing, TrustEntry};
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use uuid::Uuid;

#[derive(Debug, thiserror::Error)]
#[error("store: {0}")]
pub struct StoreError(pub String);

/// Everything a store holds, latest version of each record.
#[derive(Debug, Default, Clone)]
pub struct Snapshot {
    pub jobs: Vec<Job>,
    pub pairings: Vec<Pairing>,
    pub trust: Vec<TrustEntry>,
}

pub trait Store: Send + Sync + 'static {
    /// Takes the changes of one event, in event order. A store may write
    /// them before returning, or queue them for [`Store::flush`].
    fn apply(&self, changes: &[Change]) -> Result<(), StoreError>;
    /// Resolves once every change applied before the call is durable; a
    /// handler awaits it before answering. The default suits stores whose
    /// `apply` is already durable (or that are not durable at all).
    fn flush(&self) -> Pin<Box<dyn Future<Output = Result<(), StoreError>> + Send + '_>> {
        Box::pin(std::future::ready(Ok(())))
    }
    fn load(&self) -> Result<Snapshot, StoreError>;
    /// TEMPORARY (helper storeread builds the real one).
    fn job(&self, id: &Uuid) -> Result<Option<Arc<Job>>, StoreError>;
}

#[derive(Debug, Default)]
pub struct MemoryStore {
    inner: Mutex<Tables>,
}

#[derive(Debug, Default)]
struct Tables {
    /// Shares each job with the change that recorded it (see [`Change`]).
    jobs: BTreeMap<Uuid, Arc<Job>>,
    pairings: BTreeMap<String, Pairing>,
    trust: BTreeMap<(String, String), TrustEntry>,
}

impl Store for MemoryStore {
    fn apply(&self, changes: &[Change]) -> Result<(), StoreError> {
        let mut t = self.inner.lock().map_err(|e| StoreError(e.to_string()))?;
        for change in changes {
            match change {
                Change::Job(job) => {
                    t.jobs.insert(job.id, Arc::clone(job));
                }
                Change::Pairing(p) => {
                    t.pairings.insert(p.code.clone(), p.clone());
                }
                Change::Trust(e) => {
                    t.trust
                        .insert((e.user_id.clone(), e.provider_pubkey.clone()), e.clone());
                }
                // Nonces live in the payment gate's own store here.
                Change::NonceSpent(_) => {}
            }
        }
        Ok(())
    }

    fn job(&self, id: &Uuid) -> Result<Option<Arc<Job>>, StoreError> {
        let t = self.inner.lock().map_err(|e| StoreError(e.to_string()))?;
        Ok(t.jobs.get(id).cloned())
    }

    fn load(&self) -> Result<Snapshot, StoreError> {
        let t = self.inner.lock().map_err(|e| StoreError(e.to_string()))?;
        Ok(Snapshot {
            jobs: t.jobs.values().map(|job| (**job).clone()).collect(),
            pairings: t.pairings.values().cloned().collect(),
            trust: t.trust.values().cloned().collect(),
        })
    }
}
