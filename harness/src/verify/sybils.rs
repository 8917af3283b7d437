//! `sessions_over_cap`: no client address holds more established worker
//! sessions at once than `limits.worker_sessions_per_client_max` (decision
//! 0019: Sybil sessions cost addresses). Read from the coordinator's own
//! record of each session's span (`coordinator::buggify::sessions`, a
//! witness recorded only in an armed world), grouped by the address the
//! harness dialled them from: workers that name a `client` share it.
//!
//! A worker runs one session at a time, so a session of a key ends at the
//! latest when the next session of that key opens, and at the latest at its
//! instance's first crash or restart at or after its opening (the same
//! millisecond counts: the crash's line follows the kill, and workers
//! reconnect only after a backoff). A crashed process holds nothing, but
//! its session tasks may run on until their connections fail, and a crash
//! may leave a span open for good: seed 1855, where a Sybil registered
//! just before a crash, whose welcome was stalled, closed its span 167 ms
//! later while another Sybil held the new process's only place. Two spans
//! overlap when one opened before the other closed; a close and an open in
//! the same millisecond count as closed first.
//!
//! The same spans judge the address's worker slots (sabotage
//! `worker-slot-cap-ignores-new-session`): the slots of its sessions open
//! at once, each the slots its worker's hello declares (the harness's own
//! worker config), never exceed `limits.worker_slots_per_client_max`.

use super::safety::{SafetyKey, Violation};
use coordinator::buggify::SessionSpan;
use std::collections::BTreeMap;

/// A session's span, its end capped by its key's next session.
type Span = (i64, Option<i64>);

/// A worker that dials from a named client address.
pub struct Dialled<'a> {
    pub public_key: &'a str,
    /// The client's name (its address).
    pub client: &'a str,
    pub instance: &'a str,
    /// The slots its hello declares.
    pub slots: u32,
}

/// An instance's per-address caps: established worker sessions, and
/// their slots together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    pub sessions: usize,
    pub slots: u32,
}

