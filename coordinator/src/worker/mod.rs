//! One worker's side of the coordinator: its WebSocket session (handshake,
//! serve, frames in and out), the check of the results it sends, and of
//! the output deltas a streaming worker sends before them (`deltas.rs`).

pub mod deltas;
pub mod result;
pub mod session;
