//! The core's jobs and workers, behind maps that remember what an event
//! changed, so the invariant check after the event can look at those
//! records (and O(1) totals) instead of at every job (see invariants.rs).
//!
//! Reads go through `Deref` to the plain map. Every change goes through
//! `get_mut`, `insert` or `remove` here, which note the record and what it
//! counted towards the totals before its first change since the last
//! check. Noting is off (free) unless `Config::check_invariants` is on.

use super::{Job, SessionId, Worker};
use protocol::api::JobStatus;
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;
use std::ops::Deref;
use std::sync::Arc;
use uuid::Uuid;

/// What one job counts towards the totals the core keeps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct JobShare {
    /// Footprint while not terminal (`queued_bytes`).
    pub queued_bytes: usize,
    /// Footprint once terminal (`kept_bytes`).
    pub kept_bytes: usize,
    /// 1 while not terminal: it then has exactly one timer.
    pub live: usize,
    /// 1 while pending: it then has exactly one queue entry.
    pub pending: usize,
}

impl JobShare {
    pub fn plus(self, o: Self) -> Self {
        Self {
            queued_bytes: self.queued_bytes.wrapping_add(o.queued_bytes),
            kept_bytes: self.kept_bytes.wrapping_add(o.kept_bytes),
            live: self.live.wrapping_add(o.live),
            pending: self.pending.wrapping_add(o.pending),
        }
    }

    /// Wrapping, like `plus`: totals drift only if the state is corrupt,
    /// and the check then reports it instead of overflowing.
    pub fn minus(self, o: Self) -> Self {
        Self {
            queued_bytes: self.queued_bytes.wrapping_sub(o.queued_bytes),
            kept_bytes: self.kept_bytes.wrapping_sub(o.kept_bytes),
            live: self.live.wrapping_sub(o.live),
            pending: self.pending.wrapping_sub(o.pending),
        }
    }

    pub fn of(job: &Job) -> Self {
        let terminal = job.status.is_terminal();
        Self {
            queued_bytes: if terminal { 0 } else { job.footprint_bytes },
            kept_bytes: if terminal { job.footprint_bytes } else { 0 },
            live: usize::from(!terminal),
            pending: usize::from(job.status == JobStatus::Pending),
        }
    }
}

/// Jobs by id; changes go through [`Jobs::get_mut`] and [`Jobs::insert`].
#[derive(Debug, Default)]
pub(super) struct Jobs {
    map: FxHashMap<Uuid, Arc<Job>>,
    /// Jobs changed since the last check, with their share before the first
    /// change (zero for a new job). `None`: not noting.
    touched: Option<FxHashMap<Uuid, JobShare>>,
}

impl Deref for Jobs {
    type Target = FxHashMap<Uuid, Arc<Job>>;
    fn deref(&self) -> &Self::Target {
        &self.map
    }
}

impl Jobs {
    pub fn new(note: bool) -> Self {
        Self {
            map: FxHashMap::default(),
            touched: note.then(FxHashMap::default),
        }
    }

    /// The job to change, copied first if a change not yet dropped (by the
    /// store) still shares it.
    pub fn get_mut(&mut self, id: &Uuid) -> Option<&mut Job> {
        let job = self.map.get_mut(id)?;
        if let Some(touched) = &mut self.touched {
            touched.entry(*id).or_insert_with(|| JobShare::of(job));
        }
        Some(Arc::make_mut(job))
    }

    pub fn insert(&mut self, job: Arc<Job>) {
        if let Some(touched) = &mut self.touched {
            let before = self.map.get(&job.id).map(|j| JobShare::of(j));
            touched.entry(job.id).or_insert(before.unwrap_or_default());
        }
        self.map.insert(job.id, job);
    }

    /// Takes a job out (a cluster node hands it back to the shared store);
    /// noted like a change, its share after is zero.
    pub fn remove(&mut self, id: &Uuid) -> Option<Arc<Job>> {
        let job = self.map.remove(id)?;
        if let Some(touched) = &mut self.touched {
            touched.entry(*id).or_insert_with(|| JobShare::of(&job));
        }
        Some(job)
    }

    pub fn noting(&self) -> bool {
        self.touched.is_some()
    }

    /// The jobs changed since the last call, with their shares before.
    pub fn take_touched(&mut self) -> FxHashMap<Uuid, JobShare> {
        self.touched
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }
}

/// Idle-set entries a worker should have: one per job type while it has a free slot.
pub(super) fn idle_entries(worker: &Worker) -> usize {
    if worker.load() < worker.slots {
        worker.capabilities.len()
    } else {
        0
    }
}

/// Workers by session; changes go through [`Workers::get_mut`],
/// [`Workers::insert`] and [`Workers::remove`].
#[derive(Debug, Default)]
pub(super) struct Workers {
    map: BTreeMap<SessionId, Worker>,
    /// Workers changed since the last check, with their idle-set entries
    /// before the first change (zero for a new one). `None`: not noting.
    touched: Option<BTreeMap<SessionId, usize>>,
}

impl Deref for Workers {
    type Target = BTreeMap<SessionId, Worker>;
    fn deref(&self) -> &Self::Target {
        &self.map
    }
}

impl Workers {
    pub fn new(note: bool) -> Self {
        Self {
            map: BTreeMap::new(),
            touched: note.then(BTreeMap::new),
        }
    }

    fn note(&mut self, session: SessionId) {
        if let Some(touched) = &mut self.touched {
            let before = self.map.get(&session).map_or(0, idle_entries);
            touched.entry(session).or_insert(before);
        }
    }

    pub fn get_mut(&mut self, session: &SessionId) -> Option<&mut Worker> {
        self.note(*session);
        self.map.get_mut(session)
    }

    pub fn insert(&mut self, session: SessionId, worker: Worker) {
        self.note(session);
        self.map.insert(session, worker);
    }

    pub fn remove(&mut self, session: &SessionId) -> Option<Worker> {
        self.note(*session);
        self.map.remove(session)
    }

    pub fn noting(&self) -> bool {
        self.touched.is_some()
    }

    /// The workers changed since the last call, with their entries before.
    pub fn take_touched(&mut self) -> BTreeMap<SessionId, usize> {
        self.touched
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }
}
