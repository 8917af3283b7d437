//! The one text-frame connection both ends of the worker protocol speak.
//!
//! The coordinator's session and the worker only send and receive whole text
//! frames, so both are written against [`FrameConnection`]: the coordinator
//! implements it for the axum WebSocket, worker-sim for a tokio-tungstenite
//! client stream (over a socket or the simulation's network), and this module
//! for in-memory channels ([`ChannelConnection`], both ends of one pair).
//! A worker dials through a [`Connector`], again on every reconnect.
//!
//! No I/O lives here: only the traits and the channel pair, which needs
//! nothing but `tokio::sync`.

use std::future::Future;
use tokio::sync::mpsc;

/// A source error of a connection, kept whole for the error chain.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What a connection delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Incoming {
    Text(String),
    /// A binary frame of this many bytes; the protocol is text only, so the
    /// coordinator answers it with an error frame and a worker skips it.
    Binary(usize),
    /// The peer went away (close frame, error or end of stream).
    Closed,
}

/// Why a frame could not be sent.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The peer is gone.
    #[error("connection closed")]
    Closed,
    /// The transport failed while writing.
    #[error("send failed: {0}")]
    Failed(#[source] BoxError),
}

/// A bidirectional stream of whole text frames.
pub trait FrameConnection: Send {
    /// The next frame. Cancel-safe: dropping the future before it completes
    /// loses no frame, so callers may race it in `tokio::select!`.
    fn recv(&mut self) -> impl Future<Output = Incoming> + Send;

    fn send(&mut self, text: String) -> impl Future<Output = Result<(), SendError>> + Send;

    /// Orderly close (a WebSocket close frame). Dropping the connection
    /// instead is an abrupt loss of it.
    fn close(&mut self) -> impl Future<Output = ()> + Send;
}

/// Why a [`Connector`] produced no connection.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// This attempt failed; a later one may succeed.
    #[error("connect failed: {0}")]
    Failed(#[source] BoxError),
    /// The connector can never produce another connection (the simulation
    /// dropped its acceptor); a worker stops instead of retrying.
    #[error("connector is shut down")]
    Shutdown,
}

/// Opens connections; called again on every reconnect.
pub trait Connector: Send {
    type Connection: FrameConnection;
    fn connect(&mut self) -> impl Future<Output = Result<Self::Connection, ConnectError>> + Send;

    /// The URL this connector dials, from the worker's own configuration:
    /// the worker signs its origin at login (`crate::origin`).
    fn url(&self) -> &str;
}

// ---------------------------------------------------------------- in-memory

/// Frames buffered per direction of an in-memory connection.
pub const CHANNEL_CAPACITY: usize = 64;

/// The URL a [`ChannelConnector`] stands for; a coordinator reached over
/// channels lists it among its public URLs.
pub const CHANNEL_URL: &str = "ws://in-memory/v1/workers/ws";

/// One end of an in-memory connection; [`channel_pair`] makes both.
/// Dropping an end closes the connection as the other end sees it.
#[derive(Debug)]
pub struct ChannelConnection {
    tx: mpsc::Sender<String>,
    rx: mpsc::Receiver<String>,
}

/// Two connected ends, each sending into the other's receiver.
pub fn channel_pair() -> (ChannelConnection, ChannelConnection) {
    let (a_tx, b_rx) = mpsc::channel(CHANNEL_CAPACITY);
    let (b_tx, a_rx) = mpsc::channel(CHANNEL_CAPACITY);
    (
        ChannelConnection { tx: a_tx, rx: a_rx },
        ChannelConnection { tx: b_tx, rx: b_rx },
    )
}

impl ChannelConnection {
    /// Sends without waiting; fails when the peer's queue is full or gone.
    pub fn try_send(&self, text: impl Into<String>) -> Result<(), SendError> {
        self.tx.try_send(text.into()).map_err(|e| match e {
            mpsc::error::TrySendError::Closed(_) => SendError::Closed,
            full @ mpsc::error::TrySendError::Full(_) => SendError::Failed(full.to_string().into()),
        })
    }
}

