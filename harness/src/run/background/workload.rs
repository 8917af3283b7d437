//! `[[workloads]]` (schema version 2): a stream of commits running beside
//! the steps, at a fixed rate, each commit's tier, job type, privacy,
//! payer and instance drawn from weighted mixes with the workload's own
//! seeded RNG. Commits go over the simulated network from a client named
//! after the workload, one at a time (a slow answer delays the next
//! commit). With `until = "terminal"` the workload also polls its accepted
//! jobs until each is completed or failed; a `wait_until = { workload }`
//! step waits for it to finish.
//!
//! Transcript: with `trace = true` one line per commit and one per answer
//! (`load > #3 chain_a fast LLM_INFER PUBLIC` / `load < #3 201 JOB_ID`) and
//! one per job ending; with `trace = false` only refused commits and the
//! final counts. Either way the lines are deterministic.

use crate::spec::workload::{Until, WorkloadSpec};
use crate::spec::SimDuration;
use crate::world::transcript::Transcript;
use rand::Rng;
use rand_chacha::ChaCha20Rng;
use router::{HttpRequest, HttpTransport};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// How often a workload polls the jobs it still waits for.
pub const POLL_INTERVAL_MS: u64 = 500;

/// Draws an index by weight.
fn pick(rng: &mut ChaCha20Rng, weights: &[u32]) -> usize {
    let total: u32 = weights.iter().sum();
    let mut r = rng.gen_range(0..total.max(1));
    for (i, w) in weights.iter().enumerate() {
        if r < *w {
            return i;
        }
        r -= w;
    }
    weights.len() - 1
}

/// One commit as drawn.
struct Draw {
    instance: String,
    tier: &'static str,
    job_type: &'static str,
    private: bool,
    paid: bool,
}

fn draw(spec: &WorkloadSpec, rng: &mut ChaCha20Rng) -> Draw {
    let instance = spec.instances[rng.gen_range(0..spec.instances.len().max(1))].clone();
    let tier = ["fast", "cheap"][pick(rng, &[spec.tiers.fast, spec.tiers.cheap])];
    let job_type =
        ["LLM_INFER", "TASK"][pick(rng, &[spec.job_types.llm_infer, spec.job_types.task])];
    let private = pick(rng, &[spec.privacy.public, spec.privacy.private]) == 1;
    let paid = pick(rng, &[spec.payers.unpaid, spec.payers.paid]) == 1;
    Draw {
        instance,
        tier,
        job_type,
        private,
        paid,
    }
}

/// What a workload has done so far.
#[derive(Debug, Default)]
struct Progress {
    committed: u32,
    /// Answers by status (`201`, `402`, ...) or `transport_error`.
    answers: BTreeMap<String, u32>,
    /// Accepted jobs not yet seen terminal: (commit index, instance, id).
    open: Vec<(u32, String, String)>,
    /// Ended jobs by final status.
    ended: BTreeMap<String, u32>,
    commits_done: bool,
}

impl Progress {
    fn summary(&self) -> Value {
        json!({"committed": self.committed, "answers": self.answers, "jobs": self.ended})
    }
}

/// What a workload's task needs from the world.
pub struct Setup {
    pub spec: WorkloadSpec,
    pub rng: ChaCha20Rng,
    pub transport: Arc<dyn HttpTransport>,
    /// Base URL of each instance.
    pub bases: BTreeMap<String, String>,
    pub transcript: Transcript,
    /// Where the 201s are recorded (`World::acknowledged`).
    pub acknowledged: crate::world::acknowledged::AcknowledgedJobs,
    pub payer: x402::LocalEvmSigner,
    pub epoch_ms: i64,
    /// The start of the run (the transcript's +0).
    pub run_start: Instant,
}

