//! One worker's WebSocket session: hello, challenge-response, then the loop
//! that forwards the core's assigns and cancels to the worker and the
//! worker's accepts, results and rejects to the core.
//!
//! The login binds the worker to this coordinator: the hello names the
//! origin the worker dialled, which must be one this coordinator's
//! operator configured, and the signature covers it, so a server that
//! relays our challenge to a worker cannot log in as that worker.
//!
//! The session is written against [`FrameConnection`], a stream of text frames,
//! so the same code serves real WebSockets and the simulation's in-memory
//! channels. Results are checked (`result.rs`: output shape, receipt) in
//! the session, outside the core's lock, because signature recovery is the
//! most expensive step of a job.

use super::deltas::DeltaRate;
use super::result::{check_result, Held, OutputShape};
use crate::buggify::{self, SessionEnd, Site};
use crate::core::{FailureReason, Outbound, SessionId};
use crate::shell::{Coordinator, OutboxRx};
use protocol::api::JobType;
use protocol::connection::{FrameConnection, Incoming, SendError};
use protocol::signing;
use protocol::worker::{
    challenge_message, CoordinatorFrame, ErrorCode, WorkerFrame, FEATURE_DELTAS, PROTOCOL_VERSION,
};
use std::collections::HashMap;
use std::time::Duration;
use tokio::time::{sleep_until, Instant};
use uuid::Uuid;

/// An error frame to answer with: code, message and the job it is about.
type Refusal = (ErrorCode, String, Option<Uuid>);

/// An authenticated worker.
struct Peer {
    session: SessionId,
    pubkey: String,
    /// Its span for the harness, from its registration; taken when it ends.
    witnessed: Option<Witnessed>,
    /// `pubkey` parsed, once: every receipt is checked against it.
    key: protocol::signing::PublicKey,
    outbox: OutboxRx,
    /// Its hello named [`FEATURE_DELTAS`]: it may send `delta` frames.
    deltas: bool,
    delta_rate: DeltaRate,
    /// Its place among its address's sessions, held while it runs.
    _place: Option<crate::shell::WorkerPlace>,
}

/// Runs a worker session to its end.
pub async fn run(c: Coordinator, conn: impl FrameConnection) {
    run_admitted(c, conn, None).await;
}

/// Runs a session whose handshake holds `permit` until it completes.
pub async fn run_admitted<C: FrameConnection>(
    c: Coordinator,
    conn: C,
    permit: Option<crate::shell::HandshakePermit>,
) {
    let within = Duration::from_millis(c.config().timing.heartbeat_timeout_ms);
    let mut conn = Timed {
        conn,
        within,
        silent_until: None,
        stalled: false,
    };
    // Held to the end: shutdown waits for it (the worker's jobs are given
    // back below, before the final commit).
    let _running = c.session_running();
    // A session from a client address (one upgraded over HTTP) takes a
    // place among that address's sessions and slots once authenticated.
    let client = permit.as_ref().map(|p| p.client().to_owned());
    let handshaken = handshake(&c, &mut conn, client.as_deref()).await;
    drop(permit);
    let Some(mut peer) = handshaken else {
        conn.close().await;
        return;
    };
    tracing::info!(session = peer.session, pubkey = %peer.pubkey, "worker connected");
    let end = serve(&c, &mut conn, &mut peer).await;
    if let Some(witnessed) = peer.witnessed.take() {
        witnessed.close(end);
    }
    tracing::info!(
        session = peer.session,
        reason = end.as_str(),
        "worker disconnected"
    );
    c.metrics().session_closed(end);
    c.unregister_worker(peer.session);
    conn.close().await;
}

/// A session's span for the harness ([`buggify::session_opened`]): opened
/// when the core registers the worker (from then on admission counts it,
/// before its welcome is sent: a stalled send took 200 ms, and a commit in
/// between was admitted on it; found by the swarm, seed 899), and closed
/// when dropped: by [`Witnessed::close`] with why it ended, or with no
/// reason when a crash drops the session's task.
struct Witnessed {
    c: Coordinator,
    pubkey: String,
    session: SessionId,
    end: Option<SessionEnd>,
}

