//! The injected time source, shared with every other peer: library code
//! never reads the system clock. Under the simulation, time is the scenario
//! epoch plus tokio's (paused) elapsed time.

pub use protocol::clock::{Clock, FixedClock, SharedClock, TokioClock};