impl FrameConnection for ChannelConnection {
    async fn recv(&mut self) -> Incoming {
        // `mpsc::Receiver::recv` is cancel-safe.
        self.rx
            .recv()
            .await
            .map_or(Incoming::Closed, Incoming::Text)
    }

    async fn send(&mut self, text: String) -> Result<(), SendError> {
        self.tx.send(text).await.map_err(|_| SendError::Closed)
    }

    async fn close(&mut self) {
        // The peer's sends fail from now on; it sees `Closed` once this end
        // (and with it the sender) is dropped.
        self.rx.close();
    }
}

/// Makes a fresh [`channel_pair`] per connect and hands the far end to the
/// [`ChannelAcceptor`], like a listening socket.
#[derive(Debug, Clone)]
pub struct ChannelConnector {
    accept_tx: mpsc::UnboundedSender<ChannelConnection>,
}

/// Where the far end of each new in-memory connection is picked up.
#[derive(Debug)]
pub struct ChannelAcceptor {
    accept_rx: mpsc::UnboundedReceiver<ChannelConnection>,
}

impl ChannelAcceptor {
    pub async fn accept(&mut self) -> Option<ChannelConnection> {
        self.accept_rx.recv().await
    }

    pub fn try_accept(&mut self) -> Option<ChannelConnection> {
        self.accept_rx.try_recv().ok()
    }
}

/// A connector and the acceptor of its connections. Unbounded because each
/// queued item is one connection attempt, at most one per reconnect backoff.
pub fn channel_connector() -> (ChannelConnector, ChannelAcceptor) {
    let (accept_tx, accept_rx) = mpsc::unbounded_channel();
    (
        ChannelConnector { accept_tx },
        ChannelAcceptor { accept_rx },
    )
}

impl Connector for ChannelConnector {
    type Connection = ChannelConnection;

    async fn connect(&mut self) -> Result<ChannelConnection, ConnectError> {
        let (near, far) = channel_pair();
        self.accept_tx
            .send(far)
            .map_err(|_| ConnectError::Shutdown)?;
        Ok(near)
    }

    fn url(&self) -> &str {
        CHANNEL_URL
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_cross_both_ways_and_a_dropped_end_reads_as_closed() {
        let (mut a, mut b) = channel_pair();
        a.send("to b".into()).await.unwrap();
        b.send("to a".into()).await.unwrap();
        assert_eq!(b.recv().await, Incoming::Text("to b".into()));
        assert_eq!(a.recv().await, Incoming::Text("to a".into()));
        drop(b);
        assert_eq!(a.recv().await, Incoming::Closed);
        assert!(matches!(a.send("x".into()).await, Err(SendError::Closed)));
    }

    #[tokio::test]
    async fn close_refuses_the_peers_sends() {
        let (mut a, mut b) = channel_pair();
        a.close().await;
        assert!(matches!(b.send("x".into()).await, Err(SendError::Closed)));
        assert!(matches!(b.try_send("x"), Err(SendError::Closed)));
    }

    #[tokio::test]
    async fn try_send_reports_a_full_queue() {
        let (a, _b) = channel_pair();
        for _ in 0..CHANNEL_CAPACITY {
            a.try_send("x").unwrap();
        }
        assert!(matches!(a.try_send("x"), Err(SendError::Failed(_))));
    }

    #[tokio::test]
    async fn a_cancelled_recv_loses_no_frame() {
        let (mut a, b) = channel_pair();
        // Polled once with nothing queued, then dropped.
        let pending = tokio::time::timeout(std::time::Duration::ZERO, a.recv()).await;
        assert!(pending.is_err());
        b.try_send("kept").unwrap();
        assert_eq!(a.recv().await, Incoming::Text("kept".into()));
    }

    #[tokio::test]
    async fn the_connector_hands_the_far_end_to_the_acceptor() {
        let (mut connector, mut acceptor) = channel_connector();
        let mut near = connector.connect().await.unwrap();
        let mut far = acceptor.try_accept().expect("one connection queued");
        near.send("hello".into()).await.unwrap();
        assert_eq!(far.recv().await, Incoming::Text("hello".into()));
        drop(acceptor);
        assert!(matches!(
            connector.connect().await,
            Err(ConnectError::Shutdown)
        ));
    }
}
