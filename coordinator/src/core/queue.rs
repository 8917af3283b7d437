//! One queue of pending jobs, in dispatch order, at a constant cost per
//! push and removal.
//!
//! Each job holds a position, an `i64`: a requeued job takes the one before
//! the first, a new job the one after the last. Positions index a deque of
//! slots from `front_pos` on, so finding a job's slot is arithmetic, not a
//! search, and the ends grow and shrink without allocating once the deque
//! has its size (an ordered map here allocated and freed tree nodes as jobs
//! went through, and searched it on every push and removal).
//!
//! A job leaving from the middle (its pending timeout, a worker skipping a
//! job it failed) leaves a hole, dropped once it reaches either end. So that
//! holes stay bounded by the jobs queued, not by how long a job may wait,
//! [`Queue::remove`] compacts the slots when the holes outnumber the jobs
//! by more than [`HOLE_SLACK`]; the jobs behind the first then have new
//! positions, which the caller writes back (see `Core::dequeue`). Compaction
//! moves `len` jobs after at least `len` removals: constant work per removal.

use std::collections::VecDeque;
use uuid::Uuid;

/// Holes a queue may hold beyond its number of jobs before it is compacted.
pub(super) const HOLE_SLACK: usize = 64;

#[derive(Debug, Default)]
pub(super) struct Queue {
    /// Slot `i` is position `front_pos + i`; `None` is a hole. Neither end
    /// is a hole.
    slots: VecDeque<Option<Uuid>>,
    front_pos: i64,
    /// Jobs held: the slots that are not holes.
    len: usize,
}

/// What [`Queue::remove`] did besides taking the job out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub(super) enum Removed {
    /// Nothing else moved.
    Only,
    /// The slots were compacted: every job has a new position
    /// ([`Queue::positions`]).
    Compacted,
}

impl Queue {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Queues `id` at the back, or at the front; returns its position.
    pub fn push(&mut self, id: Uuid, to_front: bool) -> i64 {
        self.len += 1;
        if self.slots.is_empty() {
            self.slots.push_back(Some(id));
            return self.front_pos;
        }
        if to_front {
            self.front_pos -= 1;
            self.slots.push_front(Some(id));
            self.front_pos
        } else {
            self.slots.push_back(Some(id));
            self.back_pos()
        }
    }

    /// The job at `pos`, if one is there.
    pub fn get(&self, pos: i64) -> Option<&Uuid> {
        self.slots.get(self.index(pos)?)?.as_ref()
    }

    /// Takes the job at `pos` out; `None` if there is none.
    pub fn remove(&mut self, pos: i64) -> Option<Removed> {
        let i = self.index(pos)?;
        self.slots.get_mut(i)?.take()?;
        self.len -= 1;
        while self.slots.front().is_some_and(Option::is_none) {
            self.slots.pop_front();
            self.front_pos += 1;
        }
        while self.slots.back().is_some_and(Option::is_none) {
            self.slots.pop_back();
        }
        if self.slots.is_empty() {
            // Positions restart: they stay far from overflow.
            self.front_pos = 0;
        }
        let holes = self.slots.len() - self.len;
        if holes > self.len + HOLE_SLACK {
            self.slots.retain(Option::is_some);
            debug_assert_eq!(self.slots.len(), self.len);
            return Some(Removed::Compacted);
        }
        debug_assert!(
            self.slots.len() <= 2 * self.len + HOLE_SLACK,
            "holes bounded"
        );
        Some(Removed::Only)
    }

