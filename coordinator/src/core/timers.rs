//! The live timers, in firing order, at a constant cost for the common case.
//!
//! A set ordered like `BTreeSet<Timer>` (deadline, then sequence number):
//! the same `first` and the same firing order, so no transcript changes.
//! Nearly every timer is set to the event's time plus a fixed wait of its
//! kind (`pending_timeout_ms` or `lease_ms`), so each kind's timers arrive
//! in order: they are appended to that kind's lane, a deque, in O(1). A
//! removed timer is marked dead where it sits (found by binary search) and
//! dropped once it reaches the front, or by compaction when the dead
//! outnumber the live, so memory stays within twice the live timers plus a
//! constant. A timer that would arrive out of order (restored deadlines, a
//! clock that stepped back) goes to an ordinary ordered set beside the lanes.

use super::{Timer, TimerKind};
use std::collections::{BTreeSet, VecDeque};

/// Dead entries a lane may hold before it is compacted, beyond its live ones.
const DEAD_SLACK: usize = 64;

#[derive(Debug, Default)]
struct Lane {
    /// Deadlines never decrease and sequence numbers strictly increase
    /// (so the entries are in `Timer` order too); the front entry is live.
    entries: VecDeque<(Timer, bool)>,
    dead: usize,
}

impl Lane {
    /// Whether `timer` keeps the lane's order when appended.
    fn takes(&self, timer: &Timer) -> bool {
        self.entries
            .back()
            .is_none_or(|(last, _)| last.at_ms <= timer.at_ms && last.seq < timer.seq)
    }

    fn find(&self, timer: &Timer) -> Option<usize> {
        // Jobs mostly leave in the order they came (the queue head is
        // dispatched, the oldest lease ends first): the front is the
        // common case, and a search of a long lane touches cold memory.
        let front = self
            .entries
            .front()
            .is_some_and(|(t, _)| t.seq == timer.seq);
        let i = if front {
            0
        } else {
            self.entries
                .binary_search_by_key(&timer.seq, |(t, _)| t.seq)
                .ok()?
        };
        let (t, live) = &self.entries[i];
        (*live && t == timer).then_some(i)
    }

    fn kill(&mut self, i: usize) {
        self.entries[i].1 = false;
        self.dead += 1;
        while self.entries.front().is_some_and(|(_, live)| !live) {
            self.entries.pop_front();
            self.dead -= 1;
        }
        if self.dead > DEAD_SLACK && self.dead > self.entries.len() - self.dead {
            self.entries.retain(|(_, live)| *live);
            self.dead = 0;
        }
    }
}

#[derive(Debug, Default)]
pub(super) struct Timers {
    /// By kind: `TimerKind::Pending`, `TimerKind::Lease`, `TimerKind::Settle`.
    lanes: [Lane; 3],
    out_of_order: BTreeSet<Timer>,
    len: usize,
}

fn lane_index(kind: TimerKind) -> usize {
    match kind {
        TimerKind::Pending => 0,
        TimerKind::Lease => 1,
        TimerKind::Settle => 2,
    }
}

impl Timers {
    pub fn len(&self) -> usize {
        self.len
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn contains(&self, timer: &Timer) -> bool {
        self.lanes[lane_index(timer.kind)].find(timer).is_some()
            || self.out_of_order.contains(timer)
    }

    /// Adds `timer`; false if it is already there.
    pub fn insert(&mut self, timer: Timer) -> bool {
        let lane = &mut self.lanes[lane_index(timer.kind)];
        // A timer the lane takes is newer than all of it: no search there.
        if lane.takes(&timer) {
            if self.out_of_order.contains(&timer) {
                return false;
            }
            lane.entries.push_back((timer, true));
        } else if lane.find(&timer).is_some() || !self.out_of_order.insert(timer) {
            return false;
        }
        self.len += 1;
        true
    }

    /// Removes `timer`; false if it was not there.
    pub fn remove(&mut self, timer: &Timer) -> bool {
        let lane = &mut self.lanes[lane_index(timer.kind)];
        let removed = match lane.find(timer) {
            Some(i) => {
                lane.kill(i);
                true
            }
            None => self.out_of_order.remove(timer),
        };
        self.len -= usize::from(removed);
        removed
    }

    /// The timer that fires first.
    pub fn first(&self) -> Option<&Timer> {
        let fronts = self.lanes.iter().filter_map(|l| l.entries.front());
        fronts
            .map(|(t, _)| t)
            .chain(self.out_of_order.first())
            .min()
    }

    pub fn pop_first(&mut self) -> Option<Timer> {
        let first = *self.first()?;
        self.remove(&first);
        Some(first)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha20Rng;
    use uuid::Uuid;

    /// Random inserts (mostly in order per kind, some not), removals and
    /// pops agree with a `BTreeSet<Timer>` at every step.
    #[test]
    fn the_lanes_agree_with_an_ordered_set() {
        let mut rng = ChaCha20Rng::seed_from_u64(3);
        let mut timers = Timers::default();
        let mut model = BTreeSet::new();
        let mut now_ms = 0i64;
        for seq in 0..20_000u64 {
            now_ms += rng.gen_range(0..3);
            let kind = if rng.gen_bool(0.5) {
                TimerKind::Pending
            } else {
                TimerKind::Lease
            };
            let wait_ms = match kind {
                TimerKind::Pending => 1_000,
                TimerKind::Lease | TimerKind::Settle => 400,
            };
            let at_ms = if rng.gen_bool(0.05) {
                now_ms + rng.gen_range(0..2_000)
            } else {
                now_ms + wait_ms
            };
            let timer = Timer {
                at_ms,
                seq,
                kind,
                job: Uuid::from_u128(u128::from(seq)),
            };
            assert_eq!(timers.insert(timer), model.insert(timer));
            assert!(!timers.insert(timer));
            if rng.gen_bool(0.4) {
                if let Some(&victim) = model.iter().nth(rng.gen_range(0..model.len())) {
                    assert_eq!(timers.remove(&victim), model.remove(&victim));
                    assert!(!timers.remove(&victim));
                }
            }
            while timers.first().is_some_and(|t| t.at_ms <= now_ms - 500) {
                assert_eq!(timers.pop_first(), model.pop_first());
            }
            assert_eq!(timers.first(), model.first());
            assert_eq!(timers.len(), model.len());
            let dead: usize = timers.lanes.iter().map(|l| l.dead).sum();
            assert!(
                dead <= 2 * DEAD_SLACK + timers.len(),
                "dead entries are bounded"
            );
        }
        for t in &model {
            assert!(timers.contains(t));
        }
        while let Some(t) = model.pop_first() {
            assert_eq!(timers.pop_first(), Some(t));
        }
        assert!(timers.is_empty() && timers.first().is_none());
    }
}
