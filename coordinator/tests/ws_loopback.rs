//! The worker protocol over a real WebSocket on loopback, with a
//! tokio-tungstenite client: authentication, assignment, completion, forged
//! results and malformed frames.

mod common;

use common::*;
use coordinator::config::Config;
use coordinator::{app, SystemClock};
use futures_util::SinkExt;
use protocol::worker::{CoordinatorFrame, ErrorCode, PROTOCOL_VERSION};
use serde_json::json;
use std::net::SocketAddr;
use std::sync::Arc;

/// Issue 16 finding 6: one client's silent sockets are limited per client,
/// so another client (another source address) still gets in; a silent
/// socket is closed at the hello timeout, well before the auth timeout.
#[tokio::test]
async fn silent_sockets_are_limited_per_client_and_closed_at_the_hello_timeout() {
    let mut config = Config::default();
    config.limits.handshakes_max = 8;
    config.limits.handshakes_per_client_max = 2;
    config.timing.hello_timeout_ms = 300;
    let s = serve(config).await;
    let from = |ip: [u8; 4]| {
        let url = s.ws_url.clone();
        async move {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket
                .bind((std::net::Ipv4Addr::from(ip), 0).into())
                .unwrap();
            let addr = url.trim_start_matches("ws://").split('/').next().unwrap();
            let stream = socket.connect(addr.parse().unwrap()).await.unwrap();
            let stream = tokio_tungstenite::MaybeTlsStream::Plain(stream);
            tokio_tungstenite::client_async(url.as_str(), stream).await
        }
    };
    let mut silent = Vec::new();
    for _ in 0..2 {
        silent.push(
            from([127, 0, 0, 1])
                .await
                .expect("within the per-client limit")
                .0,
        );
    }
    match from([127, 0, 0, 1]).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            assert_eq!(response.status(), 503);
        }
        other => panic!("expected a 503 for a third silent socket, got {other:?}"),
    }
    // Another client is not locked out by the first one's sockets.
    let (stream, _) = from([127, 0, 0, 2]).await.expect("another client gets in");
    let w = TestWorker::connect(Wire::ws_stream(stream, &s.ws_url), 1, &["TASK"], 1).await;
    assert!(w.session_id > 0);
    // The silent ones hear auth_timeout at the hello timeout, and go.
    use futures_util::StreamExt;
    let started = tokio::time::Instant::now();
    let closing = silent[0].next().await.expect("a frame").expect("text");
    let frame: CoordinatorFrame = serde_json::from_str(closing.to_text().unwrap()).unwrap();
    assert_eq!(error_code(&frame), Some(ErrorCode::AuthTimeout));
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}

struct Server {
    app: axum::Router,
    ws_url: String,
}

/// The coordinator on a loopback port, published (`public_urls`) at that
/// address unless the config names its public URLs.
async fn serve(mut config: Config) -> Server {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    if config.public_urls.is_empty() {
        config.public_urls = vec![format!("http://{addr}")];
    }
    let c = coordinator(config, Arc::new(SystemClock), 3).await;
    let router = app(c);
    let service = router
        .clone()
        .into_make_service_with_connect_info::<SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, service).await.unwrap() });
    Server {
        app: router,
        ws_url: format!("ws://{addr}/v1/workers/ws"),
    }
}

fn error_code(frame: &CoordinatorFrame) -> Option<ErrorCode> {
    match frame {
        CoordinatorFrame::Error { code, .. } => Some(*code),
        _ => None,
    }
}

/// A version-2 hello naming `origin` as the coordinator dialled.
fn hello(origin: &str, pubkey: &str) -> serde_json::Value {
    json!({"type": "hello", "protocol_version": PROTOCOL_VERSION, "coordinator": origin,
        "provider_pubkey": pubkey, "capabilities": ["TASK"], "slots": 1})
}

