//! The one duration syntax of scenarios and template filters.

use super::ExprError;
use std::time::Duration;

/// `500ms`, `10s`, `61m`, `2h`.
/// One syntax in every duration field (`advance`, `within`, `interval`, and
/// worker `latency`): a whole number with a unit `ms`, `s`, `m` or `h`; a bare
/// number means milliseconds.
pub fn parse_duration(text: &str) -> Result<Duration, ExprError> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (num, unit) = text.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| ExprError::NotADuration(text.to_owned()))?;
    let ms = match unit {
        "" | "ms" => n,
        "s" => n * 1_000,
        "m" => n * 60_000,
        "h" => n * 3_600_000,
        _ => return Err(ExprError::DurationUnit(text.to_owned())),
    };
    Ok(Duration::from_millis(ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("61m").unwrap(), Duration::from_secs(3660));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("5").unwrap(), Duration::from_millis(5));
        assert!(parse_duration("").is_err());
        assert!(parse_duration("5d").is_err());
    }
}
