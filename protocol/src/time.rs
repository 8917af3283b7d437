//! Timestamps: ISO 8601, UTC, millisecond precision, `Z` designator
//! (`2026-11-21T10:00:00.000Z`). Time is carried as Unix milliseconds inside
//! the services and formatted only at the edge.

use chrono::{DateTime, SecondsFormat, Utc};

/// Formats Unix milliseconds as the API's timestamp string.
pub fn format_ms(unix_ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(unix_ms)
        .unwrap_or(DateTime::<Utc>::UNIX_EPOCH)
        .to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Parses an RFC 3339 timestamp into Unix milliseconds.
pub fn parse_ms(text: &str) -> Option<i64> {
    DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.timestamp_millis())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_with_millis_and_z() {
        assert_eq!(format_ms(1_795_255_200_123), "2026-11-21T10:00:00.123Z");
        assert_eq!(format_ms(0), "1970-01-01T00:00:00.000Z");
    }

    #[test]
    fn parse_inverts_format() {
        let t = 1_795_255_200_007;
        assert_eq!(parse_ms(&format_ms(t)), Some(t));
        assert_eq!(parse_ms("yesterday"), None);
    }
}