/// Logs in over a WebSocket with a hello of `version` naming `dialled` (no
/// `coordinator` when `None`) and, if challenged, an auth signed for
/// `signed`. Returns the coordinator's last answer: its refusal of the
/// hello (after which it closed), or its answer to the auth.
async fn login(s: &Server, version: u32, dialled: Option<&str>, signed: &str) -> CoordinatorFrame {
    let mut w = TestWorker {
        key: protocol::signing::Keypair::from_secret_hex(&"55".repeat(32)).unwrap(),
        wire: Wire::ws(&s.ws_url).await,
        session_id: 0,
    };
    let mut hello = hello(dialled.unwrap_or_default(), &w.key.public_key_hex());
    hello["protocol_version"] = json!(version);
    if dialled.is_none() {
        hello.as_object_mut().unwrap().remove("coordinator");
    }
    w.send(hello).await;
    let frame = w.recv().await;
    let CoordinatorFrame::Challenge { nonce, network } = &frame else {
        assert!(w.recv_closed().await, "closed after {frame:?}");
        return frame;
    };
    let message = protocol::worker::challenge_message(signed, network, nonce);
    let signature = w.key.personal_sign(message.as_bytes());
    w.send(json!({"type": "auth", "signature": signature}))
        .await;
    w.recv().await
}

#[tokio::test]
async fn a_worker_authenticates_and_completes_a_job_with_a_verified_receipt() {
    let s = serve(Config::default()).await;
    let mut w = TestWorker::connect(Wire::ws(&s.ws_url).await, 1, &["LLM_INFER"], 1).await;
    assert!(w.session_id > 0);
    assert_eq!(
        call(&s.app, "GET", "/v1/health", None).await.body["workers_online"],
        1
    );
    let job = commit(&s.app, "fast", llm_job("alice")).await.body["job_id"].clone();
    let a = w.expect_assign().await;
    assert_eq!(json!(a.job_id), job);
    w.complete(&a).await;
    let record = job_status(&s.app, job.as_str().unwrap()).await;
    assert_eq!(record["status"], "completed");
    let receipt: protocol::receipt::Receipt =
        serde_json::from_value(record["receipt"].clone()).unwrap();
    receipt.verify(&record["result"]["output"]).unwrap();
    assert_eq!(receipt.provider_pubkey, w.key.public_key_hex());
}

#[tokio::test]
async fn a_wrong_signature_is_refused_and_the_connection_closed() {
    let s = serve(Config::default()).await;
    let mut w = TestWorker {
        key: protocol::signing::Keypair::from_secret_hex(&"11".repeat(32)).unwrap(),
        wire: Wire::ws(&s.ws_url).await,
        session_id: 0,
    };
    w.send(hello(&w.wire.origin(), &w.key.public_key_hex()))
        .await;
    assert!(matches!(w.recv().await, CoordinatorFrame::Challenge { .. }));
    // Signs something other than the challenge.
    let signature = w.key.personal_sign(b"not the challenge");
    w.send(json!({"type": "auth", "signature": signature}))
        .await;
    assert_eq!(error_code(&w.recv().await), Some(ErrorCode::AuthFailed));
    assert!(w.recv_closed().await);
    assert_eq!(
        call(&s.app, "GET", "/v1/health", None).await.body["workers_online"],
        0
    );
}

#[tokio::test]
async fn a_key_the_worker_does_not_hold_cannot_authenticate() {
    let s = serve(Config::default()).await;
    let victim = protocol::signing::Keypair::from_secret_hex(&"22".repeat(32)).unwrap();
    let thief = protocol::signing::Keypair::from_secret_hex(&"33".repeat(32)).unwrap();
    let mut w = TestWorker {
        key: thief,
        wire: Wire::ws(&s.ws_url).await,
        session_id: 0,
    };
    let origin = w.wire.origin();
    w.send(hello(&origin, &victim.public_key_hex())).await;
    let CoordinatorFrame::Challenge { nonce, network } = w.recv().await else {
        panic!()
    };
    let message = protocol::worker::challenge_message(&origin, &network, &nonce);
    let signature = w.key.personal_sign(message.as_bytes());
    w.send(json!({"type": "auth", "signature": signature}))
        .await;
    assert_eq!(error_code(&w.recv().await), Some(ErrorCode::AuthFailed));
}

