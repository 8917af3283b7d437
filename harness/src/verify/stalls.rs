//! `stalled_session_kept`: a worker that stops reading is closed within its
//! heartbeat timeout (decision 0019; issue 29, finding 3). Before the fix a
//! send to a worker that read nothing waited forever once its socket's
//! buffers were full: the heartbeat timer, checked between frames, never
//! fired, the session stayed, and its outbox grew without bound.
//!
//! The harness knows when a worker stopped reading: a `worker W freeze`
//! step, or a `hold` fault between it and its instance (bytes both ways
//! held: nothing of its arrives after). The coordinator notes when each
//! session began and ended (`coordinator::buggify::session_opened`, a
//! witness recorded only in an armed world, and ended by a crash too). A
//! session of that worker open when it froze must end within the heartbeat
//! timeout plus [`SLACK_MS`] of the freeze, if the freeze lasted that long.
//!
//! The converse, `reading_session_closed`: a worker that reads every frame
//! is never closed for its outbox (held-out set 6, patch 6: an outbox whose
//! count only grew closed every healthy worker once it had been sent its
//! bound in all). Its outbox drains as fast as frames are queued, so
//! only a send that blocks can fill it; a session the coordinator notes as
//! ended by its closed outbox (`SessionEnd::OutboxClosed`) is judged when
//! its worker never froze and no link fault (hold, partition, delay) ever
//! named it.

use super::safety::{SafetyKey, Violation};
use coordinator::buggify::{SessionEnd, SessionSpan};
use std::collections::{BTreeMap, BTreeSet};

/// Beyond the heartbeat timeout: a frame written just before the freeze
/// still arrives (a link delay of up to 500 ms), and fault points delay a
/// send (up to 200 ms) or a timer (up to 50 ms).
pub const SLACK_MS: i64 = 1_000;

/// A simulated worker, as the check needs it.
pub struct Frozen<'a> {
    pub public_key: &'a str,
    /// The heartbeat timeout of its instance (ms).
    pub heartbeat_timeout_ms: i64,
    /// Whether it is judged: not where another worker runs with the same
    /// key (`key_of`: their sessions cannot be told apart), nor on an
    /// instance of several nodes (a fault holds the link to the node the
    /// worker first dials, which may not be the one it is on).
    pub judged: bool,
}

/// A time a worker stopped reading, and when it read again (`None`: not
/// before the end of the run), in transcript time.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Freeze {
    worker: String,
    line: usize,
    from_ms: i64,
    until_ms: Option<i64>,
}

/// Checks every freeze in `lines` against the sessions (times in the
/// transcript's ms).
pub fn check(
    lines: &[String],
    sessions: &[SessionSpan],
    workers: &BTreeMap<String, Frozen<'_>>,
) -> Result<(), Violation> {
    let end_ms = lines.last().map_or(0, |l| line_ms(l));
    for f in freezes(lines) {
        let Some(w) = workers.get(&f.worker).filter(|w| w.judged) else {
            continue;
        };
        let deadline_ms = f.from_ms + w.heartbeat_timeout_ms + SLACK_MS;
        if f.until_ms.unwrap_or(end_ms) <= deadline_ms {
            continue;
        }
        let kept = sessions.iter().find(|s| {
            s.pubkey.eq_ignore_ascii_case(w.public_key)
                && s.opened_ms <= f.from_ms
                && s.closed_ms.is_none_or(|c| c > deadline_ms)
        });
        if let Some(s) = kept {
            let closed = s
                .closed_ms
                .map_or("not closed".into(), |c| format!("closed at +{c} ms"));
            return Err(Violation {
                invariant: SafetyKey::StalledSessionKept,
                message: format!(
                    "worker {} stopped reading at +{} ms; its session {} was {closed}, past the heartbeat timeout ({} ms) and {SLACK_MS} ms",
                    f.worker, f.from_ms, s.session, w.heartbeat_timeout_ms
                ),
                line: Some(f.line),
            });
        }
    }
    Ok(())
}

/// Checks that no session of a worker that always read ended by its closed
/// outbox (times in the transcript's ms).
pub fn check_reading(
    lines: &[String],
    sessions: &[SessionSpan],
    workers: &BTreeMap<String, Frozen<'_>>,
) -> Result<(), Violation> {
    let stopped = ever_stopped(lines);
    let reading = (workers.iter()).filter(|(name, w)| w.judged && !stopped.contains(name.as_str()));
    for (name, w) in reading {
        let closed = sessions.iter().find(|s| {
            s.end == Some(SessionEnd::OutboxClosed) && s.pubkey.eq_ignore_ascii_case(w.public_key)
        });
        if let Some(s) = closed {
            let at_ms = s.closed_ms.unwrap_or(0);
            return Err(Violation {
                invariant: SafetyKey::ReadingSessionClosed,
                message: format!(
                    "worker {name} read every frame, but its session {} was closed for its outbox at +{at_ms} ms",
                    s.session
                ),
                line: lines.iter().position(|l| line_ms(l) >= at_ms),
            });
        }
    }
    Ok(())
}

/// The workers that froze, or that a link fault named, at any time.
fn ever_stopped(lines: &[String]) -> BTreeSet<&str> {
    let mut stopped = BTreeSet::new();
    for line in lines {
        let Some(text) = line.split_once("] harness ").map(|(_, t)| t) else {
            continue;
        };
        match text.split(' ').collect::<Vec<_>>()[..] {
            ["worker", w, "freeze"] => stopped.insert(w),
            ["fault", _, _, "between", w, "and", _] => stopped.insert(w),
            _ => continue,
        };
    }
    stopped
}

