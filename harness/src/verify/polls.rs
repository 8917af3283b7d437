//! `poll_not_woken`: a held poll (`GET /v1/jobs/{id}?wait_ms=N`) answers
//! within one scheduling step of any change of its job's status, and at its
//! deadline otherwise (docs: scenarios/README.md, "Safety").
//!
//! A `poll` step with `hold_ms` records its answer in the held-poll log
//! (`world::held_polls`). A terminal job is answered at once, so a poll
//! answered a finished job (completed or failed) saw it unfinished; had the
//! change woken it, it would have answered then, before its deadline. So an
//! answer of a finished job after the whole wait (held `>= N` ms) is a poll
//! the change did not wake. And an answer of any job held longer than its
//! whole wait (`> N` ms, by the harness's clock from the request to the
//! answer, which the simulated network delivers in no time) came after its
//! deadline: a poll is answered at its deadline to the millisecond (the
//! `poll_deadlines` kind holds polls of jobs that cannot change, so they
//! are answered exactly then). Both are judged only where the run's fault
//! points are off: a held poll shows its job only once the job's state is
//! durable, and BUGGIFY's slow flushes and writer yields stretch that wait
//! by design (swarm seed 4396: 5 ms past a 503 ms wait). The stretch hides
//! a wake too: a poll woken by its job's end and one that slept to its
//! deadline both read the ended job and then wait for the same flush, so
//! their answers are alike (swarm seed 8887: a job failed by the recovery
//! of a BUGGIFY crash, in the instant its polls were sent, shown 26 ms into
//! a 3 ms wait, after a slow flush).
//! Judged on one-node instances: a poll of a job
//! another node holds is woken by the remote watch, which reads the shared
//! store at intervals.

use super::safety::{SafetyKey, Violation};
use crate::world::held_polls::HeldAnswer;

/// When the instance's completed jobs ended (ms since the Unix epoch, by
/// id; the store keeps no end time of a failed job) and the transcript's
/// `+0.000s` on that clock: a poll of a job that had already ended when it
/// was sent did not wait for a change, so a late answer of it is a
/// deadline matter, not a missed wake (polls sent in the instant a crash
/// restarted the instance are answered after its recovery).
#[derive(Debug, Default)]
pub struct JobEnds {
    pub epoch_ms: i64,
    pub ended_at_ms: std::collections::BTreeMap<String, i64>,
}

impl JobEnds {
    fn ended_before(&self, id: &str, sent_ms: i64) -> bool {
        (self.ended_at_ms.get(id)).is_some_and(|end| *end < self.epoch_ms + sent_ms)
    }
}

/// Checks the held polls of `instance` (its answers, in sending order).
/// Call it only for runs with exact timers (no fault points): see the
/// module's comment.
pub fn check(answers: &[HeldAnswer], instance: &str, ends: &JobEnds) -> Result<(), Violation> {
    for held in answers.iter().filter(|a| a.instance == instance) {
        let Some((held_ms, body)) = &held.answer else {
            continue;
        };
        let status = body["status"].as_str().unwrap_or_default();
        let id = body["id"].as_str().unwrap_or_default();
        if *held_ms > held.wait_ms {
            return Err(Violation {
                invariant: SafetyKey::PollNotWoken,
                message: format!(
                    "{instance}: a poll of job {id} with a wait of {} ms was answered {status} after {held_ms} ms: {} ms past its deadline",
                    held.wait_ms,
                    held_ms - held.wait_ms
                ),
                line: Some(held.line),
            });
        }
        let finished = matches!(status, "completed" | "failed");
        if *held_ms >= held.wait_ms && finished && !ends.ended_before(id, held.sent_ms) {
            return Err(Violation {
                invariant: SafetyKey::PollNotWoken,
                message: format!(
                    "{instance}: a poll of job {id} held {held_ms} ms of its {} ms \
                     was answered {status}: the job ended while it was held and did not wake it",
                    held.wait_ms
                ),
                line: Some(held.line),
            });
        }
    }
    Ok(())
}

/// Held polls of this many other clients' (the router's, a workload's) may
/// be held beside the logged ones; the early-answer check judges only
/// where the logged ones and these cannot reach the held-poll bounds.
pub const UNLOGGED_HELD_MAX: usize = 1_000;

