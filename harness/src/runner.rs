//! Runs a scenario: builds the world in a fresh current-thread runtime with
//! paused time and no I/O driver, executes the steps in order, checks
//! expectations and invariants, and returns the transcript and its digest.

use crate::matcher::{self, Vars};
use crate::safety;
use crate::scenario::{
    Action, Alter, CommitMany, Control, Expect, FacilitatorControl, HttpCall, InstanceAction,
    InstanceControl, Pay, RouterCall, RouterFn, Scenario, SimDuration, Sockets, Step,
    StoreWriteKind, StubControl, WaitUntil, WorkerAction,
};
use crate::world::World;
use coordinator::store::sqlite::StoreWrite;
use protocol::api::JobStatus;
use router::{HttpRequest, LlmRequest, TaskRequest};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Passed,
    /// Step `step` (1-based; 0: before the first step) failed.
    Failed {
        step: usize,
        message: String,
    },
    /// Every step passed; an end-of-run invariant did not hold.
    InvariantBroken {
        message: String,
    },
}

impl Outcome {
    /// What failed, in the scenario's words; `None` when it passed.
    pub fn failure(&self) -> Option<String> {
        match self {
            Outcome::Passed => None,
            Outcome::Failed { step: 0, message } => {
                Some(format!("before the first step: {message}"))
            }
            Outcome::Failed { step, message } => Some(format!("step {step}: {message}")),
            Outcome::InvariantBroken { message } => Some(format!("invariants: {message}")),
        }
    }
}

#[derive(Debug, Clone)]
pub struct RunReport {
    pub name: String,
    pub seed: u64,
    pub steps_run: usize,
    pub sim_ms: i64,
    pub transcript: Vec<String>,
    pub digest: String,
    pub outcome: Outcome,
}

impl RunReport {
    /// A run whose world could not be built.
    fn not_started(scenario: &Scenario, seed: u64, message: String) -> Self {
        Self {
            name: scenario.name.clone(),
            seed,
            steps_run: 0,
            sim_ms: 0,
            transcript: vec![],
            digest: String::new(),
            outcome: Outcome::Failed { step: 0, message },
        }
    }

    fn finished(
        scenario: &Scenario,
        seed: u64,
        world: &World,
        steps_run: usize,
        outcome: Outcome,
    ) -> Self {
        Self {
            name: scenario.name.clone(),
            seed,
            steps_run,
            sim_ms: world.transcript.elapsed_ms(),
            transcript: world.transcript.lines(),
            digest: world.transcript.digest(),
            outcome,
        }
    }
}

/// Runs `scenario` in the simulation with `seed` (the scenario's unless
/// overridden), tokio's own RNG seeded from the same seed.
pub fn run_simulated(scenario: &Scenario, seed: Option<u64>) -> RunReport {
    let seed = seed.unwrap_or(scenario.seed);
    run_simulated_with(scenario, seed, seed)
}

/// Runs `scenario` with `seed`, and tokio's internal RNG (unbiased
/// `select!` branch order, among others) seeded from `tokio_seed`. Nothing
/// observable may depend on that RNG: a transcript is the same under every
/// `tokio_seed`, which the harness checks (the second of its two runs uses
/// another one). Without `--cfg tokio_unstable` the tokio seed is not set.
pub fn run_simulated_with(scenario: &Scenario, seed: u64, tokio_seed: u64) -> RunReport {
    // Time only: an accidental real socket or file wait fails loudly.
    let mut builder = tokio::runtime::Builder::new_current_thread();
    builder.enable_time().start_paused(true);
    #[cfg(tokio_unstable)]
    builder.rng_seed(tokio::runtime::RngSeed::from_bytes(
        &tokio_seed.to_le_bytes(),
    ));
    #[cfg(not(tokio_unstable))]
    let _ = tokio_seed;
    let runtime = builder.build().expect("a current-thread runtime");
    panics::start_recording();
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        runtime.block_on(async {
            let mut world = match World::build(scenario, seed).await {
                Ok(w) => w,
                Err(message) => return RunReport::not_started(scenario, seed, message),
            };
            if let Err(message) = crate::beside::start(scenario, &mut world, seed) {
                return RunReport::not_started(scenario, seed, message);
            }
            world
                .transcript
                .log("harness", format!("scenario {} seed {seed}", scenario.name));
            let (steps_run, outcome) = run_steps(scenario, &mut world).await;
            RunReport::finished(scenario, seed, &world, steps_run, outcome)
        })
    }));
    // Dropping the runtime cancels every task still running (workers, sessions, timers).
    drop(runtime);
    let panicked = panics::take();
    let mut report = run.unwrap_or_else(|_| {
        RunReport::not_started(scenario, seed, "the harness itself panicked".into())
    });
    // A panic anywhere in the world (a core invariant breach panics by
    // design) is the run's failure, whatever the steps saw afterwards.
    if let Some(first) = panicked.first() {
        report.outcome = Outcome::InvariantBroken {
            message: format!("panic: {first}"),
        };
    }
    report
}

