//! One function per step action: `run_step` is one match, each arm a
//! `run_*` that performs the action on the world and gives its answer.

use super::background::{self, Background};
use super::frames;
use crate::expr::matcher::{self, Vars};
use crate::spec::{
    Action, CommitMany, Control, Expect, FacilitatorControl, InstanceAction, InstanceControl,
    RouterCall, RouterFn, SimDuration, SlowHeads, Sockets, Step, StoreRead, StoreWriteKind,
    StubControl, WaitUntil, WorkerAction,
};
use crate::world::{World, WorldError};
use coordinator::store::sqlite::StoreWrite;
use protocol::api::JobStatus;
use router::{HttpRequest, LlmRequest, TaskRequest};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;

/// What a step got back: an HTTP answer (status and headers) or a router result.
pub(super) struct Answer {
    pub(super) status: Option<u16>,
    pub(super) headers: Vec<(String, String)>,
    pub(super) body: Value,
}

impl Answer {
    pub(super) fn body(body: Value) -> Self {
        Self {
            status: None,
            headers: Vec::new(),
            body,
        }
    }
}

pub(super) async fn run_step(
    step: &Step,
    world: &mut World,
    background: &mut Background,
    vars: &mut Vars,
) -> Result<(), String> {
    let answer = match &step.action {
        Action::Http(call) => Some(super::http::run_http(call, world, vars).await?),
        Action::Router(call) => Some(run_router(call, world, vars).await?),
        Action::Advance(duration) => {
            run_advance(duration, world).await;
            None
        }
        Action::WaitUntil(wait) => Some(run_wait_until(wait, world, vars).await?),
        Action::Worker(control) => {
            run_worker_control(control, world).await?;
            None
        }
        Action::Instance(control) => {
            run_instance_control(control, world).await?;
            None
        }
        Action::Stub(control) => {
            run_stub_control(control, world)?;
            None
        }
        Action::CommitMany(many) => Some(run_commit_many(many, world, vars).await?),
        Action::Facilitator(control) => {
            run_facilitator_control(control, world)?;
            None
        }
        Action::Buggify(switch) => {
            let on = *switch == crate::spec::BuggifySwitch::On;
            coordinator::buggify::set_active(on);
            world.transcript.log("harness", format!("buggify {switch}"));
            None
        }
        Action::Sockets(sockets) => Some(run_sockets(sockets, world).await?),
        Action::SlowHeads(heads) => Some(run_slow_heads(heads, world).await?),
        Action::RawRequest(raw) => Some(super::http::run_raw(raw, world).await?),
        Action::ExpectStore(read) => Some(run_expect_store(read, world, vars)?),
        Action::ExpectFrames(expect) => {
            frames::run_expect_frames(expect, world, vars)?;
            None
        }
        Action::ExpectCalls(expect) => {
            frames::run_expect_calls(expect, world)?;
            None
        }
        Action::SendFrame(send) => {
            frames::run_send_frame(send, world, vars).await?;
            None
        }
        Action::Attack(attack) => Some(super::attack::run_attack(attack, world).await?),
        Action::Pair(pair) => Some(super::pair::run_pair(pair, world, vars).await?),
        Action::Cancel(cancel) => Some(super::http::run_cancel(cancel, world, vars).await?),
        Action::Poll(poll) => Some(super::http::run_poll(poll, world, background, vars).await?),
        Action::Stream(call) => Some(super::stream::run_stream(call, world, vars).await?),
        Action::Group(_) => return Err("groups are expanded when the file loads".into()),
        Action::WaitWorkload(wait) => Some(Answer::body(background::wait(background, wait).await?)),
    };
    // The loader refuses `expect` and `capture` on actions without an answer.
    match answer {
        Some(answer) => check_answer(step, &answer, vars),
        None => Ok(()),
    }
}

/// Checks the step's expectations against its answer, then stores its captures.
fn check_answer(step: &Step, answer: &Answer, vars: &mut Vars) -> Result<(), String> {
    if let Some(expect) = &step.expect {
        check_expect(expect, answer, vars)?;
    }
    for (name, path) in &step.capture {
        let value = matcher::select(&answer.body, path)
            .ok_or_else(|| format!("capture {name}: nothing at {path} in {}", answer.body))?;
        vars.insert(name.clone(), value.clone());
    }
    Ok(())
}