/// When a worker received an `assign` of a job: the earliest and latest
/// time it may have (ms after `+0.000s`; a frame of a worker whose frames
/// are not traced is known only between the lines around it).
pub type AssignWindows = std::collections::BTreeMap<String, Vec<(i64, i64)>>;

/// The `assign` windows of every job in `frames`, by job id.
pub fn assign_windows(
    frames: &[crate::spec::frames::FrameRecord],
    lines: &[String],
) -> AssignWindows {
    let ms = |n: Option<usize>| {
        n.and_then(|n| lines.get(n))
            .map(|l| super::safety::line_ms(l))
    };
    let mut windows = AssignWindows::new();
    for record in frames {
        let frame = &record.frame;
        if record.direction != crate::spec::frames::Direction::Received
            || frame["type"].as_str() != Some("assign")
        {
            continue;
        }
        let Some(id) = frame["job_id"].as_str() else {
            continue;
        };
        let from_ms = ms(record.line.checked_sub(1)).unwrap_or(i64::MIN);
        let to_ms = ms(Some(record.line)).unwrap_or(i64::MAX);
        windows
            .entry(id.to_owned())
            .or_default()
            .push((from_ms, to_ms));
    }
    windows
}

/// `poll_not_woken`, its other side: a held poll is not answered before
/// its deadline unless its job's status changed (decision 0004: held
/// "until the job's status changes, N ms pass, or the coordinator
/// stops"). A job's status is known from outside where an earlier answer
/// showed it `running` at `t` and no worker received an `assign` of it
/// from `t` to the poll's answer: a job that left `running` (requeued,
/// or for good) shows `running` again only after another assign, which a
/// worker receives before it accepts or answers. So a poll sent after
/// `t` saw `running`, its job stayed `running` or left it for a status
/// not shown since, and a poll answered `running` before its deadline was
/// answered without the change it waits for (a result awaiting
/// settlement, or its settlement marked as sent, changes the job, not its
/// status). Judged on instances that no stop, crash or restart reaches (a
/// stopping coordinator answers every held poll) and where the held polls
/// cannot reach the bounds (a poll evicted for another client's, or one
/// past its client's bound, is answered at once): see
/// [`UNLOGGED_HELD_MAX`].
///
/// On a several-node instance (`several_nodes`) a poll sent to a node
/// that does not hold its job reads the shared store and is woken by the
/// remote watch when the store shows another status than it read; a
/// status is shown only once the store has it, so an earlier `running`
/// answer means the store showed `running` then. There, a job is judged
/// only if exactly one `assign` of it was received in the whole run: an
/// owner's later `assign` may precede the store's record of the status
/// before it, so the window above is not enough. Such a job left
/// `running` at most once and never came back to it, so a woken poll that
/// reads it again shows another status (sabotage
/// `remote-long-poll-answers-stale-status`).
pub fn check_early(
    answers: &[HeldAnswer],
    instance: &str,
    assigns: &AssignWindows,
    (total_max, client_max): (usize, usize),
    several_nodes: bool,
) -> Result<(), Violation> {
    let ours: Vec<&HeldAnswer> = answers.iter().filter(|a| a.instance == instance).collect();
    if ours.len() >= client_max || ours.len() + UNLOGGED_HELD_MAX >= total_max {
        return Ok(());
    }
    for held in &ours {
        let Some((answered_ms, id)) = running_at(held) else {
            continue;
        };
        let held_ms = answered_ms - held.sent_ms;
        if held_ms >= i64::try_from(held.wait_ms).unwrap_or(i64::MAX) {
            continue;
        }
        // The latest earlier answer that showed the job running.
        let shown_ms = (ours.iter())
            .filter(|e| e.line != held.line)
            .filter_map(|e| running_at(e))
            .filter(|(at_ms, of)| *of == id && *at_ms <= held.sent_ms)
            .map(|(at_ms, _)| at_ms)
            .max();
        let Some(shown_ms) = shown_ms else {
            continue;
        };
        let windows = assigns.get(id).map_or(&[][..], Vec::as_slice);
        let reassigned =
            (windows.iter()).any(|(from_ms, to_ms)| *to_ms >= shown_ms && *from_ms <= answered_ms);
        if reassigned || (several_nodes && windows.len() != 1) {
            continue;
        }
        return Err(Violation {
            invariant: SafetyKey::PollNotWoken,
            message: format!(
                "{instance}: a poll of job {id} with a wait of {} ms was answered running after {held_ms} ms, \
                 before its deadline, though the job was running since +{shown_ms} ms (an earlier answer) \
                 and no worker was assigned it again: its status never changed while it was held",
                held.wait_ms
            ),
            line: Some(held.line),
        });
    }
    Ok(())
}

