//! A streaming worker's `delta` frames (decision 0023): per assignment in
//! order, within the limits, and at the result joined to exactly its
//! output; per session within a rate. The session keeps a hash of the
//! joined text, never the text: the shell's stream buffer (shell/streams.rs)
//! holds the one copy readers see.

use sha2::{Digest, Sha256};
use tokio::time::{Duration, Instant};

/// The deltas of one assignment so far.
#[derive(Default)]
pub struct Deltas {
    next_seq: u32,
    bytes: usize,
    joined: Sha256,
}

impl Deltas {
    /// Takes delta `seq` with `text`, or says which rule it breaks.
    pub fn push(
        &mut self,
        seq: u32,
        text: &str,
        count_max: u32,
        bytes_max: usize,
    ) -> Result<(), String> {
        if seq != self.next_seq {
            return Err(format!(
                "delta seq {seq} out of order: expected {}",
                self.next_seq
            ));
        }
        if seq >= count_max {
            return Err(format!("more than {count_max} deltas for one job"));
        }
        self.bytes = self.bytes.saturating_add(text.len());
        if self.bytes > bytes_max {
            return Err(format!("deltas larger than {bytes_max} bytes together"));
        }
        self.next_seq += 1;
        self.joined.update(text.as_bytes());
        Ok(())
    }

    /// Whether a result's `output` is what the deltas joined to: true when
    /// none was sent (a result alone is the protocol of before).
    pub fn join_to(&self, output: &serde_json::Value) -> bool {
        if self.next_seq == 0 {
            return true;
        }
        match output.as_str() {
            Some(text) => {
                text.len() == self.bytes
                    && self.joined.clone().finalize() == Sha256::digest(text.as_bytes())
            }
            None => false,
        }
    }
}

/// A session's delta rate: a count per one-second window (tokio time,
/// virtual in the simulation).
pub struct DeltaRate {
    window_start: Instant,
    count: u32,
}

impl Default for DeltaRate {
    fn default() -> Self {
        Self {
            window_start: Instant::now(),
            count: 0,
        }
    }
}

impl DeltaRate {
    /// Counts one delta; false when it is over `per_second_max`.
    pub fn allow(&mut self, per_second_max: u32) -> bool {
        let now = Instant::now();
        if now.duration_since(self.window_start) >= Duration::from_secs(1) {
            self.window_start = now;
            self.count = 0;
        }
        self.count += 1;
        self.count <= per_second_max
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn deltas_in_order_join_to_exactly_the_output() {
        let mut d = Deltas::default();
        d.push(0, "Hel", 10, 100).unwrap();
        d.push(1, "lo", 10, 100).unwrap();
        assert!(d.join_to(&json!("Hello")));
        assert!(!d.join_to(&json!("Hello!")));
        assert!(!d.join_to(&json!("Hellx")));
        assert!(!d.join_to(&json!({"text": "Hello"})));
        assert!(Deltas::default().join_to(&json!({"any": "thing"})));
    }

    #[test]
    fn deltas_out_of_order_or_over_a_limit_are_refused() {
        let mut d = Deltas::default();
        assert!(d
            .push(1, "a", 10, 100)
            .unwrap_err()
            .contains("out of order"));
        d.push(0, "a", 2, 100).unwrap();
        d.push(1, "b", 2, 100).unwrap();
        assert!(d.push(2, "c", 2, 100).unwrap_err().contains("more than 2"));
        let mut d = Deltas::default();
        assert!(d.push(0, "abcd", 10, 3).unwrap_err().contains("3 bytes"));
    }

    #[tokio::test(start_paused = true)]
    async fn the_rate_is_per_second() {
        let mut rate = DeltaRate::default();
        assert!(rate.allow(2) && rate.allow(2));
        assert!(!rate.allow(2));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(rate.allow(2));
    }
}
