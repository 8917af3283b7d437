//! The transcript: one line per observable event, stamped with simulated
//! time since the scenario epoch, and a rolling SHA-256 over the lines.

use sha2::{Digest, Sha256};
use std::sync::{Arc, Mutex};

/// Shared by every peer of a run; clones append to the same transcript.
#[derive(Clone)]
pub struct Transcript {
    inner: Arc<Mutex<Lines>>,
    clock: Arc<dyn coordinator::Clock>,
    epoch_ms: i64,
}

struct Lines {
    lines: Vec<String>,
    digest: Sha256,
}

impl Transcript {
    pub fn new(clock: Arc<dyn coordinator::Clock>, epoch_ms: i64) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Lines {
                lines: Vec::new(),
                digest: Sha256::new(),
            })),
            clock,
            epoch_ms,
        }
    }

    /// Appends `[+S.mmm] actor text`.
    pub fn log(&self, actor: &str, text: impl AsRef<str>) {
        let elapsed_ms = self.clock.now_ms() - self.epoch_ms;
        let line = format!(
            "[+{}.{:03}s] {actor} {}",
            elapsed_ms / 1000,
            elapsed_ms % 1000,
            text.as_ref()
        );
        let mut inner = self.inner.lock().expect("transcript lock");
        inner.digest.update(line.as_bytes());
        inner.digest.update(b"\n");
        inner.lines.push(line);
    }

    pub fn lines(&self) -> Vec<String> {
        self.inner.lock().expect("transcript lock").lines.clone()
    }

    /// Hex SHA-256 over every line so far, each followed by `\n`.
    pub fn digest(&self) -> String {
        hex::encode(
            self.inner
                .lock()
                .expect("transcript lock")
                .digest
                .clone()
                .finalize(),
        )
    }

    pub fn elapsed_ms(&self) -> i64 {
        self.clock.now_ms() - self.epoch_ms
    }
}

/// The first line where two transcripts differ, as (line number from 1, left, right).
pub fn first_difference(a: &[String], b: &[String]) -> Option<(usize, String, String)> {
    let n = a.len().max(b.len());
    (0..n).find_map(|i| {
        let (x, y) = (a.get(i), b.get(i));
        (x != y).then(|| {
            (
                i + 1,
                x.cloned().unwrap_or_else(|| "<end>".into()),
                y.cloned().unwrap_or_else(|| "<end>".into()),
            )
        })
    })
}
