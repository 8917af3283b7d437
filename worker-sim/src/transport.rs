//! Text-frame transports. A worker only needs to send and receive whole text
//! frames, so the simulation can swap the WebSocket for in-memory channels
//! whose other ends the harness wires to the coordinator's session logic.

use futures_util::{SinkExt, StreamExt};
use std::future::Future;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    #[error("connection closed")]
    Closed,
    #[error("connect failed: {0}")]
    Connect(String),
    #[error("send failed: {0}")]
    Send(String),
    /// The connector can never produce another connection (the simulation
    /// dropped its acceptor); the worker stops instead of retrying.
    #[error("connector is shut down")]
    Shutdown,
}

/// One connection carrying text frames.
pub trait Transport: Send {
    fn send(&mut self, frame: String) -> impl Future<Output = Result<(), TransportError>> + Send;
    /// The next text frame, or `None` once the peer has gone away.
    fn recv(&mut self) -> impl Future<Output = Option<String>> + Send;
    /// Orderly close (a WebSocket close frame). Dropping the transport instead
    /// is an abrupt loss of the connection.
    fn close(&mut self) -> impl Future<Output = ()> + Send;
}

/// Opens connections; called again on every reconnect.
pub trait Connector: Send {
    type Transport: Transport;
    fn connect(&mut self) -> impl Future<Output = Result<Self::Transport, TransportError>> + Send;
}

// ---------------------------------------------------------------- in-memory

/// Frames buffered per direction of an in-memory connection; the same
/// bound as the coordinator's own channel tests use.
pub const CHANNEL_CAPACITY: usize = 64;

/// The worker's end of an in-memory connection.
#[derive(Debug)]
pub struct ChannelTransport {
    pub to_coordinator: mpsc::Sender<String>,
    pub from_coordinator: mpsc::Receiver<String>,
}

/// The coordinator's end of an in-memory connection. The field names and
/// types match `coordinator::session::ChannelConnection`, so the harness
/// wires one to the coordinator's session logic with
/// `ChannelConnection { from_worker: peer.from_worker, to_worker: peer.to_worker }`.
/// Dropping it closes the connection as the worker sees it.
#[derive(Debug)]
pub struct ChannelPeer {
    pub from_worker: mpsc::Receiver<String>,
    pub to_worker: mpsc::Sender<String>,
}

impl ChannelPeer {
    pub async fn send(&self, frame: impl Into<String>) -> Result<(), TransportError> {
        self.to_worker
            .send(frame.into())
            .await
            .map_err(|_| TransportError::Closed)
    }

    /// Without waiting; fails when the worker's queue is full or gone.
    pub fn try_send(&self, frame: impl Into<String>) -> Result<(), TransportError> {
        self.to_worker
            .try_send(frame.into())
            .map_err(|e| TransportError::Send(e.to_string()))
    }

    pub async fn recv(&mut self) -> Option<String> {
        self.from_worker.recv().await
    }
}

/// A connected pair of in-memory ends.
pub fn channel_pair() -> (ChannelTransport, ChannelPeer) {
    let (to_coordinator, from_worker) = mpsc::channel(CHANNEL_CAPACITY);
    let (to_worker, from_coordinator) = mpsc::channel(CHANNEL_CAPACITY);
    (
        ChannelTransport {
            to_coordinator,
            from_coordinator,
        },
        ChannelPeer {
            from_worker,
            to_worker,
        },
    )
}

impl Transport for ChannelTransport {
    async fn send(&mut self, frame: String) -> Result<(), TransportError> {
        self.to_coordinator
            .send(frame)
            .await
            .map_err(|_| TransportError::Closed)
    }

    async fn recv(&mut self) -> Option<String> {
        self.from_coordinator.recv().await
    }

    async fn close(&mut self) {
        self.from_coordinator.close();
    }
}

/// Makes a fresh [`channel_pair`] per connect and hands the peer end to the
/// [`ChannelAcceptor`], like a listening socket.
#[derive(Debug, Clone)]
pub struct ChannelConnector {
    accept_tx: mpsc::UnboundedSender<ChannelPeer>,
}

