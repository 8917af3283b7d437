//! The `http` step: one request to an instance, logged on both sides; with
//! `pay`, a 402 answered like a paying client (signed, or altered on purpose).

use super::steps::Answer;
use crate::expr::matcher::{self, Vars};
use crate::spec::calls::HELD_POLLS_PER_STEP_MAX;
use crate::spec::{Alter, CancelCall, HttpCall, Pay, PollCall, ProofSpec, RawRequest};
use crate::world::held_polls::HeldAnswer;
use crate::world::malformed::MalformedAnswer;
use crate::world::paid_commits::PaidCommit;
use crate::world::users::{normal, SentProof};
use crate::world::World;
use protocol::user_proof::{ProofRequest, HEADER};
use router::HttpRequest;
use serde_json::{json, Value};

/// One HTTP step: builds the request, sends it, logs both sides; with
/// `pay`, answers a 402 like a paying client and sends again.
pub(super) async fn run_http(
    call: &HttpCall,
    world: &mut World,
    vars: &mut Vars,
) -> Result<Answer, String> {
    let answer = run_http_once(call, world, vars).await?;
    if !call.retry_after || answer.status != Some(429) {
        return Ok(answer);
    }
    // Waits out the 429 as told, then sends the request once more.
    let retry_after_s = super::retry_after::wait_out(call, world, &answer).await;
    let again = run_http_once(call, world, vars).await?;
    super::retry_after::note_retry(call, world, retry_after_s, &again);
    Ok(again)
}

/// One `http` call (with its paid retry, when it pays).
async fn run_http_once(
    call: &HttpCall,
    world: &mut World,
    vars: &mut Vars,
) -> Result<Answer, String> {
    let latest;
    let call = if call.path.contains(LATEST_IN_PATH) {
        let job = latest_job(world, &call.instance);
        let path = call.path.replace(LATEST_IN_PATH, &job);
        latest = HttpCall {
            path,
            ..call.clone()
        };
        &latest
    } else {
        call
    };
    let (mut request, path, shown) = build_request(call, world, vars)?;
    let honest = match &call.user_proof {
        Some(proof) => add_user_proof(world, &call.instance, proof, &mut request, &path)?,
        None => None,
    };
    let from = call.client.as_deref();
    let mut answer = exchange(world, &call.instance, from, request.clone(), &path, &shown).await;
    if let Some(suffix) = user_suffix(world, &call.instance) {
        unscope_user(&mut answer.body, &suffix);
    }
    if call.malformed {
        let request = format!("{} {path}", request.method);
        record_malformed(world, &call.instance, request, &answer);
    }
    record_trust(world, &call.instance, &request, &path, honest, &answer);
    let Some(pay) = &call.pay else {
        record_paid_commit(world, &call.instance, &request, &path, &answer);
        return Ok(answer);
    };
    if answer.status != Some(402) {
        // No payment was asked for (the instance was down, say): a `pay`
        // step still defines `{{last_payment}}`, as `harness check`
        // promises, as an empty `X-PAYMENT`, so that a later replay of it
        // sends a payment that buys nothing rather than failing the step
        // (swarm seed 4394).
        vars.entry("last_payment".to_owned()).or_insert(json!(""));
        (vars.entry("last_payment_header".to_owned())).or_insert(json!("X-PAYMENT"));
        return Ok(answer);
    }
    let (name, value) = sign_payment(world, &answer, pay)?;
    world.transcript.log(
        "payer",
        format!(
            "pays with {name} ({})",
            pay.alter.map_or("valid", Alter::as_str)
        ),
    );
    vars.insert("last_payment".into(), json!(value));
    vars.insert("last_payment_header".into(), json!(name));
    request.headers.push((name.to_ascii_lowercase(), value));
    // The coordinator spends a proof's nonce before it asks for payment: the
    // paid retry is a new request, with a fresh proof (a replay stays one).
    if let Some(proof) = call.user_proof.as_ref().filter(|p| !p.replay) {
        request
            .headers
            .retain(|(k, _)| !k.eq_ignore_ascii_case(HEADER));
        add_user_proof(world, &call.instance, proof, &mut request, &path)?;
    }
    let answer = exchange(world, &call.instance, from, request.clone(), &path, &shown).await;
    record_paid_commit(world, &call.instance, &request, &path, &answer);
    Ok(answer)
}