impl Witnessed {
    fn open(c: &Coordinator, pubkey: &str, session: SessionId) -> Self {
        buggify::session_opened(pubkey, session, c.now_ms());
        Self {
            c: c.clone(),
            pubkey: pubkey.to_owned(),
            session,
            end: None,
        }
    }

    /// Closes the span, noting why the session ended.
    fn close(mut self, end: SessionEnd) {
        self.end = Some(end);
    }
}

impl Drop for Witnessed {
    fn drop(&mut self) {
        buggify::session_closed(&self.pubkey, self.session, self.c.now_ms(), self.end);
    }
}

/// A connection whose every send has a deadline, the heartbeat timeout: a
/// worker that stops reading fills its TCP window, and a send without one
/// waited forever while the heartbeat timer (checked between frames) never
/// fired and the outbox grew (issue 29, finding 3). A send that misses it
/// fails as on a closed connection, which ends the session; its jobs go
/// back to the queue. Once the session runs, a send also ends at the
/// heartbeat deadline (a worker silent that long is gone whatever the send
/// path does), so a stalled worker is closed within the heartbeat timeout
/// of its last frame, not of its first blocked send. The closing handshake
/// gets [`CLOSE_WITHIN`], and none after a missed send (the socket takes
/// nothing more).
struct Timed<C> {
    conn: C,
    within: Duration,
    /// The heartbeat deadline of the running session.
    silent_until: Option<Instant>,
    /// A send missed its deadline.
    stalled: bool,
}

/// Most time a closing handshake may take before the socket is dropped.
const CLOSE_WITHIN: Duration = Duration::from_secs(1);

impl<C: FrameConnection> FrameConnection for Timed<C> {
    async fn recv(&mut self) -> Incoming {
        self.conn.recv().await
    }

    async fn send(&mut self, text: String) -> Result<(), SendError> {
        let deadline = Instant::now() + self.within;
        let deadline = self.silent_until.map_or(deadline, |s| s.min(deadline));
        let send = async {
            buggify::stall(Site::WorkerSendStall, 200).await;
            self.conn.send(text).await
        };
        match tokio::time::timeout_at(deadline, send).await {
            Ok(sent) => sent,
            Err(_) => {
                self.stalled = true;
                Err(SendError::Closed)
            }
        }
    }

    async fn close(&mut self) {
        if !self.stalled {
            let _ = tokio::time::timeout(CLOSE_WITHIN, self.conn.close()).await;
        }
    }
}

async fn send_frame<C: FrameConnection>(
    conn: &mut C,
    frame: &CoordinatorFrame,
) -> Result<(), SendError> {
    let text = serde_json::to_string(frame).expect("frames serialise");
    conn.send(text).await
}

async fn send_error<C: FrameConnection>(
    conn: &mut C,
    code: ErrorCode,
    message: impl Into<String>,
    job_id: Option<Uuid>,
) -> Result<(), SendError> {
    send_frame(
        conn,
        &CoordinatorFrame::Error {
            code,
            message: message.into(),
            job_id,
        },
    )
    .await
}

/// Parses a text frame, answering oversized and malformed ones with an error frame.
async fn parse_frame<C: FrameConnection>(
    c: &Coordinator,
    conn: &mut C,
    incoming: Incoming,
) -> Result<Option<WorkerFrame>, SendError> {
    let text = match incoming {
        Incoming::Closed => return Err(SendError::Closed),
        Incoming::Binary(_) => {
            send_error(
                conn,
                ErrorCode::MalformedFrame,
                "frames must be JSON text",
                None,
            )
            .await?;
            return Ok(None);
        }
        Incoming::Text(text) => text,
    };
    let limit = c.config().limits.frame_bytes_max;
    if text.len() > limit {
        let message = format!(
            "frame of {} bytes is over the {limit}-byte limit",
            text.len()
        );
        send_error(conn, ErrorCode::FrameTooLarge, message, None).await?;
        return Ok(None);
    }
    match serde_json::from_str(&text) {
        Ok(frame) => Ok(Some(frame)),
        Err(e) => {
            send_error(conn, ErrorCode::MalformedFrame, e.to_string(), None).await?;
            Ok(None)
        }
    }
}

