//! Real sockets for tests that need them (official SDKs, reqwest transports,
//! WebSocket workers): an axum service on an ephemeral loopback port.

/// Serves `router` on `127.0.0.1:<ephemeral>` until the runtime ends, and
/// returns its base URL `http://127.0.0.1:<port>`. Panics when no loopback
/// port can be bound: the test cannot run at all then.
pub async fn serve_loopback(router: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind an ephemeral loopback port");
    let addr = listener
        .local_addr()
        .expect("a bound listener has an address");
    tokio::spawn(async move { axum::serve(listener, router).await });
    format!("http://{addr}")
}
