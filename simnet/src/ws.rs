//! A worker's connector over the simulated network: each connect opens a
//! link from the worker's own address and performs a real WebSocket
//! handshake (HTTP upgrade) with tokio-tungstenite, as on a socket.

use crate::{host_of, Net, SimStream};
use protocol::connection::{ConnectError, Connector};
use std::net::SocketAddr;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use worker_sim::WsConnection;

/// The WebSocket read buffer of a simulated worker's connection.
const READ_BUFFER_BYTES: usize = 1024;

#[derive(Clone)]
pub struct SimWsConnector {
    net: Net,
    from: SocketAddr,
    url: String,
}

impl SimWsConnector {
    /// Connects the peer called `peer` to `url` (`ws://host/v1/workers/ws`).
    pub fn new(net: &Net, peer: &str, url: impl Into<String>) -> Self {
        Self {
            net: net.clone(),
            from: net.peer_addr(peer),
            url: url.into(),
        }
    }
}

impl Connector for SimWsConnector {
    type Connection = WsConnection<SimStream>;

    async fn connect(&mut self) -> Result<Self::Connection, ConnectError> {
        let host = host_of(&self.url).map_err(|e| ConnectError::Failed(e.into()))?;
        let stream = self
            .net
            .connect(self.from, &host)
            .map_err(|e| ConnectError::Failed(e.into()))?;
        // Frames are small: tungstenite's default 128 KiB read buffer is
        // zeroed for every read, which was a tenth of a simulation's CPU
        // (the coordinator's sessions use 1 KiB for the same reason).
        let config = WebSocketConfig::default().read_buffer_size(READ_BUFFER_BYTES);
        let (ws, _response) =
            tokio_tungstenite::client_async_with_config(self.url.as_str(), stream, Some(config))
                .await
                .map_err(|e| ConnectError::Failed(e.into()))?;
        Ok(WsConnection::from_stream(ws))
    }

    fn url(&self) -> &str {
        &self.url
    }
}