/// `poll_not_woken`, for a change that is not an end: a held poll
/// answered at its deadline though its job was first assigned while it was
/// held (a worker received the job's first `assign` strictly after the
/// poll was sent and strictly before its answer) was not woken by that
/// change of status, pending to assigned (decision 0004). [`check`] sees a
/// missed wake only where the job ended while held, so a coordinator that
/// woke polls only for a job's end (sabotage
/// `held-polls-woken-only-when-their-job-ends`) passed it. Judged where
/// [`check_early`] is, on one-node instances: there the status changes in
/// the instant the `assign` is sent, and a woken poll is answered then.
pub fn check_late(
    answers: &[HeldAnswer],
    instance: &str,
    assigns: &AssignWindows,
) -> Result<(), Violation> {
    let ours = answers.iter().filter(|a| a.instance == instance);
    for held in ours.filter(|a| a.status == 200) {
        let Some((held_ms, body)) = &held.answer else {
            continue;
        };
        if *held_ms < held.wait_ms {
            continue;
        }
        let Some(id) = body["id"].as_str() else {
            continue;
        };
        let answered_ms = held.sent_ms + i64::try_from(*held_ms).unwrap_or(i64::MAX / 2);
        let Some(&(from_ms, to_ms)) = assigns.get(id).and_then(|w| w.first()) else {
            continue;
        };
        if from_ms > held.sent_ms && to_ms < answered_ms {
            return Err(Violation {
                invariant: SafetyKey::PollNotWoken,
                message: format!(
                    "{instance}: a poll of job {id} with a wait of {} ms was answered {} at its deadline, \
                     though a worker received the job's first assign at +{to_ms} ms, while it was held: \
                     the change from pending did not wake it",
                    held.wait_ms, body["status"]
                ),
                line: Some(held.line),
            });
        }
    }
    Ok(())
}

/// When a held poll was answered showing its job `running` (ms after
/// `+0.000s`), and the job's id.
fn running_at(held: &HeldAnswer) -> Option<(i64, &str)> {
    let (held_ms, body) = held.answer.as_ref()?;
    let fine = held.status == 200 && body["status"].as_str() == Some("running");
    let at_ms = held.sent_ms + i64::try_from(*held_ms).ok()?;
    fine.then_some((at_ms, body["id"].as_str()?))
}

/// Whether any stop, crash or restart reached `instance` in the run (its
/// controls, its armed crash, or a reboot fault, whose line does not name
/// its instance).
pub fn disturbed(lines: &[String], instance: &str) -> bool {
    let controlled = format!("harness instance {instance} ");
    let crashed = format!("{instance} crashed");
    lines.iter().any(|line| {
        let rest = line.split_once("] ").map_or("", |(_, rest)| rest);
        rest.starts_with(&controlled)
            || rest.starts_with(&crashed)
            || (rest.starts_with("harness fault ") && rest.ends_with(": crash"))
    })
}

