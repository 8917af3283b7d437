//! The simulated worker: hello, challenge-response, heartbeats, at most
//! `slots` jobs at once, accept/result with a signed receipt, scripted faults,
//! and reconnects with capped exponential backoff.
//!
//! Starting one in-process over channels:
//!
//! ```no_run
//! # async fn demo() -> Result<(), worker_sim::WorkerError> {
//! use protocol::connection::channel_connector;
//! use worker_sim::{EventLog, TokioClock, Worker, WorkerConfig};
//! let (connector, mut acceptor) = channel_connector();
//! let log = EventLog::new();
//! let mut worker = Worker::new(WorkerConfig::with_seed(7), TokioClock::shared(1_795_255_200_000))?
//!     .with_observer(std::sync::Arc::new(log.clone()));
//! tokio::spawn(async move { worker.run(connector).await });
//! // Each (re)connect yields the coordinator's end; hand it to the session logic:
//! // `coordinator::worker::session::run(c, peer)`.
//! let peer = acceptor.accept().await.unwrap();
//! # drop(peer); Ok(()) }
//! ```
//!
//! Each session runs in one task: incoming frames, job completions and the
//! heartbeat timer are multiplexed with a biased `select!`, and job work runs
//! as futures in a `FuturesUnordered`, so nothing is spawned and a paused
//! runtime replays the same interleaving for the same seed.

use crate::backend::{Backend, BackendError, BoxFuture, SimBackend};
use crate::clock::SharedClock;
use crate::config::{rng_for, KeyError, Stream, WorkerConfig};
use crate::event::{EventKind, NullObserver, Observer, WorkerEvent};
use crate::fault::{HandshakeFault, HeartbeatFault, JobFault, MalformedKind};
use futures_util::stream::{FuturesUnordered, StreamExt};
use protocol::connection::{ConnectError, Connector, FrameConnection, Incoming};
use protocol::origin::{worker_origin, OriginError};
use protocol::receipt::{Receipt, ReceiptBody};
use protocol::signing::Keypair;
use protocol::worker::{
    challenge_message, Assignment, CoordinatorFrame, ErrorCode, WorkerFrame, FEATURE_DELTAS,
    PROTOCOL_VERSION,
};
use rand::Rng;
use rand_chacha::ChaCha20Rng;
use serde_json::Value;
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use testkit::outputs;
use tokio::time::Instant;
use uuid::Uuid;

#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error(transparent)]
    Key(#[from] KeyError),
    /// The coordinator answered the handshake with an `error` frame; retrying
    /// with the same hello would be refused again.
    #[error("coordinator refused the handshake ({code:?}): {message}")]
    Refused { code: ErrorCode, message: String },
    /// The connector's URL names no coordinator origin to sign.
    #[error("coordinator URL: {0}")]
    Url(#[from] OriginError),
    /// The challenge was for another network than the worker serves: the
    /// worker did not sign it and will not reconnect.
    #[error("the coordinator's challenge is for network {offered:?}, but this worker serves {expected:?}; not signing")]
    WrongNetwork { expected: String, offered: String },
}

/// Why [`Worker::run`] returned without an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkerExit {
    /// The connector can make no more connections (the harness dropped its acceptor).
    ConnectorShutdown,
    /// The connection ended and [`crate::ReconnectPolicy::enabled`] is off.
    ReconnectDisabled,
    /// `max_attempts` consecutive connection attempts failed.
    GaveUp { attempts: u32 },
}

/// How a session ended.
enum SessionEnd {
    PeerClosed(String),
    /// `JobFault::Disconnect`: closed by us, cleanly.
    Disconnected,
    /// `JobFault::Crash`: connection dropped, restart after a pause.
    Crashed {
        restart_after_ms: u64,
    },
    Refused {
        code: ErrorCode,
        message: String,
    },
    /// The challenge named another network; the worker closed unsigned.
    WrongNetwork {
        offered: String,
    },
}

enum Completion {
    Output(Result<Value, BackendError>),
    /// A `give_up` fault's end: the job is rejected.
    GiveUp,
    Disconnect,
    Crash {
        restart_after_ms: u64,
    },
}