/// The next frame of the handshake: `Some(None)` for a bad frame already
/// answered, `None` when the connection closed or the deadline passed.
async fn handshake_frame<C: FrameConnection>(
    c: &Coordinator,
    conn: &mut C,
    deadline: Instant,
) -> Option<Option<WorkerFrame>> {
    tokio::select! {
        biased;
        _ = sleep_until(deadline) => {
            let _ = send_error(conn, ErrorCode::AuthTimeout, "hello and auth must complete in time", None).await;
            None
        }
        incoming = conn.recv() => parse_frame(c, conn, incoming).await.ok(),
    }
}

/// Hello, challenge, auth, welcome; `None` if the worker did not complete it.
async fn handshake<C: FrameConnection>(
    c: &Coordinator,
    conn: &mut C,
    client: Option<&str>,
) -> Option<Peer> {
    let timing = &c.config().timing;
    let opened = Instant::now();
    // A worker says hello at once; only the signature may take longer (a
    // hardware key). A silent connection gives its handshake place back soon.
    let hello_deadline = opened + Duration::from_millis(timing.hello_timeout_ms);
    let deadline = opened + Duration::from_millis(timing.auth_timeout_ms);
    let hello = hello(c, conn, hello_deadline.min(deadline)).await?;
    auth(c, conn, &hello, deadline).await?;
    let place = match client.map(|client| c.worker_place(client, hello.slots)) {
        Some(Err(message)) => {
            let _ = send_error(conn, ErrorCode::InvalidHello, message, None).await;
            return None;
        }
        Some(Ok(place)) => Some(place),
        None => None,
    };
    let mut peer = welcome(c, conn, hello).await?;
    peer._place = place;
    Some(peer)
}

/// What a worker's accepted hello said.
struct Hello {
    origin: String,
    pubkey: String,
    key: signing::PublicKey,
    capabilities: Vec<JobType>,
    slots: u32,
    deltas: bool,
}

/// Waits for a hello this coordinator accepts (other frames are answered
/// and skipped); `None` once the worker is refused or silent too long.
async fn hello<C: FrameConnection>(
    c: &Coordinator,
    conn: &mut C,
    deadline: Instant,
) -> Option<Hello> {
    loop {
        let frame = handshake_frame(c, conn, deadline).await?;
        match frame {
            Some(WorkerFrame::Hello {
                protocol_version,
                coordinator,
                provider_pubkey,
                capabilities,
                slots,
                features,
                ..
            }) => {
                if protocol_version != PROTOCOL_VERSION {
                    let _ =
                        send_error(conn, ErrorCode::UnsupportedVersion, unsupported(), None).await;
                    return None;
                }
                let checked = check_origin(c, coordinator).and_then(|origin| {
                    let key = check_hello(c, &provider_pubkey, &capabilities, slots)?;
                    Ok((origin, key))
                });
                return match checked {
                    Ok((origin, key)) => Some(Hello {
                        origin,
                        pubkey: key.to_hex(),
                        key,
                        capabilities,
                        slots,
                        deltas: features.iter().any(|f| f == FEATURE_DELTAS),
                    }),
                    Err(message) => {
                        let _ = send_error(conn, ErrorCode::InvalidHello, message, None).await;
                        None
                    }
                };
            }
            Some(_) => {
                send_error(conn, ErrorCode::UnexpectedFrame, "expected hello", None)
                    .await
                    .ok()?;
            }
            None => {}
        }
    }
}

