//! The edge poll (`poll` with `edge_ms = d`): a poll of a job at exactly
//! its deadline plus `d` ms (times drawn at the edges of every timeout,
//! not only inside them). The deadline of a job no worker took is
//! `created_at + pending_timeout_ms`, or its payment's deadline
//! (`validBefore` less the settle margin) where that comes first; a job a
//! worker holds is polled at the end of its lease. The safety key
//! `expiry_off_edge` judges what the poll shows there.

use super::http::{latest_job, run_http, LATEST};
use super::steps::Answer;
use crate::expr::matcher::{self, Vars};
use crate::spec::PollCall;
use crate::verify::edges::EDGE_POLL;
use crate::world::World;
use protocol::api::JobStatus;
use router::HttpRequest;
use serde_json::Value;
use std::time::Duration;

/// Tasks a poll lets run first in its instant (as the held poll of a
/// `cancel` does): the coordinator's timer task, woken by the same instant,
/// fires the deadline before the poll is served, whichever of the two
/// tokio's scheduler woke first. One yield per task woken is enough; a
/// world has far fewer tasks due in one instant.
const YIELDS: usize = 64;

/// Sleeps until the job's deadline plus `edge_ms`, then polls it.
/// A deadline already past (the step came late, or the job is not the one
/// the step meant) is noted and the job polled at once.
pub(super) async fn run_edge_poll(
    poll: &PollCall,
    edge_ms: i64,
    world: &mut World,
    vars: &mut Vars,
) -> Result<Answer, String> {
    let mut call = poll.http();
    if poll.job == LATEST {
        call.path = format!("/v1/jobs/{}", latest_job(world, &poll.instance));
    }
    let path = matcher::render_str(&call.path, vars)?;
    let job = path.trim_start_matches("/v1/jobs/").to_owned();
    let now_ms = world.transcript.epoch_ms() + world.transcript.elapsed_ms();
    let (deadline_ms, which) = match world.edge_deadlines.get(&job) {
        Some(&aimed) => aimed,
        None => {
            let aimed = deadline_of(poll, &path, &job, world).await;
            if let Some(aimed) = aimed {
                world.edge_deadlines.insert(job.clone(), aimed);
            }
            aimed.unwrap_or((now_ms - edge_ms, "pending"))
        }
    };
    let at_ms = deadline_ms + edge_ms;
    let (actor, sign) = ("harness", if edge_ms < 0 { "-" } else { "+" });
    if at_ms < now_ms {
        let text = format!(
            "edge poll too late: {job}'s deadline {sign}{} ms had passed",
            edge_ms.abs()
        );
        world.transcript.log(actor, text);
    } else {
        let wait_ms = u64::try_from(at_ms - now_ms).unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(wait_ms)).await;
        for _ in 0..YIELDS {
            tokio::task::yield_now().await;
        }
        let text = format!(
            "{EDGE_POLL}{job} at its {which} deadline {sign}{} ms",
            edge_ms.abs()
        );
        world.transcript.log(actor, text);
    }
    run_http(&call, world, vars).await
}

/// A paid job's payment deadline (`validBefore` less the settle margin),
/// read from the node's core: it caps the pending deadline (decision
/// 0021). Only when to poll is read there; `expiry_off_edge` judges the
/// answer from the job's own ticket.
fn payment_deadline_ms(node: &crate::world::SimInstance, job: &str) -> Option<i64> {
    let id = uuid::Uuid::parse_str(job).ok()?;
    node.coordinator()?
        .read(|core| core.settle_deadline_ms(&id))
}

/// A held job's lease end, read from the node's core: a job a worker
/// holds is polled at the edge of its lease. Only when to poll is read
/// there; `expiry_off_edge` judges the answer from the assignment's time.
fn lease_end_ms(node: &crate::world::SimInstance, job: &str) -> Option<i64> {
    let id = uuid::Uuid::parse_str(job).ok()?;
    node.coordinator()?.read(|core| {
        let job = core.job(&id)?;
        let held = matches!(job.status, JobStatus::Assigned | JobStatus::Running);
        held.then_some(job.deadline_ms).flatten()
    })
}

/// The job's deadline now, and whose: its lease's end while a worker holds
/// it; else its pending deadline (`created_at + pending_timeout_ms`), or
/// its payment's (`validBefore` less the settle margin) where that comes
/// first. `None` when the instance does not answer (down, restarting).
async fn deadline_of(
    poll: &PollCall,
    path: &str,
    job: &str,
    world: &World,
) -> Option<(i64, &'static str)> {
    let base = world
        .node_url(&poll.instance, poll.node.unwrap_or(0))
        .ok()?;
    // Its creation time, read without a transcript line (the poll after
    // the wait is the one logged).
    let answer = world.http.send(HttpRequest::get(format!("{base}{path}")));
    let body: Value = serde_json::from_slice(&answer.await.ok()?.body).ok()?;
    let created_ms = body["created_at"]
        .as_str()
        .and_then(protocol::time::parse_ms)?;
    let nodes = world.nodes(&poll.instance);
    let node = nodes.first()?;
    if let Some(lease_ms) = lease_end_ms(node, job) {
        return Some((lease_ms, "lease"));
    }
    let pending_ms = created_ms + node.timing().pending_timeout_ms;
    match payment_deadline_ms(node, job) {
        Some(paid_ms) if paid_ms < pending_ms => Some((paid_ms, "payment")),
        _ => Some((pending_ms, "pending")),
    }
}

/// Sleeps until `at_ms` (ms since the epoch, on the transcript's clock) and
/// notes "`what` at `edge` ±N ms"; an instant already past, or unknown, is
/// noted "`what` too late for `edge` ±N ms" and not waited for. The edge
/// claim of a `pair` step and the edge replay of an `attack` step wait so:
/// the request is then sent in that instant, judged by the time it is made.
pub(super) async fn sleep_until_edge(
    world: &mut World,
    at_ms: Option<i64>,
    (what, edge): (&str, &str),
    edge_ms: i64,
) {
    let now_ms = world.transcript.epoch_ms() + world.transcript.elapsed_ms();
    let sign = if edge_ms < 0 { "-" } else { "+" };
    let offset = format!("{sign}{} ms", edge_ms.abs());
    let Some(at_ms) = at_ms.filter(|at| *at >= now_ms) else {
        let text = format!("{what} too late for {edge} {offset}");
        world.transcript.log("harness", text);
        return;
    };
    let wait_ms = u64::try_from(at_ms - now_ms).unwrap_or(0);
    tokio::time::sleep(Duration::from_millis(wait_ms)).await;
    world
        .transcript
        .log("harness", format!("{what} at {edge} {offset}"));
}