/// Checks the sessions of `workers` (keys unique among all workers) against
/// each instance's cap (`caps`), times on the transcript's clock (`lines`
/// give the crashes).
pub fn check(
    lines: &[String],
    sessions: &[SessionSpan],
    workers: &[Dialled<'_>],
    caps: &BTreeMap<String, Caps>,
) -> Result<(), Violation> {
    let mut groups: BTreeMap<(&str, &str), Vec<(Span, u32)>> = BTreeMap::new();
    for (i, s) in sessions.iter().enumerate() {
        let Some(w) = (workers.iter()).find(|w| w.public_key.eq_ignore_ascii_case(&s.pubkey))
        else {
            continue;
        };
        let next_open = (sessions[i + 1..].iter())
            .find(|n| n.pubkey == s.pubkey)
            .map(|n| n.opened_ms);
        let crashed = crashes(lines, w.instance).find(|&c| c >= s.opened_ms);
        let closed = [s.closed_ms, next_open, crashed]
            .into_iter()
            .flatten()
            .min();
        let spans = groups.entry((w.client, w.instance)).or_default();
        spans.push(((s.opened_ms, closed), w.slots));
    }
    for ((client, instance), spans) in &groups {
        let Some(&cap) = caps.get(*instance) else {
            continue;
        };
        for &((at_ms, _), _) in spans {
            let open: Vec<u32> = (spans.iter())
                .filter(|((o, c), _)| *o <= at_ms && c.is_none_or(|c| c > at_ms))
                .map(|(_, slots)| *slots)
                .collect();
            let slots: u64 = open.iter().map(|s| u64::from(*s)).sum();
            let over = if open.len() > cap.sessions {
                format!(
                    "{} worker sessions on {instance} at +{at_ms} ms, over its cap of {}",
                    open.len(),
                    cap.sessions
                )
            } else if slots > u64::from(cap.slots) {
                format!(
                    "{slots} worker slots in {} sessions on {instance} at +{at_ms} ms, over its cap of {} slots",
                    open.len(),
                    cap.slots
                )
            } else {
                continue;
            };
            return Err(Violation {
                invariant: SafetyKey::SessionsOverCap,
                message: format!("client {client} held {over}"),
                line: None,
            });
        }
    }
    Ok(())
}

/// When `instance` crashed or restarted: its `restart` and
/// `graceful_restart` steps, an armed write's crash, and any `reboot`
/// fault's crash (its line does not name the instance).
fn crashes<'a>(lines: &'a [String], instance: &'a str) -> impl Iterator<Item = i64> + 'a {
    let restart = format!("harness instance {instance} restart");
    let graceful = format!("harness instance {instance} graceful_restart");
    let crashed = format!("harness {instance} crashed");
    lines.iter().filter_map(move |line| {
        let rest = line.split_once("] ").map_or("", |(_, rest)| rest);
        let hit = rest == restart
            || rest == graceful
            || rest.starts_with(&crashed)
            || (rest.starts_with("harness fault ") && rest.ends_with(": crash"));
        hit.then(|| super::safety::line_ms(line))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use coordinator::buggify::SessionEnd;

    fn span(pubkey: &str, opened_ms: i64, closed_ms: Option<i64>) -> SessionSpan {
        SessionSpan {
            pubkey: pubkey.into(),
            session: 1,
            opened_ms,
            closed_ms,
            end: closed_ms.map(|_| SessionEnd::ConnectionClosed),
        }
    }

    fn judge(sessions: &[SessionSpan]) -> Option<&'static str> {
        judge_slots(sessions, 1, 1_024)
    }

    /// With workers of `slots` each, under a cap of `slots_max` slots.
    fn judge_slots(sessions: &[SessionSpan], slots: u32, slots_max: u32) -> Option<&'static str> {
        let workers = ["a", "b", "c"].map(|k| Dialled {
            public_key: k,
            client: "sybil",
            instance: "chain_a",
            slots,
        });
        let cap = Caps {
            sessions: 2,
            slots: slots_max,
        };
        let caps = BTreeMap::from([("chain_a".to_owned(), cap)]);
        let lines =
            ["[+0.100s] harness chain_a crashed at its armed store write; restarting".to_owned()];
        check(&lines, sessions, &workers, &caps)
            .err()
            .map(|v| v.invariant.as_str())
    }

    /// Two sessions of 3 slots each break a cap of 5 slots, one session
    /// that opens as the other closes does not; 6 slots fit a cap of 6.
    #[test]
    fn slots_of_one_address_over_its_cap_are_seen() {
        let two = [span("a", 0, None), span("b", 5, None)];
        assert_eq!(judge_slots(&two, 3, 5), Some("sessions_over_cap"));
        assert_eq!(judge_slots(&two, 3, 6), None);
        let turn = [span("a", 0, Some(5)), span("b", 5, None)];
        assert_eq!(judge_slots(&turn, 3, 5), None);
    }

    /// Three sessions of one address at once break a cap of two; a third
    /// that opens as another closes does not.
    #[test]
    fn sessions_of_one_address_over_its_cap_are_seen() {
        let three = [span("a", 0, None), span("b", 5, None), span("c", 9, None)];
        assert_eq!(judge(&three), Some("sessions_over_cap"));
        let turn = [
            span("a", 0, Some(9)),
            span("b", 5, None),
            span("c", 9, None),
        ];
        assert_eq!(judge(&turn), None);
        let other = [span("a", 0, None), span("b", 5, None), span("x", 9, None)];
        assert_eq!(judge(&other), None, "x dials from its own address");
    }

    /// A span a crash left open ends when its key's next session opens,
    /// or at its instance's crash (at 100 ms here) if that comes first.
    #[test]
    fn a_keys_next_session_ends_its_last() {
        let again = [span("a", 0, None), span("b", 5, None), span("a", 9, None)];
        assert_eq!(judge(&again), None);
        let refused = [span("a", 0, None), span("b", 1, None), span("c", 200, None)];
        assert_eq!(judge(&refused), None, "a and b died at the crash");
        let linger = [
            span("a", 0, Some(150)),
            span("b", 120, None),
            span("c", 130, None),
        ];
        assert_eq!(judge(&linger), None, "a's task ran on past the crash");
        let after = [
            span("a", 150, None),
            span("b", 160, None),
            span("c", 170, None),
        ];
        assert_eq!(judge(&after), Some("sessions_over_cap"), "opened after it");
    }
}
