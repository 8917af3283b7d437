//! A simulated instance: the real coordinator started through the
//! composition root (`server::start`), one process generation after another
//! across crashes and restarts, alone or as one node of several.

use super::*;

/// A simulated instance: the real coordinator, started through the
/// composition root on an in-memory SQLite database that outlives each
/// process generation, served on the simulated network. Cloning gives
/// another handle on the same instance (fault injectors running beside the
/// steps crash and restart it through theirs).
#[derive(Clone)]
pub struct SimInstance {
    pub(super) settings: Settings,
    pub(super) settler: Option<Arc<dyn x402::Settler>>,
    pub(super) seed: u64,
    pub(super) generation: Arc<AtomicU64>,
    pub(super) clock: Arc<TokioClock>,
    pub(super) host: String,
    pub(super) net: simnet::Net,
    /// Never held across an await.
    pub(super) process: Arc<Mutex<Process>>,
    /// Set by an armed crash (`crash_after`).
    pub(super) crashed: Arc<AtomicBool>,
    /// A paid instance's settlement ledger, told when a process starts and
    /// stops (whether a coordinator could learn of a settlement).
    pub(super) settlements: Option<super::settlements::SettleLedger>,
    /// A node of a several-node instance: started on the shared store.
    pub(super) node: Option<SimNode>,
    /// Serves with the binary's connection bounds (`http_bounds`).
    pub(super) http_bounds: bool,
}

/// What makes a simulated instance one node of several.
#[derive(Clone)]
pub(super) struct SimNode {
    pub(super) shared: Arc<MemoryShared>,
    /// `{instance}-{i}`, kept across generations: a restarted node
    /// recovers what it still holds.
    pub(super) id: String,
    pub(super) lease_ms: i64,
    /// Where its supervisor says what it did.
    pub(super) transcript: Transcript,
}

/// How often a fenced node's supervisor tries to start it again (it cannot
/// join while the store is out of reach).
pub(super) const REJOIN_RETRY_MS: u64 = 1_000;

#[derive(Default)]
pub(super) struct Process {
    /// The running generation; `None` between a crash and the restart.
    pub(super) server: Option<Server>,
    /// A crashed generation's store, kept until the next generation has
    /// opened the database (an in-memory database lives while a
    /// connection to it is open).
    pub(super) keeper: Option<Arc<SqliteStore>>,
    /// A generation is being started (see [`SimInstance::start`]).
    pub(super) starting: bool,
}

impl SimInstance {
    pub(super) fn process(&self) -> std::sync::MutexGuard<'_, Process> {
        self.process.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts a generation: a seeded RNG stream of its own, recovery from
    /// the database, serving on the instance's host name.
    /// Starting an instance that runs, or that another caller is starting
    /// (a `reboot` fault's restart beside a step's), does nothing: there is
    /// never more than one generation, as a supervisor keeps one process.
    pub async fn start(&self) -> Result<(), WorldError> {
        {
            let mut process = self.process();
            if process.server.is_some() || process.starting {
                return Ok(());
            }
            process.starting = true;
        }
        let started = self.start_generation().await;
        self.process().starting = false;
        Ok(started?)
    }

    pub(super) async fn start_generation(&self) -> Result<(), String> {
        let mut rng = ChaCha20Rng::seed_from_u64(self.seed);
        rng.set_stream(self.generation.fetch_add(1, Ordering::SeqCst));
        let parts = server::Parts {
            clock: self.clock.clone(),
            rng,
            runtime: server::Runtime::Simulation,
            settler: self.settler.clone(),
        };
        let mut started = match &self.node {
            None => server::start(self.settings.clone(), parts).await,
            Some(node) => {
                let cluster = coordinator::node::ClusterSettings {
                    url: "memory".into(),
                    schema: None,
                    node_id: node.id.clone(),
                    node_lease_ms: node.lease_ms,
                };
                let shared: Arc<dyn coordinator::cluster::SharedStore> = node.shared.clone();
                server::start_node(self.settings.clone(), parts, cluster, shared).await
            }
        }
        .map_err(|e| e.to_string())?;
        started.serve(self.net.listen(&self.host), self.http_bounds, |_| {});
        if let Some(store) = started.store() {
            // The `store.writer.crash` fault point (a BUGGIFY run's only):
            // killed as an armed crash kills, restarted at the next step.
            store.on_buggify_crash(self.killer());
        }
        if let Some(fenced) = started.fenced() {
            tokio::spawn(self.clone().supervise(fenced));
        }
        let mut process = self.process();
        process.server = Some(started);
        process.keeper = None;
        self.crashed.store(false, Ordering::SeqCst);
        self.note_life(true);
        Ok(())
    }