/// Keeps a commit sent with a payment header, and its answer, for
/// decision 0008's keys (`world::paid_commits`); the answer is the
/// transcript's last line. Other requests are not kept.
fn record_paid_commit(
    world: &mut World,
    instance: &str,
    request: &HttpRequest,
    path: &str,
    answer: &Answer,
) {
    let Some(tier) = path.strip_prefix("/v1/jobs/commit/") else {
        return;
    };
    let payment = (request.headers.iter())
        .find(|(k, _)| k == "x-payment" || k == "payment-signature")
        .map(|(_, v)| v.clone());
    let Some(payment) = payment.filter(|p| !p.is_empty()) else {
        return;
    };
    let text = |key: &str| answer.body[key].as_str().map(str::to_owned);
    world.paid_commits.record(PaidCommit {
        instance: instance.to_owned(),
        tier: tier.to_owned(),
        body: serde_json::from_slice(&request.body).unwrap_or(Value::Null),
        payment,
        status: answer.status,
        job_id: text("job_id"),
        error: text("error"),
        line: world.transcript.len().saturating_sub(1),
    });
}

/// The requests of several `http` calls sent at once, none waiting for
/// another's answer (one group commit may then hold what they change), each
/// built, signed, logged and recorded as [`run_http`] does; no payment. The
/// answers, in order.
pub(super) async fn run_http_at_once(
    calls: &[HttpCall],
    world: &mut World,
    vars: &mut Vars,
) -> Result<Vec<Answer>, String> {
    let mut sent = Vec::with_capacity(calls.len());
    for call in calls {
        if call.pay.is_some() || call.path.contains(LATEST_IN_PATH) {
            return Err("requests sent at once take no payment and no {latest}".into());
        }
        let (mut request, path, shown) = build_request(call, world, vars)?;
        let honest = match &call.user_proof {
            Some(proof) => add_user_proof(world, &call.instance, proof, &mut request, &path)?,
            None => None,
        };
        sent.push((call, request, path, shown, honest));
    }
    let shared: &World = world;
    let exchanges = (sent.iter()).map(|(call, request, path, shown, _)| {
        let from = call.client.as_deref();
        exchange(shared, &call.instance, from, request.clone(), path, shown)
    });
    let mut answers = futures_util::future::join_all(exchanges).await;
    for ((call, request, path, _, honest), answer) in sent.into_iter().zip(&mut answers) {
        if let Some(suffix) = user_suffix(world, &call.instance) {
            unscope_user(&mut answer.body, &suffix);
        }
        record_trust(world, &call.instance, &request, &path, honest, answer);
    }
    Ok(answers)
}

/// The `job` of a `cancel` step that names the job of the latest 201 a
/// step got from its instance.
pub(super) const LATEST: &str = "latest";

/// In an `http` step's path, the job of the latest 201 a step got from
/// its instance (as `latest` names it in a `poll` or `cancel` step), so a
/// malformed request can name a job that exists (a bad `wait_ms` of it).
pub(super) const LATEST_IN_PATH: &str = "{latest}";

/// Keeps a malformed request's answer for `bad_input_mishandled`
/// (`world::malformed`); the answer is the transcript's last line.
fn record_malformed(world: &mut World, instance: &str, request: String, answer: &Answer) {
    let line = world.transcript.len().saturating_sub(1);
    world.malformed.record(MalformedAnswer {
        instance: instance.to_owned(),
        request,
        line,
        status: answer.status,
        body: answer.body.clone(),
    });
}

