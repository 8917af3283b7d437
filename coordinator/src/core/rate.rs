//! Fixed-window counters per key (client address, user), bounded in keys.
//!
//! A fixed window lets through at most twice the limit across a window
//! boundary; the limits are set with that in mind. Time is the caller's
//! `now_ms`, so the core stays deterministic.

use std::collections::HashMap;

/// Length of every window: the limits are "per minute".
pub const WINDOW_MS: i64 = 60_000;

/// Counts per key in the current window of each key.
#[derive(Debug, Default)]
pub struct Windows {
    /// key -> (window start, events counted in it).
    counts: HashMap<String, (i64, u32)>,
}

/// The key has used its window; retry after this many milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limited {
    pub retry_after_ms: i64,
}

impl Windows {
    /// Refuses if `key` has counted `max` events in its window, or if it is
    /// new and `keys_max` keys are tracked with live windows.
    pub fn check(
        &mut self,
        key: &str,
        now_ms: i64,
        max: u32,
        keys_max: usize,
    ) -> Result<(), Limited> {
        if max == 0 {
            return Err(full());
        }
        match self.counts.get(key) {
            Some(&(start, count)) if now_ms - start < WINDOW_MS => {
                if count >= max {
                    return Err(Limited {
                        retry_after_ms: start + WINDOW_MS - now_ms,
                    });
                }
                Ok(())
            }
            Some(_) => Ok(()),
            None => self.room_for_new_key(now_ms, keys_max),
        }
    }

    fn room_for_new_key(&mut self, now_ms: i64, keys_max: usize) -> Result<(), Limited> {
        if self.counts.len() >= keys_max {
            self.counts
                .retain(|_, (start, _)| now_ms - *start < WINDOW_MS);
        }
        if self.counts.len() >= keys_max {
            // Every tracked key is active: a flood of addresses. Refusing
            // the newcomer keeps memory bounded; clients already tracked
            // keep their budget.
            return Err(full());
        }
        Ok(())
    }

    /// Counts one event for `key`. Call after a successful [`Self::check`].
    pub fn add(&mut self, key: &str, now_ms: i64) {
        let window = self.counts.entry(key.to_owned()).or_insert((now_ms, 0));
        if now_ms - window.0 >= WINDOW_MS {
            *window = (now_ms, 0);
        }
        window.1 = window.1.saturating_add(1);
    }

    /// [`Self::check`] then [`Self::add`].
    pub fn take(
        &mut self,
        key: &str,
        now_ms: i64,
        max: u32,
        keys_max: usize,
    ) -> Result<(), Limited> {
        self.check(key, now_ms, max, keys_max)?;
        self.add(key, now_ms);
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.counts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }
}

fn full() -> Limited {
    Limited {
        retry_after_ms: WINDOW_MS,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_per_key_per_window() {
        let mut w = Windows::default();
        for _ in 0..3 {
            w.take("a", 0, 3, 10).unwrap();
        }
        assert_eq!(
            w.take("a", 10_000, 3, 10),
            Err(Limited {
                retry_after_ms: 50_000
            })
        );
        w.take("b", 10_000, 3, 10).unwrap();
        w.take("a", 60_000, 3, 10).unwrap();
    }

    #[test]
    fn check_alone_counts_nothing() {
        let mut w = Windows::default();
        for _ in 0..5 {
            w.check("a", 0, 1, 10).unwrap();
        }
        assert!(w.is_empty());
    }

    #[test]
    fn keys_are_bounded_and_stale_ones_swept() {
        let mut w = Windows::default();
        w.take("a", 0, 5, 2).unwrap();
        w.take("b", 0, 5, 2).unwrap();
        assert!(w.take("c", 1, 5, 2).is_err(), "both windows live");
        // A tracked key still works while the map is full.
        w.take("a", 2, 5, 2).unwrap();
        w.take("c", WINDOW_MS, 5, 2).unwrap();
        assert_eq!(w.len(), 1);
    }
}