/// A running workload: its tasks and when it finished.
pub struct Running {
    pub name: String,
    progress: Arc<Mutex<Progress>>,
    finished: watch::Receiver<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Running {
    /// Waits until the workload finished; its answer counts commits,
    /// answers and job ends.
    pub async fn wait(&mut self, within: &SimDuration) -> Result<Value, String> {
        let waited = tokio::time::timeout(within.duration, self.finished.wait_for(|f| *f)).await;
        let summary = lock(&self.progress).summary();
        match waited {
            Ok(Ok(_)) => Ok(summary),
            _ => Err(format!(
                "workload {} did not finish within {within}: {summary}",
                self.name
            )),
        }
    }

    pub fn abort(&self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

fn lock(progress: &Mutex<Progress>) -> std::sync::MutexGuard<'_, Progress> {
    progress.lock().unwrap_or_else(|p| p.into_inner())
}

/// Spawns the workload's committer, and its poller when it waits for
/// terminal states; whichever ends the workload reports it finished.
pub fn spawn(setup: Setup) -> Running {
    let name = setup.spec.name.clone();
    let progress = Arc::new(Mutex::new(Progress::default()));
    let (done, finished) = watch::channel(false);
    let done = Arc::new(done);
    let mut tasks = Vec::new();
    if setup.spec.until == Until::Terminal {
        tasks.push(tokio::spawn(poll_until_ended(
            setup.spec.clone(),
            setup.transport.clone(),
            setup.bases.clone(),
            setup.transcript.clone(),
            progress.clone(),
            done.clone(),
        )));
    }
    tasks.insert(0, tokio::spawn(commit_all(setup, progress.clone(), done)));
    Running {
        name,
        progress,
        finished,
        tasks,
    }
}

/// Logs the totals and wakes whoever waits for the workload.
fn finish(
    spec: &WorkloadSpec,
    transcript: &Transcript,
    progress: &Mutex<Progress>,
    done: &watch::Sender<bool>,
) {
    let summary = lock(progress).summary();
    transcript.log(
        &spec.name,
        format!(
            "finished {}",
            String::from_utf8_lossy(&protocol::canonical::to_vec(&summary))
        ),
    );
    let _ = done.send(true);
}

/// Commits every job on schedule; with `until = "answered"` the workload
/// is then finished.
async fn commit_all(
    mut setup: Setup,
    progress: Arc<Mutex<Progress>>,
    done: Arc<watch::Sender<bool>>,
) {
    let spec = setup.spec.clone();
    let start = setup.run_start
        + spec
            .start
            .as_ref()
            .map_or(Duration::from_millis(1), |s| s.duration);
    for i in 0..spec.count {
        tokio::time::sleep_until(start + spec.offset(i)).await;
        let drawn = draw(&spec, &mut setup.rng);
        commit_one(&mut setup, &progress, i, drawn).await;
    }
    lock(&progress).commits_done = true;
    if spec.until == Until::Answered {
        finish(&spec, &setup.transcript, &progress, &done);
    }
}

/// Sends commit `i` (paying a 402 when drawn to pay) and records the answer.
async fn commit_one(setup: &mut Setup, progress: &Mutex<Progress>, i: u32, d: Draw) {
    let spec = &setup.spec;
    let transcript = &setup.transcript;
    let privacy = if d.private { "PRIVATE" } else { "PUBLIC" };
    let payload = match d.job_type {
        "TASK" => json!({"task_type": "classify", "input": format!("{} #{i}", spec.name)}),
        _ => json!({"prompt": format!("{} #{i}", spec.name), "max_tokens": 8}),
    };
    let body = json!({"job_type": d.job_type, "user_id": spec.user(), "privacy_class": privacy, "payload": payload});
    let url = format!("{}/v1/jobs/commit/{}", setup.bases[&d.instance], d.tier);
    let paid = if d.paid { " paid" } else { "" };
    if spec.trace {
        transcript.log(
            &spec.name,
            format!(
                "> #{i} {} {} {} {privacy}{paid}",
                d.instance, d.tier, d.job_type
            ),
        );
    }
    let transport = setup.transport.clone();
    let mut answer = transport
        .send(HttpRequest::post_json(url.clone(), &body))
        .await;
    let now_s = (transcript.elapsed_ms() + setup.epoch_ms) / 1000;
    let header = match &answer {
        Ok(r) if d.paid && r.status == 402 => {
            Some(payment_header(&setup.payer, &mut setup.rng, r, now_s))
        }
        _ => None,
    };
    match header {
        Some(Ok((name, value))) => {
            let mut request = HttpRequest::post_json(url, &body);
            request.headers.push((name.to_ascii_lowercase(), value));
            answer = transport.send(request).await;
        }
        Some(Err(e)) => transcript.log(&spec.name, format!("#{i} cannot pay: {e}")),
        None => {}
    }
    let (key, shown, id) = read_answer(&answer);
    if spec.trace || id.is_none() {
        transcript.log(&spec.name, format!("< #{i} {shown}"));
    }
    if let Some(id) = &id {
        setup.acknowledged.insert(id);
    }
    let mut p = lock(progress);
    p.committed += 1;
    *p.answers.entry(key).or_default() += 1;
    if let Some(id) = id {
        p.open.push((i, d.instance, id));
    }
}

/// A commit's answer: its key in the answer counts (status or
/// `transport_error`), its transcript form, and the job id when it is a 201.
fn read_answer(
    answer: &Result<router::HttpResponse, router::TransportError>,
) -> (String, String, Option<String>) {
    match answer {
        Ok(r) => {
            let body: Value = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
            let id = body["job_id"].as_str().map(str::to_owned);
            let shown = match (&id, r.status) {
                (Some(id), 201) => id.clone(),
                _ => refusal(&body),
            };
            (
                r.status.to_string(),
                format!("{} {shown}", r.status),
                id.filter(|_| r.status == 201),
            )
        }
        Err(e) => (
            "transport_error".to_owned(),
            format!("transport error: {e}"),
            None,
        ),
    }
}

/// A refused commit's answer as the transcript shows it: its `error`, or
/// the start of its body (a 402's requirements are long and the same every
/// time).
fn refusal(body: &Value) -> String {
    const SHOWN_CHARS_MAX: usize = 120;
    let shown = match body.get("error") {
        Some(error) => json!({ "error": error }),
        None => body.clone(),
    };
    String::from_utf8_lossy(&protocol::canonical::to_vec(&shown))
        .chars()
        .take(SHOWN_CHARS_MAX)
        .collect()
}

/// Signs the 402's requirements with the scenario payer: the header's name and value.
fn payment_header(
    payer: &x402::LocalEvmSigner,
    rng: &mut ChaCha20Rng,
    answer: &router::HttpResponse,
    now_s: i64,
) -> Result<(String, String), String> {
    use x402::PaymentSigner;
    let header = answer
        .headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("payment-required"))
        .map(|(_, v)| v.as_bytes());
    let required = x402::PaymentRequired::from_response(header, Some(&answer.body))
        .map_err(|e| format!("cannot read the 402 answer: {e}"))?;
    let signed = payer
        .pay(&required, u64::try_from(now_s).unwrap_or(0), rng)
        .map_err(|e| format!("signing the payment: {e}"))?;
    Ok((signed.name.to_owned(), signed.value))
}

/// Polls the open jobs every [`POLL_INTERVAL_MS`] (in commit order) until
/// the commits are done and every accepted job ended. A poll that fails
/// (instance down, link cut) is tried again at the next round.
async fn poll_until_ended(
    spec: WorkloadSpec,
    transport: Arc<dyn HttpTransport>,
    bases: BTreeMap<String, String>,
    transcript: Transcript,
    progress: Arc<Mutex<Progress>>,
    done: Arc<watch::Sender<bool>>,
) {
    loop {
        tokio::time::sleep(Duration::from_millis(POLL_INTERVAL_MS)).await;
        let open = lock(&progress).open.clone();
        let mut ended = Vec::new();
        for (i, instance, id) in &open {
            let url = format!("{}/v1/jobs/{id}", bases[instance]);
            let Ok(r) = transport.send(HttpRequest::get(url)).await else {
                continue;
            };
            let body: Value = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
            let status = body["status"].as_str().unwrap_or("");
            if status == "completed" || status == "failed" {
                if spec.trace || status != "completed" {
                    let error = body["result"]["error"]
                        .as_str()
                        .map_or(String::new(), |e| format!(" ({e})"));
                    transcript.log(&spec.name, format!("#{i} {id} {status}{error}"));
                }
                ended.push((*i, status.to_owned()));
            }
        }
        let mut p = lock(&progress);
        for (i, status) in ended {
            p.open.retain(|(j, _, _)| *j != i);
            *p.ended.entry(status).or_default() += 1;
        }
        if p.commits_done && p.open.is_empty() {
            drop(p);
            finish(&spec, &transcript, &progress, &done);
            return;
        }
    }
}