/// The job of the latest 201 a step got from `instance`; none yet: the
/// nil id, which no job has (404).
pub(super) fn latest_job(world: &World, instance: &str) -> String {
    let job = world.acknowledged.latest(instance);
    job.unwrap_or_else(|| uuid::Uuid::nil().to_string())
}

/// The `poll` step: the `http` GET it is, of the named or the latest job.
pub(super) async fn run_poll(
    poll: &PollCall,
    world: &mut World,
    background: &mut super::background::Background,
    vars: &mut Vars,
) -> Result<Answer, String> {
    let mut call = poll.http();
    if poll.job == LATEST {
        call.path = format!("/v1/jobs/{}", latest_job(world, &poll.instance));
    }
    if let Some(edge_ms) = poll.edge_ms {
        return super::edge::run_edge_poll(poll, edge_ms, world, vars).await;
    }
    let Some(wait_ms) = poll.hold_ms else {
        return run_http(&call, world, vars).await;
    };
    let path = matcher::render_str(&call.path, vars)?;
    let base = world.node_url(&poll.instance, poll.node.unwrap_or(0))?;
    let count = poll.count.unwrap_or(1);
    if !(1..=HELD_POLLS_PER_STEP_MAX).contains(&count) {
        return Err(format!(
            "poll count {count}: 1 to {HELD_POLLS_PER_STEP_MAX} held polls a step"
        ));
    }
    let transport = match poll.client.as_deref() {
        Some(name) => world.client(name),
        None => world.http.clone(),
    };
    let shown = match count {
        1 => String::new(),
        n => format!(" ×{n}"),
    };
    world.transcript.log(
        &poll.instance,
        format!("held poll{shown} (wait {wait_ms} ms) > GET {path}"),
    );
    // Its answer goes to the held-poll log, not the transcript (see
    // `world::held_polls`); the line above says where it was sent.
    let sent = HeldAnswer {
        instance: poll.instance.clone(),
        wait_ms,
        line: world.transcript.len() - 1,
        client: poll.client.clone(),
        sent_ms: world.transcript.elapsed_ms(),
        status: 0,
        answer: None,
    };
    for _ in 0..count {
        let request = HttpRequest::get(format!("{base}{path}?wait_ms={wait_ms}"));
        let (log, transport, mut held) =
            (world.held_polls.clone(), transport.clone(), sent.clone());
        let sent_at = tokio::time::Instant::now();
        background.hold(tokio::spawn(async move {
            if let Ok(answer) = transport.send(request).await {
                let body = serde_json::from_slice(&answer.body).unwrap_or(Value::Null);
                let held_ms = u64::try_from(sent_at.elapsed().as_millis()).unwrap_or(u64::MAX);
                held.status = answer.status;
                held.answer = Some((held_ms, body));
            }
            log.record(held);
        }));
    }
    Ok(Answer::body(Value::Null))
}

/// How long the held poll of a `cancel` step asks to wait.
const HELD_POLL_WAIT_MS: u64 = 30_000;