/// `held_polls_over_cap`: the held-poll bounds hold as a client sees
/// them (docs/security.md, "Accounted memory"; the `poll_hoards` kind).
/// A poll beyond the bounds is answered at once, never refused: every
/// answer of a held poll is a 200 with the job, or the spec's 404 (an
/// unknown job) with its JSON error. And at no instant are more polls held
/// than `held_polls_max`, nor more of one client than
/// `held_polls_per_client_max`: a poll is held from its sending until its
/// answer, both on the harness's clock (the simulated network delivers in
/// no time). This judges what clients see, apart from the shell's own
/// accounting (which `resource_bound_exceeded` judges), so a cap counted
/// wrong in both places is still seen. Judged only where the run's fault
/// points are off: a failing store flush answers a poll 500 by design, and
/// a slow one delays an evicted poll's answer past its successor's arrival.
pub fn check_caps(
    answers: &[HeldAnswer],
    instance: &str,
    (total_max, client_max): (usize, usize),
) -> Result<(), Violation> {
    let ours: Vec<&HeldAnswer> = answers.iter().filter(|a| a.instance == instance).collect();
    if let Some(v) = ours.iter().find_map(|held| misanswered(held, instance)) {
        return Err(v);
    }
    // Each held interval's start (+1) and end (-1); at one instant the ends
    // go first (an evicted poll is answered as its successor is held).
    let mut edges: Vec<(i64, i8, &HeldAnswer)> = Vec::new();
    for held in &ours {
        let Some((held_ms, _)) = &held.answer else {
            continue;
        };
        let held_ms = i64::try_from(*held_ms).unwrap_or(i64::MAX / 2);
        if held_ms > 0 {
            edges.push((held.sent_ms, 1, held));
            edges.push((held.sent_ms + held_ms, -1, held));
        }
    }
    edges.sort_by_key(|(at, delta, held)| (*at, *delta, held.line));
    let mut total = 0usize;
    let mut per_client: std::collections::BTreeMap<&str, usize> = Default::default();
    for (at, delta, held) in edges {
        let client = held.client.as_deref().unwrap_or("(scenario client)");
        let count = per_client.entry(client).or_default();
        if delta < 0 {
            total -= 1;
            *count -= 1;
            continue;
        }
        total += 1;
        *count += 1;
        let over = match (*count > client_max, total > total_max) {
            (true, _) => format!(
                "{count} polls of client {client} held at once, over its cap of {client_max}"
            ),
            (_, true) => format!("{total} polls held at once, over the cap of {total_max}"),
            _ => continue,
        };
        return Err(Violation {
            invariant: SafetyKey::HeldPollsOverCap,
            message: format!("{instance}: at +{at} ms {over}"),
            line: Some(held.line),
        });
    }
    Ok(())
}