/// Calls the router with the step's request; the answer is the result or `{error}`.
async fn run_router(call: &RouterCall, world: &World, vars: &Vars) -> Result<Answer, String> {
    let request = matcher::render(&call.request, vars)?;
    world.transcript.log(
        "router",
        format!(
            "> {} {}",
            call.call,
            String::from_utf8_lossy(&protocol::canonical::to_vec(&request))
        ),
    );
    let bad_request = |e: serde_json::Error| format!("router request: {e}");
    let result = match call.call {
        RouterFn::RunLlm => {
            let r: LlmRequest = serde_json::from_value(request).map_err(bad_request)?;
            world.router.run_llm(r).await
        }
        RouterFn::RunTask => {
            let r: TaskRequest = serde_json::from_value(request).map_err(bad_request)?;
            world.router.run_task(r).await
        }
    };
    let body = match result {
        Ok(r) => serde_json::to_value(&r).map_err(|e| e.to_string())?,
        Err(e) => json!({"error": e.to_string()}),
    };
    world.transcript.log(
        "router",
        format!(
            "< {}",
            String::from_utf8_lossy(&protocol::canonical::to_vec(&body))
        ),
    );
    Ok(Answer::body(body))
}

async fn run_advance(duration: &SimDuration, world: &World) {
    world
        .transcript
        .log("harness", format!("advance {duration}"));
    tokio::time::sleep(duration.duration).await;
}

