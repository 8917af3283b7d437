//! Issue 29, finding 4: HTTP connections have deadlines and budgets. An
//! unfinished request head is closed at the head timeout, a head beyond the
//! buffer bound is refused, an unfinished body is answered 408 at its
//! deadline, and one address cannot hold more than its share
//! of connections while another address is still served.

mod common;

use common::EPOCH_MS;
use coordinator::config::Config;
use coordinator::server::{self, Parts, Settings};
use rand::SeedableRng;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

async fn serve(config: Config) -> (server::Server, std::net::SocketAddr) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let settings = Settings {
        config,
        ..Settings::default()
    };
    let parts = Parts::new(
        Arc::new(coordinator::TokioClock::new(EPOCH_MS)),
        rand_chacha::ChaCha20Rng::seed_from_u64(1),
    );
    let mut server = server::start(settings, parts).await.unwrap();
    server.serve_tcp(listener);
    (server, addr)
}

async fn connect_from(ip: [u8; 4], to: std::net::SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket
        .bind((std::net::Ipv4Addr::from(ip), 0).into())
        .unwrap();
    socket.connect(to).await.unwrap()
}

/// Reads until the server closes (`true`) or `within` passes (`false`).
async fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    let mut buf = vec![0u8; 65_536];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => continue,
        }
    }
}

async fn health(stream: &mut TcpStream) -> String {
    stream
        .write_all(b"GET /v1/health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut answer)).await;
    answer
}

#[tokio::test]
async fn an_unfinished_head_is_closed_at_the_head_timeout() {
    let mut config = Config::default();
    config.timing.http_head_timeout_ms = 300;
    let (_server, addr) = serve(config).await;
    let mut slow = connect_from([127, 0, 0, 1], addr).await;
    slow.write_all(b"GET /v1/health HTTP/1.1\r\nhost: x\r\nx-slow: ")
        .await
        .unwrap();
    assert!(
        closed_within(&mut slow, Duration::from_secs(3)).await,
        "an unfinished head is still open after 3 s"
    );
}

/// A body dribbled slower than its deadline is answered 408 (JSON) and its
/// buffer freed; before, a request could hold its body buffer for ever.
#[tokio::test]
async fn an_unfinished_body_is_answered_408_at_the_body_timeout() {
    let mut config = Config::default();
    config.timing.http_body_timeout_ms = 300;
    let (_server, addr) = serve(config).await;
    let mut slow = connect_from([127, 0, 0, 1], addr).await;
    slow.write_all(
        b"POST /v1/jobs/commit/cheap HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
          content-length: 1000\r\n\r\n{\"job_type\":",
    )
    .await
    .unwrap();
    let mut answer = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(3), slow.read(&mut answer))
        .await
        .expect("an answer within 3 s")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer[..n]);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("did not arrive within 300 ms"), "{answer}");
}

#[tokio::test]
async fn a_head_over_the_bound_is_refused() {
    let (_server, addr) = serve(Config::default()).await;
    let mut big = connect_from([127, 0, 0, 1], addr).await;
    let head = format!(
        "GET /v1/health HTTP/1.1\r\nhost: x\r\nx-big: {}\r\n\r\n",
        "a".repeat(64 * 1024)
    );
    let _ = big.write_all(head.as_bytes()).await;
    let answer = health(&mut big).await;
    assert!(!answer.contains("200 OK"), "{answer}");
}

#[tokio::test]
async fn one_address_holds_at_most_its_share_of_connections() {
    let mut config = Config::default();
    config.limits.http_connections_per_client_max = 2;
    let (_server, addr) = serve(config).await;
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut s = connect_from([127, 0, 0, 1], addr).await;
        s.write_all(b"GET /v1/health HTTP/1.1\r\nhost: x\r\n")
            .await
            .unwrap();
        held.push(s);
    }
    // Accepted by the kernel, then closed at once by the coordinator.
    let mut third = connect_from([127, 0, 0, 1], addr).await;
    assert!(closed_within(&mut third, Duration::from_secs(2)).await);
    // Another address is served.
    let mut other = connect_from([127, 0, 0, 2], addr).await;
    assert!(health(&mut other).await.starts_with("HTTP/1.1 200"));
    // A place given back is taken again.
    drop(held.pop());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut again = connect_from([127, 0, 0, 1], addr).await;
    assert!(health(&mut again).await.starts_with("HTTP/1.1 200"));
}