struct InFlight {
    fault: Option<JobFault>,
    assignment: Assignment,
    /// The `seq` of its next delta.
    next_seq: u32,
}

/// Deltas of the jobs in flight, tagged with their job, on their way from
/// the job's work to the session (decision 0023).
type DeltaTx = tokio::sync::mpsc::UnboundedSender<(Uuid, String)>;

pub struct Worker {
    config: WorkerConfig,
    key: Keypair,
    /// Signs what the `bad_signature` faults sign.
    wrong_key: Keypair,
    clock: SharedClock,
    backend: Arc<dyn Backend>,
    observer: Arc<dyn Observer>,
    latency_rng: ChaCha20Rng,
    fault_rng: ChaCha20Rng,
    backoff_rng: ChaCha20Rng,
    jobs_seen: u64,
    sessions: u32,
    /// Frames a driver asks this worker to send as they are, whatever the
    /// protocol says (see [`Worker::with_outbox`]).
    outbox: Option<tokio::sync::mpsc::UnboundedReceiver<String>>,
    /// The output and receipt of the last result answered honestly: what
    /// an `other_job_receipt` fault sends for another job.
    last_result: Option<(Value, Receipt)>,
    /// The payment reference of the last paid job answered: what an
    /// `other_payment_ref` fault binds another job's receipt to.
    last_payment_ref: Option<String>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("name", &self.config.name)
            .field("public_key", &self.key.public_key_hex())
            .finish_non_exhaustive()
    }
}

type Step<T = ()> = Result<T, SessionEnd>;

/// A text frame, `None` for a binary frame (not part of the protocol, so
/// skipped unseen), or the end of the session once the peer has gone.
fn text_of(incoming: Incoming) -> Step<Option<String>> {
    match incoming {
        Incoming::Text(text) => Ok(Some(text)),
        Incoming::Binary(_) => Ok(None),
        Incoming::Closed => Err(SessionEnd::PeerClosed("connection closed by peer".into())),
    }
}

