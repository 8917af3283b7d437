//! Shared test helpers: a coordinator under a chosen clock, one-shot HTTP
//! calls through the real router, and a test worker that speaks the worker
//! protocol over in-memory channels or a real WebSocket.
#![allow(dead_code)] // each test binary uses a different subset

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use coordinator::config::Config;
use coordinator::server::{self, Parts, Settings};
use coordinator::{Clock, Coordinator};
use http_body_util::BodyExt;
use protocol::connection::{
    channel_pair, ChannelConnection, FrameConnection, Incoming, CHANNEL_URL,
};
use protocol::origin::worker_origin;
use protocol::receipt::ReceiptBody;
use protocol::signing::Keypair;
use protocol::worker::{challenge_message, Assignment, CoordinatorFrame, PROTOCOL_VERSION};
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceExt;
use worker_sim::WsConnection;

/// 2026-11-21T10:00:00.000Z
pub const EPOCH_MS: i64 = 1_795_255_200_000;

/// The default configuration with `--user-auth off`: the spec's literal
/// flows, plain user ids on every trust endpoint and PRIVATE commit
/// (decision 0017). The tests of the spec's behaviour use it; the proof of a
/// user is tested in `user_proof.rs`.
pub fn spec_config() -> Config {
    Config {
        user_auth: coordinator::config::UserAuth::Off,
        ..Config::default()
    }
}

/// A coordinator started through the composition root on a private
/// in-memory SQLite database.
pub async fn coordinator(config: Config, clock: Arc<dyn Clock>, seed: u64) -> Coordinator {
    let settings = Settings {
        config,
        ..Settings::default()
    };
    let parts = Parts::new(clock, ChaCha20Rng::seed_from_u64(seed));
    let server = server::start(settings, parts)
        .await
        .expect("coordinator starts");
    let c = server.coordinator().clone();
    // The coordinator runs to the end of the test, its timer task with it:
    // a dropped `Server` would stop its tasks.
    std::mem::forget(server);
    c
}

pub struct Response {
    pub status: StatusCode,
    pub headers: axum::http::HeaderMap,
    pub body: Value,
    pub raw: Vec<u8>,
}

pub async fn call(app: &Router, method: &str, uri: &str, body: Option<Value>) -> Response {
    let mut req = Request::builder().method(method).uri(uri);
    let body = match body {
        Some(v) => {
            req = req.header("content-type", "application/json");
            Body::from(serde_json::to_vec(&v).unwrap())
        }
        None => Body::empty(),
    };
    send(app, req.body(body).unwrap()).await
}

pub async fn send(app: &Router, req: Request<Body>) -> Response {
    let res = app.clone().oneshot(req).await.unwrap();
    let status = res.status();
    let headers = res.headers().clone();
    let raw = res.into_body().collect().await.unwrap().to_bytes().to_vec();
    let body = serde_json::from_slice(&raw).unwrap_or_else(|_| {
        panic!(
            "non-JSON body with {status}: {}",
            String::from_utf8_lossy(&raw)
        )
    });
    Response {
        status,
        headers,
        body,
        raw,
    }
}

pub fn llm_job(user: &str) -> Value {
    json!({"job_type": "LLM_INFER", "user_id": user, "payload": {"prompt": "Say hi", "max_tokens": 8}})
}

pub fn task_job(user: &str) -> Value {
    json!({"job_type": "TASK", "user_id": user, "payload": {"task_type": "summarize", "input": "A long text."}})
}

pub fn private(mut job: Value) -> Value {
    job["privacy_class"] = json!("PRIVATE");
    job
}

pub async fn commit(app: &Router, tier: &str, job: Value) -> Response {
    call(app, "POST", &format!("/v1/jobs/commit/{tier}"), Some(job)).await
}

pub async fn job_status(app: &Router, id: &str) -> Value {
    call(app, "GET", &format!("/v1/jobs/{id}"), None).await.body
}

/// Creates a pairing code for `user` and claims it for `key`.
pub async fn pair(app: &Router, user: &str, key: &Keypair) {
    let code = call(
        app,
        "POST",
        "/v1/trust/create",
        Some(json!({"user_id": user})),
    )
    .await;
    assert_eq!(code.status, StatusCode::CREATED);
    let claim = call(
        app,
        "POST",
        "/v1/trust/claim",
        Some(json!({"pairing_code": code.body["pairing_code"], "provider_pubkey": key.public_key_hex()})),
    )
    .await;
    assert_eq!(claim.status, StatusCode::OK, "{:?}", claim.body);
}

/// A text-frame pipe to the coordinator: the shared in-memory channel pair
/// into its session logic, or worker-sim's WebSocket client with the origin
/// of the URL it dialled.
pub enum Wire {
    Channel(ChannelConnection),
    Ws(Box<WsConnection>, String),
}