/// Issue 29, finding 7: established worker sessions (and their slots) per
/// address are bounded; another address still gets in.
#[tokio::test]
async fn one_address_holds_at_most_its_worker_sessions_and_slots() {
    use common::{TestWorker, Wire};
    use protocol::worker::{CoordinatorFrame, ErrorCode};
    let mut config = Config::default();
    config.limits.worker_sessions_per_client_max = 2;
    config.limits.worker_slots_per_client_max = 10;
    let (_server, addr) = serve(config).await;
    let url = format!("ws://{addr}/v1/workers/ws");
    let _a = TestWorker::connect(Wire::ws(&url).await, 1, &["TASK"], 4).await;
    // Slots: 4 + 8 is over 10.
    let mut over = TestWorker {
        key: protocol::signing::Keypair::generate(&mut rand_chacha::ChaCha20Rng::seed_from_u64(2)),
        wire: Wire::ws(&url).await,
        session_id: 0,
    };
    assert_eq!(refusal(&mut over, 8).await, Some(ErrorCode::InvalidHello));
    let _b = TestWorker::connect(Wire::ws(&url).await, 3, &["TASK"], 4).await;
    // Sessions: a third is over 2.
    let mut third = TestWorker {
        key: protocol::signing::Keypair::generate(&mut rand_chacha::ChaCha20Rng::seed_from_u64(4)),
        wire: Wire::ws(&url).await,
        session_id: 0,
    };
    assert_eq!(refusal(&mut third, 1).await, Some(ErrorCode::InvalidHello));
    // Another address gets in.
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(([127, 0, 0, 2], 0).into()).unwrap();
    let stream = socket.connect(addr).await.unwrap();
    let stream = tokio_tungstenite::MaybeTlsStream::Plain(stream);
    let (ws, _) = tokio_tungstenite::client_async(url.as_str(), stream)
        .await
        .unwrap();
    let other = TestWorker::connect(Wire::ws_stream(ws, &url), 5, &["TASK"], 4).await;
    assert!(other.session_id > 0);

    /// Logs in with `slots`; the error code that ends it, if any.
    async fn refusal(w: &mut TestWorker, slots: u32) -> Option<ErrorCode> {
        let origin = w.wire.origin();
        w.send(serde_json::json!({"type": "hello", "protocol_version": protocol::worker::PROTOCOL_VERSION,
            "coordinator": origin, "provider_pubkey": w.key.public_key_hex(),
            "capabilities": ["TASK"], "slots": slots}))
            .await;
        let CoordinatorFrame::Challenge { nonce, network } = w.recv().await else {
            return None;
        };
        let message = protocol::worker::challenge_message(&origin, &network, &nonce);
        let signature = w.key.personal_sign(message.as_bytes());
        w.send(serde_json::json!({"type": "auth", "signature": signature}))
            .await;
        match w.recv().await {
            CoordinatorFrame::Error { code, .. } => Some(code),
            _ => None,
        }
    }
}

/// Sends `head` on a fresh connection and reads the whole answer.
async fn answer_to(addr: std::net::SocketAddr, head: &[u8]) -> String {
    let mut stream = connect_from([127, 0, 0, 1], addr).await;
    let _ = stream.write_all(head).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer).into_owned()
}

/// The JSON body of an answer, if it has one.
fn json_body(answer: &str) -> Option<serde_json::Value> {
    let (_, body) = answer.split_once("\r\n\r\n")?;
    serde_json::from_str(body).ok()
}

/// Principle 4 and issue 33, item 1: a request head hyper cannot parse (a
/// control character in a header value, a malformed request line, a head
/// over the bound) is answered before any route runs; the answer still
/// carries the spec's JSON error body, never an empty one.
#[tokio::test]
async fn an_unparseable_head_is_answered_with_a_json_error() {
    let (_server, addr) = serve(Config::default()).await;
    let cases: [(&[u8], &str); 4] = [
        (
            b"GET /v1/health HTTP/1.1\r\nhost: x\r\nx-user-proof: \x01abc\r\n\r\n",
            "HTTP/1.1 400 ",
        ),
        (
            b"GET /v1/jobs/\x01 HTTP/1.1\r\nhost: x\r\n\r\n",
            "HTTP/1.1 400 ",
        ),
        (b"G\x00T / HTTP/1.1\r\nhost: x\r\n\r\n", "HTTP/1.1 400 "),
        (b"GET / HTTP/9.9\r\nhost: x\r\n\r\n", "HTTP/1.1 400 "),
    ];
    for (head, status) in cases {
        let answer = answer_to(addr, head).await;
        assert!(answer.starts_with(status), "{head:?} -> {answer:?}");
        let body = json_body(&answer).unwrap_or_else(|| panic!("{head:?} -> {answer:?}"));
        let error = body["error"].as_str().unwrap_or_default();
        assert!(!error.is_empty(), "{head:?} -> {answer:?}");
    }
    let big = format!(
        "GET /v1/health HTTP/1.1\r\nhost: x\r\nx-big: {}\r\n\r\n",
        "a".repeat(64 * 1024)
    );
    let answer = answer_to(addr, big.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 431 "), "{answer:?}");
    assert!(json_body(&answer).is_some(), "{answer:?}");
}