#[tokio::test]
async fn bad_hellos_are_refused_with_a_reason() {
    let s = serve(Config::default()).await;
    let key = protocol::signing::Keypair::from_secret_hex(&"44".repeat(32))
        .unwrap()
        .public_key_hex();
    let origin = protocol::origin::worker_origin(&s.ws_url).unwrap();
    let good = hello(&origin, &key);
    let with = |field: &str, value: serde_json::Value| {
        let mut h = good.clone();
        h[field] = value;
        h
    };
    let cases = [
        (
            with("protocol_version", json!(99)),
            ErrorCode::UnsupportedVersion,
        ),
        (
            with("provider_pubkey", json!("0x12")),
            ErrorCode::InvalidHello,
        ),
        (with("capabilities", json!([])), ErrorCode::InvalidHello),
        (with("slots", json!(0)), ErrorCode::InvalidHello),
        (with("slots", json!(1000)), ErrorCode::InvalidHello),
    ];
    for (hello, code) in cases {
        let mut wire = Wire::ws(&s.ws_url).await;
        wire.send_text(hello.to_string()).await;
        let frame: CoordinatorFrame =
            serde_json::from_str(&wire.recv_text().await.unwrap()).unwrap();
        assert_eq!(error_code(&frame), Some(code), "{hello}");
        assert!(wire.recv_text().await.is_none(), "closed after {hello}");
    }
}