/// Panics of the world's tasks, recorded per thread: tokio catches a task's
/// panic, so without this a coordinator that panicked would only show as
/// steps failing later for unrelated-looking reasons.
pub mod panics {
    use std::cell::{Cell, RefCell};
    use std::sync::Once;

    thread_local! {
        static RECORDED: RefCell<Option<Vec<String>>> = const { RefCell::new(None) };
        static QUIET: Cell<bool> = const { Cell::new(false) };
    }

    /// Keeps the default panic output off stderr on this thread (the swarm
    /// runs thousands of worlds; their panics are reported as failures).
    pub fn set_quiet(quiet: bool) {
        QUIET.with(|q| q.set(quiet));
    }

    /// Starts recording this thread's panics (and installs the hook once).
    pub fn start_recording() {
        static HOOK: Once = Once::new();
        HOOK.call_once(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                let message = info
                    .payload()
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| info.payload().downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a panic without a message".into());
                let at = info
                    .location()
                    .map_or(String::new(), |l| format!(" at {}:{}", l.file(), l.line()));
                RECORDED.with(|r| {
                    if let Ok(mut r) = r.try_borrow_mut() {
                        if let Some(list) = r.as_mut() {
                            list.push(format!("{message}{at}"));
                        }
                    }
                });
                if !QUIET.with(Cell::get) {
                    previous(info);
                }
            }));
        });
        RECORDED.with(|r| *r.borrow_mut() = Some(Vec::new()));
    }

    /// The panics recorded since `start_recording`, in order; stops recording.
    pub fn take() -> Vec<String> {
        RECORDED.with(|r| r.borrow_mut().take().unwrap_or_default())
    }
}

/// Runs `scenario` against live coordinator processes started from `bin`.
/// Expectations are checked; transcripts are not compared (real time and
/// real scheduling make them differ from run to run).
/// With `cluster`, each instance is several nodes on one PostgreSQL.
pub fn run_live(
    scenario: &Scenario,
    bin: &std::path::Path,
    cluster: Option<&crate::world::LiveCluster>,
) -> RunReport {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime");
    let report = runtime.block_on(async {
        let failed = |message| RunReport::not_started(scenario, scenario.seed, message);
        let mut world = match World::build_live(scenario, scenario.seed, bin, cluster).await {
            Ok(w) => w,
            Err(message) => return failed(message),
        };
        // Let workers connect and authenticate over real sockets.
        if let Err(message) = wait_for_workers(&world).await {
            return failed(message);
        }
        let (steps_run, outcome) = run_steps(scenario, &mut world).await;
        RunReport::finished(scenario, scenario.seed, &world, steps_run, outcome)
    });
    drop(runtime);
    report
}

