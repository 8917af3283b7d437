//! The shell around the core: one mutex, the clock, the store, the worker
//! session outboxes and the timer task. Every event runs as
//! `lock -> core event at clock.now_ms() -> store changes -> deliver frames`,
//! so the store sees changes in event order and sessions see frames in
//! event order.

use crate::clock::Clock;
use crate::config::Config;
use crate::core::{Core, Outbound, SessionId};
use crate::store::{Store, StoreError};
use rand_chacha::ChaCha20Rng;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::{mpsc, watch, Notify};

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("payments are already enabled")]
pub struct PaymentsAlreadyEnabled;

/// Cheap to clone handle on a running coordinator.
#[derive(Clone)]
pub struct Coordinator {
    inner: Arc<Inner>,
}

struct Inner {
    config: Config,
    clock: Arc<dyn Clock>,
    store: Arc<dyn Store>,
    state: Mutex<State>,
    timer_wake: Notify,
    shutdown: watch::Sender<bool>,
    /// Set once, before serving, when the deployment gates commits on payment.
    payments: std::sync::OnceLock<x402::PaymentGate>,
    /// Bounds connections that have not authenticated yet.
    handshakes: Arc<tokio::sync::Semaphore>,
}

struct State {
    core: Core,
    /// Unbounded because the core sends at most `slots` assigns and cancels
    /// per session between two reads of the session, plus one result ack per
    /// result the worker sent: the worker itself bounds the backlog.
    outboxes: HashMap<SessionId, mpsc::UnboundedSender<Outbound>>,
}

impl Coordinator {
    /// Starts a coordinator and its timer task on the current tokio runtime.
    pub fn new(
        config: Config,
        clock: Arc<dyn Clock>,
        rng: ChaCha20Rng,
        store: Arc<dyn Store>,
    ) -> Self {
        let (shutdown, _) = watch::channel(false);
        let handshakes_max = config.limits.handshakes_max;
        let inner = Arc::new(Inner {
            config: config.clone(),
            clock,
            store,
            state: Mutex::new(State {
                core: Core::new(config, rng),
                outboxes: HashMap::new(),
            }),
            timer_wake: Notify::new(),
            shutdown,
            payments: std::sync::OnceLock::new(),
            handshakes: Arc::new(tokio::sync::Semaphore::new(handshakes_max)),
        });
        let coordinator = Self { inner };
        tokio::spawn(run_timers(coordinator.clone()));
        coordinator
    }

    /// Starts a coordinator on the state `store` holds: loads it and
    /// restores the core (see `core/restore.rs` for the rules), then writes
    /// back what recovery changed before serving anything.
    pub async fn open(
        config: Config,
        clock: Arc<dyn Clock>,
        rng: ChaCha20Rng,
        store: Arc<dyn Store>,
    ) -> Result<Self, StoreError> {
        let snapshot = store.load()?;
        let c = Self::new(config, clock, rng, store);
        c.with(|core, now_ms| core.restore(snapshot, now_ms));
        c.durable().await?;
        Ok(c)
    }

    /// Resolves once every change made so far is durable. Await it before
    /// answering a client about anything the answer depends on.
    pub async fn durable(&self) -> Result<(), StoreError> {
        self.inner.store.flush().await
    }

    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// Turns on payment gating of the commit endpoints (x402). Call once,
    /// before serving; a second call is refused and changes nothing.
    pub fn enable_payments(&self, gate: x402::PaymentGate) -> Result<(), PaymentsAlreadyEnabled> {
        self.inner
            .payments
            .set(gate)
            .map_err(|_| PaymentsAlreadyEnabled)
    }

    /// A place for one more unauthenticated connection, if there is one.
    pub fn handshake_permit(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        self.inner.handshakes.clone().try_acquire_owned().ok()
    }

    /// The payment gate, when commits must be paid.
    pub fn payments(&self) -> Option<&x402::PaymentGate> {
        self.inner.payments.get()
    }

