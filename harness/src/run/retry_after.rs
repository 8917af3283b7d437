//! An `http` step with `retry_after = true` waits out a 429 as a
//! well-behaved client does: exactly the answered `Retry-After` seconds,
//! nothing else sent meanwhile, then the same request once more. Both are
//! noted as JSON (`harness retry after 429 {...}`,
//! `harness retried after 429 {...}`) for `retry_after_refused`
//! (`verify/retry_afters.rs`); the transcript's other lines do not show the
//! header.

use super::steps::Answer;
use crate::spec::HttpCall;
use crate::verify::retry_afters::{RETRIED, WAITS};
use crate::world::World;
use serde_json::json;
/// The longest wait taken (a longer `Retry-After` is waited this long: a
/// rate window is a minute, a live code's expiry an hour).
const WAIT_MAX_S: u64 = 2 * 60 * 60;

/// Notes the 429 and sleeps its `Retry-After` (whole seconds; none, or
/// one that is no number, is waited as 0 and noted `null`); the seconds
/// noted.
pub(super) async fn wait_out(call: &HttpCall, world: &mut World, refused: &Answer) -> Option<u64> {
    let retry_after_s = (refused.headers.iter())
        .find(|(k, _)| k.eq_ignore_ascii_case("retry-after"))
        .and_then(|(_, v)| v.trim().parse::<u64>().ok());
    let note = json!({
        "instance": call.instance,
        "client": call.client,
        "method": call.method,
        "path": call.path,
        "retry_after_s": retry_after_s,
        "error": refused.body["error"],
    });
    world.transcript.log("harness", format!("{WAITS}{note}"));
    let wait_s = retry_after_s.unwrap_or(0).min(WAIT_MAX_S);
    tokio::time::sleep(std::time::Duration::from_secs(wait_s)).await;
    retry_after_s
}

/// Notes the retry's answer.
pub(super) fn note_retry(
    call: &HttpCall,
    world: &mut World,
    waited_s: Option<u64>,
    again: &Answer,
) {
    let note = json!({
        "instance": call.instance,
        "client": call.client,
        "method": call.method,
        "path": call.path,
        "waited_s": waited_s,
        "status": again.status,
        "error": again.body["error"],
    });
    world.transcript.log("harness", format!("{RETRIED}{note}"));
}