/// Waits until every instance reports the workers the scenario starts on it.
async fn wait_for_workers(world: &World) -> Result<(), String> {
    for (name, instance) in &world.instances {
        let want = world
            .workers
            .values()
            .filter(|w| w.instance == *name && w.starts())
            .count();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let r = world
                .http
                .send(HttpRequest::get(format!("{}/v1/health", instance.base_url)))
                .await
                .map_err(|e| format!("{name}: {e}"))?;
            let health: Value = serde_json::from_slice(&r.body).map_err(|e| e.to_string())?;
            if health["workers_online"].as_u64() >= Some(want as u64) {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(format!(
                    "{name}: {want} workers did not connect within 10 s: {health}"
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    Ok(())
}

async fn run_steps(scenario: &Scenario, world: &mut World) -> (usize, Outcome) {
    // Let workers connect and authenticate before the first step.
    tokio::time::sleep(Duration::from_millis(1)).await;
    let mut vars = Vars::new();
    // Worker keys derive from the seed; scenarios name them as {{pubkey.NAME}}.
    for (name, worker) in &world.workers {
        vars.insert(format!("pubkey.{name}"), json!(worker.public_key));
    }
    for (i, step) in scenario.steps.iter().enumerate() {
        let number = i + 1;
        // A supervisor restarts an instance whose armed crash fired.
        if let Err(message) = world.restart_crashed().await {
            return (
                number,
                Outcome::Failed {
                    step: number,
                    message,
                },
            );
        }
        if let Some(name) = &step.name {
            world
                .transcript
                .log("harness", format!("step {number}: {name}"));
        }
        if let Err(message) = run_step(step, world, &mut vars).await {
            world
                .transcript
                .log("harness", format!("FAILED step {number}: {message}"));
            return (
                number,
                Outcome::Failed {
                    step: number,
                    message,
                },
            );
        }
    }
    // Injectors repair what they broke; workloads still running stop.
    crate::beside::stop(world).await;
    // Let in-flight frames land and stores commit before the end-of-run checks.
    tokio::time::sleep(Duration::from_millis(1)).await;
    world.settle().await;
    let checked = check_invariants(scenario, world)
        .and_then(|()| crate::temporal::check(&scenario.temporal, world, &vars));
    match checked {
        Ok(()) => {
            world.transcript.log("harness", "invariants hold");
            (scenario.steps.len(), Outcome::Passed)
        }
        Err(message) => {
            world
                .transcript
                .log("harness", format!("FAILED invariant: {message}"));
            let history = job_history(&message, &world.transcript.lines());
            let message = if history.is_empty() {
                message
            } else {
                format!(
                    "{message}\n  the job's history:\n    {}",
                    history.join("\n    ")
                )
            };
            (scenario.steps.len(), Outcome::InvariantBroken { message })
        }
    }
}

/// What a step got back: an HTTP answer (status and headers) or a router result.
struct Answer {
    status: Option<u16>,
    headers: Vec<(String, String)>,
    body: Value,
}

impl Answer {
    fn body(body: Value) -> Self {
        Self {
            status: None,
            headers: Vec::new(),
            body,
        }
    }
}

async fn run_step(step: &Step, world: &mut World, vars: &mut Vars) -> Result<(), String> {
    let answer = match &step.action {
        Action::Http(call) => Some(run_http(call, world, vars).await?),
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
        Action::Sockets(sockets) => Some(run_sockets(sockets, world).await?),
        Action::ExpectFrames(expect) => {
            crate::frames::run_expect_frames(expect, world, vars)?;
            None
        }
        Action::ExpectCalls(expect) => {
            crate::frames::run_expect_calls(expect, world)?;
            None
        }
        Action::SendFrame(send) => {
            crate::frames::run_send_frame(send, world, vars).await?;
            None
        }
        Action::Group(_) => return Err("groups are expanded when the file loads".into()),
        Action::WaitWorkload(wait) => Some(Answer::body(crate::beside::wait(world, wait).await?)),
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
    }
    // Let the connection drop or the handshake run before the next step.
    tokio::time::sleep(Duration::from_millis(1)).await;
    Ok(())
}

async fn run_instance_control(control: &InstanceControl, world: &mut World) -> Result<(), String> {
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

/// One HTTP step: builds the request, sends it, logs both sides; with
/// `pay`, answers a 402 like a paying client and sends again.
async fn run_http(call: &HttpCall, world: &mut World, vars: &mut Vars) -> Result<Answer, String> {
    let path = matcher::render_str(&call.path, vars)?;
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
        let body = matcher::render(body, vars)?;
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
    let from = call.client.as_deref();
    let answer = exchange(world, &call.instance, from, request.clone(), &path, &shown).await;
    let Some(pay) = &call.pay else {
        return Ok(answer);
    };
    if answer.status != Some(402) {
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
    Ok(exchange(world, &call.instance, from, request, &path, &shown).await)
}

/// Sends one request and logs it and its answer.
async fn exchange(
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
    match transport.send(request).await {
        Ok(r) => {
            let body: Value = serde_json::from_slice(&r.body)
                .unwrap_or_else(|_| json!({"non_json_body": String::from_utf8_lossy(&r.body)}));
            world.transcript.log(
                instance,
                format!(
                    "< {} {}",
                    r.status,
                    String::from_utf8_lossy(&protocol::canonical::to_vec(&body))
                ),
            );
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
            Answer::body(json!({"transport_error": e.to_string()}))
        }
    }
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
        Some(crate::terms::PayVersion::V1) => None,
        Some(crate::terms::PayVersion::V2) => {
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
        match serde_json::from_slice::<Value>(&r.body)
            .ok()
            .and_then(|b| b["job_id"].as_str().map(str::to_owned))
        {
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

/// Safety (always, `safety`): what clients and workers saw agrees with what
/// the instances hold. Liveness (when asked): all jobs terminal / completed,
/// exact counts.
fn check_invariants(scenario: &Scenario, world: &World) -> Result<(), String> {
    for (name, want) in &scenario.invariants.stub_calls {
        let got = world
            .stubs
            .get(name)
            .ok_or_else(|| format!("stub_calls: no stub {name:?}"))?
            .calls()
            .len();
        if got != *want {
            return Err(format!("stub {name} got {got} calls, expected {want}"));
        }
    }
    let mut snapshots = BTreeMap::new();
    for (name, instance) in &world.instances {
        // A live instance's state is in another process; live runs check expectations only.
        let crate::world::Driver::Sim(sim) = &instance.driver else {
            continue;
        };
        if let Some(snapshot) = world.cluster_snapshot(name) {
            // Several nodes: what every running node holds is checked, and
            // the shared store holds every job whoever owns it.
            for node in world.nodes(name) {
                node.check_core()?;
            }
            snapshots.insert(name.clone(), snapshot);
            continue;
        }
        let Some(store) = sim.store() else {
            return Err(format!("{name} is not running at the end of the run"));
        };
        sim.check_core()?;
        let snapshot = coordinator::store::Store::load(&*store).map_err(|e| e.to_string())?;
        snapshots.insert(name.clone(), snapshot);
    }
    check_safety(scenario, world, &snapshots)?;
    for (name, snapshot) in &snapshots {
        let mut counts = BTreeMap::<JobStatus, usize>::new();
        for job in &snapshot.jobs {
            *counts.entry(job.status).or_default() += 1;
            check_job(scenario, name, job)?;
        }
        if let Some(want) = scenario.invariants.job_counts.get(name) {
            let (got, want) = (by_name(&counts), by_name(want));
            if got != want {
                return Err(format!("{name}: job counts {got:?}, expected {want:?}"));
            }
        }
        world.transcript.log(
            "harness",
            format!(
                "{name} jobs {}",
                serde_json::to_string(&by_name(&counts)).unwrap_or_default()
            ),
        );
    }
    Ok(())
}

/// The safety properties of `crate::safety` over the transcript and stores.
fn check_safety(
    scenario: &Scenario,
    world: &World,
    snapshots: &BTreeMap<String, coordinator::store::Snapshot>,
) -> Result<(), String> {
    if snapshots.is_empty() {
        return Ok(());
    }
    let instances = snapshots
        .iter()
        .map(|(name, s)| {
            let spec = scenario.instances.get(name);
            let state = safety::InstanceState {
                jobs: &s.jobs,
                trust: &s.trust,
                paid: spec.is_some_and(|i| i.payment.is_some()),
                retention: spec.is_some_and(|i| i.retention_hours.is_some()),
                retention_cut_ms: world
                    .nodes(name)
                    .iter()
                    .filter_map(|node| node.retention_cut_ms())
                    .max()
                    .map(|cut_ms| cut_ms - world.transcript.epoch_ms()),
            };
            (name.clone(), state)
        })
        .collect();
    let workers = world
        .workers
        .iter()
        .map(|(name, w)| {
            let view = safety::WorkerView {
                instance: &w.instance,
                public_key: &w.public_key,
            };
            (name.clone(), view)
        })
        .collect();
    let lines = world.transcript.lines();
    safety::check(&lines, &instances, &workers).map_err(|v| v.to_string())
}

/// Counts keyed by status name, in name order, without zero counts (a
/// scenario may list a status with 0 or leave it out).
fn by_name(counts: &BTreeMap<JobStatus, usize>) -> BTreeMap<&'static str, usize> {
    counts
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(status, n)| (status.as_str(), *n))
        .collect()
}

/// The per-job liveness invariants of instance `name`.
fn check_job(scenario: &Scenario, name: &str, job: &coordinator::core::Job) -> Result<(), String> {
    let error = job
        .error
        .map_or(String::new(), |e| format!(" (result.error {})", e.as_str()));
    if scenario.invariants.all_jobs_terminal && !job.status.is_terminal() {
        return Err(format!(
            "{name}: job {} is still {} after {} attempt(s){error}",
            job.id, job.status, job.attempts
        ));
    }
    if scenario.invariants.all_jobs_completed && job.status != JobStatus::Completed {
        return Err(format!(
            "{name}: job {} is {}, not completed, after {} attempt(s){error}",
            job.id, job.status, job.attempts
        ));
    }
    Ok(())
}

/// The transcript lines that mention the first job id in `message`, for an
/// invariant failure: the job's history as the run saw it.
fn job_history(message: &str, transcript: &[String]) -> Vec<String> {
    const HISTORY_LINES_MAX: usize = 12;
    let Some(id) = message
        .split(|c: char| !(c.is_ascii_hexdigit() || c == '-'))
        .find(|w| w.len() == 36 && uuid::Uuid::parse_str(w).is_ok())
    else {
        return Vec::new();
    };
    let lines: Vec<String> = transcript
        .iter()
        .filter(|l| l.contains(id))
        .map(|l| l.chars().take(240).collect())
        .collect();
    let skip = lines.len().saturating_sub(HISTORY_LINES_MAX);
    lines.into_iter().skip(skip).collect()
}

#[cfg(test)]
mod tests {
    use super::forge_signature;

    /// A 65-byte signature whose `s` ends in `byte`, with `v` = 0x1b.
    fn signature_ending(byte: &str) -> String {
        format!("0x{}{byte}1b", "ab".repeat(63))
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
