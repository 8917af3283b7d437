//! The `pair` step: a user pairs a worker as an owner's tooling would, a
//! create with the user's own proof and a claim of its code, through the
//! `http` step's own request path (so the ledger of proven pairings,
//! `world::users`, records it as it records two `http` steps). A create
//! that fails sends no claim: in a world whose fault points can cut any
//! request, the step reports what happened rather than failing.

use super::http::run_http;
use super::steps::Answer;
use crate::expr::matcher::Vars;
use crate::spec::{HttpCall, Pair, ProofSpec};
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
    let created = run_http(&create, world, vars).await?;
    let code = created.body["pairing_code"]
        .as_str()
        .filter(|_| ok(&created));
    let Some(code) = code.map(str::to_owned) else {
        return Ok(summary(created, false));
    };
    let claim = HttpCall {
        body: Some(json!({ "pairing_code": code, "provider_pubkey": key })),
        ..post(pair, "/v1/trust/claim", pair.node)
    };
    let claimed = run_http(&claim, world, vars).await?;
    let paired = ok(&claimed);
    Ok(summary(claimed, paired))
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