    /// The jobs in dispatch order.
    pub fn ids(&self) -> impl Iterator<Item = &Uuid> + '_ {
        self.slots.iter().flatten()
    }

    /// The jobs in dispatch order, with their positions.
    pub fn positions(&self) -> impl Iterator<Item = (i64, &Uuid)> + '_ {
        (self.front_pos..)
            .zip(&self.slots)
            .filter_map(|(pos, slot)| Some((pos, slot.as_ref()?)))
    }

    fn back_pos(&self) -> i64 {
        self.front_pos + self.slots.len() as i64 - 1
    }

    fn index(&self, pos: i64) -> Option<usize> {
        usize::try_from(pos.checked_sub(self.front_pos)?).ok()
    }

    /// Slots held, holes included.
    #[cfg(test)]
    pub fn slots_len(&self) -> usize {
        self.slots.len()
    }

    /// Puts `id` at `pos` without the checks of [`Queue::push`]: for the
    /// tests that corrupt a queue on purpose.
    #[cfg(test)]
    pub fn force(&mut self, pos: i64, id: Uuid) {
        while self.index(pos).is_none() {
            self.front_pos -= 1;
            self.slots.push_front(None);
        }
        let i = self.index(pos).expect("extended");
        if i >= self.slots.len() {
            self.slots.resize(i + 1, None);
        }
        if self.slots[i].replace(id).is_none() {
            self.len += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha20Rng;
    use std::collections::BTreeMap;

    /// Random pushes at both ends and removals anywhere agree with an
    /// ordered map of position → job, once the positions a compaction
    /// moved are written back; holes stay bounded by the jobs held.
    #[test]
    fn the_queue_agrees_with_an_ordered_map() {
        let mut rng = ChaCha20Rng::seed_from_u64(5);
        let mut queue = Queue::default();
        // job → position, as the jobs themselves hold it.
        let mut pos_of: BTreeMap<Uuid, i64> = BTreeMap::new();
        let mut compactions = 0;
        for n in 0..20_000u128 {
            let id = Uuid::from_u128(n);
            let pos = queue.push(id, rng.gen_bool(0.2));
            pos_of.insert(id, pos);
            // Around 500 jobs held, after growing there and before emptying.
            let removals = match (n, pos_of.len()) {
                (19_000.., _) => 3,
                (_, 500..) => rng.gen_range(0..=2),
                _ => rng.gen_range(0..=1),
            };
            for _ in 0..removals {
                if pos_of.is_empty() {
                    break;
                }
                // The head or anywhere.
                let victim = if rng.gen_bool(0.5) {
                    *queue.ids().next().expect("not empty")
                } else {
                    *pos_of
                        .keys()
                        .nth(rng.gen_range(0..pos_of.len()))
                        .expect("in range")
                };
                let pos = pos_of.remove(&victim).expect("queued");
                match queue.remove(pos).expect("there") {
                    // Positions stayed: nothing is at this one now.
                    Removed::Only => assert_eq!(queue.remove(pos), None, "taken once"),
                    Removed::Compacted => {
                        compactions += 1;
                        for (pos, id) in queue.positions() {
                            pos_of.insert(*id, pos);
                        }
                    }
                }
            }
            assert_eq!(queue.len(), pos_of.len());
            assert!(queue.slots.len() <= 2 * queue.len() + HOLE_SLACK + 1);
        }
        assert!(compactions > 0, "the test reached compaction");
        let mut model: Vec<(i64, Uuid)> = pos_of.iter().map(|(id, pos)| (*pos, *id)).collect();
        model.sort_unstable();
        let held: Vec<(i64, Uuid)> = queue.positions().map(|(p, id)| (p, *id)).collect();
        assert_eq!(held, model);
        for (pos, id) in &model {
            assert_eq!(queue.get(*pos), Some(id));
        }
    }

    #[test]
    fn an_emptied_queue_starts_again_at_zero() {
        let mut queue = Queue::default();
        let a = queue.push(Uuid::from_u128(1), false);
        let b = queue.push(Uuid::from_u128(2), true);
        assert_eq!((a, b), (0, -1));
        assert_eq!(queue.remove(b), Some(Removed::Only));
        assert_eq!(queue.remove(a), Some(Removed::Only));
        assert!(queue.is_empty() && queue.slots.is_empty());
        assert_eq!(queue.push(Uuid::from_u128(3), true), 0);
        assert_eq!(queue.get(-1), None);
        assert_eq!(queue.get(1), None);
    }
}
