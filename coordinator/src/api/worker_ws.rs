//! `GET /v1/workers/ws`: the WebSocket upgrade that starts a worker session
//! (`worker::session`), and an axum WebSocket as a [`FrameConnection`].

use super::docs::Unavailable;
use super::error::ApiError;
use super::ClientAddr;
use crate::shell::Coordinator;
use crate::worker::session::run_admitted;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use protocol::connection::{FrameConnection, Incoming, SendError};

/// `GET /v1/workers/ws`.
#[utoipa::path(get, path = "/v1/workers/ws", tag = "service",
    description = "The worker protocol over WebSocket (docs/worker-protocol.md): send the upgrade \
        request, then `hello` and `auth` frames.",
    responses(
        (status = 101, description = "Switched to the WebSocket worker protocol"),
        (status = 400, description = "Not a WebSocket upgrade request", body = protocol::api::ErrorBody),
        (status = 503, response = Unavailable),
    ))]
pub async fn upgrade(
    State(c): State<Coordinator>,
    ClientAddr(client): ClientAddr,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    // axum's own rejection is plain text; every error answer is JSON.
    let ws = match ws {
        Ok(ws) => ws,
        Err(rejection) => return ApiError::BadRequest(rejection.body_text()).into_response(),
    };
    // Unauthenticated connections each hold a session for up to the auth
    // timeout; past the limit in total or for this client, refuse before
    // upgrading, so one client cannot lock every worker out.
    let Some(permit) = c.handshake_permit(&client) else {
        return ApiError::Unavailable("too many workers are connecting; retry later".into())
            .into_response();
    };
    // Frames up to `frame_bytes_max` get a normal answer; beyond four times
    // that the WebSocket layer refuses the message and the connection ends,
    // so no worker can make the coordinator buffer unbounded input.
    let hard_limit = c.config().limits.frame_bytes_max.saturating_mul(4);
    // Most frames are well under 1 KiB; tungstenite's default 128 KiB read
    // buffer per connection (zeroed per read) would dominate the memory and
    // heartbeat CPU of many idle workers. Larger messages still assemble.
    ws.read_buffer_size(1024)
        .write_buffer_size(1024)
        .max_message_size(hard_limit)
        .max_frame_size(hard_limit)
        .on_upgrade(move |socket| run_admitted(c, AxumConnection(socket), Some(permit)))
}

/// An axum WebSocket as a [`FrameConnection`].
struct AxumConnection(WebSocket);

impl FrameConnection for AxumConnection {
    async fn recv(&mut self) -> Incoming {
        loop {
            // `WebSocket::recv` is a stream poll, so cancel-safe.
            return match self.0.recv().await {
                Some(Ok(Message::Text(text))) => Incoming::Text(text.as_str().to_owned()),
                Some(Ok(Message::Binary(bytes))) => Incoming::Binary(bytes.len()),
                // Pings are answered by the WebSocket layer itself.
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                Some(Ok(Message::Close(_)) | Err(_)) | None => Incoming::Closed,
            };
        }
    }

    async fn send(&mut self, text: String) -> Result<(), SendError> {
        self.0
            .send(Message::Text(text.into()))
            .await
            .map_err(|e| SendError::Failed(e.into()))
    }

    async fn close(&mut self) {
        let _ = self.0.send(Message::Close(None)).await;
    }
}