/// The next frame of a driver's outbox; never ready without one.
async fn next_scripted(
    outbox: &mut Option<tokio::sync::mpsc::UnboundedReceiver<String>>,
) -> Option<String> {
    match outbox {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

impl Worker {
    /// A worker with the simulated backend and no observer; its key comes
    /// from `config.key` (by default derived from `config.seed`).
    pub fn new(config: WorkerConfig, clock: SharedClock) -> Result<Self, WorkerError> {
        let key = config.key.load(config.seed)?;
        let seed = config.seed;
        Ok(Self {
            key,
            wrong_key: Keypair::generate(&mut rng_for(seed, Stream::WrongKey)),
            clock,
            backend: Arc::new(SimBackend),
            observer: Arc::new(NullObserver),
            latency_rng: rng_for(seed, Stream::Latency),
            fault_rng: rng_for(seed, Stream::Faults),
            backoff_rng: rng_for(seed, Stream::Backoff),
            jobs_seen: 0,
            sessions: 0,
            outbox: None,
            last_result: None,
            last_payment_ref: None,
            config,
        })
    }

    pub fn with_backend(mut self, backend: Arc<dyn Backend>) -> Self {
        self.backend = backend;
        self
    }

    pub fn with_observer(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observer = observer;
        self
    }

    /// Frames sent into `outbox` go out on the current session verbatim
    /// (after the handshake), so a scenario can script a misbehaving peer:
    /// a result for a job it does not hold, a frame out of order. Frames
    /// sent while no session is up wait for the next one.
    pub fn with_outbox(mut self, outbox: tokio::sync::mpsc::UnboundedReceiver<String>) -> Self {
        self.outbox = Some(outbox);
        self
    }

    pub fn with_keypair(mut self, key: Keypair) -> Self {
        self.key = key;
        self
    }

    pub fn public_key_hex(&self) -> String {
        self.key.public_key_hex()
    }

    pub fn config(&self) -> &WorkerConfig {
        &self.config
    }

    /// Assignments received so far, across sessions.
    pub fn jobs_seen(&self) -> u64 {
        self.jobs_seen
    }

    fn emit(&self, kind: EventKind) {
        self.observer.on_event(&WorkerEvent {
            worker: self.config.name.clone(),
            at_ms: self.clock.now_ms(),
            kind,
        });
    }

    async fn pause(&self, ms: u64, reason: &str) {
        self.emit(EventKind::Sleeping {
            ms,
            reason: reason.to_owned(),
        });
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }

    fn backoff_ms(&mut self, failures: u32) -> u64 {
        let policy = &self.config.reconnect;
        let base = policy.delay_ms(failures.max(1));
        let jitter = if policy.jitter_ms > 0 {
            self.backoff_rng.gen_range(0..=policy.jitter_ms)
        } else {
            0
        };
        base + jitter
    }

    /// Connects, serves sessions and reconnects until the connector shuts
    /// down, reconnecting is off or gives up, or the coordinator refuses the
    /// handshake.
    pub async fn run<C: Connector>(&mut self, mut connector: C) -> Result<WorkerExit, WorkerError> {
        // What the login signs: the coordinator this worker was told to
        // reach, never anything the server it reached says.
        let origin = worker_origin(connector.url()).inspect_err(|e| {
            self.emit(EventKind::Stopped {
                reason: format!("coordinator URL: {e}"),
            });
        })?;
        // Consecutive attempts that did not reach `welcome`.
        let mut failures: u32 = 0;
        let mut first = true;
        loop {
            if !first && !self.config.reconnect.enabled {
                self.emit(EventKind::Stopped {
                    reason: "reconnect disabled".into(),
                });
                return Ok(WorkerExit::ReconnectDisabled);
            }
            first = false;
            self.emit(EventKind::Connecting {
                attempt: failures + 1,
            });
            let conn = match connector.connect().await {
                Ok(t) => t,
                Err(ConnectError::Shutdown) => {
                    self.emit(EventKind::Stopped {
                        reason: "connector shut down".into(),
                    });
                    return Ok(WorkerExit::ConnectorShutdown);
                }
                Err(e) => {
                    failures += 1;
                    self.emit(EventKind::ConnectFailed {
                        attempt: failures,
                        error: e.to_string(),
                    });
                    if let Some(exit) = self.gave_up(failures) {
                        return Ok(exit);
                    }
                    let ms = self.backoff_ms(failures);
                    self.pause(ms, "reconnect backoff").await;
                    continue;
                }
            };
            let (end, welcomed) = self.session(conn, &origin).await;
            if welcomed {
                failures = 0;
            } else {
                failures += 1;
            }
            if let Some(stop) = self.after_session(end, failures).await {
                return stop;
            }
        }
    }

    /// Reports how a session ended and pauses as the policy says before the
    /// next connect; `Some` when the worker stops instead.
    async fn after_session(
        &mut self,
        end: SessionEnd,
        failures: u32,
    ) -> Option<Result<WorkerExit, WorkerError>> {
        match end {
            SessionEnd::Refused { code, message } => {
                self.emit(EventKind::Stopped {
                    reason: format!("handshake refused: {message}"),
                });
                return Some(Err(WorkerError::Refused { code, message }));
            }
            SessionEnd::WrongNetwork { offered } => {
                let error = WorkerError::WrongNetwork {
                    expected: self.config.network.clone(),
                    offered,
                };
                self.emit(EventKind::Stopped {
                    reason: error.to_string(),
                });
                return Some(Err(error));
            }
            SessionEnd::Crashed { restart_after_ms } => {
                self.emit(EventKind::Disconnected {
                    reason: "crash".into(),
                });
                self.pause(restart_after_ms, "crash restart").await;
            }
            SessionEnd::Disconnected | SessionEnd::PeerClosed(_) => {
                let reason = match end {
                    SessionEnd::PeerClosed(reason) => reason,
                    _ => "scripted disconnect".into(),
                };
                self.emit(EventKind::Disconnected { reason });
                if let Some(exit) = self.gave_up(failures) {
                    return Some(Ok(exit));
                }
                if self.config.reconnect.enabled {
                    let ms = self.backoff_ms(failures);
                    self.pause(ms, "reconnect backoff").await;
                }
            }
        }
        None
    }

    fn gave_up(&self, failures: u32) -> Option<WorkerExit> {
        let max = self.config.reconnect.max_attempts?;
        if failures >= max {
            self.emit(EventKind::Stopped {
                reason: format!("gave up after {failures} attempts"),
            });
            Some(WorkerExit::GaveUp { attempts: failures })
        } else {
            None
        }
    }

    /// One connection; returns how it ended and whether it got to `welcome`.
    async fn session<T: FrameConnection>(&mut self, mut t: T, origin: &str) -> (SessionEnd, bool) {
        let mut welcomed = false;
        let end = match self.session_inner(&mut t, origin, &mut welcomed).await {
            Err(end) => end,
            Ok(never) => match never {},
        };
        match end {
            // A crash drops the connection without a close frame.
            SessionEnd::Crashed { .. } => drop(t),
            _ => t.close().await,
        }
        (end, welcomed)
    }

    async fn send_frame<T: FrameConnection>(&self, t: &mut T, frame: &WorkerFrame) -> Step {
        let text = serde_json::to_string(frame).expect("worker frames serialise");
        self.send_raw(t, text).await
    }

    async fn send_raw<T: FrameConnection>(&self, t: &mut T, text: String) -> Step {
        self.emit(EventKind::FrameOut {
            frame: text.clone(),
        });
        t.send(text)
            .await
            .map_err(|e| SessionEnd::PeerClosed(e.to_string()))
    }

    /// The next coordinator frame that parses; unparsable ones are reported and skipped.
    async fn recv_frame<T: FrameConnection>(&self, t: &mut T) -> Step<CoordinatorFrame> {
        loop {
            let Some(text) = text_of(t.recv().await)? else {
                continue;
            };
            if let Some(frame) = self.parse_in(text) {
                return Ok(frame);
            }
        }
    }

    fn parse_in(&self, text: String) -> Option<CoordinatorFrame> {
        let parsed = serde_json::from_str::<CoordinatorFrame>(&text);
        self.emit(EventKind::FrameIn {
            frame: text.clone(),
        });
        match parsed {
            Ok(frame) => Some(frame),
            Err(_) => {
                self.emit(EventKind::Unparsable { frame: text });
                None
            }
        }
    }

    async fn handshake<T: FrameConnection>(&mut self, t: &mut T, origin: &str) -> Step<(u64, u64)> {
        let fault = self.config.faults.handshake.clone();
        let hello = WorkerFrame::Hello {
            protocol_version: if fault == Some(HandshakeFault::WrongProtocolVersion) {
                999
            } else {
                PROTOCOL_VERSION
            },
            coordinator: Some(origin.to_owned()),
            provider_pubkey: if fault == Some(HandshakeFault::InvalidHello) {
                "0x1234".to_owned()
            } else {
                self.key.public_key_hex()
            },
            capabilities: self.config.capabilities.clone(),
            slots: self.config.slots,
            agent: Some(self.config.agent.clone()),
            features: match self.config.stream {
                true => vec![FEATURE_DELTAS.to_owned()],
                false => Vec::new(),
            },
        };
        self.send_frame(t, &hello).await?;
        loop {
            match self.recv_frame(t).await? {
                CoordinatorFrame::Challenge { nonce, network } => {
                    if network != self.config.network {
                        return Err(SessionEnd::WrongNetwork { offered: network });
                    }
                    let signer = if fault == Some(HandshakeFault::BadAuthSignature) {
                        &self.wrong_key
                    } else {
                        &self.key
                    };
                    let message = challenge_message(origin, &network, &nonce);
                    let signature = signer.personal_sign(message.as_bytes());
                    self.send_frame(t, &WorkerFrame::Auth { signature }).await?;
                }
                CoordinatorFrame::Welcome {
                    session_id,
                    heartbeat_interval_ms,
                    ..
                } => return Ok((session_id, heartbeat_interval_ms)),
                // A coordinator that is shutting down refuses for now, not for
                // good: reconnect with backoff, as after a session it closed
                // (docs/worker-protocol.md), or a rolling restart stops
                // every worker that dials in during it.
                CoordinatorFrame::Error {
                    code: ErrorCode::ShuttingDown,
                    message,
                    ..
                } => return Err(SessionEnd::PeerClosed(message)),
                CoordinatorFrame::Error { code, message, .. } => {
                    return Err(SessionEnd::Refused { code, message })
                }
                // Nothing else is meaningful before `welcome`; keep waiting.
                _ => {}
            }
        }
    }

    async fn session_inner<T: FrameConnection>(
        &mut self,
        t: &mut T,
        origin: &str,
        welcomed: &mut bool,
    ) -> Step<Infallible> {
        let (session_id, interval_ms) = self.handshake(t, origin).await?;
        *welcomed = true;
        self.emit(EventKind::Welcomed {
            session: self.sessions,
            session_id,
        });
        self.sessions += 1;

        let start = Instant::now();
        let interval_ms = match self.config.faults.heartbeat {
            HeartbeatFault::Slow { interval_ms } => interval_ms,
            _ => interval_ms,
        }
        .max(1);
        let stop_at = match self.config.faults.heartbeat {
            HeartbeatFault::Stop { after_ms } => Some(start + Duration::from_millis(after_ms)),
            _ => None,
        };
        let interval = Duration::from_millis(interval_ms);
        let mut next_heartbeat = start + interval;
        let mut in_flight: BTreeMap<Uuid, InFlight> = BTreeMap::new();
        let mut pending: FuturesUnordered<BoxFuture<(Uuid, Completion)>> = FuturesUnordered::new();
        let (delta_tx, mut deltas) = tokio::sync::mpsc::unbounded_channel();

        loop {
            let heartbeat_due = stop_at.is_none_or(|stop| next_heartbeat < stop);
            tokio::select! {
                biased;
                incoming = t.recv() => {
                    let Some(text) = text_of(incoming)? else { continue };
                    let Some(frame) = self.parse_in(text) else { continue };
                    self.on_frame(t, frame, &mut in_flight, &mut pending, &delta_tx).await?;
                }
                Some((job_id, text)) = deltas.recv() => {
                    self.send_delta(t, &mut in_flight, job_id, text).await?;
                }
                Some((job_id, completion)) = pending.next(), if !pending.is_empty() => {
                    // A job's last deltas may be queued still: they go first.
                    while let Ok((job_id, text)) = deltas.try_recv() {
                        self.send_delta(t, &mut in_flight, job_id, text).await?;
                    }
                    let Some(job) = in_flight.remove(&job_id) else {
                        // Cancelled meanwhile; the work is wasted.
                        continue;
                    };
                    self.on_completion(t, job, completion).await?;
                }
                _ = tokio::time::sleep_until(next_heartbeat), if heartbeat_due => {
                    self.send_frame(t, &WorkerFrame::Heartbeat).await?;
                    next_heartbeat += interval;
                }
                Some(text) = next_scripted(&mut self.outbox) => {
                    self.send_raw(t, text).await?;
                }
            }
        }
    }

    async fn on_frame<T: FrameConnection>(
        &mut self,
        t: &mut T,
        frame: CoordinatorFrame,
        in_flight: &mut BTreeMap<Uuid, InFlight>,
        pending: &mut FuturesUnordered<BoxFuture<(Uuid, Completion)>>,
        deltas: &DeltaTx,
    ) -> Step {
        match frame {
            CoordinatorFrame::Assign(assignment) => {
                self.on_assign(t, assignment, in_flight, pending, deltas)
                    .await
            }
            CoordinatorFrame::Cancel { job_id, reason } => {
                if in_flight.remove(&job_id).is_some() {
                    self.emit(EventKind::JobDropped { job_id, reason });
                }
                Ok(())
            }
            // result_accepted, errors and stray handshake frames need no answer;
            // they are in the event log.
            _ => Ok(()),
        }
    }

    async fn on_assign<T: FrameConnection>(
        &mut self,
        t: &mut T,
        assignment: Assignment,
        in_flight: &mut BTreeMap<Uuid, InFlight>,
        pending: &mut FuturesUnordered<BoxFuture<(Uuid, Completion)>>,
        deltas: &DeltaTx,
    ) -> Step {
        let index = self.jobs_seen;
        self.jobs_seen += 1;
        let job_id = assignment.job_id;
        let fault = self.config.faults.pick(index, &mut self.fault_rng);

        if let Some(reason) = self.refusal(&assignment, in_flight) {
            let reason = reason.to_owned();
            return self
                .send_frame(t, &WorkerFrame::Reject { job_id, reason })
                .await;
        }

        if let Some(fault) = &fault {
            self.emit(EventKind::FaultFired {
                job_index: index,
                job_id,
                fault: fault.name().to_owned(),
            });
        }
        match &fault {
            Some(JobFault::Reject {
                reason,
                accept_first,
            }) => {
                if *accept_first {
                    self.send_frame(t, &WorkerFrame::Accept { job_id }).await?;
                }
                let reason = reason.clone();
                return self
                    .send_frame(t, &WorkerFrame::Reject { job_id, reason })
                    .await;
            }
            Some(JobFault::Malformed { frame }) => {
                let text = self.malformed_frame(frame);
                self.send_raw(t, text).await?;
            }
            _ => {}
        }

        self.send_frame(t, &WorkerFrame::Accept { job_id }).await?;
        // Drawn for every job accepted here, whatever its fault: a seed's
        // later latencies depend on this draw order.
        let latency_ms = self.config.latency.sample_ms(&mut self.latency_rng);
        if let Some(work) = self.work(fault.as_ref(), &assignment, latency_ms, deltas) {
            pending.push(work);
        }
        let next_seq = 0;
        in_flight.insert(
            job_id,
            InFlight {
                fault,
                assignment,
                next_seq,
            },
        );
        Ok(())
    }

    /// Sends a delta of a job still in flight (one cancelled meanwhile
    /// sends nothing more).
    async fn send_delta<T: FrameConnection>(
        &self,
        t: &mut T,
        in_flight: &mut BTreeMap<Uuid, InFlight>,
        job_id: Uuid,
        text: String,
    ) -> Step {
        let Some(job) = in_flight.get_mut(&job_id) else {
            return Ok(());
        };
        let seq = job.next_seq;
        job.next_seq += 1;
        self.send_frame(t, &WorkerFrame::Delta { job_id, seq, text })
            .await
    }

    /// Why this worker cannot take `assignment` now, if it cannot.
    fn refusal(
        &self,
        assignment: &Assignment,
        in_flight: &BTreeMap<Uuid, InFlight>,
    ) -> Option<&'static str> {
        if in_flight.contains_key(&assignment.job_id) {
            Some("job already in progress")
        } else if in_flight.len() >= self.config.slots as usize {
            Some("no free slot")
        } else if !self.config.capabilities.contains(&assignment.job_type) {
            Some("job type not offered by this worker")
        } else if assignment.payload.job_type() != assignment.job_type {
            Some("job_type does not match the payload")
        } else {
            None
        }
    }

    /// The job's end as `fault` shapes it, due `latency_ms` after acceptance
    /// (plus a slow fault's extra); `None` for a job that never ends.
    fn work(
        &self,
        fault: Option<&JobFault>,
        assignment: &Assignment,
        mut latency_ms: u64,
        deltas: &DeltaTx,
    ) -> Option<BoxFuture<(Uuid, Completion)>> {
        let completion: BoxFuture<Completion> = match fault {
            Some(JobFault::Silent) => return None,
            Some(JobFault::Disconnect) => Box::pin(async { Completion::Disconnect }),
            Some(JobFault::GiveUp) => Box::pin(async { Completion::GiveUp }),
            Some(JobFault::Crash { restart_after_ms }) => {
                let restart_after_ms = *restart_after_ms;
                Box::pin(async move { Completion::Crash { restart_after_ms } })
            }
            other => {
                if let Some(JobFault::Slow { extra_ms }) = other {
                    latency_ms += extra_ms;
                }
                if self.config.stream {
                    let job_id = assignment.job_id;
                    let differ = other == Some(&JobFault::DeltasDiffer);
                    let work = streamed(&*self.backend, assignment, latency_ms, differ, deltas);
                    return Some(Box::pin(async move { (job_id, work.await) }));
                }
                let work = self.backend.execute(&assignment.payload);
                Box::pin(async move { Completion::Output(work.await) })
            }
        };
        let job_id = assignment.job_id;
        Some(Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(latency_ms)).await;
            (job_id, completion.await)
        }))
    }

    async fn on_completion<T: FrameConnection>(
        &mut self,
        t: &mut T,
        job: InFlight,
        completion: Completion,
    ) -> Step {
        let job_id = job.assignment.job_id;
        let output = match completion {
            Completion::Disconnect => return Err(SessionEnd::Disconnected),
            Completion::Crash { restart_after_ms } => {
                return Err(SessionEnd::Crashed { restart_after_ms })
            }
            Completion::GiveUp => {
                let reason = "gave up at its own deadline".to_owned();
                return self
                    .send_frame(t, &WorkerFrame::Reject { job_id, reason })
                    .await;
            }
            Completion::Output(Err(e)) => {
                let reason = e.to_string();
                return self
                    .send_frame(t, &WorkerFrame::Reject { job_id, reason })
                    .await;
            }
            Completion::Output(Ok(output)) => output,
        };
        let frame = self.result_frame(&job, output);
        if job.fault == Some(JobFault::DuplicateResult) {
            self.send_frame(t, &frame).await?;
        }
        self.send_frame(t, &frame).await
    }

    /// The `result` frame, with the job's receipt fault applied.
    fn result_frame(&mut self, job: &InFlight, output: Value) -> WorkerFrame {
        let a = &job.assignment;
        let completed_at = protocol::time::format_ms(self.clock.now_ms());
        let body = |output: &Value| {
            ReceiptBody::new(
                a.job_id,
                self.key.public_key_hex(),
                output,
                completed_at.clone(),
                a.payment_ref.clone(),
            )
        };
        let (output, receipt) = match job.fault {
            Some(JobFault::BadSignature) => {
                let receipt = body(&output).sign(&self.wrong_key);
                (output, receipt)
            }
            Some(JobFault::WrongOutputHash) => {
                let tampered = serde_json::json!({ "tampered": output });
                (output, body(&tampered).sign(&self.key))
            }
            Some(JobFault::InvalidOutput) => {
                let wrong = outputs::invalid_output_for(&a.payload);
                let receipt = body(&wrong).sign(&self.key);
                (wrong, receipt)
            }
            Some(JobFault::OtherJobReceipt) => match &self.last_result {
                // The same shape, so only the receipt's job id tells.
                Some((other, receipt)) if other.is_string() == output.is_string() => {
                    (other.clone(), receipt.clone())
                }
                _ => (output.clone(), body(&output).sign(&self.key)),
            },
            Some(JobFault::OtherPaymentRef) => {
                let mut receipt = body(&output);
                receipt.payment_ref = Some(match &self.last_payment_ref {
                    Some(other) if a.payment_ref.as_ref() != Some(other) => other.clone(),
                    // Made up: a worker can write any reference it likes.
                    _ => format!("x402:0x{}", a.job_id.simple()),
                });
                (output, receipt.sign(&self.key))
            }
            Some(JobFault::NoPaymentRef) => {
                let mut receipt = body(&output);
                receipt.payment_ref = None;
                (output, receipt.sign(&self.key))
            }
            Some(JobFault::ForeignKeyReceipt) => {
                let mut receipt = body(&output);
                receipt.provider_pubkey = self.wrong_key.public_key_hex();
                (output, receipt.sign(&self.wrong_key))
            }
            _ => {
                let receipt = body(&output).sign(&self.key);
                (output, receipt)
            }
        };
        if job.fault.is_none() {
            self.last_result = Some((output.clone(), receipt.clone()));
        }
        if a.payment_ref.is_some() {
            self.last_payment_ref = a.payment_ref.clone();
        }
        WorkerFrame::Result {
            job_id: a.job_id,
            output,
            receipt,
        }
    }

    fn malformed_frame(&mut self, kind: &MalformedKind) -> String {
        match kind {
            MalformedKind::NotJson => "this is not json {".to_owned(),
            MalformedKind::UnknownType => r#"{"type":"gossip","note":"no such frame"}"#.to_owned(),
            MalformedKind::Oversized { bytes } => {
                let head = r#"{"type":"heartbeat","padding":""#;
                let pad = bytes.saturating_sub(head.len() + 2);
                format!("{head}{}\"}}", "x".repeat(pad))
            }
            MalformedKind::Unexpected => serde_json::to_string(&WorkerFrame::Hello {
                protocol_version: PROTOCOL_VERSION,
                coordinator: None,
                provider_pubkey: self.key.public_key_hex(),
                capabilities: self.config.capabilities.clone(),
                slots: self.config.slots,
                agent: Some(self.config.agent.clone()),
                features: Vec::new(),
            })
            .expect("worker frames serialise"),
            MalformedKind::ForeignResult => {
                let job_id = uuid::Builder::from_random_bytes(self.fault_rng.gen()).into_uuid();
                let output = Value::String("unsolicited".into());
                let receipt = ReceiptBody::new(
                    job_id,
                    self.key.public_key_hex(),
                    &output,
                    protocol::time::format_ms(self.clock.now_ms()),
                    None,
                )
                .sign(&self.key);
                serde_json::to_string(&WorkerFrame::Result {
                    job_id,
                    output,
                    receipt,
                })
                .expect("worker frames serialise")
            }
        }
    }
}

