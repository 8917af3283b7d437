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

/// The worker's end of an in-memory connection.
#[derive(Debug)]
pub struct ChannelTransport {
    pub tx: mpsc::UnboundedSender<String>,
    pub rx: mpsc::UnboundedReceiver<String>,
}

/// The coordinator's end of an in-memory connection: `rx` yields the frames
/// the worker sent, `tx` delivers frames to the worker. Dropping it closes the
/// connection as the worker sees it.
#[derive(Debug)]
pub struct ChannelPeer {
    pub tx: mpsc::UnboundedSender<String>,
    pub rx: mpsc::UnboundedReceiver<String>,
}

impl ChannelPeer {
    pub fn send(&self, frame: impl Into<String>) -> Result<(), TransportError> {
        self.tx
            .send(frame.into())
            .map_err(|_| TransportError::Closed)
    }

    pub async fn recv(&mut self) -> Option<String> {
        self.rx.recv().await
    }
}

/// A connected pair of in-memory ends.
pub fn channel_pair() -> (ChannelTransport, ChannelPeer) {
    let (to_peer, from_worker) = mpsc::unbounded_channel();
    let (to_worker, from_peer) = mpsc::unbounded_channel();
    (
        ChannelTransport {
            tx: to_peer,
            rx: from_peer,
        },
        ChannelPeer {
            tx: to_worker,
            rx: from_worker,
        },
    )
}

impl Transport for ChannelTransport {
    async fn send(&mut self, frame: String) -> Result<(), TransportError> {
        self.tx.send(frame).map_err(|_| TransportError::Closed)
    }

    async fn recv(&mut self) -> Option<String> {
        self.rx.recv().await
    }

    async fn close(&mut self) {
        self.rx.close();
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

/// A tokio-tungstenite client connection.
pub struct WsTransport {
    stream: WebSocketStream<MaybeTlsStream<TcpStream>>,
}

impl std::fmt::Debug for WsTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WsTransport").finish_non_exhaustive()
    }
}

impl WsTransport {
    pub async fn connect(url: &str) -> Result<Self, TransportError> {
        let (stream, _response) = tokio_tungstenite::connect_async(url)
            .await
            .map_err(|e| TransportError::Connect(e.to_string()))?;
        Ok(Self { stream })
    }
}

impl Transport for WsTransport {
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
}

impl WsConnector {
    pub fn new(url: impl Into<String>) -> Self {
        Self { url: url.into() }
    }
}

impl Connector for WsConnector {
    type Transport = WsTransport;

    async fn connect(&mut self) -> Result<WsTransport, TransportError> {
        WsTransport::connect(&self.url).await
    }
}
