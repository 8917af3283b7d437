//! One worker's side of the coordinator: its WebSocket session (handshake,
//! serve, frames in and out) and the check of the results it sends.

pub mod result;
pub mod session;