impl Wire {
    /// Connects over in-memory channels to the coordinator's real session
    /// logic; a coordinator with no public URL takes the channels' origin,
    /// as a served one takes its listener's.
    pub fn channel(c: &Coordinator) -> Self {
        c.default_worker_origins(vec![worker_origin(CHANNEL_URL).unwrap()]);
        let (worker_end, coordinator_end) = channel_pair();
        tokio::spawn(coordinator::worker::session::run(
            c.clone(),
            coordinator_end,
        ));
        Wire::Channel(worker_end)
    }

    pub async fn ws(url: &str) -> Self {
        let conn = WsConnection::connect(url).await.unwrap();
        Wire::Ws(Box::new(conn), worker_origin(url).unwrap())
    }

    /// A WebSocket to `url` whose handshake the test already did.
    pub fn ws_stream(
        stream: tokio_tungstenite::WebSocketStream<
            tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
        >,
        url: &str,
    ) -> Self {
        let conn = WsConnection::from_stream(stream);
        Wire::Ws(Box::new(conn), worker_origin(url).unwrap())
    }

    /// The origin of the coordinator this wire reaches, as a worker signs it.
    pub fn origin(&self) -> String {
        match self {
            Wire::Channel(_) => worker_origin(CHANNEL_URL).unwrap(),
            Wire::Ws(_, origin) => origin.clone(),
        }
    }

    pub async fn send_text(&mut self, text: String) {
        let _ = match self {
            Wire::Channel(conn) => conn.send(text).await,
            Wire::Ws(conn, _) => conn.send(text).await,
        };
    }

    /// The next text frame, or `None` once the coordinator closed.
    pub async fn recv_text(&mut self) -> Option<String> {
        loop {
            let incoming = match self {
                Wire::Channel(conn) => conn.recv().await,
                Wire::Ws(conn, _) => conn.recv().await,
            };
            match incoming {
                Incoming::Text(text) => return Some(text),
                Incoming::Binary(_) => continue,
                Incoming::Closed => return None,
            }
        }
    }
}

pub struct TestWorker {
    pub key: Keypair,
    pub wire: Wire,
    pub session_id: u64,
}

impl TestWorker {
    /// Connects, says hello and proves its key.
    pub async fn connect(wire: Wire, seed: u64, capabilities: &[&str], slots: u32) -> Self {
        let key = Keypair::generate(&mut ChaCha20Rng::seed_from_u64(seed));
        let mut w = TestWorker {
            key,
            wire,
            session_id: 0,
        };
        w.authenticate(capabilities, slots).await;
        w
    }

    pub async fn authenticate(&mut self, capabilities: &[&str], slots: u32) {
        self.authenticate_with(capabilities, slots, &[]).await;
    }

    /// As [`TestWorker::authenticate`], its hello naming `features`
    /// (none: the hello has no `features` key, as an old worker's).
    pub async fn authenticate_with(
        &mut self,
        capabilities: &[&str],
        slots: u32,
        features: &[&str],
    ) {
        let origin = self.wire.origin();
        let mut hello = json!({"type": "hello", "protocol_version": PROTOCOL_VERSION, "coordinator": origin,
            "provider_pubkey": self.key.public_key_hex(), "capabilities": capabilities, "slots": slots});
        if !features.is_empty() {
            hello["features"] = json!(features);
        }
        self.send(hello).await;
        let challenge = self.recv().await;
        let CoordinatorFrame::Challenge { nonce, network } = challenge else {
            panic!("expected challenge, got {challenge:?}");
        };
        let message = challenge_message(&origin, &network, &nonce);
        let signature = self.key.personal_sign(message.as_bytes());
        self.send(json!({"type": "auth", "signature": signature}))
            .await;
        match self.recv().await {
            CoordinatorFrame::Welcome { session_id, .. } => self.session_id = session_id,
            other => panic!("expected welcome, got {other:?}"),
        }
    }

    pub async fn send(&mut self, frame: Value) {
        self.wire.send_text(frame.to_string()).await;
    }

