//! Issue 16, finding 4: a hostile server relays a worker's login. Over real
//! sockets: the real coordinator on one loopback port, a fake server on
//! another that dials the real coordinator for every worker that connects
//! to it and pipes the frames both ways (recording what it sees), and a
//! real worker (worker-sim, with a key its owner paired with a user) that
//! was pointed at the fake server. The real coordinator must refuse the
//! relayed login, so the user's PRIVATE job never reaches the fake server.

mod common;

use coordinator::server::{self, Parts, Settings};
use futures_util::{SinkExt, StreamExt};
use protocol::signing::Keypair;
use rand::SeedableRng;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_tungstenite::tungstenite::Message;
use worker_sim::{EventKind, EventLog, TokioClock, Worker, WorkerConfig, WsConnector};

const EPOCH_MS: i64 = 1_795_255_200_000;
const SECRET: &str = "the victim's private prompt 7f3a";

/// The real coordinator on a loopback port, with the default settings (its
/// accepted origin is the address it listens on) but user auth off: this
/// test is about the worker's login, its user a plain name (decision 0017).
/// Returns it and that address. It serves until the `Server` drops.
async fn start_coordinator() -> (server::Server, SocketAddr) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let parts = Parts::new(
        Arc::new(coordinator::TokioClock::new(EPOCH_MS)),
        rand_chacha::ChaCha20Rng::seed_from_u64(1),
    );
    let settings = Settings {
        config: coordinator::config::Config {
            user_auth: coordinator::config::UserAuth::Off,
            ..Default::default()
        },
        ..Settings::default()
    };
    let mut server = server::start(settings, parts).await.unwrap();
    server.serve_tcp(listener);
    (server, addr)
}

/// How the fake server treats the worker's hello before relaying it.
#[derive(Clone, Copy)]
enum Relay {
    /// Relays every frame unchanged.
    Verbatim,
    /// Rewrites the hello's `coordinator` to the real coordinator's origin,
    /// so the hello itself passes the origin check.
    ForgeOrigin,
}

/// Every text frame the fake server saw, in either direction.
type Seen = Arc<Mutex<Vec<String>>>;

/// The fake server: accepts WebSockets on its own loopback port and, for
/// each, dials the real coordinator at `real` and pipes frames both ways.
async fn start_relay(real: SocketAddr, mode: Relay) -> (SocketAddr, Seen) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Seen = Arc::default();
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let log = log.clone();
            tokio::spawn(async move {
                let Ok(victim) = tokio_tungstenite::accept_async(socket).await else {
                    return;
                };
                let url = format!("ws://{real}/v1/workers/ws");
                let Ok((upstream, _)) = tokio_tungstenite::connect_async(url).await else {
                    return;
                };
                pipe(victim, upstream, real, mode, log).await;
            });
        }
    });
    (addr, seen)
}

async fn pipe<A, B>(
    victim: tokio_tungstenite::WebSocketStream<A>,
    upstream: tokio_tungstenite::WebSocketStream<B>,
    real: SocketAddr,
    mode: Relay,
    seen: Seen,
) where
    A: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    B: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let (mut to_victim, mut from_victim) = victim.split();
    let (mut to_real, mut from_real) = upstream.split();
    loop {
        tokio::select! {
            biased;
            frame = from_victim.next() => {
                let Some(Ok(Message::Text(text))) = frame else { break };
                let mut text = text.as_str().to_owned();
                seen.lock().unwrap().push(format!("-> {text}"));
                if let Relay::ForgeOrigin = mode {
                    text = forge_origin(&text, real);
                }
                if to_real.send(Message::Text(text.into())).await.is_err() {
                    break;
                }
            }
            frame = from_real.next() => {
                let Some(Ok(Message::Text(text))) = frame else { break };
                seen.lock().unwrap().push(format!("<- {text}"));
                if to_victim.send(Message::Text(text)).await.is_err() {
                    break;
                }
            }
        }
    }
}

/// The hello with its `coordinator` replaced by the real coordinator's origin.
fn forge_origin(text: &str, real: SocketAddr) -> String {
    let mut frame: Value = serde_json::from_str(text).unwrap();
    if frame["type"] == "hello" {
        frame["coordinator"] = json!(format!("ws://{real}"));
    }
    frame.to_string()
}

async fn pair(http: &reqwest::Client, base: &str, user_id: &str, pubkey: &str) {
    let code = common::pairing_code(http, base, user_id).await;
    let claimed = http
        .post(format!("{base}/v1/trust/claim"))
        .json(&json!({"pairing_code": code, "provider_pubkey": pubkey}))
        .send()
        .await
        .unwrap();
    assert_eq!(claimed.status(), 200);
}

/// The victim's worker, paired with `victim`, pointed at the fake server.
fn start_victim(relay: SocketAddr, key: Keypair) -> EventLog {
    let log = EventLog::new();
    let mut worker = Worker::new(WorkerConfig::with_seed(3), TokioClock::shared(EPOCH_MS))
        .unwrap()
        .with_keypair(key)
        .with_observer(Arc::new(log.clone()));
    let connector = WsConnector::new(format!("ws://{relay}/v1/workers/ws"));
    tokio::spawn(async move { worker.run(connector).await });
    log
}

/// Waits until the worker was welcomed or stopped; true if welcomed.
async fn welcomed(log: &EventLog) -> bool {
    for _ in 0..200 {
        for event in log.events() {
            match event.kind {
                EventKind::Welcomed { .. } => return true,
                EventKind::Stopped { .. } => return false,
                _ => {}
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the worker neither got in nor stopped: {:?}", log.events());
}

async fn relayed_login_is_refused(mode: Relay) {
    let (_server, real) = start_coordinator().await;
    let base = format!("http://{real}");
    let http = reqwest::Client::new();
    let key = Keypair::generate(&mut rand_chacha::ChaCha20Rng::seed_from_u64(9));
    pair(&http, &base, "victim", &key.public_key_hex()).await;
    let (relay, seen) = start_relay(real, mode).await;

    let log = start_victim(relay, key);
    assert!(
        !welcomed(&log).await,
        "the real coordinator welcomed a relayed login: {:?}",
        seen.lock().unwrap()
    );
    // Refused at hello (the origin named is the relay's) or, when the relay
    // forged the hello, at auth (the signature names the relay's origin).
    let refusal = match mode {
        Relay::Verbatim => r#"<- {"type":"error","code":"invalid_hello""#,
        Relay::ForgeOrigin => r#"<- {"type":"error","code":"auth_failed""#,
    };
    let frames = seen.lock().unwrap().clone();
    assert!(frames.iter().any(|f| f.starts_with(refusal)), "{frames:?}");

    // The victim's PRIVATE job finds no trusted worker; the prompt stays put.
    let committed = http
        .post(format!("{base}/v1/jobs/commit/cheap"))
        .json(
            &json!({"job_type": "TASK", "user_id": "victim", "privacy_class": "PRIVATE",
            "payload": {"task_type": "extract_json", "input": SECRET}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(committed.status(), 422);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let seen = seen.lock().unwrap();
    assert!(seen.iter().all(|f| !f.contains(SECRET)), "{seen:?}");
}

#[tokio::test]
async fn a_verbatim_relay_of_the_login_is_refused() {
    relayed_login_is_refused(Relay::Verbatim).await;
}

#[tokio::test]
async fn a_relay_that_forges_the_hellos_origin_is_refused() {
    relayed_login_is_refused(Relay::ForgeOrigin).await;
}
