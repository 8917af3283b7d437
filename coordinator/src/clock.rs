//! The coordinator's only source of wall-clock time: the shared
//! [`protocol::clock::Clock`]. Production uses [`SystemClock`]; the
//! simulation a [`TokioClock`]; tests a [`ManualClock`].

pub use protocol::clock::{Clock, ManualClock, SharedClock, SystemClock, TokioClock};