/// Sends the challenge and waits for an auth frame whose signature the
/// hello's key made over it (other frames are answered and skipped).
async fn auth<C: FrameConnection>(
    c: &Coordinator,
    conn: &mut C,
    hello: &Hello,
    deadline: Instant,
) -> Option<()> {
    let network = c.config().network.clone();
    let nonce = c.with(|core, _| core.challenge_nonce());
    send_frame(
        conn,
        &CoordinatorFrame::Challenge {
            nonce: nonce.clone(),
            network: network.clone(),
        },
    )
    .await
    .ok()?;
    let message = challenge_message(&hello.origin, &network, &nonce);
    loop {
        let frame = handshake_frame(c, conn, deadline).await?;
        match frame {
            Some(WorkerFrame::Auth { signature }) => {
                let signed =
                    signing::verify_personal_sign(&hello.key, message.as_bytes(), &signature);
                if let Err(e) = signed {
                    let _ = send_error(conn, ErrorCode::AuthFailed, e.to_string(), None).await;
                    return None;
                }
                return Some(());
            }
            Some(_) => {
                send_error(conn, ErrorCode::UnexpectedFrame, "expected auth", None)
                    .await
                    .ok()?;
            }
            None => {}
        }
    }
}

/// Registers the authenticated worker and welcomes it.
async fn welcome<C: FrameConnection>(c: &Coordinator, conn: &mut C, hello: Hello) -> Option<Peer> {
    let timing = &c.config().timing;
    let (session, outbox) = match c.register_worker(&hello.pubkey, hello.capabilities, hello.slots)
    {
        Ok(registered) => registered,
        Err(e) => {
            let _ = send_error(conn, ErrorCode::ShuttingDown, e.to_string(), None).await;
            return None;
        }
    };
    let witnessed = Witnessed::open(c, &hello.pubkey, session);
    let welcome = CoordinatorFrame::Welcome {
        session_id: session,
        heartbeat_interval_ms: timing.heartbeat_interval_ms,
        heartbeat_timeout_ms: timing.heartbeat_timeout_ms,
    };
    if send_frame(conn, &welcome).await.is_err() {
        witnessed.close(SessionEnd::ConnectionClosed);
        c.unregister_worker(session);
        return None;
    }
    Some(Peer {
        session,
        pubkey: hello.pubkey,
        witnessed: Some(witnessed),
        key: hello.key,
        outbox,
        deltas: hello.deltas,
        delta_rate: DeltaRate::default(),
        _place: None,
    })
}

/// The `unsupported_version` message, naming the version spoken and where
/// worker owners read what changed.
fn unsupported() -> String {
    format!(
        "this coordinator speaks protocol_version {PROTOCOL_VERSION} only; upgrade the worker \
         (docs/worker-protocol.md, \"Migrating from version 1\")"
    )
}

/// The hello's `coordinator`, if it is one of this coordinator's origins.
/// Checked against what the operator configured (or the address served),
/// never against the request's `Host`, which the client writes.
fn check_origin(c: &Coordinator, coordinator: Option<String>) -> Result<String, String> {
    let Some(origin) = coordinator else {
        return Err("hello must name the coordinator the worker dialled: \
            `coordinator`, the origin of its URL (protocol_version 2)"
            .into());
    };
    if c.worker_origins().contains(&origin) {
        return Ok(origin);
    }
    let shown: String = origin.chars().take(ORIGIN_SHOWN_CHARS_MAX).collect();
    // Peer-supplied and unauthenticated: logged escaped (`?`), so newlines
    // and terminal escape codes cannot forge log lines (issue 29, finding 9).
    tracing::info!(origin = ?shown, "worker login refused: it dialled another coordinator");
    Err(format!(
        "the worker dialled {shown:?}, which is not this coordinator: \
         point it at a URL this coordinator's operator published (--public-url)"
    ))
}

/// Most characters of a refused origin echoed back or logged.
const ORIGIN_SHOWN_CHARS_MAX: usize = 256;

fn check_hello(
    c: &Coordinator,
    pubkey: &str,
    capabilities: &[JobType],
    slots: u32,
) -> Result<protocol::signing::PublicKey, String> {
    let key = signing::parse_public_key(pubkey).map_err(|e| e.to_string())?;
    if capabilities.is_empty() {
        return Err("capabilities must name at least one job type".into());
    }
    let slots_max = c.config().limits.slots_max;
    if slots == 0 || slots > slots_max {
        return Err(format!("slots must be from 1 to {slots_max}"));
    }
    Ok(key)
}