/// The `cancel` step: the `http` call it is; with `held_poll`, a long poll
/// of the job sent first and held across it, which must answer at the
/// cancel's instant with the status the cancel left.
pub(super) async fn run_cancel(
    cancel: &CancelCall,
    world: &mut World,
    vars: &mut Vars,
) -> Result<Answer, String> {
    let mut call = cancel.http();
    if cancel.job == LATEST {
        call.path = format!("/v1/jobs/{}/cancel", latest_job(world, &cancel.instance));
    }
    if !cancel.held_poll {
        return run_http(&call, world, vars).await;
    }
    let job = matcher::render_str(&call.path, vars)?;
    let job = job
        .trim_start_matches("/v1/jobs/")
        .trim_end_matches("/cancel");
    let base = world.node_url(&cancel.instance, cancel.node.unwrap_or(0))?;
    let poll = HttpRequest::get(format!("{base}/v1/jobs/{job}?wait_ms={HELD_POLL_WAIT_MS}"));
    let transport = match cancel.client.as_deref() {
        Some(name) => world.client(name),
        None => world.http.clone(),
    };
    let sent_at = tokio::time::Instant::now();
    let held = tokio::spawn(async move { transport.send(poll).await });
    // Until the poll is held (no time passes).
    for _ in 0..64 {
        tokio::task::yield_now().await;
    }
    let answer = run_http(&call, world, vars).await?;
    let polled = held.await.map_err(|e| format!("held poll: {e}"))?;
    let polled = polled.map_err(|e| format!("held poll: {e}"))?;
    let body: Value = serde_json::from_slice(&polled.body).unwrap_or(Value::Null);
    let held_ms = sent_at.elapsed().as_millis();
    world.transcript.log(
        &cancel.instance,
        format!(
            "held poll < {} after {held_ms} ms {}",
            polled.status,
            String::from_utf8_lossy(&protocol::canonical::to_vec(&body))
        ),
    );
    if held_ms >= u128::from(HELD_POLL_WAIT_MS) || body["status"] != answer.body["status"] {
        return Err(format!(
            "the held poll answered {} after {held_ms} ms, not {} at the cancel's instant",
            body["status"], answer.body["status"]
        ));
    }
    Ok(answer)
}

/// The step's request: method, URL, body (canonical JSON or raw bytes) and
/// headers, with templates rendered; also its path and the body as logged.
fn build_request(
    call: &HttpCall,
    world: &World,
    vars: &Vars,
) -> Result<(HttpRequest, String, String), String> {
    let suffix = user_suffix(world, &call.instance);
    let path = matcher::render_str(&call.path, vars)?;
    let path = suffix
        .as_ref()
        .map_or(path.clone(), |s| scope_query(&path, s));
    let base = world.node_url(&call.instance, call.node.unwrap_or(0))?;
    let url = format!("{base}{path}");
    let method: axum::http::Method = call
        .method
        .parse()
        .map_err(|_| format!("bad method {:?}", call.method))?;
    let mut request = HttpRequest {
        method,
        url,
        headers: Vec::new(),
        body: Vec::new(),
    };
    let mut shown = String::new();
    if let Some(body) = &call.body {
        let mut body = matcher::render(body, vars)?;
        suffix.iter().for_each(|s| scope_user(&mut body, s));
        request.body = protocol::canonical::to_vec(&body);
        request
            .headers
            .push(("content-type".into(), "application/json".into()));
        shown = String::from_utf8_lossy(&request.body).into_owned();
    } else if let Some(raw) = &call.raw_body {
        request.body = raw.as_bytes().to_vec();
        shown = format!("raw:{raw:?}");
    }
    for (k, v) in &call.headers {
        let k = matcher::render_str(k, vars)?;
        let v = matcher::render_str(v, vars)?;
        request
            .headers
            .retain(|(name, _)| !name.eq_ignore_ascii_case(&k));
        request.headers.push((k.to_ascii_lowercase(), v));
    }
    Ok((request, path, shown))
}

