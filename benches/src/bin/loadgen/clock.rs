//! The tool's clock: it measures wall time (see the binary's note), so unlike
//! the library crates it reads the system clock.

use tokio::time::Instant;

/// Monotonic now.
pub fn now() -> Instant {
    Instant::now()
}

/// Unix time in microseconds, to compare with the coordinator's `completed_at`.
#[allow(clippy::disallowed_methods)] // the load tool compares against the coordinator's wall clock
pub fn unix_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}
