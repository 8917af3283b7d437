//! The jobs the run was told exist: every `201 { job_id }` a harness step
//! got (`http`, `commit_many`, workloads). Temporal properties with
//! `per = "acknowledged_job"` judge exactly these, not the records the
//! coordinator keeps of commits it refused (a 422's `job_id`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

/// Shared by the world and its background tasks; order-free (a set).
#[derive(Debug, Clone, Default)]
pub struct AcknowledgedJobs(Arc<Mutex<BTreeSet<String>>>, Latest);

/// By instance, the job of the latest 201 a step got from it (the swarm's
/// cancels aim at it: `cancel = { job = "latest" }`).
#[derive(Debug, Clone, Default)]
struct Latest(Arc<Mutex<BTreeMap<String, String>>>);

impl AcknowledgedJobs {
    /// Records `job_id` if `status` acknowledged it (201).
    pub fn record(&self, status: u16, job_id: Option<&str>) {
        if let (201, Some(id)) = (status, job_id) {
            self.insert(id);
        }
    }

    /// Records a job id known to have been answered 201.
    pub fn insert(&self, job_id: &str) {
        self.lock().insert(job_id.to_owned());
    }

    /// Records `job_id` as `instance`'s latest if `status` acknowledged it.
    pub fn record_latest(&self, instance: &str, status: u16, job_id: Option<&str>) {
        if let (201, Some(id)) = (status, job_id) {
            let mut latest = self.1 .0.lock().unwrap_or_else(|p| p.into_inner());
            latest.insert(instance.to_owned(), id.to_owned());
        }
    }

    /// The job of the latest 201 a step got from `instance`.
    pub fn latest(&self, instance: &str) -> Option<String> {
        let latest = self.1 .0.lock().unwrap_or_else(|p| p.into_inner());
        latest.get(instance).cloned()
    }

    pub fn all(&self) -> BTreeSet<String> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeSet<String>> {
        // Every update is one insert: a panic elsewhere cannot leave it half-done.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}