/// Adds the `X-User-Proof` header the step asks for; returns the proof
/// when it is its user's own (signed by the key of the account it names),
/// the one kind of proof that makes a pairing proven. A PRIVATE commit
/// with its user's own proof is noted (`private_commit_unproven`).
fn add_user_proof(
    world: &mut World,
    instance: &str,
    proof: &ProofSpec,
    request: &mut HttpRequest,
    path: &str,
) -> Result<Option<SentProof>, String> {
    let header = match proof.signer()? {
        None => {
            let last = world.users.last_proof.clone();
            last.ok_or("user_proof: replay = true, but no step sent a proof before")?
                .header
        }
        Some((user, key)) => {
            let user_id = world.users.get(user)?.id.clone();
            let now_ms = world.transcript.elapsed_ms() + world.epoch_ms();
            let method = request.method.to_string();
            let signed = ProofRequest {
                method: &method,
                path_and_query: path,
                body: &request.body,
            };
            let header = world.users.sign(key, &user_id, &signed, now_ms)?;
            let own = world.users.is_own(key, &user_id);
            world.transcript.log(
                "harness",
                format!(
                    "{key} signs a user proof as {user}{}",
                    if own { "" } else { " (not its key)" }
                ),
            );
            request
                .headers
                .push((HEADER.to_ascii_lowercase(), header.clone()));
            if own && path.starts_with("/v1/jobs/commit") {
                let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
                if let ("PRIVATE", Some(named)) = (
                    body["privacy_class"].as_str().unwrap_or(""),
                    body["user_id"].as_str(),
                ) {
                    world.users.note_proven_commit(instance, named);
                }
            }
            return Ok(own.then(|| world.users.last_proof.clone()).flatten());
        }
    };
    world
        .transcript
        .log("harness", "a user proof sent again (replay)");
    request.headers.push((HEADER.to_ascii_lowercase(), header));
    Ok(None)
}

/// Keeps the ledger of proven pairings (`world::users`): a code created
/// with its user's own proof, every successful claim, and every claim whose
/// answer was lost.
pub(super) fn record_trust(
    world: &mut World,
    instance: &str,
    request: &HttpRequest,
    path: &str,
    honest: Option<SentProof>,
    answer: &Answer,
) {
    let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
    let path = path.split('?').next().unwrap_or_default();
    record_code(world, instance, path, &body, answer);
    // A claim whose answer was lost may have paired (`Users::unanswered`).
    let unanswered = answer.status.is_none() && path == "/v1/trust/claim";
    if !unanswered && !answer.status.is_some_and(|s| (200..300).contains(&s)) {
        return;
    }
    match path {
        "/v1/trust/create" => {
            let (Some(sent), Some(user), Some(code)) = (
                honest,
                body["user_id"].as_str(),
                answer.body["pairing_code"].as_str(),
            ) else {
                return;
            };
            // A proof of one user never makes a pairing of another proven.
            if normal(&sent.user_id) != normal(user) {
                return;
            }
            let bound = body["provider_pubkey"].as_str();
            world.users.record_create(instance, user, code, bound, sent);
        }
        "/v1/trust/claim" => {
            if let (Some(code), Some(key)) = (
                body["pairing_code"].as_str(),
                body["provider_pubkey"].as_str(),
            ) {
                world.users.record_claim(instance, code, key, !unanswered);
            }
        }
        _ => {}
    }
}

/// Keeps the ledger of pairing codes (`world::codes`): a create answered
/// 201, and every claim answered.
fn record_code(world: &World, instance: &str, path: &str, body: &Value, answer: &Answer) {
    use crate::world::codes::{Claimed, Created};
    let Some(status) = answer.status else {
        return;
    };
    let lower = |v: &Value| v.as_str().map(|s| s.trim().to_ascii_lowercase());
    match path {
        "/v1/trust/create" if status == 201 => {
            let expires = answer.body["expires_at"].as_str();
            let (Some(code), Some(expires_ms)) = (
                lower(&answer.body["pairing_code"]),
                expires.and_then(protocol::time::parse_ms),
            ) else {
                return;
            };
            let bound_to = lower(&body["provider_pubkey"]);
            let instance = instance.to_owned();
            (world.codes).created(Created {
                instance,
                code,
                bound_to,
                expires_ms,
            });
        }
        "/v1/trust/claim" => {
            let (Some(code), Some(key)) = (
                lower(&body["pairing_code"]),
                lower(&body["provider_pubkey"]),
            ) else {
                return;
            };
            world.codes.claimed(Claimed {
                instance: instance.to_owned(),
                code,
                key,
                status,
                error: answer.body["error"].as_str().map(str::to_owned),
                answered_ms: world.epoch_ms() + world.transcript.elapsed_ms(),
                line: world.transcript.len().saturating_sub(1),
            });
        }
        _ => {}
    }
}