/// Where the harness picks up each new worker connection.
#[derive(Debug)]
pub struct ChannelAcceptor {
    accept_rx: mpsc::UnboundedReceiver<ChannelPeer>,
}

impl ChannelAcceptor {
    pub async fn accept(&mut self) -> Option<ChannelPeer> {
        self.accept_rx.recv().await
    }

    pub fn try_accept(&mut self) -> Option<ChannelPeer> {
        self.accept_rx.try_recv().ok()
    }
}

pub fn channel_connector() -> (ChannelConnector, ChannelAcceptor) {
    let (accept_tx, accept_rx) = mpsc::unbounded_channel();
    (
        ChannelConnector { accept_tx },
        ChannelAcceptor { accept_rx },
    )
}

impl Connector for ChannelConnector {
    type Transport = ChannelTransport;

    async fn connect(&mut self) -> Result<ChannelTransport, TransportError> {
        let (transport, peer) = channel_pair();
        self.accept_tx
            .send(peer)
            .map_err(|_| TransportError::Shutdown)?;
        Ok(transport)
    }
}

// ---------------------------------------------------------------- WebSocket

/// A tokio-tungstenite client connection, over a socket by default or
/// over any byte stream (the simulation's network).
pub struct WsTransport<S = MaybeTlsStream<TcpStream>> {
    stream: WebSocketStream<S>,
}

impl<S> std::fmt::Debug for WsTransport<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WsTransport").finish_non_exhaustive()
    }
}

impl WsTransport {
    pub async fn connect(url: &str) -> Result<Self, TransportError> {
        Self::connect_with(url, false).await
    }

    /// `nodelay` sets `TCP_NODELAY`: without it a worker's back-to-back
    /// `accept` and `result` frames wait on the peer's delayed ACK (~40 ms on Linux).
    pub async fn connect_with(url: &str, nodelay: bool) -> Result<Self, TransportError> {
        let (stream, _response) = tokio_tungstenite::connect_async_with_config(url, None, nodelay)
            .await
            .map_err(|e| TransportError::Connect(e.to_string()))?;
        Ok(Self { stream })
    }
}

impl<S> WsTransport<S> {
    /// A connection whose WebSocket handshake is already done.
    pub fn from_stream(stream: WebSocketStream<S>) -> Self {
        Self { stream }
    }
}

impl<S> Transport for WsTransport<S>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send,
{
    async fn send(&mut self, frame: String) -> Result<(), TransportError> {
        self.stream
            .send(Message::Text(frame.into()))
            .await
            .map_err(|e| TransportError::Send(e.to_string()))
    }

    async fn recv(&mut self) -> Option<String> {
        loop {
            match self.stream.next().await? {
                Ok(Message::Text(text)) => return Some(text.as_str().to_owned()),
                // Pings are answered by tungstenite itself; binary frames are
                // not part of the protocol.
                Ok(
                    Message::Ping(_) | Message::Pong(_) | Message::Binary(_) | Message::Frame(_),
                ) => continue,
                Ok(Message::Close(_)) | Err(_) => return None,
            }
        }
    }

    async fn close(&mut self) {
        let _ = self.stream.close(None).await;
    }
}

/// Connects to a `ws://` (or `wss://`) URL on every call.
#[derive(Debug, Clone)]
pub struct WsConnector {
    pub url: String,
    nodelay: bool,
}

impl WsConnector {
    /// With `TCP_NODELAY`: frames are small and a result must not wait for
    /// a delayed ACK.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            nodelay: true,
        }
    }

    /// Turns `TCP_NODELAY` off or on for each connection.
    pub fn with_nodelay(mut self, nodelay: bool) -> Self {
        self.nodelay = nodelay;
        self
    }

    /// Whether connections set `TCP_NODELAY`.
    pub fn nodelay(&self) -> bool {
        self.nodelay
    }
}

impl Connector for WsConnector {
    type Transport = WsTransport;

    async fn connect(&mut self) -> Result<WsTransport, TransportError> {
        WsTransport::connect_with(&self.url, self.nodelay).await
    }
}
