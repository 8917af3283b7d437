//! A worker's connector over the simulated network: each connect opens a
//! link from the worker's own address and performs a real WebSocket
//! handshake (HTTP upgrade) with tokio-tungstenite, as on a socket.

use crate::{host_of, Net, SimStream};
use std::net::SocketAddr;
use worker_sim::{Connector, TransportError, WsTransport};

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
    type Transport = WsTransport<SimStream>;

    async fn connect(&mut self) -> Result<Self::Transport, TransportError> {
        let connect = |e: &dyn std::fmt::Display| TransportError::Connect(e.to_string());
        let host = host_of(&self.url).map_err(|e| connect(&e))?;
        let stream = self
            .net
            .connect(self.from, &host)
            .map_err(|e| connect(&e))?;
        let (ws, _response) = tokio_tungstenite::client_async(self.url.as_str(), stream)
            .await
            .map_err(|e| connect(&e))?;
        Ok(WsTransport::from_stream(ws))
    }
}