/// Most deltas the simulated backend's output is cut into.
const SIM_DELTAS_MAX: usize = 32;

/// A streaming worker's work on one job, due `latency_ms` after it began:
/// a streaming backend's deltas as they come (after the latency), else the
/// finished output's pieces spread evenly over the latency, the result at
/// its end (decision 0023). Only text outputs are cut. `differ` (the
/// `deltas_differ` fault): every delta's text is [`altered`], the result's
/// output is not.
fn streamed(
    backend: &dyn Backend,
    assignment: &Assignment,
    latency_ms: u64,
    differ: bool,
    deltas: &DeltaTx,
) -> BoxFuture<Completion> {
    let deltas = deltas.clone();
    let job_id = assignment.job_id;
    let shown = move |text: &str| {
        if differ {
            altered(text)
        } else {
            text.to_owned()
        }
    };
    if backend.streams() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        let work = backend.execute_streaming(&assignment.payload, tx);
        let forwarding = async move {
            while let Some(text) = rx.recv().await {
                let _ = deltas.send((job_id, shown(&text)));
            }
        };
        return Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(latency_ms)).await;
            let (output, ()) = futures_util::future::join(work, forwarding).await;
            Completion::Output(output)
        });
    }
    let work = backend.execute(&assignment.payload);
    Box::pin(async move {
        let output = work.await;
        let text = output.as_ref().ok().and_then(Value::as_str).unwrap_or("");
        let text = shown(text);
        let pieces = pieces(&text, SIM_DELTAS_MAX);
        let step = latency_ms / (pieces.len() as u64 + 1);
        for piece in &pieces {
            tokio::time::sleep(Duration::from_millis(step)).await;
            let _ = deltas.send((job_id, (*piece).to_owned()));
        }
        let rest = latency_ms - step * pieces.len() as u64;
        tokio::time::sleep(Duration::from_millis(rest)).await;
        Completion::Output(output)
    })
}

