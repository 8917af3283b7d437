//! The `attack` step: an attacker who knows a victim's user id, and holds
//! none of the victim's keys, tries to act for the victim. Every request
//! is an ordinary HTTP exchange from the attacker's own client (logged as
//! `(from ATTACKER)`); a pairing code it obtains is claimed for its own
//! worker's key, so a coordinator that let it through ends up with the
//! attacker's worker trusted for the victim, which the safety key
//! `private_to_unproven_pairing` then judges.

use super::http::{exchange, record_trust};
use super::steps::Answer;
use crate::spec::{Attack, AttackKind};
use crate::world::World;
use protocol::user_proof::{ProofRequest, UserProof, HEADER};
use router::HttpRequest;
use serde_json::{json, Value};

/// One attack; the answer is `{status, error, refused, paired}`: the
/// coordinator's answer to the attack's request (for a pairing attack,
/// the create's, or the claim's once a code was obtained).
pub(super) async fn run_attack(attack: &Attack, world: &mut World) -> Result<Answer, String> {
    let victim = world.users.get(&attack.victim)?.id.clone();
    world.users.get(&attack.attacker)?;
    world.transcript.log(
        "harness",
        format!(
            "attack {} by {} on {} ({victim})",
            attack.kind, attack.attacker, attack.victim
        ),
    );
    let base = world.node_url(&attack.instance, 0)?;
    let (first, code) = match attack.kind {
        AttackKind::ClaimVictimCode => {
            let code = world
                .users
                .last_code(&attack.instance, &victim)
                .ok_or_else(|| format!("attack: {} created no code to claim", attack.victim))?
                .to_owned();
            (None, Some(code))
        }
        AttackKind::ListWithoutProof => {
            let path = format!("/v1/trust/list?user_id={victim}");
            let request = HttpRequest::get(format!("{base}{path}"));
            let answer = send(world, attack, request, &path, "").await;
            return Ok(summary(answer, false));
        }
        _ => {
            if let Some(edge_ms) = attack.replay_edge_ms {
                wait_for_window_edge(world, attack, &victim, edge_ms).await;
            }
            let (request, path) = attack_request(attack, world, &base, &victim)?;
            let shown = String::from_utf8_lossy(&request.body).into_owned();
            let answer = send(world, attack, request, &path, &shown).await;
            if matches!(
                attack.kind,
                AttackKind::CommitAsVictim | AttackKind::CommitWithoutProof
            ) {
                return Ok(summary(answer, false));
            }
            let code = answer.body["pairing_code"].as_str().map(str::to_owned);
            (Some(answer), code)
        }
    };
    let Some(code) = code.filter(|_| first.as_ref().is_none_or(ok)) else {
        return Ok(summary(first.expect("a create was sent"), false));
    };
    let worker = attack
        .worker
        .as_deref()
        .ok_or("attack: a pairing attack needs worker (the attacker's)")?;
    let key = world
        .workers
        .get(worker)
        .ok_or_else(|| format!("attack: no worker {worker:?}"))?
        .public_key
        .clone();
    let body = json!({"pairing_code": code, "provider_pubkey": key});
    let path = "/v1/trust/claim";
    let request = HttpRequest::post_json(format!("{base}{path}"), &body);
    let shown = String::from_utf8_lossy(&request.body).into_owned();
    let answer = send(world, attack, request, path, &shown).await;
    let paired = ok(&answer);
    Ok(summary(answer, paired))
}

/// The request of a create or commit attack, with the proof it carries.
fn attack_request(
    attack: &Attack,
    world: &mut World,
    base: &str,
    victim: &str,
) -> Result<(HttpRequest, String), String> {
    if attack.kind == AttackKind::ReplayCreate {
        let sent = world
            .users
            .last_create(&attack.instance, victim)
            .ok_or_else(|| format!("attack: {} created no code to replay", attack.victim))?
            .clone();
        let mut request = HttpRequest::post_json(format!("{base}{}", sent.path), &Value::Null);
        request.body = sent.body;
        request
            .headers
            .push((HEADER.to_ascii_lowercase(), sent.header));
        return Ok((request, sent.path));
    }
    let (path, body) = match attack.kind {
        AttackKind::CommitAsVictim | AttackKind::CommitWithoutProof => (
            "/v1/jobs/commit/fast",
            json!({
                "job_type": "TASK", "user_id": victim, "privacy_class": "PRIVATE",
                "payload": {"task_type": "classify", "input": "in the victim's name"},
            }),
        ),
        _ => ("/v1/trust/create", json!({ "user_id": victim })),
    };
    let mut request = HttpRequest::post_json(format!("{base}{path}"), &body);
    request.body = protocol::canonical::to_vec(&body);
    let unsigned = [
        AttackKind::CreateWithoutProof,
        AttackKind::CommitWithoutProof,
    ];
    if !unsigned.contains(&attack.kind) {
        let now_ms = world.transcript.elapsed_ms() + world.epoch_ms();
        let signed = ProofRequest {
            method: "POST",
            path_and_query: path,
            body: &request.body,
        };
        // A proof signed by the attacker's key names the victim, or, for
        // `create_with_own_proof`, the attacker's own account (valid, but
        // of someone else than the request's user).
        let named = match attack.kind {
            AttackKind::CreateWithOwnProof => world.users.get(&attack.attacker)?.id.clone(),
            _ => victim.to_owned(),
        };
        let header = world
            .users
            .sign(&attack.attacker, &named, &signed, now_ms)?;
        request.headers.push((HEADER.to_ascii_lowercase(), header));
    }
    Ok((request, path.to_owned()))
}

/// Before a replay, sleeps until the victim's last create's proof is
/// `edge_ms` from the end of its window (issue time + the instance's
/// `user_proof_window_ms`, the last instant `verify` accepts) and notes it;
/// an instant already past is noted too late (the replay is then sent at
/// once).
async fn wait_for_window_edge(world: &mut World, attack: &Attack, victim: &str, edge_ms: i64) {
    let issued_ms = (world.users.last_create(&attack.instance, victim))
        .and_then(|sent| UserProof::from_header(&sent.header).ok())
        .map(|proof| proof.issued_at_ms);
    let window_ms = (world.nodes(&attack.instance).first())
        .map_or(protocol::user_proof::WINDOW_MS, |node| {
            node.timing().user_proof_window_ms
        });
    let at_ms = issued_ms.map(|issued| issued + window_ms + edge_ms);
    let what = ("proof replay", "its window's end");
    super::edge::sleep_until_edge(world, at_ms, what, edge_ms).await;
}

/// Sends one request from the attacker's client and keeps the trust
/// ledger (an attacker's create is never its user's own proof).
async fn send(
    world: &mut World,
    attack: &Attack,
    request: HttpRequest,
    path: &str,
    shown: &str,
) -> Answer {
    let from = Some(attack.attacker.as_str());
    let answer = exchange(world, &attack.instance, from, request.clone(), path, shown).await;
    record_trust(world, &attack.instance, &request, path, None, &answer);
    answer
}

fn ok(answer: &Answer) -> bool {
    answer.status.is_some_and(|s| (200..300).contains(&s))
}

fn summary(answer: Answer, paired: bool) -> Answer {
    let body = json!({
        "status": answer.status,
        "error": answer.body.get("error").cloned().unwrap_or(Value::Null),
        "refused": !ok(&answer),
        "paired": paired,
    });
    Answer {
        status: answer.status,
        headers: answer.headers,
        body,
    }
}