/// A held poll's answer other than the job or the spec's 404.
fn misanswered(held: &HeldAnswer, instance: &str) -> Option<Violation> {
    let (_, body) = held.answer.as_ref()?;
    let fine = match held.status {
        200 => body["status"].is_string() && body["id"].is_string(),
        404 => body.get("error").is_some(),
        _ => false,
    };
    let client = held.client.as_deref().unwrap_or("the scenario client");
    (!fine).then(|| Violation {
        invariant: SafetyKey::HeldPollsOverCap,
        message: format!(
            "{instance}: a held poll of {client} was answered {} {}, not the job (a poll beyond the bounds is answered at once, never refused)",
            held.status,
            String::from_utf8_lossy(&protocol::canonical::to_vec(body))
        ),
        line: Some(held.line),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key(held: HeldAnswer) -> Option<SafetyKey> {
        check(&[held], "chain_a", &JobEnds::default())
            .err()
            .map(|v| v.invariant)
    }

    fn held(after: u64, status: &str) -> HeldAnswer {
        HeldAnswer {
            instance: "chain_a".into(),
            wait_ms: 5001,
            line: 7,
            client: None,
            sent_ms: 0,
            status: 200,
            answer: Some((after, json!({"id": "j", "status": status}))),
        }
    }

    /// The late side: a poll held to its deadline is not woken only where
    /// its job's first assign came strictly inside the hold.
    #[test]
    fn a_first_assign_inside_the_hold_must_wake_the_poll() {
        let late = |assign: (i64, i64), after: u64, status: &str| {
            let assigns = AssignWindows::from([("j".to_owned(), vec![assign, (9000, 9000)])]);
            check_late(&[held(after, status)], "chain_a", &assigns)
                .err()
                .map(|v| v.invariant)
        };
        assert_eq!(
            late((10, 10), 5001, "running"),
            Some(SafetyKey::PollNotWoken)
        );
        assert_eq!(
            late((10, 10), 5001, "assigned"),
            Some(SafetyKey::PollNotWoken)
        );
        // Woken at the assign: answered then, not at the deadline.
        assert_eq!(late((10, 10), 10, "assigned"), None);
        // Assigned in the instant the poll was sent, or at its deadline:
        // either side of the hold, no change inside it is certain.
        assert_eq!(late((0, 0), 5001, "running"), None);
        assert_eq!(late((5001, 5001), 5001, "running"), None);
        // A job no worker received: nothing is known of its changes.
        let none = check_late(&[held(5001, "pending")], "chain_a", &AssignWindows::new());
        assert!(none.is_ok());
    }

    /// A poll of `client` sent at `sent_ms`, held `held_ms`.
    fn hoarded(client: &str, sent_ms: i64, held_ms: u64, line: usize) -> HeldAnswer {
        HeldAnswer {
            client: Some(client.into()),
            sent_ms,
            line,
            ..held(held_ms, "pending")
        }
    }

    fn caps(answers: &[HeldAnswer]) -> Option<SafetyKey> {
        check_caps(answers, "chain_a", (3, 2))
            .err()
            .map(|v| v.invariant)
    }

    #[test]
    fn held_polls_over_a_cap_as_a_client_sees_them() {
        // Two of one client held at once, a third answered at once, and
        // one evicted at the instant a lighter client's is held: as promised.
        let within = [
            hoarded("h", 0, 5001, 1),
            hoarded("h", 0, 100, 2),
            hoarded("h", 0, 0, 3),
            hoarded("g", 50, 5000, 4),
            hoarded("k", 100, 5000, 5),
        ];
        assert_eq!(caps(&within), None);
        // A third of one client held beside its two.
        let client_over = [
            hoarded("h", 0, 5001, 1),
            hoarded("h", 0, 5001, 2),
            hoarded("h", 10, 5001, 3),
        ];
        assert_eq!(caps(&client_over), Some(SafetyKey::HeldPollsOverCap));
        // A fourth in all.
        let total_over = [
            hoarded("h", 0, 5001, 1),
            hoarded("g", 0, 5001, 2),
            hoarded("k", 0, 5001, 3),
            hoarded("l", 1, 5001, 4),
        ];
        assert_eq!(caps(&total_over), Some(SafetyKey::HeldPollsOverCap));
        // Refused instead of answered with the job; the spec's 404 is fine.
        let refused = HeldAnswer {
            status: 503,
            answer: Some((0, json!({"error": "unavailable"}))),
            ..hoarded("h", 0, 0, 1)
        };
        assert_eq!(caps(&[refused]), Some(SafetyKey::HeldPollsOverCap));
        let unknown = HeldAnswer {
            status: 404,
            answer: Some((0, json!({"error": "job_not_found"}))),
            ..hoarded("h", 0, 0, 1)
        };
        assert_eq!(caps(&[unknown]), None);
    }

    /// A poll of job `j` sent at `sent_ms`, waiting `wait_ms`, answered
    /// `status` after `held_ms`, on line `line`.
    fn chained(sent_ms: i64, wait_ms: u64, held_ms: u64, status: &str, line: usize) -> HeldAnswer {
        HeldAnswer {
            wait_ms,
            line,
            sent_ms,
            ..held(held_ms, status)
        }
    }

    fn early(answers: &[HeldAnswer], assigns: &AssignWindows) -> Option<SafetyKey> {
        check_early(answers, "chain_a", assigns, (10_000, 1_000), false)
            .err()
            .map(|v| v.invariant)
    }

    #[test]
    fn a_poll_answered_running_early_while_its_job_stayed_running_was_not_woken_by_a_change() {
        // Assigned at +0, shown running at +121 by a poll at its deadline;
        // the next poll answered running 700 ms into its 5001 ms wait.
        let assigned: AssignWindows = [("j".to_owned(), vec![(0, 0)])].into();
        let first = chained(20, 101, 101, "running", 1);
        let second = chained(122, 5001, 700, "running", 2);
        let pair = [first.clone(), second.clone()];
        assert_eq!(early(&pair, &assigned), Some(SafetyKey::PollNotWoken));
        // At its deadline, or with another status, it is as promised.
        let at_deadline = chained(122, 5001, 5001, "running", 2);
        assert_eq!(early(&[first.clone(), at_deadline], &assigned), None);
        let completed = chained(122, 5001, 700, "completed", 2);
        assert_eq!(early(&[first.clone(), completed], &assigned), None);
        // No earlier answer showed it running: its status when the poll
        // came is unknown (it may have been assigned, then accepted).
        assert_eq!(early(std::slice::from_ref(&second), &assigned), None);
        let shown_pending = chained(20, 101, 101, "pending", 1);
        assert_eq!(early(&[shown_pending, second.clone()], &assigned), None);
        // Assigned again after it was shown running: it may have been
        // requeued and taken again, so it may have changed twice.
        let again: AssignWindows = [("j".to_owned(), vec![(0, 0), (400, 400)])].into();
        assert_eq!(early(&pair, &again), None);
        // An assign known only between two lines that reach the window.
        let around: AssignWindows = [("j".to_owned(), vec![(0, 121)])].into();
        assert_eq!(early(&pair, &around), None);
        // Where a poll may be evicted or answered at once for the bounds.
        let capped = check_early(&pair, "chain_a", &assigned, (100, 1_000), false);
        assert_eq!(capped, Ok(()));
        let client_capped = check_early(&pair, "chain_a", &assigned, (10_000, 2), false);
        assert_eq!(client_capped, Ok(()));
    }

    #[test]
    fn on_a_cluster_an_early_running_answer_is_judged_only_for_a_job_assigned_once() {
        // A poll sent to the node that does not hold the job, woken by the
        // remote watch when the job completed on its owner, answered the
        // record it read before waiting.
        let once: AssignWindows = [("j".to_owned(), vec![(0, 0)])].into();
        let first = chained(120, 101, 101, "running", 1);
        let stale = chained(222, 5001, 900, "running", 2);
        let pair = [first.clone(), stale];
        let cluster = |assigns: &AssignWindows| {
            check_early(&pair, "chain_a", assigns, (10_000, 1_000), true)
                .err()
                .map(|v| v.invariant)
        };
        assert_eq!(cluster(&once), Some(SafetyKey::PollNotWoken));
        // Read again after the wake: completed, as promised.
        let fresh = chained(222, 5001, 900, "completed", 2);
        let judged = check_early(&[first, fresh], "chain_a", &once, (10_000, 1_000), true);
        assert_eq!(judged, Ok(()));
        // Assigned twice, even both before it was shown running: the
        // store may have shown the first attempt's status after the
        // second assign, so the job may have come back to running.
        let twice: AssignWindows = [("j".to_owned(), vec![(0, 0), (50, 50)])].into();
        assert_eq!(cluster(&twice), None);
        assert_eq!(cluster(&AssignWindows::new()), None);
    }

    #[test]
    fn a_reboot_or_control_of_the_instance_disturbs_it() {
        let line = |rest: &str| vec![format!("[+1.000s] {rest}")];
        assert!(disturbed(
            &line("harness instance chain_a restart"),
            "chain_a"
        ));
        assert!(disturbed(
            &line("chain_a crashed at its armed store write"),
            "chain_a"
        ));
        assert!(disturbed(&line("harness fault reboot0: crash"), "chain_a"));
        assert!(!disturbed(
            &line("harness instance chain_b restart"),
            "chain_a"
        ));
        assert!(!disturbed(
            &line("harness fault f0: partition 100ms between w00 and chain_a"),
            "chain_a"
        ));
    }

    #[test]
    fn a_poll_that_waited_its_whole_wait_for_a_finished_job_was_not_woken() {
        assert_eq!(key(held(5001, "failed")), Some(SafetyKey::PollNotWoken));
        assert_eq!(key(held(5001, "completed")), Some(SafetyKey::PollNotWoken));
        // Woken before its deadline, or still unfinished at it: as promised.
        assert_eq!(key(held(4000, "failed")), None);
        assert_eq!(key(held(5001, "pending")), None);
        // Answered a millisecond past its deadline, whatever the job was.
        assert_eq!(key(held(5002, "pending")), Some(SafetyKey::PollNotWoken));
        assert_eq!(key(held(5002, "running")), Some(SafetyKey::PollNotWoken));
        // A job that had ended before the poll was sent did not change
        // while it was held: its late answer is no missed wake.
        let mut late = held(5001, "completed");
        late.sent_ms = 100;
        let ended = |at_ms| JobEnds {
            epoch_ms: 1_000,
            ended_at_ms: [("j".to_owned(), at_ms)].into(),
        };
        let with_ends =
            |h: HeldAnswer, ends: &JobEnds| check(&[h], "chain_a", ends).err().map(|v| v.invariant);
        assert_eq!(with_ends(late.clone(), &ended(1_099)), None);
        assert_eq!(
            with_ends(late, &ended(1_100)),
            Some(SafetyKey::PollNotWoken)
        );
        // Another instance's poll, or one whose connection was cut.
        let other = HeldAnswer {
            instance: "chain_b".into(),
            ..held(5001, "failed")
        };
        assert_eq!(key(other), None);
        let cut = HeldAnswer {
            answer: None,
            ..held(5001, "failed")
        };
        assert_eq!(key(cut), None);
    }
}
