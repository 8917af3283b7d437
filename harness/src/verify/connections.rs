//! `unfinished_head_kept` and `connections_over_cap`: what decision 0019
//! promises of plain HTTP connections (review hole (c), issue 29 finding
//! 4), on instances that serve with the binary's bounds (`http_bounds`).
//!
//! A connection that never finishes its request head (a slowloris client,
//! or one that sends nothing) is closed within `http_head_timeout_ms` of
//! its admission, plus [`SLACK_MS`]; and no client address ever has more
//! than `http_connections_per_client_max` plain connections open at once.
//! Both are read from the accept loop's own accounting: each connection it
//! admitted, with its client's count then and when it gave its place back
//! (`coordinator::buggify::connections`, a witness recorded only in an
//! armed world). Which connections never finish a head the harness knows:
//! those of the clients of `slow_heads` steps, which send nothing else.

use super::safety::{SafetyKey, Violation};
use coordinator::buggify::ConnectionSpan;
use std::collections::{BTreeMap, BTreeSet};

/// Beyond the head deadline: the accept loop and hyper's timer run in the
/// same instant in the simulation; a little room for a task's turn.
pub const SLACK_MS: i64 = 100;

/// The bounds an instance serves with, by the address it serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Served {
    pub instance: String,
    pub head_timeout_ms: i64,
    pub per_client_max: usize,
}

/// Checks every admitted connection (times in the transcript's ms):
/// `served` maps a server address to its bounds, `slow` holds the
/// rate-limit keys of the clients that never finish a head, `end_ms` is
/// when the run ended.
pub fn check(
    spans: &[ConnectionSpan],
    served: &BTreeMap<String, Served>,
    slow: &BTreeSet<String>,
    end_ms: i64,
) -> Result<(), Violation> {
    for span in spans {
        let Some(bounds) = served.get(&span.server) else {
            continue;
        };
        if span.open_of_client > bounds.per_client_max {
            return Err(Violation {
                invariant: SafetyKey::ConnectionsOverCap,
                message: format!(
                    "client {} had {} plain connections open on {} at +{} ms, over its cap of {}",
                    span.client,
                    span.open_of_client,
                    bounds.instance,
                    span.opened_ms,
                    bounds.per_client_max
                ),
                line: None,
            });
        }
        if !slow.contains(&span.client) {
            continue;
        }
        let deadline_ms = span.opened_ms + bounds.head_timeout_ms + SLACK_MS;
        if span.closed_ms.unwrap_or(end_ms) > deadline_ms {
            let closed = span.closed_ms.map_or("still open at the end".into(), |c| {
                format!("closed at +{c} ms")
            });
            return Err(Violation {
                invariant: SafetyKey::UnfinishedHeadKept,
                message: format!(
                    "a connection of {} to {} opened at +{} ms never finished its head and was {closed}, past the head timeout ({} ms) and {SLACK_MS} ms",
                    span.client, bounds.instance, span.opened_ms, bounds.head_timeout_ms
                ),
                line: None,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(
        client: &str,
        open_of_client: usize,
        opened_ms: i64,
        closed_ms: Option<i64>,
    ) -> ConnectionSpan {
        ConnectionSpan {
            server: "127.1.0.0:80".into(),
            client: client.into(),
            open_of_client,
            opened_ms,
            closed_ms,
        }
    }

    fn judge(spans: &[ConnectionSpan]) -> Option<&'static str> {
        let served = BTreeMap::from([(
            "127.1.0.0:80".to_owned(),
            Served {
                instance: "chain_a".into(),
                head_timeout_ms: 2_000,
                per_client_max: 4,
            },
        )]);
        let slow = BTreeSet::from(["127.2.0.9".to_owned()]);
        check(spans, &served, &slow, 60_000)
            .err()
            .map(|v| v.invariant.as_str())
    }

    /// A slow client's connection must close by the head timeout and the
    /// slack; an honest client's may stay open as long as it likes.
    #[test]
    fn a_slow_head_is_closed_by_its_deadline() {
        let slow = "127.2.0.9";
        assert_eq!(judge(&[span(slow, 1, 1_000, Some(3_000))]), None);
        assert_eq!(judge(&[span(slow, 1, 1_000, Some(3_100))]), None);
        let late = judge(&[span(slow, 1, 1_000, Some(3_101))]);
        assert_eq!(late, Some("unfinished_head_kept"));
        assert_eq!(
            judge(&[span(slow, 1, 1_000, None)]),
            Some("unfinished_head_kept")
        );
        assert_eq!(judge(&[span("127.2.0.1", 1, 1_000, None)]), None);
        // The run ended before its deadline: nothing to judge yet.
        assert_eq!(judge(&[span(slow, 1, 59_000, None)]), None);
    }

    /// The cap counts the connection being admitted.
    #[test]
    fn a_client_over_its_cap_is_seen() {
        assert_eq!(judge(&[span("127.2.0.1", 4, 0, Some(1))]), None);
        let over = judge(&[span("127.2.0.1", 5, 0, Some(1))]);
        assert_eq!(over, Some("connections_over_cap"));
    }

    /// A server the check was not told of (bounds off) is not judged.
    #[test]
    fn an_unbounded_server_is_not_judged() {
        let mut other = span("127.2.0.9", 99, 0, None);
        other.server = "127.1.0.1:80".into();
        assert_eq!(judge(&[other]), None);
    }
}