/// Every freeze: `harness worker W freeze` to `harness worker W thaw`, and
/// `harness fault NAME: hold between W and I` to its repair.
fn freezes(lines: &[String]) -> Vec<Freeze> {
    let mut open: BTreeMap<String, usize> = BTreeMap::new();
    let mut all: Vec<Freeze> = Vec::new();
    for (n, line) in lines.iter().enumerate() {
        let Some(text) = line.split_once("] harness ").map(|(_, t)| t) else {
            continue;
        };
        let (key, worker, starts) = match text.split(' ').collect::<Vec<_>>()[..] {
            ["worker", w, "freeze"] => (format!("freeze {w}"), w, true),
            ["worker", w, "thaw"] => (format!("freeze {w}"), w, false),
            ["fault", name, "hold", "between", w, "and", i] => (format!("{name}{w}{i}"), w, true),
            ["fault", name, "repaired", "between", w, "and", i] => {
                (format!("{name}{w}{i}"), w, false)
            }
            _ => continue,
        };
        let at_ms = line_ms(line);
        match (starts, open.get(&key)) {
            (true, None) => {
                open.insert(key, all.len());
                all.push(Freeze {
                    worker: worker.to_owned(),
                    line: n,
                    from_ms: at_ms,
                    until_ms: None,
                });
            }
            (false, Some(&i)) => {
                all[i].until_ms = Some(at_ms);
                open.remove(&key);
            }
            _ => {}
        }
    }
    all
}

/// A line's time, in ms after `+0.000s`.
fn line_ms(line: &str) -> i64 {
    super::safety::line_ms(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "ab12";

    fn judge(lines: &[&str], closed_ms: Option<i64>) -> Option<&'static str> {
        let end = closed_ms.map(|_| SessionEnd::HeartbeatTimeout);
        judge_with(check, lines, closed_ms, end)
    }

    /// `check` or `check_reading`.
    type Check =
        fn(&[String], &[SessionSpan], &BTreeMap<String, Frozen<'_>>) -> Result<(), Violation>;

    fn judge_with(
        check: Check,
        lines: &[&str],
        closed_ms: Option<i64>,
        end: Option<SessionEnd>,
    ) -> Option<&'static str> {
        let lines: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
        let sessions = [SessionSpan {
            pubkey: KEY.into(),
            session: 1,
            opened_ms: 100,
            closed_ms,
            end,
        }];
        let workers = BTreeMap::from([(
            "w1".to_owned(),
            Frozen {
                public_key: KEY,
                heartbeat_timeout_ms: 2_000,
                judged: true,
            },
        )]);
        check(&lines, &sessions, &workers)
            .err()
            .map(|v| v.invariant.as_str())
    }

    /// A worker that never stopped reading is never closed for its outbox;
    /// one that froze, or that a link fault held, may be, and other ends
    /// are not judged here.
    #[test]
    fn a_reading_workers_session_is_never_closed_for_its_outbox() {
        let reading = ["[+1.000s] harness worker w2 freeze", "[+5.000s] note end"];
        let outbox = Some(SessionEnd::OutboxClosed);
        assert_eq!(
            judge_with(check_reading, &reading, Some(2_000), outbox),
            Some("reading_session_closed")
        );
        for end in [
            SessionEnd::HeartbeatTimeout,
            SessionEnd::ConnectionClosed,
            SessionEnd::ClosedByCoordinator,
        ] {
            assert_eq!(
                judge_with(check_reading, &reading, Some(2_000), Some(end)),
                None
            );
        }
        assert_eq!(judge_with(check_reading, &reading, None, None), None);
        let frozen = ["[+1.000s] harness worker w1 freeze", "[+5.000s] note end"];
        assert_eq!(
            judge_with(check_reading, &frozen, Some(2_000), outbox),
            None
        );
        let held = ["[+1.000s] harness fault link0: delay between w1 and chain_a"];
        assert_eq!(judge_with(check_reading, &held, Some(2_000), outbox), None);
    }

    /// Frozen at 1 s for 9 s with a 2 s heartbeat timeout: the session
    /// must end by 4 s (timeout and slack).
    #[test]
    fn a_frozen_workers_session_ends_within_its_heartbeat_timeout() {
        let frozen = [
            "[+1.000s] harness worker w1 freeze",
            "[+10.000s] harness worker w1 thaw",
        ];
        assert_eq!(judge(&frozen, Some(3_000)), None);
        assert_eq!(judge(&frozen, Some(4_000)), None);
        assert_eq!(judge(&frozen, Some(4_001)), Some("stalled_session_kept"));
        assert_eq!(judge(&frozen, None), Some("stalled_session_kept"));
        let held = [
            "[+1.000s] harness fault link0: hold between w1 and chain_a",
            "[+10.000s] harness fault link0: repaired between w1 and chain_a",
        ];
        assert_eq!(judge(&held, Some(9_000)), Some("stalled_session_kept"));
    }

    /// A freeze shorter than the timeout and slack judges nothing, and a
    /// session that ended before the freeze is not the frozen one.
    #[test]
    fn a_short_freeze_or_an_earlier_session_is_not_judged() {
        let short = [
            "[+1.000s] harness worker w1 freeze",
            "[+3.900s] harness worker w1 thaw",
            "[+60.000s] note end",
        ];
        assert_eq!(judge(&short, None), None);
        let later = ["[+1.000s] harness worker w1 freeze", "[+60.000s] note end"];
        assert_eq!(judge(&later, Some(500)), None);
    }
}