/// `text` with its characters rotated by one (the first last): as many
/// bytes, a different text unless every character is the same.
fn altered(text: &str) -> String {
    let mut chars = text.chars();
    let first = chars.next();
    chars.chain(first).collect()
}

/// `text` cut after spaces into at most `max` pieces that join to it.
fn pieces(text: &str, max: usize) -> Vec<&str> {
    let words: Vec<&str> = text.split_inclusive(' ').collect();
    let per_piece = words.len().div_ceil(max.max(1)).max(1);
    let mut pieces = Vec::new();
    let mut start = 0;
    for group in words.chunks(per_piece) {
        let len: usize = group.iter().map(|w| w.len()).sum();
        pieces.push(&text[start..start + len]);
        start += len;
    }
    pieces
}

#[cfg(test)]
mod stream_tests {
    use super::{altered, pieces};

    #[test]
    fn altered_text_keeps_its_length_and_differs() {
        for text in ["Say hi to the world", "héllo wörld", "ab"] {
            let a = altered(text);
            assert_eq!(a.len(), text.len());
            assert_ne!(a, text);
        }
        assert_eq!(altered(""), "");
    }

    #[test]
    fn pieces_join_to_the_text_and_are_bounded() {
        let text = "one two three four five six seven";
        for max in [1, 2, 3, 32] {
            let p = pieces(text, max);
            assert_eq!(p.concat(), text);
            assert!(p.len() <= max && !p.is_empty());
        }
        assert!(pieces("", 4).is_empty());
    }
}
