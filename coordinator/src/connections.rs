//! Serving HTTP on TCP with deadlines and budgets (issue 29, finding 4):
//! a connection has `http_head_timeout_ms` to send each request head, and
//! its head buffer stops at `http_head_bytes_max`; at most
//! `http_connections_max` plain connections are open at once, and
//! `http_connections_per_client_max` of them from one peer address (IPv6
//! by /64). `axum::serve` gives hyper no timer (so no header timeout) and
//! keeps hyper's ~400 KB head buffer, so this accept loop replaces it for
//! TCP. A connection upgraded to a worker session leaves the count at the
//! upgrade (sessions are bounded by the handshake and session limits).
//!
//! The simulation serves its in-memory listener with `axum::serve` still
//! (`Server::serve`): its clients keep idle connections for long virtual
//! times, and a header timeout would change every transcript.

use crate::api::rate_limit_key;
use crate::config::Config;
use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tower::Layer;

/// Pause after a failed accept (out of file descriptors, usually), as
/// `axum::serve` does, so the loop does not spin.
const ACCEPT_RETRY: Duration = Duration::from_secs(1);

/// Open plain connections, in all and per peer address.
#[derive(Default)]
struct Counts {
    all: usize,
    by_client: BTreeMap<String, usize>,
}

/// A place among the open connections, given back when dropped.
struct Place {
    counts: Arc<Mutex<Counts>>,
    client: String,
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        counts.all -= 1;
        if let Some(n) = counts.by_client.get_mut(&self.client) {
            *n -= 1;
            if *n == 0 {
                counts.by_client.remove(&self.client);
            }
        }
    }
}

/// A place for a new connection from `client`, if both budgets allow it.
fn admit(counts: &Arc<Mutex<Counts>>, client: String, config: &Config) -> Option<Place> {
    let limits = &config.limits;
    let mut c = counts.lock().unwrap_or_else(|p| p.into_inner());
    let of_client = c.by_client.get(&client).copied().unwrap_or(0);
    if c.all >= limits.http_connections_max || of_client >= limits.http_connections_per_client_max {
        return None;
    }
    c.all += 1;
    *c.by_client.entry(client.clone()).or_insert(0) += 1;
    drop(c);
    Some(Place {
        counts: counts.clone(),
        client,
    })
}

/// Serves `app` on `listener` until `stopped` resolves, then lets every open
/// connection finish its request (graceful, as `axum::serve` does) and
/// returns once all have closed.
pub async fn serve(
    listener: TcpListener,
    app: axum::Router,
    config: Config,
    stopped: impl Future<Output = ()> + Send + 'static,
) {
    let counts = Arc::new(Mutex::new(Counts::default()));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    // Every connection task holds a sender; all gone = all closed.
    let (open_tx, mut open_rx) = mpsc::channel::<()>(1);
    tokio::pin!(stopped);
    loop {
        let (stream, peer) = tokio::select! {
            biased;
            _ = &mut stopped => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(ACCEPT_RETRY).await;
                    continue;
                }
            },
        };
        let client = rate_limit_key(peer.ip());
        let Some(place) = admit(&counts, client, &config) else {
            tracing::debug!("connection refused: the connection budget is spent");
            continue;
        };
        let _ = stream.set_nodelay(true);
        let service = axum::Extension(ConnectInfo(peer)).layer(app.clone());
        let conn = connection(&config, stream, service);
        let mut stop = stop_rx.clone();
        let open = open_tx.clone();
        tokio::spawn(async move {
            let _place = place;
            let _open = open;
            tokio::pin!(conn);
            let stopping = tokio::select! {
                _ = &mut conn => false,
                _ = stop.wait_for(|s| *s) => true,
            };
            if stopping {
                conn.as_mut().graceful_shutdown();
                let _ = conn.await;
            }
        });
    }
    let _ = stop_tx.send(true);
    drop(open_tx);
    let _ = open_rx.recv().await;
}

/// One connection under hyper with the head deadline and buffer bound.
fn connection<S>(
    config: &Config,
    stream: tokio::net::TcpStream,
    service: S,
) -> hyper::server::conn::http1::UpgradeableConnection<
    TokioIo<tokio::net::TcpStream>,
    TowerToHyperService<S>,
>
where
    S: tower::Service<
            axum::http::Request<hyper::body::Incoming>,
            Response = axum::response::Response,
            Error = std::convert::Infallible,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let head_timeout = Duration::from_millis(config.timing.http_head_timeout_ms);
    // hyper refuses a buffer under 8 KiB.
    let head_bytes = config.limits.http_head_bytes_max.max(8_192);
    hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(head_timeout)
        .max_buf_size(head_bytes)
        .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service))
        .with_upgrades()
}