/// Polls the job every 100 ms until it has the status; the answer is its record.
async fn run_wait_until(wait: &WaitUntil, world: &World, vars: &Vars) -> Result<Answer, String> {
    let job = matcher::render_str(&wait.job, vars)?;
    let url = format!("{}/v1/jobs/{job}", world.poll_url(&wait.instance)?);
    let deadline = tokio::time::Instant::now() + wait.within.duration;
    loop {
        let r = world
            .http
            .send(HttpRequest::get(url.clone()))
            .await
            .map_err(|e| format!("polling {job}: {e}"))?;
        let body: Value = serde_json::from_slice(&r.body).map_err(|e| e.to_string())?;
        if job_status(&body) == Some(wait.status) {
            world.transcript.log(
                &wait.instance,
                format!(
                    "job {job} is {}: {}",
                    wait.status,
                    String::from_utf8_lossy(&protocol::canonical::to_vec(&body))
                ),
            );
            return Ok(Answer {
                status: Some(r.status),
                headers: r.headers,
                body,
            });
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "job {job} did not become {} within {}: {body}",
                wait.status, wait.within
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The `status` of a polled job record, if it is one.
fn job_status(record: &Value) -> Option<JobStatus> {
    record["status"].as_str().and_then(JobStatus::parse)
}

async fn run_worker_control(
    control: &Control<WorkerAction>,
    world: &mut World,
) -> Result<(), String> {
    world.transcript.log(
        "harness",
        format!("worker {} {}", control.name, control.action),
    );
    match control.action {
        WorkerAction::Stop => world.stop_worker(&control.name)?,
        WorkerAction::Start => world.start_worker(&control.name)?,
        WorkerAction::Freeze => world.freeze_worker(&control.name, true)?,
        WorkerAction::Thaw => world.freeze_worker(&control.name, false)?,
    }
    // Let the connection drop or the handshake run before the next step.
    tokio::time::sleep(Duration::from_millis(1)).await;
    Ok(())
}

pub(super) async fn run_instance_control(
    control: &InstanceControl,
    world: &mut World,
) -> Result<(), WorldError> {
    let mut at = control.write.map_or(String::new(), |w| format!(" {w}"));
    if let Some(node) = control.node {
        at.push_str(&format!(" node {node}"));
    }
    if let Some(ms) = control.duration_ms {
        at.push_str(&format!(" for {ms} ms"));
    }
    world.transcript.log(
        "harness",
        format!("instance {} {}{at}", control.name, control.action),
    );
    let node = control.node.unwrap_or(0);
    match control.action {
        InstanceAction::Stop => world.set_instance_up(&control.name, false),
        InstanceAction::Start => world.set_instance_up(&control.name, true),
        InstanceAction::Restart => world.restart_node(&control.name, node).await,
        InstanceAction::GracefulRestart => world.graceful_restart_node(&control.name, node).await,
        InstanceAction::Partition => {
            let ms = control.duration_ms.ok_or("partition needs duration_ms")?;
            world.partition_node(&control.name, node, ms)
        }
        InstanceAction::Crash => {
            let ms = control.duration_ms.ok_or("crash needs duration_ms")?;
            world.crash_node(&control.name, node, ms)
        }
        InstanceAction::LoseAnswer => world.lose_answer(&control.name, node),
        InstanceAction::CrashAfter => {
            let write = match control.write.ok_or("crash_after needs write")? {
                StoreWriteKind::NonceReserved => StoreWrite::NonceReserved,
                StoreWriteKind::NonceSpent => StoreWrite::NonceSpent,
                StoreWriteKind::NonceReleased => StoreWrite::NonceReleased,
                StoreWriteKind::Commit => StoreWrite::Commit,
            };
            world.crash_after(&control.name, write).await
        }
    }
}

/// Opens half-open worker connections and answers how many the instance
/// upgraded and how many it refused.
async fn run_sockets(sockets: &Sockets, world: &mut World) -> Result<Answer, String> {
    let (opened, refused) = world
        .open_idle_sockets(&sockets.instance, sockets.count, &sockets.client)
        .await?;
    world.transcript.log(
        &sockets.client,
        format!(
            "opened {opened} idle worker sockets to {}, {refused} refused",
            sockets.instance
        ),
    );
    Ok(Answer::body(json!({"opened": opened, "refused": refused})))
}

/// Opens a slowloris client's connections and answers how many opened.
async fn run_slow_heads(heads: &SlowHeads, world: &mut World) -> Result<Answer, String> {
    let opened = world
        .open_slow_heads(&heads.instance, heads.count, &heads.client, heads.head)
        .await?;
    Ok(Answer::body(json!({ "opened": opened })))
}

/// `expect_store`: the job as the instance's store holds it (its latest
/// version, committed or waiting in the writer's batch; for several nodes,
/// the shared store), answered as the API shows a job record (200), or 404
/// when the store has no such job. It sees what a crash would leave, which
/// a poll (answered from the core's memory) does not.
fn run_expect_store(read: &StoreRead, world: &World, vars: &Vars) -> Result<Answer, String> {
    let job = matcher::render_str(&read.job, vars)?;
    let id = uuid::Uuid::parse_str(&job)
        .map_err(|e| format!("expect_store: {job:?} is not a job id: {e}"))?;
    let stored = if let Some(snapshot) = world.cluster_snapshot(&read.instance) {
        snapshot
            .jobs
            .into_iter()
            .find(|j| j.id == id)
            .map(|j| j.record())
    } else {
        let store = world
            .nodes(&read.instance)
            .first()
            .and_then(|node| node.store())
            .ok_or_else(|| format!("expect_store: {} is not running", read.instance))?;
        coordinator::store::Store::job(&*store, &id)
            .map_err(|e| format!("expect_store: {e}"))?
            .map(|j| j.record())
    };
    let (status, body) = match &stored {
        Some(record) => (
            200,
            serde_json::to_value(record).map_err(|e| e.to_string())?,
        ),
        None => (404, json!({ "error": "job not in the store" })),
    };
    world.transcript.log(
        &read.instance,
        format!(
            "store holds job {job}: {}",
            stored.map_or("none".into(), |r| r.status.to_string())
        ),
    );
    Ok(Answer {
        status: Some(status),
        headers: Vec::new(),
        body,
    })
}

fn run_stub_control(control: &StubControl, world: &World) -> Result<(), String> {
    let stub = world
        .stubs
        .get(&control.name)
        .ok_or_else(|| format!("no stub {:?}", control.name))?;
    stub.set_default_fault(control.default_fault.clone());
    world.transcript.log(
        "harness",
        format!(
            "stub {} fault {}",
            control.name,
            control.default_fault.as_ref().map_or("none", |f| f.name())
        ),
    );
    Ok(())
}

fn run_facilitator_control(control: &FacilitatorControl, world: &World) -> Result<(), String> {
    let stub = world
        .instances
        .get(&control.instance)
        .and_then(|i| i.facilitator.as_ref())
        .ok_or_else(|| format!("instance {:?} has no facilitator", control.instance))?;
    stub.set_script(crate::world::facilitator_script(control.script));
    world.transcript.log(
        "harness",
        format!(
            "facilitator of {} now answers {}",
            control.instance, control.script
        ),
    );
    Ok(())
}

/// Commits `count` jobs, then polls until each is completed or failed; the
/// answer counts them by final status (refused commits as `http_STATUS`).
async fn run_commit_many(many: &CommitMany, world: &World, vars: &Vars) -> Result<Answer, String> {
    world.transcript.log(
        &many.instance,
        format!(
            "> commit_many {} jobs to /v1/jobs/commit/{}",
            many.count, many.tier
        ),
    );
    let mut counts = BTreeMap::<String, usize>::new();
    let ids = commit_jobs(many, world, vars, &mut counts).await?;
    for status in await_terminal(many, world, ids).await? {
        *counts.entry(status.as_str().to_owned()).or_default() += 1;
    }
    let body = json!(counts);
    world.transcript.log(
        &many.instance,
        format!(
            "< commit_many finished {}",
            String::from_utf8_lossy(&protocol::canonical::to_vec(&body))
        ),
    );
    Ok(Answer::body(body))
}

/// Sends the commits `interval` apart; returns the ids of the accepted jobs
/// and counts the refused ones in `refused` as `http_STATUS`.
async fn commit_jobs(
    many: &CommitMany,
    world: &World,
    vars: &Vars,
    refused: &mut BTreeMap<String, usize>,
) -> Result<Vec<String>, String> {
    let url = format!(
        "{}/v1/jobs/commit/{}",
        world.base_url(&many.instance)?,
        many.tier
    );
    let mut ids = Vec::with_capacity(many.count as usize);
    for i in 0..many.count {
        let mut local = vars.clone();
        local.insert("i".into(), json!(i));
        let body = matcher::render(&many.body, &local)?;
        let r = world
            .http
            .send(HttpRequest::post_json(url.clone(), &body))
            .await
            .map_err(|e| format!("commit {i}: {e}"))?;
        let id = serde_json::from_slice::<Value>(&r.body)
            .ok()
            .and_then(|b| b["job_id"].as_str().map(str::to_owned));
        world.acknowledged.record(r.status, id.as_deref());
        match id {
            Some(id) if r.status == 201 => ids.push(id),
            _ => *refused.entry(format!("http_{}", r.status)).or_default() += 1,
        }
        if !many.interval.duration.is_zero() {
            tokio::time::sleep(many.interval.duration).await;
        }
    }
    Ok(ids)
}

/// Polls the jobs every 100 ms until each is terminal, failing after
/// `within`; returns their final statuses.
async fn await_terminal(
    many: &CommitMany,
    world: &World,
    mut open: Vec<String>,
) -> Result<Vec<JobStatus>, String> {
    let base = world.poll_url(&many.instance)?;
    let deadline = tokio::time::Instant::now() + many.within.duration;
    let mut ended = Vec::with_capacity(open.len());
    loop {
        let mut still = Vec::new();
        for id in open {
            let r = world
                .http
                .send(HttpRequest::get(format!("{base}/v1/jobs/{id}")))
                .await
                .map_err(|e| format!("polling {id}: {e}"))?;
            let body: Value = serde_json::from_slice(&r.body).map_err(|e| e.to_string())?;
            match job_status(&body) {
                Some(status) if status.is_terminal() => ended.push(status),
                _ => still.push(id),
            }
        }
        open = still;
        if open.is_empty() {
            return Ok(ended);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "{} jobs not finished within {}",
                open.len(),
                many.within
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn check_expect(expect: &Expect, answer: &Answer, vars: &Vars) -> Result<(), String> {
    let (status, headers, body) = (answer.status, &answer.headers, &answer.body);
    if let Some(want) = expect.status {
        if status != Some(want) {
            return Err(format!("expected status {want}, got {status:?}: {body}"));
        }
    }
    if let Some(want) = &expect.body {
        let want = matcher::render(want, vars)?;
        if let Some(m) = matcher::mismatch(&want, body, "$") {
            return Err(format!("body mismatch at {m}"));
        }
    }
    for (name, want) in &expect.headers {
        let got = headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| Value::String(v.clone()))
            .unwrap_or(Value::Null);
        let want = matcher::render(&Value::String(want.clone()), vars)?;
        if let Some(m) = matcher::mismatch(&want, &got, &format!("header {name}")) {
            return Err(m);
        }
    }
    Ok(())
}
