//! Latency samples and their summary.

use serde::Serialize;

/// Percentiles of a set of samples in microseconds.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct Summary {
    pub count: usize,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
    pub mean_us: u64,
}

/// Nearest-rank percentile of sorted samples (`q` in 0..=1).
pub fn percentile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub fn summarize(samples: &[u64]) -> Summary {
    let mut s = samples.to_vec();
    s.sort_unstable();
    let sum: u128 = s.iter().map(|&v| v as u128).sum();
    Summary {
        count: s.len(),
        p50_us: percentile(&s, 0.50),
        p90_us: percentile(&s, 0.90),
        p99_us: percentile(&s, 0.99),
        max_us: s.last().copied().unwrap_or(0),
        mean_us: if s.is_empty() {
            0
        } else {
            (sum / s.len() as u128) as u64
        },
    }
}

/// `1234` µs as `1.23 ms`, for tables.
pub fn fmt_us(us: u64) -> String {
    if us >= 1_000_000 {
        format!("{:.2} s", us as f64 / 1e6)
    } else if us >= 1_000 {
        format!("{:.2} ms", us as f64 / 1e3)
    } else {
        format!("{us} µs")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 0.5), 50);
        assert_eq!(percentile(&v, 0.99), 99);
        assert_eq!(percentile(&v, 1.0), 100);
        assert_eq!(percentile(&[], 0.5), 0);
        let s = summarize(&[5, 1, 3]);
        assert_eq!((s.p50_us, s.max_us, s.mean_us), (3, 5, 3));
        assert_eq!(fmt_us(1_500), "1.50 ms");
    }
}
