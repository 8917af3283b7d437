//! `resource_bound_exceeded` and `honest_starved`, judged from what the
//! coordinator noted in this thread's simulated world
//! (`coordinator::resources`, a witness kept only while the harness
//! watches).
//!
//! - `resource_bound_exceeded`: after every event, every accounted figure
//!   (worker outboxes, held polls, queued, kept and failed job bytes) is
//!   within the bound derived from the instance's limits (the table in
//!   `coordinator/src/resources.rs` and docs/security.md). The shell
//!   checks the figures after each event and notes the first past its
//!   bound; any note fails the run.
//! - `honest_starved`: no commit is refused for capacity (503) while
//!   another client holds more queued bytes than its share
//!   (`queued_bytes_per_client_max`): a client within its share is refused
//!   only when the clients together fill the budget. The core notes each
//!   refusal with the heaviest other client's queued bytes then.
//!
//! Both name the first transcript line at or after the note's time.

use super::safety::{line_ms, SafetyKey, Violation};
use coordinator::resources::{Exceeded, Refusal};

/// Checks the notes (coordinator clock times) against the transcript
/// (whose `+0.000s` is `epoch_ms`).
pub fn check(
    lines: &[String],
    epoch_ms: i64,
    exceeded: &[Exceeded],
    refusals: &[Refusal],
) -> Result<(), Violation> {
    let line_at = |at_ms: i64| lines.iter().position(|l| line_ms(l) >= at_ms - epoch_ms);
    let over = exceeded.first().map(|e| Violation {
        invariant: SafetyKey::ResourceBoundExceeded,
        message: format!(
            "{} at +{} ms: {} was {}, past its bound {}",
            e.network,
            e.at_ms - epoch_ms,
            e.figure.what,
            e.figure.value,
            e.figure.bound
        ),
        line: line_at(e.at_ms),
    });
    let starved = refusals.iter().find_map(|r| {
        let (other, bytes) = r.heaviest_other.as_ref()?;
        (*bytes > r.share_bytes).then(|| Violation {
            invariant: SafetyKey::HonestStarved,
            message: format!(
                "at +{} ms a commit of client {} was refused for capacity while client {other} held {bytes} queued bytes, over its share of {}",
                r.at_ms - epoch_ms,
                r.owner,
                r.share_bytes
            ),
            line: line_at(r.at_ms),
        })
    });
    match (over, starved) {
        (Some(a), Some(b)) => Err(if b.line < a.line { b } else { a }),
        (Some(v), None) | (None, Some(v)) => Err(v),
        (None, None) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use coordinator::resources::Figure;

    fn refusal(heaviest: Option<usize>) -> Refusal {
        Refusal {
            at_ms: 1_500,
            owner: "10.0.0.1".into(),
            heaviest_other: heaviest.map(|b| ("flooder".into(), b)),
            share_bytes: 1_000,
        }
    }

    #[test]
    fn a_refusal_while_another_client_is_over_its_share_is_starvation() {
        let lines = vec!["[+1.000s] a".to_owned(), "[+2.000s] b".to_owned()];
        let judged = |r: Refusal| check(&lines, 0, &[], &[r]);
        assert!(judged(refusal(None)).is_ok());
        assert!(judged(refusal(Some(1_000))).is_ok(), "at its share");
        let v = judged(refusal(Some(1_001))).unwrap_err();
        assert_eq!(v.invariant, SafetyKey::HonestStarved);
        assert_eq!(v.line, Some(1));
    }

    #[test]
    fn any_figure_past_its_bound_fails() {
        let exceeded = Exceeded {
            network: "eip155:84532".into(),
            at_ms: 500,
            figure: Figure {
                what: "outbox of worker session 1 (bytes)".into(),
                value: 11,
                bound: 10,
            },
        };
        let lines = vec!["[+1.000s] a".to_owned()];
        let v = check(&lines, 0, &[exceeded], &[]).unwrap_err();
        assert_eq!(v.invariant, SafetyKey::ResourceBoundExceeded);
        assert!(v.message.contains("past its bound 10"), "{}", v.message);
        assert!(check(&lines, 0, &[], &[]).is_ok());
    }
}
