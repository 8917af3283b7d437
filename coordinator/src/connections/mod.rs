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
//! The simulation serves its in-memory listener through the same loop with
//! the bounds off ([`Bounds::Off`]) unless a scenario turns them on for an
//! instance (`http_bounds = true`, decision 0019): its clients keep idle
//! connections for long virtual times, and a header timeout would change
//! every transcript. Bounded, hyper's head deadline runs on `TokioTimer`,
//! which reads tokio's clock: the simulation's paused, virtual time.
//!
//! A head hyper cannot parse is answered by hyper itself, before any route;
//! [`head_errors`] gives that answer the API's JSON error body.

mod head_errors;

use crate::api::rate_limit_key;
use crate::clock::SharedClock;
use crate::config::Config;
use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tower::Layer;

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
    /// Its span in the harness's witness (`buggify::connection_opened`),
    /// in an armed simulation only, and the clock that closes it.
    span: Option<(usize, SharedClock)>,
}

impl Drop for Place {
    fn drop(&mut self) {
        if let Some((index, clock)) = &self.span {
            crate::buggify::connection_closed(*index, clock.now_ms());
        }
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

/// A place for a new connection from `client` to `server`, if both
/// budgets allow it.
fn admit(
    counts: &Arc<Mutex<Counts>>,
    client: String,
    server: &str,
    (config, clock): (&Config, &SharedClock),
) -> Option<Place> {
    let limits = &config.limits;
    let mut c = counts.lock().unwrap_or_else(|p| p.into_inner());
    let of_client = c.by_client.get(&client).copied().unwrap_or(0);
    if c.all >= limits.http_connections_max || of_client >= limits.http_connections_per_client_max {
        return None;
    }
    c.all += 1;
    *c.by_client.entry(client.clone()).or_insert(0) += 1;
    drop(c);
    let span = crate::buggify::connection_opened(crate::buggify::ConnectionSpan {
        server: server.to_owned(),
        client: client.clone(),
        open_of_client: of_client + 1,
        opened_ms: clock.now_ms(),
        closed_ms: None,
    });
    Some(Place {
        counts: counts.clone(),
        client,
        span: span.map(|index| (index, clock.clone())),
    })
}

/// What serving bounds on each connection.
#[derive(Clone)]
pub enum Bounds {
    /// A real process: the head deadline and buffer bound, and the
    /// connection budgets of `config` (issue 29, finding 4). The clock
    /// times the spans an armed simulation notes (`buggify::connections`).
    Enforced(Box<Config>, SharedClock),
    /// The simulation by default: its clients keep idle connections for
    /// long virtual times, and a header timeout would change every
    /// transcript; the connection loop and its shutdown are the same code.
    /// A scenario turns the bounds on per instance (`http_bounds = true`).
    Off,
}

/// Serves `app` on `listener` until `stopped` resolves, then lets every open
/// connection finish its request (graceful, as `axum::serve` does) and
/// returns once all have closed. Every `select!` here is `biased`: the
/// simulation replays byte for byte under any tokio seed, and
/// `axum::serve`'s unbiased ones made a request racing a graceful restart
/// served in one run and dropped in the other (swarm seed 2065).
pub async fn serve<L>(
    mut listener: L,
    app: axum::Router,
    bounds: Bounds,
    stopped: impl Future<Output = ()> + Send + 'static,
) where
    L: axum::serve::Listener<Addr = std::net::SocketAddr>,
{
    let counts = Arc::new(Mutex::new(Counts::default()));
    let server = listener
        .local_addr()
        .map_or_else(|_| String::new(), |a| a.to_string());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    // Every connection task holds a sender; all gone = all closed.
    let (open_tx, mut open_rx) = mpsc::channel::<()>(1);
    tokio::pin!(stopped);
    loop {
        let (io, peer) = tokio::select! {
            biased;
            _ = &mut stopped => break,
            accepted = listener.accept() => accepted,
        };
        let place = match &bounds {
            Bounds::Enforced(config, clock) => {
                match admit(&counts, rate_limit_key(peer.ip()), &server, (config, clock)) {
                    Some(place) => Some(place),
                    None => {
                        tracing::debug!("connection refused: the connection budget is spent");
                        continue;
                    }
                }
            }
            Bounds::Off => None,
        };
        let service = axum::Extension(ConnectInfo(peer)).layer(app.clone());
        let conn = connection(&bounds, io, service);
        let mut stop = stop_rx.clone();
        let open = open_tx.clone();
        tokio::spawn(async move {
            let _place = place;
            let _open = open;
            tokio::pin!(conn);
            // The connection first: a request that has arrived is served.
            let stopping = tokio::select! {
                biased;
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

/// One connection under hyper, with the head deadline and buffer bound
/// when they are enforced, and JSON bodies on hyper's own head errors.
fn connection<I, S>(
    bounds: &Bounds,
    io: I,
    service: S,
) -> hyper::server::conn::http1::UpgradeableConnection<
    TokioIo<head_errors::JsonHeadErrors<I>>,
    TowerToHyperService<S>,
>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    S: tower::Service<
            axum::http::Request<hyper::body::Incoming>,
            Response = axum::response::Response,
            Error = std::convert::Infallible,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let mut builder = hyper::server::conn::http1::Builder::new();
    let mut head_bytes_max = None;
    if let Bounds::Enforced(config, _) = bounds {
        let head_timeout = Duration::from_millis(config.timing.http_head_timeout_ms);
        // hyper refuses a buffer under 8 KiB.
        let head_bytes = config.limits.http_head_bytes_max.max(8_192);
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(head_timeout)
            .max_buf_size(head_bytes);
        head_bytes_max = Some(head_bytes);
    }
    let io = head_errors::JsonHeadErrors::new(io, head_bytes_max);
    builder
        .serve_connection(TokioIo::new(io), TowerToHyperService::new(service))
        .with_upgrades()
}