    /// What kills the process from inside a store write (an armed crash,
    /// the `store.writer.crash` fault point): its connections are cut and
    /// nothing it does afterwards reaches a peer; it is restarted at the
    /// next step boundary.
    /// It holds no handle on the instance: the store keeps it, and the
    /// instance keeps the store (a cycle would leak every world).
    pub(super) fn killer(&self) -> impl FnOnce() + Send + 'static {
        let (net, host, crashed) = (self.net.clone(), self.host.clone(), self.crashed.clone());
        let (ledger, clock) = (self.settlements.clone(), self.clock.clone());
        move || {
            net.crash(&host);
            crashed.store(true, Ordering::SeqCst);
            note_life(ledger.as_ref(), &clock, false);
        }
    }

    /// Tells the settlement ledger that a process started or stopped.
    fn note_life(&self, up: bool) {
        note_life(self.settlements.as_ref(), &self.clock, up);
    }

    /// Kills the running generation: its store writes nothing more, its
    /// tasks stop, and every connection it serves is cut.
    pub fn crash(&self) {
        self.net.crash(&self.host);
        self.note_life(false);
        let mut process = self.process();
        if let Some(server) = process.server.take() {
            process.keeper = server.store().cloned();
            server.crash();
        }
    }

    /// The coordinator timings it runs with.
    pub fn timing(&self) -> &coordinator::config::Timing {
        &self.settings.config.timing
    }

    /// The coordinator limits it runs with.
    pub fn limits(&self) -> &coordinator::config::Limits {
        &self.settings.config.limits
    }

    /// A node's supervisor: once the shared store fences the generation,
    /// crashes it (a real node exits) and starts a new one as soon as it
    /// can join again.
    /// (Boxed: it starts generations, which spawn it.)
    pub(super) fn supervise(
        self,
        fenced: Arc<tokio::sync::Notify>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        Box::pin(async move {
            fenced.notified().await;
            self.crash();
            self.log("fenced by the shared store; crashed");
            tokio::time::sleep(std::time::Duration::from_millis(REJOIN_RETRY_MS)).await;
            // However long the partition lasts.
            while self.rejoin().await.is_err() {}
            self.log("rejoined the shared store");
        })
    }

    /// Starts a generation; a node that cannot join yet (the store is out
    /// of reach, or its own id's lease has not lapsed) is tried again every
    /// [`REJOIN_RETRY_MS`], as a supervisor restarts a process that exited,
    /// for at most [`DOWN_WAIT_MS`].
    pub async fn rejoin(&self) -> Result<(), WorldError> {
        let mut waited_ms = 0;
        loop {
            match self.start().await {
                Err(e) if self.node.is_some() && waited_ms < DOWN_WAIT_MS => {
                    tracing::debug!(error = %e, "node cannot join yet");
                    tokio::time::sleep(std::time::Duration::from_millis(REJOIN_RETRY_MS)).await;
                    waited_ms += REJOIN_RETRY_MS;
                }
                done => return done,
            }
        }
    }

    /// Logs a node's line under its id (nothing for a single coordinator).
    pub(super) fn log(&self, line: &str) {
        if let Some(node) = &self.node {
            node.transcript.log(&node.id, line);
        }
    }

    /// Stops the running generation gracefully, then ends it as its
    /// process would exit: the store writes nothing more and every
    /// connection still open is cut.
    pub async fn shutdown(&self) {
        let server = {
            let mut process = self.process();
            let Some(server) = process.server.take() else {
                // Down already (a reboot's crash): its keeper holds the
                // database until the next generation opens it.
                return;
            };
            // The in-memory database must outlive the generation.
            process.keeper = server.store().cloned();
            server
        };
        server.shutdown().await;
        self.note_life(false);
        if let Some(store) = &self.process().keeper {
            store.halt();
        }
        self.net.crash(&self.host);
    }

    /// Waits until a generation is running: one that a `reboot` fault
    /// crashed comes back when its downtime ends.
    pub(super) async fn wait_running(&self) -> Result<(), String> {
        for _ in 0..DOWN_WAIT_MS {
            if self.is_running() {
                return Ok(());
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        Err(format!("instance is not running after {DOWN_WAIT_MS} ms"))
    }

    /// Whether a generation is running.
    pub fn is_running(&self) -> bool {
        self.process().server.is_some()
    }

    /// The current generation's store.
    pub fn store(&self) -> Option<Arc<SqliteStore>> {
        self.process()
            .server
            .as_ref()
            .and_then(|s| s.store().cloned())
    }

    /// The whole-state check of the running generation's core. After each
    /// event the core checks only what the event changed (and the whole
    /// state every few hundred events); a run ends with the whole check.
    pub fn check_core(&self) -> Result<(), WorldError> {
        let Some(c) = self.coordinator() else {
            return Ok(());
        };
        c.read(|core| core.check_invariants(c.now_ms()))
            .map_err(WorldError::CoreBroken)
    }

    /// The current generation's coordinator.
    pub fn coordinator(&self) -> Option<coordinator::Coordinator> {
        self.process()
            .server
            .as_ref()
            .map(|s| s.coordinator().clone())
    }
}

/// The longest an instance action waits for an instance to come back.
pub const DOWN_WAIT_MS: u64 = 60_000;

/// A process-wide unique in-memory database for one instance of one run
/// (runs may share a process, and tests run in parallel threads). The
/// number never reaches a transcript.
pub(super) fn memdb_path(instance: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("file:/sim-{n}-{instance}?vfs=memdb")
}

/// Tells a paid instance's settlement ledger that a process of it started
/// (`up`) or stopped, now.
fn note_life(ledger: Option<&super::settlements::SettleLedger>, clock: &TokioClock, up: bool) {
    if let Some(ledger) = ledger {
        ledger.node_life(coordinator::clock::Clock::now_ms(clock), up);
    }
}