/// The authenticated loop; returns why it ended.
async fn serve<C: FrameConnection>(
    c: &Coordinator,
    conn: &mut Timed<C>,
    peer: &mut Peer,
) -> SessionEnd {
    let heartbeat_timeout = Duration::from_millis(c.config().timing.heartbeat_timeout_ms);
    let mut silent_until = Instant::now() + heartbeat_timeout;
    conn.silent_until = Some(silent_until);
    // Jobs this session holds, to check results against.
    let mut held: HashMap<Uuid, Held> = HashMap::new();
    loop {
        tokio::select! {
            biased;
            out = peer.outbox.recv() => {
                let frame = match out.map(|out| *out) {
                    Some(Outbound::Frame(frame)) => frame,
                    Some(Outbound::Close(code, message)) => {
                        let _ = send_error(conn, code, message, None).await;
                        return SessionEnd::ClosedByCoordinator;
                    }
                    None => return SessionEnd::OutboxClosed,
                };
                if send_frame(conn, &frame).await.is_err() {
                    return SessionEnd::ConnectionClosed;
                }
                // After the send: this task reads the worker's next frame
                // only once it is back in the loop.
                match frame {
                    CoordinatorFrame::Assign(a) => {
                        let shape = OutputShape::of(&a.payload);
                        let deltas = Default::default();
                        held.insert(a.job_id, Held { shape, payment_ref: a.payment_ref, deltas });
                    }
                    CoordinatorFrame::Cancel { job_id, .. } => { held.remove(&job_id); }
                    _ => {}
                }
            }
            _ = sleep_until(silent_until) => {
                let _ = send_error(conn, ErrorCode::HeartbeatTimeout, "no frame within the heartbeat timeout", None).await;
                return SessionEnd::HeartbeatTimeout;
            }
            incoming = conn.recv() => {
                // Any frame, even a bad one, shows the worker is alive.
                silent_until = Instant::now() + heartbeat_timeout;
                conn.silent_until = Some(silent_until);
                let frame = match parse_frame(c, conn, incoming).await {
                    Err(_) => return SessionEnd::ConnectionClosed,
                    Ok(None) => continue,
                    Ok(Some(frame)) => frame,
                };
                if handle(c, conn, peer, &mut held, frame).await.is_err() {
                    return SessionEnd::ConnectionClosed;
                }
            }
        }
    }
}

async fn handle<C: FrameConnection>(
    c: &Coordinator,
    conn: &mut C,
    peer: &mut Peer,
    held: &mut HashMap<Uuid, Held>,
    frame: WorkerFrame,
) -> Result<(), SendError> {
    let session = peer.session;
    let refused = match frame {
        WorkerFrame::Heartbeat => None,
        WorkerFrame::Hello { .. } | WorkerFrame::Auth { .. } => Some((
            ErrorCode::UnexpectedFrame,
            "already authenticated".to_owned(),
            None,
        )),
        WorkerFrame::Accept { job_id } => c
            .with(|core, _| core.accept(session, job_id))
            .err()
            .map(|e| (e.code(), e.to_string(), Some(job_id))),
        WorkerFrame::Reject { job_id, .. } => {
            held.remove(&job_id);
            c.with(|core, now_ms| {
                core.attempt_failed(session, job_id, FailureReason::WorkerRejected, now_ms)
            })
            .err()
            .map(|e| (e.code(), e.to_string(), Some(job_id)))
        }
        WorkerFrame::Delta { job_id, seq, text } => delta(c, peer, held, job_id, seq, text),
        WorkerFrame::Result {
            job_id,
            output,
            receipt,
        } => result(c, peer, held, job_id, output, receipt).await?,
    };
    match refused {
        Some((code, message, job_id)) => send_error(conn, code, message, job_id).await,
        None => Ok(()),
    }
}