#[tokio::test]
async fn a_result_from_another_session_is_refused() {
    let s = serve(Config::default()).await;
    let mut owner = TestWorker::connect(Wire::ws(&s.ws_url).await, 1, &["TASK"], 1).await;
    let job = commit(&s.app, "fast", task_job("u")).await.body["job_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let a = owner.expect_assign().await;
    let mut other = TestWorker::connect(Wire::ws(&s.ws_url).await, 2, &["TASK"], 1).await;
    // A validly signed result, but from a session that does not hold the job.
    let forged = other.result_frame(&a, "2026-11-21T10:00:01.000Z");
    other.send(forged).await;
    let frame = other.recv().await;
    assert_eq!(error_code(&frame), Some(ErrorCode::NotAssigned));
    other
        .send(json!({"type": "accept", "job_id": a.job_id}))
        .await;
    assert_eq!(
        error_code(&other.recv().await),
        Some(ErrorCode::NotAssigned)
    );
    let unknown = json!({"type": "accept", "job_id": uuid::Uuid::nil()});
    other.send(unknown).await;
    assert_eq!(error_code(&other.recv().await), Some(ErrorCode::UnknownJob));
    assert_eq!(job_status(&s.app, &job).await["status"], "assigned");
    owner.complete(&a).await;
    assert_eq!(job_status(&s.app, &job).await["status"], "completed");
}

#[tokio::test]
async fn malformed_frames_get_error_frames_and_the_connection_survives() {
    let mut config = Config::default();
    config.limits.frame_bytes_max = 4096;
    let s = serve(config).await;
    let mut w = TestWorker::connect(Wire::ws(&s.ws_url).await, 1, &["TASK"], 1).await;
    let bad = [
        ("{not json".to_owned(), ErrorCode::MalformedFrame),
        (
            r#"{"type":"teleport"}"#.to_owned(),
            ErrorCode::MalformedFrame,
        ),
        (r#"{"type":"accept"}"#.to_owned(), ErrorCode::MalformedFrame),
        (
            r#"{"type":"accept","job_id":"x"}"#.to_owned(),
            ErrorCode::MalformedFrame,
        ),
        ("[]".to_owned(), ErrorCode::MalformedFrame),
        (
            format!(r#"{{"type":"heartbeat","pad":"{}"}}"#, "x".repeat(5000)),
            ErrorCode::FrameTooLarge,
        ),
        (
            hello("ws://x", "0x").to_string(),
            ErrorCode::UnexpectedFrame,
        ),
    ];
    for (text, code) in bad {
        w.wire.send_text(text.clone()).await;
        assert_eq!(error_code(&w.recv().await), Some(code), "{text}");
    }
    if let Wire::Ws(ws, _) = &mut w.wire {
        ws.stream_mut()
            .send(tokio_tungstenite::tungstenite::Message::Binary(
                vec![1, 2, 3].into(),
            ))
            .await
            .unwrap();
    }
    assert_eq!(error_code(&w.recv().await), Some(ErrorCode::MalformedFrame));
    // Still connected and still served.
    assert_eq!(
        call(&s.app, "GET", "/v1/health", None).await.body["workers_online"],
        1
    );
    commit(&s.app, "fast", task_job("u")).await;
    let a = w.expect_assign().await;
    w.complete(&a).await;
}

#[tokio::test]
async fn connections_still_authenticating_are_bounded() {
    let mut config = Config::default();
    config.limits.handshakes_max = 1;
    let s = serve(config).await;
    // One connection that never says hello holds the only place.
    let mut silent = Wire::ws(&s.ws_url).await;
    let refused = tokio_tungstenite::connect_async(&s.ws_url).await;
    match refused {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            assert_eq!(response.status(), 503);
        }
        other => panic!("expected a 503, got {other:?}"),
    }
    // A frame other than hello does not get it through the handshake.
    silent.send_text("{\"type\":\"heartbeat\"}".into()).await;
    let _ = silent.recv_text().await; // unexpected_frame
    assert!(tokio_tungstenite::connect_async(&s.ws_url).await.is_err());
    // When it goes away the place is free again.
    drop(silent);
    for _ in 0..100 {
        if let Ok((stream, _)) = tokio_tungstenite::connect_async(&s.ws_url).await {
            let w = TestWorker::connect(Wire::ws_stream(stream, &s.ws_url), 1, &["TASK"], 1).await;
            assert!(w.session_id > 0);
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("the place was not freed");
}

/// Issue 16, finding 4: the login names the coordinator the worker dialled,
/// checked against what the operator configured; a version-1 hello, which
/// names none, is refused by version.
#[tokio::test]
async fn a_version_1_hello_is_refused_naming_the_version_spoken() {
    let s = serve(Config::default()).await;
    let origin = protocol::origin::worker_origin(&s.ws_url).unwrap();
    let frame = login(&s, 1, None, &origin).await;
    let CoordinatorFrame::Error { code, message, .. } = &frame else {
        panic!("{frame:?}")
    };
    assert_eq!(*code, ErrorCode::UnsupportedVersion);
    assert!(message.contains("protocol_version 2"), "{message}");
    // A version-2 hello without `coordinator` is not a login either.
    let frame = login(&s, 2, None, &origin).await;
    assert_eq!(
        error_code(&frame),
        Some(ErrorCode::InvalidHello),
        "{frame:?}"
    );
}

#[tokio::test]
async fn the_origin_dialled_must_be_one_the_operator_configured() {
    let s = serve(Config::default()).await;
    let origin = protocol::origin::worker_origin(&s.ws_url).unwrap();
    let frame = login(&s, 2, Some(&origin), &origin).await;
    assert!(
        matches!(frame, CoordinatorFrame::Welcome { .. }),
        "{frame:?}"
    );

    let elsewhere = "ws://127.0.0.1:1";
    let frame = login(&s, 2, Some(elsewhere), elsewhere).await;
    let CoordinatorFrame::Error { code, message, .. } = &frame else {
        panic!("{frame:?}")
    };
    assert_eq!(*code, ErrorCode::InvalidHello);
    assert!(message.contains(elsewhere), "{message}");
    // The signed text must name the origin of the hello.
    let frame = login(&s, 2, Some(&origin), elsewhere).await;
    assert_eq!(error_code(&frame), Some(ErrorCode::AuthFailed), "{frame:?}");
    // Only the canonical form is an origin: no path, no default port.
    let with_path = format!("{origin}/v1/workers/ws");
    let frame = login(&s, 2, Some(&with_path), &with_path).await;
    assert_eq!(
        error_code(&frame),
        Some(ErrorCode::InvalidHello),
        "{frame:?}"
    );
}

/// Behind a TLS proxy the operator publishes `https://coord.example.com`:
/// workers dialling that log in, whatever address the socket reached, and
/// the socket's own address (what `Host` would say) is not accepted.
#[tokio::test]
async fn configured_public_urls_decide_never_the_address_reached() {
    let s = serve(Config {
        public_urls: vec![
            "https://coord.example.com/".into(),
            "http://10.0.0.5:8080".into(),
        ],
        ..Config::default()
    })
    .await;
    for dialled in ["wss://coord.example.com", "ws://10.0.0.5:8080"] {
        let frame = login(&s, 2, Some(dialled), dialled).await;
        assert!(
            matches!(frame, CoordinatorFrame::Welcome { .. }),
            "{dialled}: {frame:?}"
        );
    }
    let reached = protocol::origin::worker_origin(&s.ws_url).unwrap();
    for dialled in [reached.as_str(), "ws://coord.example.com"] {
        let frame = login(&s, 2, Some(dialled), dialled).await;
        assert_eq!(
            error_code(&frame),
            Some(ErrorCode::InvalidHello),
            "{dialled}: {frame:?}"
        );
    }
}