    pub async fn recv(&mut self) -> CoordinatorFrame {
        let text = tokio::time::timeout(Duration::from_secs(120), self.wire.recv_text())
            .await
            .expect("a frame within 120 s")
            .expect("connection open");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("bad frame {text}: {e}"))
    }

    pub async fn recv_closed(&mut self) -> bool {
        tokio::time::timeout(Duration::from_secs(120), self.wire.recv_text())
            .await
            .expect("close within 120 s")
            .is_none()
    }

    pub async fn expect_assign(&mut self) -> Assignment {
        match self.recv().await {
            CoordinatorFrame::Assign(a) => a,
            other => panic!("expected assign, got {other:?}"),
        }
    }

    /// The output a well-behaved worker returns for the assignment.
    pub fn output_for(a: &Assignment) -> Value {
        match &a.payload {
            protocol::api::Payload::Llm { prompt, .. } => json!(format!("echo: {prompt}")),
            protocol::api::Payload::Task { task_type, .. } => match task_type {
                protocol::api::TaskType::ExtractJson => json!({"extracted": true}),
                _ => json!("summary"),
            },
        }
    }

    pub fn result_frame(&self, a: &Assignment, completed_at: &str) -> Value {
        let output = Self::output_for(a);
        let receipt = ReceiptBody::new(
            a.job_id,
            self.key.public_key_hex(),
            &output,
            completed_at.into(),
            a.payment_ref.clone(),
        )
        .sign(&self.key);
        json!({"type": "result", "job_id": a.job_id, "output": output, "receipt": receipt})
    }

    /// Sends the assignment's result (signed, completed at a fixed time).
    pub async fn send_result(&mut self, a: &Assignment) {
        let frame = self.result_frame(a, "2026-11-21T10:00:01.000Z");
        self.send(frame).await;
    }

    /// Accepts and completes an assignment, and waits for the acknowledgement.
    pub async fn complete(&mut self, a: &Assignment) {
        self.send(json!({"type": "accept", "job_id": a.job_id}))
            .await;
        self.send_result(a).await;
        match self.recv().await {
            CoordinatorFrame::ResultAccepted { job_id } => assert_eq!(job_id, a.job_id),
            other => panic!("expected result_accepted, got {other:?}"),
        }
    }
}

/// Lets spawned tasks run until they are all waiting.
pub async fn settle() {
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
}

/// Payments: the pay-to address, the payer (anvil account #0, a public test
/// key) and the time its payments are made at.
pub const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
pub const PAYER: &str = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";
pub const NOW_S: u64 = (EPOCH_MS / 1000) as u64;

/// Base Sepolia USDC terms paid to [`PAY_TO`].
pub fn payment_config() -> x402::PaymentConfig {
    x402::PaymentConfig::base_sepolia_usdc(PAY_TO.parse().unwrap())
}

/// A settler that settles through the recording facilitator `stub`.
pub fn stub_settler(stub: &testkit::FacilitatorStub) -> Arc<dyn x402::Settler> {
    Arc::new(x402::FacilitatorSettler::new(
        testkit::RouterTransport::new(stub.router()),
        Duration::from_secs(5),
    ))
}

/// Turns on payments of `c` (Base Sepolia settings) settled through `stub`.
pub fn enable_stub_payments(c: &Coordinator, stub: &testkit::FacilitatorStub) {
    let gate = x402::PaymentGate::new(
        payment_config(),
        Arc::new(x402::InMemoryNonceStore::default()),
        stub_settler(stub),
    );
    c.enable_payments(gate).unwrap();
}

/// A JSON POST with a fixed `Host` (the payment's `resource`) and an
/// optional payment header.
pub async fn post(
    app: &Router,
    path: &str,
    body: &Value,
    payment: Option<(&str, &str)>,
) -> Response {
    let mut req = Request::post(path)
        .header("content-type", "application/json")
        .header("host", "coordinator.test");
    if let Some((name, value)) = payment {
        req = req.header(name, value);
    }
    send(app, req.body(Body::from(body.to_string())).unwrap()).await
}

/// Pays the 402 answer `r` the way a client would: the header's name and value.
pub fn pay(r: &Response, seed: u64) -> (String, String) {
    use x402::PaymentSigner;
    let header = r.headers.get("payment-required").map(|h| h.as_bytes());
    let required = x402::PaymentRequired::from_response(header, Some(&r.raw)).unwrap();
    let signer = x402::LocalEvmSigner::from_secret_hex(PAYER).unwrap();
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    let h = signer.pay(&required, NOW_S, &mut rng).unwrap();
    (h.name.to_owned(), h.value)
}

/// Waits (at most `within`) for a coordinator process's log line
/// `listening on http://…` among `lines` (its stderr) and returns that base
/// URL; panics if the process exits first.
pub async fn wait_listening<R>(lines: &mut tokio::io::Lines<R>, within: Duration) -> String
where
    R: tokio::io::AsyncBufRead + Unpin,
{
    tokio::time::timeout(within, async {
        while let Some(line) = lines.next_line().await.expect("stderr readable") {
            if let Some(at) = line.find("listening on http://") {
                let rest = &line[at + "listening on ".len()..];
                return rest.split_whitespace().next().unwrap().to_owned();
            }
        }
        panic!("the coordinator exited before listening");
    })
    .await
    .expect("the coordinator listens in time")
}
