//! The `pair` step: a user pairs a worker as an owner's tooling would, a
//! create with the user's own proof and a claim of its code, through the
//! `http` step's own request path (so the ledger of proven pairings,
//! `world::users`, records it as it records two `http` steps). A create
//! that fails sends no claim: in a world whose fault points can cut any
//! request, the step reports what happened rather than failing. With
//! `claim_edge_ms` the claim waits for its code's expiry (an edge claim).

use super::http::{run_http, run_http_at_once};
use super::steps::run_instance_control;
use super::steps::Answer;
use crate::expr::matcher::Vars;
use crate::spec::calls::PAIR_CODES_MAX;
use crate::spec::{HttpCall, InstanceAction, InstanceControl, Pair, ProofSpec};
use crate::verify::code_edges::EDGE_CLAIM;
use crate::world::World;
use serde_json::json;

/// Runs the pairing; answers `{status, paired}`.
pub(super) async fn run_pair(
    pair: &Pair,
    world: &mut World,
    vars: &mut Vars,
) -> Result<Answer, String> {
    let key = format!("{{{{pubkey.{}}}}}", pair.worker);
    let create = HttpCall {
        body: Some(
            json!({ "user_id": format!("{{{{user.{}}}}}", pair.user), "provider_pubkey": key }),
        ),
        user_proof: Some(ProofSpec {
            user: Some(pair.user.clone()),
            key: None,
            replay: false,
        }),
        ..post(pair, "/v1/trust/create", None)
    };
    if pair.codes.is_some() || pair.restart_before_claim {
        return run_pair_batch(pair, &create, world, vars).await;
    }
    let created = run_http(&create, world, vars).await?;
    let code = created.body["pairing_code"]
        .as_str()
        .filter(|_| ok(&created));
    let Some(code) = code.map(str::to_owned) else {
        return Ok(summary(created, false));
    };
    if let Some(edge_ms) = pair.claim_edge_ms {
        let expires_at = created.body["expires_at"].as_str().unwrap_or_default();
        wait_for_edge(world, &code, expires_at, edge_ms).await;
    }
    let claim = HttpCall {
        body: Some(json!({ "pairing_code": code, "provider_pubkey": key })),
        ..post(pair, "/v1/trust/claim", pair.node)
    };
    let claimed = run_http(&claim, world, vars).await?;
    let paired = ok(&claimed);
    Ok(summary(claimed, paired))
}

/// `codes` creates sent at once, each with its own proof (a group commit may
/// hold them all), then, with `restart_before_claim`, a crash and restart of
/// the instance, then a claim of each code created, in turn. Answers as the
/// plain step, with `paired` true when every claim was answered 2xx.
async fn run_pair_batch(
    pair: &Pair,
    create: &HttpCall,
    world: &mut World,
    vars: &mut Vars,
) -> Result<Answer, String> {
    let count = pair.codes.unwrap_or(1);
    if !(1..=PAIR_CODES_MAX).contains(&count) {
        return Err(format!("pair codes {count}: 1 to {PAIR_CODES_MAX}"));
    }
    let calls = vec![create.clone(); count as usize];
    let created = run_http_at_once(&calls, world, vars).await?;
    let codes: Vec<String> = (created.iter())
        .filter(|a| ok(a))
        .filter_map(|a| a.body["pairing_code"].as_str().map(str::to_owned))
        .collect();
    if pair.restart_before_claim {
        let restart = InstanceControl {
            name: pair.instance.clone(),
            action: InstanceAction::Restart,
            write: None,
            node: None,
            duration_ms: None,
        };
        run_instance_control(&restart, world)
            .await
            .map_err(|e| e.to_string())?;
    }
    let Some(mut last) = created.into_iter().last() else {
        return Err("pair: no create was sent".into());
    };
    let mut paired = !codes.is_empty();
    for code in codes {
        let key = format!("{{{{pubkey.{}}}}}", pair.worker);
        let claim = HttpCall {
            body: Some(json!({ "pairing_code": code, "provider_pubkey": key })),
            ..post(pair, "/v1/trust/claim", pair.node)
        };
        last = run_http(&claim, world, vars).await?;
        paired &= ok(&last);
    }
    Ok(summary(last, paired))
}

/// Sleeps until the code's `expires_at` plus `edge_ms` (the claim is then
/// sent in that instant: a claim is judged by the time it is made, with no
/// timer to race) and notes it; an instant already past is noted too late.
async fn wait_for_edge(world: &mut World, code: &str, expires_at: &str, edge_ms: i64) {
    let at_ms = protocol::time::parse_ms(expires_at).map(|e| e + edge_ms);
    let what = format!("{EDGE_CLAIM}{code}");
    super::edge::sleep_until_edge(world, at_ms, (&what, "its expiry"), edge_ms).await;
}

/// A bodiless `POST path` to the pairing's instance, from the shared client.
fn post(pair: &Pair, path: &str, node: Option<u32>) -> HttpCall {
    HttpCall {
        instance: pair.instance.clone(),
        method: "POST".into(),
        path: path.into(),
        body: None,
        raw_body: None,
        headers: Default::default(),
        pay: None,
        client: None,
        node,
        user_proof: None,
        malformed: false,
        retry_after: false,
    }
}

fn ok(answer: &Answer) -> bool {
    answer.status.is_some_and(|s| (200..300).contains(&s))
}

fn summary(answer: Answer, paired: bool) -> Answer {
    Answer {
        status: answer.status,
        headers: answer.headers,
        body: json!({ "status": answer.status, "paired": paired }),
    }
}