/// The suffix of plain user ids against a `--target` (see
/// `InstanceHandle::user_suffix`).
fn user_suffix(world: &World, instance: &str) -> Option<String> {
    world
        .instances
        .get(instance)
        .and_then(|i| i.user_suffix.clone())
}

/// Whether `id` names a plain user: a short word, not an account (an
/// address or a CAIP-10 id, which stand for a key and are never rewritten)
/// and not one of the malformed ids scenarios send to be refused.
fn is_plain_user(id: &str) -> bool {
    let word = |c: char| c.is_ascii_alphanumeric() || "_-.@+".contains(c);
    (1..=64).contains(&id.len()) && id.chars().all(word) && !id.starts_with("0x")
}

/// Appends `suffix` to the plain `user_id` of a request body (see
/// `InstanceHandle::user_suffix`).
fn scope_user(body: &mut Value, suffix: &str) {
    let Some(id) = body.get_mut("user_id") else {
        return;
    };
    if let Some(plain) = id.as_str().filter(|id| is_plain_user(id)) {
        *id = json!(format!("{plain}{suffix}"));
    }
}

/// `path` with `suffix` appended to a plain `user_id` query value.
fn scope_query(path: &str, suffix: &str) -> String {
    let Some((route, query)) = path.split_once('?') else {
        return path.to_owned();
    };
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| match pair.strip_prefix("user_id=") {
            Some(id) if !id.is_empty() && is_plain_user(id) => format!("{pair}{suffix}"),
            _ => pair.to_owned(),
        })
        .collect();
    format!("{route}?{}", pairs.join("&"))
}

/// Takes `suffix` off the `user_id` of an answer, so expectations see the
/// scenario's own names.
fn unscope_user(body: &mut Value, suffix: &str) {
    if let Some(id) = body.get_mut("user_id") {
        if let Some(plain) = id.as_str().and_then(|id| id.strip_suffix(suffix)) {
            *id = json!(plain);
        }
    }
}

/// Sends one request and logs it and its answer.
pub(super) async fn exchange(
    world: &World,
    instance: &str,
    client: Option<&str>,
    request: HttpRequest,
    path: &str,
    shown: &str,
) -> Answer {
    let paid = request
        .headers
        .iter()
        .any(|(k, _)| k == "x-payment" || k == "payment-signature");
    let note = if paid { " [paid]" } else { "" };
    let from = client.map_or(String::new(), |c| format!(" (from {c})"));
    world.transcript.log(
        instance,
        format!("> {} {path}{note}{from} {shown}", request.method),
    );
    let transport = match client {
        Some(name) => world.client(name),
        None => world.http.clone(),
    };
    let watched = crate::world::proofs::Watched::of(world, instance, &request, path);
    // Pairing requests are logged for `trust_list_not_durable`.
    let trust = crate::world::trust_lists::Watched::of(world, instance, &request, path);
    match transport.send(request).await {
        Ok(r) => {
            let body = logged_body(world, instance, r.status, &r.body);
            if let Some(w) = watched {
                w.answered(world, Some(r.status));
            }
            if let Some(t) = trust {
                let shown =
                    String::from_utf8_lossy(&protocol::canonical::to_vec(&body)).into_owned();
                t.answered(world, Some(r.status), shown);
            }
            world.acknowledged.record(r.status, body["job_id"].as_str());
            (world.acknowledged).record_latest(instance, r.status, body["job_id"].as_str());
            (world.streams).record_committer(r.status, body["job_id"].as_str(), client);
            Answer {
                status: Some(r.status),
                headers: r.headers,
                body,
            }
        }
        Err(e) => {
            world
                .transcript
                .log(instance, format!("< transport error: {e}"));
            if let Some(w) = watched {
                w.answered(world, None);
            }
            if let Some(t) = trust {
                t.answered(world, None, String::new());
            }
            Answer::body(json!({"transport_error": e.to_string()}))
        }
    }
}

