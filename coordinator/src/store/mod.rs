//! Persistence behind a trait. The core hands over every record it changes,
//! one `apply` call per event, in the order the events happened; a store
//! writes them and `load` gives back the latest version of each.
//!
//! `MemoryStore` keeps them in memory for tests and the simulation; the
//! durable [`crate::store::sqlite::SqliteStore`] implements the same trait.

pub mod sqlite;

use crate::core::trust::{Pairing, TrustEntry};
pub use crate::core::Snapshot;
use crate::core::{Change, Job};
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use uuid::Uuid;

#[derive(Debug, thiserror::Error)]
#[error("store: {0}")]
pub struct StoreError(pub String);

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
    /// What `load` gives, with the jobs handed to `job` one at a time in
    /// commit order (`seq`) instead of collected: a restart then never
    /// holds every stored job at once (the core keeps the live ones and the
    /// most recent finished ones). Returns the pairings and trust entries.
    /// The default sorts `load`'s jobs, for stores that hold them anyway.
    fn load_into(
        &self,
        job: &mut dyn FnMut(Job),
    ) -> Result<(Vec<Pairing>, Vec<TrustEntry>), StoreError> {
        let mut snapshot = self.load()?;
        snapshot.jobs.sort_by_key(|j| j.seq);
        snapshot.jobs.into_iter().for_each(job);
        Ok((snapshot.pairings, snapshot.trust))
    }
    /// The latest version of job `id` among the changes this store was
    /// given (`apply`), whether or not it is durable yet; `None` if it never
    /// had it or retention deleted it.
    ///
    /// Why: the core keeps a finished job only in a bounded cache, so a poll,
    /// a retried paid commit or a worker's frame about an older one reads it
    /// here. A version that is not durable yet may be returned: the caller
    /// awaits [`Store::flush`] before it answers, as every handler already
    /// does, so no client sees what a crash could take back.
    fn job(&self, id: &Uuid) -> Result<Option<Arc<Job>>, StoreError>;
}

/// The latest version of job `id` in `changes` (given in event order).
pub(crate) fn latest_job(changes: &[Change], id: &Uuid) -> Option<Arc<Job>> {
    changes.iter().rev().find_map(|change| match change {
        Change::Job(job) if job.id == *id => Some(Arc::clone(job)),
        _ => None,
    })
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

    fn load(&self) -> Result<Snapshot, StoreError> {
        let t = self.inner.lock().map_err(|e| StoreError(e.to_string()))?;
        Ok(Snapshot {
            jobs: t.jobs.values().map(|job| (**job).clone()).collect(),
            pairings: t.pairings.values().cloned().collect(),
            trust: t.trust.values().cloned().collect(),
        })
    }

    fn job(&self, id: &Uuid) -> Result<Option<Arc<Job>>, StoreError> {
        let t = self.inner.lock().map_err(|e| StoreError(e.to_string()))?;
        Ok(t.jobs.get(id).cloned())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::config::Config;
    use crate::core::Core;
    use protocol::api::{JobStatus, JobSubmission, JobType, Payload, PrivacyClass, TaskType, Tier};
    use rand::SeedableRng;

    /// A job committed by a real core, and the changes that recorded it.
    pub(crate) fn committed() -> (Arc<Job>, Vec<Change>) {
        let mut core = Core::new(
            Config::default(),
            rand_chacha::ChaCha20Rng::seed_from_u64(1),
        );
        let s = task_submission("a");
        core.commit(s, Tier::Cheap, None, 1_000).unwrap();
        let changes = core.take_changes();
        let job = latest_job(&changes, &only_job(&changes)).expect("the job");
        (job, changes)
    }

    /// A `summarize` TASK job of `user`, as validation makes it.
    pub(crate) fn task_submission(user: &str) -> JobSubmission {
        JobSubmission {
            job_type: JobType::Task,
            user_id: user.into(),
            payload: Payload::Task {
                task_type: TaskType::Summarize,
                input: "x".into(),
            },
            privacy_class: PrivacyClass::Public,
        }
    }

    fn only_job(changes: &[Change]) -> Uuid {
        let mut ids = changes.iter().filter_map(|c| match c {
            Change::Job(job) => Some(job.id),
            _ => None,
        });
        let id = ids.next().expect("a job");
        assert!(ids.all(|other| other == id));
        id
    }

    #[test]
    fn memory_store_reads_the_latest_version_it_was_given() {
        let store = MemoryStore::default();
        let (job, changes) = committed();
        assert!(store.job(&job.id).unwrap().is_none());
        store.apply(&changes).unwrap();
        let mut done = Arc::clone(&job);
        Arc::make_mut(&mut done).status = JobStatus::Completed;
        store.apply(&[Change::Job(Arc::clone(&done))]).unwrap();
        let read = store.job(&job.id).unwrap().expect("stored");
        assert!(Arc::ptr_eq(&read, &done), "the stored Arc, not a copy");
        assert!(store.job(&Uuid::nil()).unwrap().is_none());
    }

    #[test]
    fn latest_job_is_the_last_version_in_event_order() {
        let (job, _) = committed();
        let mut later = Arc::clone(&job);
        Arc::make_mut(&mut later).status = JobStatus::Failed;
        let changes = [
            Change::Job(Arc::clone(&job)),
            Change::Job(Arc::clone(&later)),
        ];
        let found = latest_job(&changes, &job.id).expect("present");
        assert!(Arc::ptr_eq(&found, &later));
        assert!(latest_job(&changes, &Uuid::nil()).is_none());
    }
}
