//! A worker-sim WebSocket connector with Nagle's algorithm off.
//!
//! `worker_sim::WsTransport` connects with `tokio_tungstenite::connect_async`,
//! which leaves `TCP_NODELAY` unset; a worker then sends `accept` and
//! `result` back to back and the second frame waits for the coordinator's
//! delayed ACK (~40 ms on Linux). The load tool uses this connector so the
//! workers' side of that stall is not counted against the coordinator;
//! `--nagle-workers` switches back to worker-sim's own `WsConnector`.

use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use worker_sim::{Connector, Transport, TransportError};

pub struct NoDelayTransport {
    stream: WebSocketStream<MaybeTlsStream<TcpStream>>,
}

impl Transport for NoDelayTransport {
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
                Ok(Message::Close(_)) | Err(_) => return None,
                Ok(_) => continue,
            }
        }
    }

    async fn close(&mut self) {
        let _ = self.stream.close(None).await;
    }
}

/// Connects to a `ws://` URL with `TCP_NODELAY` set.
#[derive(Debug, Clone)]
pub struct NoDelayConnector {
    pub url: String,
}

impl Connector for NoDelayConnector {
    type Transport = NoDelayTransport;

    async fn connect(&mut self) -> Result<NoDelayTransport, TransportError> {
        let (stream, _) = tokio_tungstenite::connect_async_with_config(&self.url, None, true)
            .await
            .map_err(|e| TransportError::Connect(e.to_string()))?;
        Ok(NoDelayTransport { stream })
    }
}
