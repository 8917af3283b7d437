//! `sessions_over_cap`: no client address holds more established worker
//! sessions at once than `limits.worker_sessions_per_client_max` (decision
//! 0019: Sybil sessions cost addresses). Read from the coordinator's own
//! record of each session's span (`coordinator::buggify::sessions`, a
//! witness recorded only in an armed world), grouped by the address the
//! harness dialled them from: workers that name a `client` share it.
//!
//! A worker runs one session at a time, so a session of a key ends at the
//! latest when the next session of that key opens (a crash's span may be
//! left open). Two spans overlap when one opened before the other closed;
//! a close and an open in the same millisecond count as closed first.

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
}

/// Checks the sessions of `workers` (keys unique among all workers) against
/// each instance's cap (`caps`).
pub fn check(
    sessions: &[SessionSpan],
    workers: &[Dialled<'_>],
    caps: &BTreeMap<String, usize>,
) -> Result<(), Violation> {
    let mut groups: BTreeMap<(&str, &str), Vec<Span>> = BTreeMap::new();
    for (i, s) in sessions.iter().enumerate() {
        let Some(w) = (workers.iter()).find(|w| w.public_key.eq_ignore_ascii_case(&s.pubkey))
        else {
            continue;
        };
        let next_open = (sessions[i + 1..].iter())
            .find(|n| n.pubkey == s.pubkey)
            .map(|n| n.opened_ms);
        let closed = match (s.closed_ms, next_open) {
            (Some(c), Some(n)) => Some(c.min(n)),
            (c, n) => c.or(n),
        };
        let spans = groups.entry((w.client, w.instance)).or_default();
        spans.push((s.opened_ms, closed));
    }
    for ((client, instance), spans) in &groups {
        let Some(&cap) = caps.get(*instance) else {
            continue;
        };
        for &(at_ms, _) in spans {
            let open = (spans.iter())
                .filter(|(o, c)| *o <= at_ms && c.is_none_or(|c| c > at_ms))
                .count();
            if open > cap {
                return Err(Violation {
                    invariant: SafetyKey::SessionsOverCap,
                    message: format!(
                        "client {client} held {open} worker sessions on {instance} at +{at_ms} ms, over its cap of {cap}"
                    ),
                    line: None,
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(pubkey: &str, opened_ms: i64, closed_ms: Option<i64>) -> SessionSpan {
        SessionSpan {
            pubkey: pubkey.into(),
            session: 1,
            opened_ms,
            closed_ms,
        }
    }

    fn judge(sessions: &[SessionSpan]) -> Option<&'static str> {
        let workers = ["a", "b", "c"].map(|k| Dialled {
            public_key: k,
            client: "sybil",
            instance: "chain_a",
        });
        let caps = BTreeMap::from([("chain_a".to_owned(), 2)]);
        check(sessions, &workers, &caps)
            .err()
            .map(|v| v.invariant.as_str())
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

    /// A span a crash left open ends when its key's next session opens.
    #[test]
    fn a_keys_next_session_ends_its_last() {
        let again = [span("a", 0, None), span("b", 5, None), span("a", 9, None)];
        assert_eq!(judge(&again), None);
    }
}