/// A worker's result: checked against what its job was assigned with, then
/// the job completed (once durable) or the attempt failed. `Some` is the
/// error frame to answer with.
async fn result(
    c: &Coordinator,
    peer: &Peer,
    held: &mut HashMap<Uuid, Held>,
    job_id: Uuid,
    output: serde_json::Value,
    receipt: protocol::receipt::Receipt,
) -> Result<Option<Refusal>, SendError> {
    let session = peer.session;
    match held.remove(&job_id) {
        None => Ok(Some(not_held(c, job_id))),
        Some(job) => {
            let output_max = c.config().limits.output_bytes_max;
            let checked = check_result(
                &peer.pubkey,
                &peer.key,
                job_id,
                &job,
                &output,
                &receipt,
                output_max,
            );
            match checked {
                Ok(()) => {
                    let completed = c.with(|core, now_ms| {
                        core.complete(session, job_id, output, receipt, now_ms)
                    });
                    if completed.is_ok() {
                        // `result_accepted` waits in the outbox until the
                        // completion is on disk: a worker told its job is
                        // done never sees it rerun after a crash. If it did
                        // not become durable, the session ends here, so the
                        // waiting `result_accepted` is never sent (issue 29,
                        // finding 9).
                        if let Err(e) = c.durable().await {
                            tracing::error!(error = %e, session, "a completion did not become durable");
                            return Err(SendError::Closed);
                        }
                    }
                    Ok(completed
                        .err()
                        .map(|e| (e.code(), e.to_string(), Some(job_id))))
                }
                Err((reason, code, message)) => {
                    c.metrics().result_rejected(reason);
                    // The attempt is spent either way; the job goes elsewhere.
                    let _ =
                        c.with(|core, now_ms| core.attempt_failed(session, job_id, reason, now_ms));
                    Ok(Some((code, message, Some(job_id))))
                }
            }
        }
    }
}

/// The refusal of a frame about a job this session does not hold: it says
/// whether the job exists at all. A store that cannot answer: the job is
/// taken to exist.
fn not_held(c: &Coordinator, job_id: Uuid) -> Refusal {
    let e = if !matches!(c.job(&job_id), Ok(None)) {
        crate::core::FrameError::NotAssigned
    } else {
        crate::core::FrameError::UnknownJob
    };
    (e.code(), e.to_string(), Some(job_id))
}

/// A worker's output delta (decision 0023): from a worker that announced
/// the feature, for a text job it holds and runs, in order and within the
/// limits, then handed to the job's readers. A delta that breaks a rule
/// is refused and spends the attempt as an invalid output would: the
/// readers were shown a stream that can no longer be trusted, and the
/// job's retry tells them to start again.
fn delta(
    c: &Coordinator,
    peer: &mut Peer,
    held: &mut HashMap<Uuid, Held>,
    job_id: Uuid,
    seq: u32,
    text: String,
) -> Option<Refusal> {
    if !peer.deltas {
        let message = "delta frames need the `deltas` feature in the hello";
        return Some((ErrorCode::UnexpectedFrame, message.into(), Some(job_id)));
    }
    let Some(job) = held.get_mut(&job_id) else {
        return Some(not_held(c, job_id));
    };
    let limits = &c.config().limits;
    let checked = if job.shape != OutputShape::Text {
        Err("deltas are for text outputs only".to_owned())
    } else if !peer
        .delta_rate
        .allow(limits.deltas_per_session_per_second_max)
    {
        Err(format!(
            "more than {} deltas a second",
            limits.deltas_per_session_per_second_max
        ))
    } else {
        job.deltas.push(
            seq,
            &text,
            limits.deltas_per_job_max,
            limits.output_bytes_max,
        )
    };
    let checked = checked.and_then(|()| c.push_delta(peer.session, job_id, &text));
    let message = checked.err()?;
    held.remove(&job_id);
    let reason = FailureReason::InvalidOutput;
    c.metrics().result_rejected(reason);
    let _ = c.with(|core, now_ms| core.attempt_failed(peer.session, job_id, reason, now_ms));
    Some((ErrorCode::InvalidOutput, message, Some(job_id)))
}