/// An answer's body as JSON (one that is not JSON is kept as
/// `non_json_body`), logged with its status.
fn logged_body(world: &World, instance: &str, status: u16, bytes: &[u8]) -> Value {
    let body: Value = serde_json::from_slice(bytes)
        .unwrap_or_else(|_| json!({"non_json_body": String::from_utf8_lossy(bytes)}));
    let shown = String::from_utf8_lossy(&protocol::canonical::to_vec(&body)).into_owned();
    world
        .transcript
        .log(instance, format!("< {status} {shown}"));
    body
}

/// `raw_request`: the bytes as they are, logged escaped; the answer as an
/// `http` step's.
pub(super) async fn run_raw(raw: &RawRequest, world: &mut World) -> Result<Answer, String> {
    world.transcript.log(
        &raw.instance,
        format!("> raw request (from {}) {:?}", raw.client, raw.bytes),
    );
    let answer = match world
        .raw_exchange(&raw.instance, &raw.client, raw.bytes.as_bytes())
        .await
    {
        Ok(r) => Answer {
            status: Some(r.status),
            body: logged_body(world, &raw.instance, r.status, &r.body),
            headers: r.headers,
        },
        Err(e) => {
            world.transcript.log(&raw.instance, format!("< {e}"));
            Answer::body(json!({"transport_error": e.to_string()}))
        }
    };
    if raw.malformed {
        record_malformed(world, &raw.instance, "raw".into(), &answer);
    }
    Ok(answer)
}

/// Signs a payment for a 402 answer with the scenario payer, altered as asked.
fn sign_payment(world: &mut World, answer: &Answer, pay: &Pay) -> Result<(String, String), String> {
    use base64::Engine;
    use x402::PaymentSigner;
    let header = answer
        .headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("payment-required"))
        .map(|(_, v)| v.as_bytes());
    let body = serde_json::to_vec(&answer.body).map_err(|e| e.to_string())?;
    // Paying v1 reads the v1 body and answers with `X-PAYMENT`.
    let header = match pay.version {
        Some(crate::spec::pricing::PayVersion::V1) => None,
        Some(crate::spec::pricing::PayVersion::V2) => {
            Some(header.ok_or("the 402 answer has no PAYMENT-REQUIRED header to pay v2")?)
        }
        None => header,
    };
    let mut required = x402::PaymentRequired::from_response(header, Some(&body))
        .map_err(|e| format!("cannot read the 402 answer: {e}"))?;
    let mut now_seconds =
        u64::try_from((world.transcript.elapsed_ms() + world.epoch_ms()) / 1000).unwrap_or(0);
    let alter = pay.alter.unwrap_or(Alter::Unaltered);
    let entry = required
        .accepts
        .first_mut()
        .ok_or("the 402 answer accepts nothing")?;
    match alter {
        // A forged signature is applied to the signed payment below.
        Alter::Unaltered | Alter::Signature => {}
        Alter::Recipient => entry["payTo"] = json!("0x0000000000000000000000000000000000000001"),
        Alter::Amount => {
            entry["amount"] = json!("1");
            entry["maxAmountRequired"] = json!("1");
        }
        Alter::Window => entry["maxTimeoutSeconds"] = json!(3),
        Alter::Future => now_seconds += 1_200,
        Alter::Network => entry["network"] = json!("eip155:8453"),
    }
    let signed = world
        .payer
        .pay(&required, now_seconds, &mut world.payer_rng)
        .map_err(|e| format!("signing the payment: {e}"))?;
    let mut value = signed.value;
    if alter == Alter::Signature {
        let b64 = base64::engine::general_purpose::STANDARD;
        let mut payload: Value =
            serde_json::from_slice(&b64.decode(&value).map_err(|e| e.to_string())?)
                .map_err(|e| e.to_string())?;
        let sig = payload["payload"]["signature"].as_str().unwrap_or_default();
        let forged = forge_signature(sig)?;
        payload["payload"]["signature"] = json!(forged);
        value = b64.encode(payload.to_string());
    }
    Ok((signed.name.to_owned(), value))
}

