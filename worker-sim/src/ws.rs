//! The worker's WebSocket: a tokio-tungstenite client stream as a
//! [`FrameConnection`], and [`WsConnector`], which dials a URL. The traits
//! and the in-memory channels the simulation uses are in
//! `protocol::connection`, shared with the coordinator.

use futures_util::{SinkExt, StreamExt};
use protocol::connection::{ConnectError, Connector, FrameConnection, Incoming, SendError};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// A tokio-tungstenite client connection, over a socket by default or
/// over any byte stream (the simulation's network).
pub struct WsConnection<S = MaybeTlsStream<TcpStream>> {
    stream: WebSocketStream<S>,
}

impl<S> std::fmt::Debug for WsConnection<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WsConnection").finish_non_exhaustive()
    }
}

impl WsConnection {
    pub async fn connect(url: &str) -> Result<Self, ConnectError> {
        Self::connect_with(url, false).await
    }

    /// `nodelay` sets `TCP_NODELAY`: without it a worker's back-to-back
    /// `accept` and `result` frames wait on the peer's delayed ACK (~40 ms on Linux).
    pub async fn connect_with(url: &str, nodelay: bool) -> Result<Self, ConnectError> {
        let (stream, _response) = tokio_tungstenite::connect_async_with_config(url, None, nodelay)
            .await
            .map_err(|e| ConnectError::Failed(e.into()))?;
        Ok(Self { stream })
    }
}

impl<S> WsConnection<S> {
    /// A connection whose WebSocket handshake is already done.
    pub fn from_stream(stream: WebSocketStream<S>) -> Self {
        Self { stream }
    }

    /// The underlying stream, for frames outside the protocol (tests send
    /// binary frames through it).
    pub fn stream_mut(&mut self) -> &mut WebSocketStream<S> {
        &mut self.stream
    }
}

impl<S> FrameConnection for WsConnection<S>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send,
{
    async fn recv(&mut self) -> Incoming {
        loop {
            // `StreamExt::next` is cancel-safe.
            return match self.stream.next().await {
                Some(Ok(Message::Text(text))) => Incoming::Text(text.as_str().to_owned()),
                Some(Ok(Message::Binary(bytes))) => Incoming::Binary(bytes.len()),
                // Pings are answered by tungstenite itself; raw frames only
                // appear when writing, never when reading.
                Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => continue,
                Some(Ok(Message::Close(_)) | Err(_)) | None => Incoming::Closed,
            };
        }
    }

    async fn send(&mut self, text: String) -> Result<(), SendError> {
        self.stream
            .send(Message::Text(text.into()))
            .await
            .map_err(|e| SendError::Failed(e.into()))
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
    type Connection = WsConnection;

    async fn connect(&mut self) -> Result<WsConnection, ConnectError> {
        WsConnection::connect_with(&self.url, self.nodelay).await
    }

    fn url(&self) -> &str {
        &self.url
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client `WsConnection` and the server's raw stream, over an in-memory pipe.
    async fn pair() -> (
        WsConnection<tokio::io::DuplexStream>,
        WebSocketStream<tokio::io::DuplexStream>,
    ) {
        let (client_io, server_io) = tokio::io::duplex(64 * 1024);
        let (client, server) = tokio::join!(
            tokio_tungstenite::client_async("ws://sim/v1/workers/ws", client_io),
            tokio_tungstenite::accept_async(server_io),
        );
        let (client, _response) = client.unwrap();
        (WsConnection::from_stream(client), server.unwrap())
    }

    #[tokio::test]
    async fn binary_frames_are_reported_pings_skipped_and_close_ends_it() {
        let (mut conn, mut server) = pair().await;
        server.send(Message::Ping(vec![1].into())).await.unwrap();
        server
            .send(Message::Binary(vec![1, 2, 3].into()))
            .await
            .unwrap();
        server.send(Message::Text("hi".into())).await.unwrap();
        assert_eq!(conn.recv().await, Incoming::Binary(3));
        assert_eq!(conn.recv().await, Incoming::Text("hi".into()));
        conn.send("back".into()).await.unwrap();
        // The pong answering the ping comes first.
        let mut texts = Vec::new();
        while texts.is_empty() {
            if let Message::Text(text) = server.next().await.unwrap().unwrap() {
                texts.push(text.as_str().to_owned());
            }
        }
        assert_eq!(texts, ["back"]);
        server.close(None).await.unwrap();
        assert_eq!(conn.recv().await, Incoming::Closed);
    }
}