    pub fn now_ms(&self) -> i64 {
        self.inner.clock.now_ms()
    }

    /// Runs one event against the core and applies its effects.
    pub fn with<R>(&self, event: impl FnOnce(&mut Core, i64) -> R) -> R {
        let mut state = self.lock();
        let deadline_before = state.core.next_deadline_ms();
        let now_ms = self.inner.clock.now_ms();
        let out = event(&mut state.core, now_ms);
        state.core.assert_invariants(now_ms);
        self.flush(&mut state);
        if state.core.next_deadline_ms() != deadline_before {
            self.inner.timer_wake.notify_one();
        }
        out
    }

    /// Reads the core without an event.
    pub fn read<R>(&self, read: impl FnOnce(&Core) -> R) -> R {
        read(&self.lock().core)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock would leave the core half-changed;
        // there is no safe way on, so poisoning is not recovered from.
        self.inner
            .state
            .lock()
            .expect("coordinator state lock poisoned")
    }

    fn flush(&self, state: &mut State) {
        let changes = state.core.take_changes();
        if !changes.is_empty() {
            if let Err(e) = self.inner.store.apply(&changes) {
                tracing::error!(error = %e, "store write failed");
            }
        }
        for (session, out) in state.core.take_outbox() {
            if let Some(tx) = state.outboxes.get(&session) {
                // A closed outbox means the session is ending; it unregisters itself.
                let _ = tx.send(out);
            }
        }
    }

    /// Registers an authenticated worker session and returns its id and
    /// the receiving end of its outbox.
    pub fn register_worker(
        &self,
        pubkey: &str,
        capabilities: Vec<protocol::api::JobType>,
        slots: u32,
    ) -> Result<(SessionId, mpsc::UnboundedReceiver<Outbound>), crate::core::TooManyWorkers> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut state = self.lock();
        let now_ms = self.inner.clock.now_ms();
        // The outbox must exist before the core fills the new worker's slots.
        let next = state.core.peek_next_session();
        state.outboxes.insert(next, tx);
        let registered = state.core.register(pubkey, capabilities, slots, now_ms);
        state.core.assert_invariants(now_ms);
        match registered {
            Ok(session) => {
                debug_assert_eq!(session, next);
                self.flush(&mut state);
                self.inner.timer_wake.notify_one();
                Ok((session, rx))
            }
            Err(e) => {
                state.outboxes.remove(&next);
                self.flush(&mut state);
                Err(e)
            }
        }
    }

    pub fn unregister_worker(&self, session: SessionId) {
        let mut state = self.lock();
        state.outboxes.remove(&session);
        let now_ms = self.inner.clock.now_ms();
        state.core.unregister(session, now_ms);
        state.core.assert_invariants(now_ms);
        self.flush(&mut state);
        self.inner.timer_wake.notify_one();
    }

    /// Asks every worker session to close; used on graceful shutdown.
    pub fn shutdown(&self) {
        let _ = self.inner.shutdown.send(true);
    }

    pub fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.inner.shutdown.subscribe()
    }
}

/// Sleeps until the core's next deadline, fires due timers, repeats; ends
/// on shutdown. A `notify_one` that arrives while no one waits is kept as a
/// permit, so a deadline added between the read and the wait is not missed.
async fn run_timers(c: Coordinator) {
    let mut shutdown = c.shutdown_signal();
    loop {
        let wait_ms = c
            .read(|core| core.next_deadline_ms())
            .map(|at| at - c.now_ms());
        if let Some(ms) = wait_ms {
            if ms <= 0 {
                c.with(|core, now_ms| core.tick(now_ms));
                continue;
            }
        }
        let sleep = async {
            match wait_ms {
                Some(ms) => tokio::time::sleep(std::time::Duration::from_millis(ms as u64)).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            _ = shutdown.changed() => return,
            _ = c.inner.timer_wake.notified() => {}
            _ = sleep => {}
        }
    }
}