/// A signature that differs from `sig` (a `0x`-prefixed 65-byte hex string)
/// in one bit of the last byte of `s`, so it no longer verifies. Flipping a
/// bit always changes it; setting the byte to a constant, as this once did,
/// left one signature in 256 untouched, and live runs (whose signatures
/// change with the wall clock) then paid with a valid one.
fn forge_signature(sig: &str) -> Result<String, String> {
    let digits = sig.strip_prefix("0x").unwrap_or(sig);
    if digits.len() != 130 || !digits.is_ascii() {
        return Err(format!(
            "cannot forge a signature that is not 65 bytes of hex: {sig}"
        ));
    }
    let at = digits.len() - 4;
    let byte = u8::from_str_radix(&digits[at..at + 2], 16)
        .map_err(|e| format!("cannot forge a signature that is not hex: {e}"))?;
    Ok(format!(
        "0x{}{:02x}{}",
        &digits[..at],
        byte ^ 0x01,
        &digits[at + 2..]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 65-byte signature whose `s` ends in `byte`, with `v` = 0x1b.
    fn signature_ending(byte: &str) -> String {
        format!("0x{}{byte}1b", "ab".repeat(63))
    }

    #[test]
    fn a_target_run_scopes_plain_user_ids_and_leaves_accounts_alone() {
        let suffix = "-run1";
        assert_eq!(
            scope_query("/v1/trust/list?user_id=alice&x=1", suffix),
            "/v1/trust/list?user_id=alice-run1&x=1"
        );
        let address = "/v1/trust/list?user_id=0x00000000000000000000000000000000000000aa";
        assert_eq!(scope_query(address, suffix), address);
        for malformed in ["/v1/trust/list?user_id=", "/v1/trust/list?user_id=a%00b"] {
            assert_eq!(scope_query(malformed, suffix), malformed);
        }
        let mut body = json!({"user_id": "alice"});
        scope_user(&mut body, suffix);
        assert_eq!(body["user_id"], "alice-run1");
        for untouched in [
            json!("eip155:84532:0x00000000000000000000000000000000000000aa"),
            json!(""),
            json!(" "),
            json!("x".repeat(65)),
            json!(5),
        ] {
            let mut body = json!({ "user_id": untouched });
            scope_user(&mut body, suffix);
            assert_eq!(body["user_id"], untouched);
        }
        let mut answer = json!({"user_id": "alice-run1", "paired_at": "t"});
        unscope_user(&mut answer, suffix);
        assert_eq!(answer["user_id"], "alice");
    }

    #[test]
    fn a_forged_signature_always_differs() {
        for byte in 0..=255u8 {
            let sig = signature_ending(&format!("{byte:02x}"));
            let forged = forge_signature(&sig).unwrap();
            assert_ne!(forged, sig, "byte {byte:02x}");
            assert_eq!(forged.len(), sig.len());
            // Only the last byte of `s` changes; `r` and `v` are kept.
            assert_eq!(forged[..sig.len() - 4], sig[..sig.len() - 4]);
            assert_eq!(forged[sig.len() - 2..], sig[sig.len() - 2..]);
        }
    }

    #[test]
    fn a_signature_that_is_not_65_bytes_of_hex_is_not_forged() {
        assert!(forge_signature("0x1234").is_err());
        assert!(forge_signature(&signature_ending("zz")).is_err());
    }
}
