//! The end-to-end load: C clients each commit a job, follow it to its end
//! by polling, and take the next, for a count of jobs, a time, or at a
//! fixed arrival rate.

use crate::cli::{poll_name, Args, Mode, PollStyle};
use crate::clock::{now, unix_us};
use benches::procfs::{self, ProcSample};
use benches::stats::{summarize, Summary};
use indicatif::ProgressBar;
use serde::Serialize;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// A job not ended this long after its commit counts as a failure.
const JOB_TIMEOUT: Duration = Duration::from_secs(60);

/// The label of the phase that only warms up; it is not reported.
pub const WARM_UP: &str = "warm-up";

#[derive(Debug, Clone, Copy)]
pub struct JobSample {
    /// Seconds since the phase started, when the job was seen to end.
    pub done_at_s: f64,
    pub commit_us: u64,
    /// Commit sent (or, in `rate` mode, scheduled) → poll saw `completed`.
    pub observed_us: u64,
    /// Commit sent → the coordinator's `completed_at` (ms resolution).
    pub server_us: u64,
    /// Scheduled → sent (`rate` mode only).
    start_lag_us: u64,
    polls: u32,
}

#[derive(Default)]
struct Failures {
    commit: AtomicU64,
    job_failed: AtomicU64,
    timeout: AtomicU64,
    poll: AtomicU64,
}

enum Tickets {
    Count { left: AtomicU64 },
    Until { deadline: Instant },
    Scheduled(tokio::sync::Mutex<tokio::sync::mpsc::UnboundedReceiver<Instant>>),
}

impl Tickets {
    /// `Some(scheduled time)` while there is work, `None` when the phase is over.
    async fn next(&self) -> Option<Option<Instant>> {
        match self {
            Tickets::Count { left } => left
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .ok()
                .map(|_| None),
            Tickets::Until { deadline } => (now() < *deadline).then_some(None),
            Tickets::Scheduled(rx) => rx.lock().await.recv().await.map(Some),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct LoadResult {
    pub label: String,
    pub seconds: f64,
    pub committed: u64,
    pub completed: u64,
    pub failures: Value,
    pub jobs_per_s: f64,
    pub offered_rate: Option<f64>,
    pub commit_latency: Summary,
    pub commit_to_completed_observed: Summary,
    pub commit_to_completed_server: Summary,
    pub start_lag: Option<Summary>,
    pub polls_per_job: f64,
    pub coordinator_cpu_us_per_job: Option<f64>,
    pub coordinator_cpu_cores: Option<f64>,
    pub loadgen_cpu_us_per_job: Option<f64>,
    #[serde(skip)]
    pub samples: Vec<JobSample>,
}

impl LoadResult {
    /// Commit refusals, failed jobs and timeouts (poll errors are retried).
    pub fn failures_total(&self) -> u64 {
        ["commit", "job_failed", "timeout"]
            .iter()
            .map(|k| self.failures[k].as_u64().unwrap_or(0))
            .sum()
    }
}

/// What every phase of one poll style shares.
struct Load<'a> {
    client: &'a reqwest::Client,
    base: &'a str,
    clients: usize,
    poll: PollStyle,
    poll_interval: Duration,
    wait_ms: u64,
    pid: Option<u32>,
    progress: &'a ProgressBar,
}

#[derive(Debug, Clone, Copy)]
enum LoadMode {
    Count(u64),
    Duration(f64),
    Rate { per_s: f64, secs: f64 },
}

/// Modes `jobs`, `duration` and `rate`, once per `--poll` style (workers
/// already connected): a warm-up first, then the mode's phases.
pub async fn run_loads(
    args: &Args,
    client: &reqwest::Client,
    base: &str,
    pid: Option<u32>,
    progress: &ProgressBar,
) -> Vec<LoadResult> {
    let mut loads = Vec::new();
    for (i, &style) in args.poll.iter().enumerate() {
        let load = Load {
            client,
            base,
            clients: args.clients,
            poll: style,
            poll_interval: Duration::from_millis(args.poll_interval_ms),
            wait_ms: args.wait_ms,
            pid,
            progress,
        };
        // The default style keeps the labels reports had before `--poll`.
        let label = |name: &str| match style {
            PollStyle::Backoff => name.to_owned(),
            other => format!("{name}, poll {}", poll_name(other, args)),
        };
        if i == 0 {
            // A short warm-up so connection pools and allocators are in their steady state.
            run_load(&load, WARM_UP, LoadMode::Count((args.clients as u64) * 4)).await;
        }
        match args.mode {
            Mode::Jobs => {
                loads.push(run_load(&load, &label("jobs"), LoadMode::Count(args.jobs)).await)
            }
            Mode::Duration => loads
                .push(run_load(&load, &label("duration"), LoadMode::Duration(args.duration)).await),
            _ => run_rate(&load, args, &label, &mut loads).await,
        }
    }
    loads
}

/// Rate mode: at `--rate`, or at `--rate-of-peak` of a peak measured first
/// (reported too).
async fn run_rate(
    load: &Load<'_>,
    args: &Args,
    label: &dyn Fn(&str) -> String,
    loads: &mut Vec<LoadResult>,
) {
    let per_s = match args.rate {
        Some(r) => r,
        None => {
            let peak = run_load(load, &label("peak"), LoadMode::Duration(args.peak_secs)).await;
            let r = peak.jobs_per_s * args.rate_of_peak;
            loads.push(peak);
            r
        }
    };
    loads.push(
        run_load(
            load,
            &label(&format!("rate {per_s:.0}/s")),
            LoadMode::Rate {
                per_s: per_s.max(1.0),
                secs: args.duration,
            },
        )
        .await,
    );
}

/// How a client follows its job: the query of each poll, the pause before
/// the first, and the pause between polls (`None`: doubling up to 16 ms).
#[derive(Clone)]
struct PollPlan {
    query: String,
    first_delay: Duration,
    next_delay: Option<Duration>,
}

impl PollPlan {
    fn of(load: &Load<'_>) -> Self {
        let (query, first_delay, next_delay) = match load.poll {
            PollStyle::Backoff => (String::new(), Duration::from_millis(1), None),
            PollStyle::Every => (String::new(), Duration::ZERO, Some(load.poll_interval)),
            PollStyle::Wait => (
                format!("?wait_ms={}", load.wait_ms),
                Duration::ZERO,
                Some(Duration::ZERO),
            ),
        };
        PollPlan {
            query,
            first_delay,
            next_delay,
        }
    }
}

/// What the client tasks of one phase share.
struct Phase {
    client: reqwest::Client,
    tickets: Tickets,
    failures: Failures,
    committed: AtomicU64,
    commit_url: String,
    body: bytes::Bytes,
    base: String,
    plan: PollPlan,
    progress: ProgressBar,
    start: Instant,
    /// The progress bar counts jobs (else tenths of seconds).
    counted: bool,
}

/// CPU counters of the coordinator and of this process at a phase's start.
struct CpuMarks {
    coordinator: Option<ProcSample>,
    loadgen: Option<ProcSample>,
}

impl CpuMarks {
    fn take(pid: Option<u32>) -> Self {
        CpuMarks {
            coordinator: pid.and_then(procfs::sample),
            loadgen: procfs::sample(0),
        }
    }
}

/// One phase: `load.clients` clients until the tickets of `mode` run out.
async fn run_load(load: &Load<'_>, label: &str, mode: LoadMode) -> LoadResult {
    let commit_url = format!("{}/v1/jobs/commit/cheap", load.base);
    let body = bytes::Bytes::from(
        serde_json::to_vec(&benches::fixtures::task_body("loadgen")).expect("json"),
    );
    let cpu_before = CpuMarks::take(load.pid);
    let start = now();
    let (tickets, offered_rate, generator) = tickets(mode, start, load.progress);
    let phase = Arc::new(Phase {
        client: load.client.clone(),
        tickets,
        failures: Failures::default(),
        committed: AtomicU64::new(0),
        commit_url,
        body,
        base: load.base.to_owned(),
        plan: PollPlan::of(load),
        progress: load.progress.clone(),
        start,
        counted: matches!(mode, LoadMode::Count(_)),
    });
    load.progress.set_position(0);
    load.progress.set_message(label.to_owned());
    let ticker = Ticker::start(phase.clone());
    let tasks: Vec<_> = (0..load.clients)
        .map(|_| tokio::spawn(client_loop(phase.clone())))
        .collect();
    let mut samples = Vec::new();
    for t in tasks {
        if let Ok(s) = t.await {
            samples.extend(s);
        }
    }
    if let Some(g) = generator {
        g.abort();
    }
    ticker.stop().await;
    let seconds = start.elapsed().as_secs_f64();
    let cpu_after = CpuMarks::take(load.pid);
    summarize_load(
        label,
        seconds,
        &phase,
        offered_rate,
        samples,
        cpu_before,
        cpu_after,
    )
}

/// The tickets of `mode` from `start` (sizing the progress bar), the offered
/// rate, and in `rate` mode the task that issues the scheduled arrivals.
fn tickets(
    mode: LoadMode,
    start: Instant,
    progress: &ProgressBar,
) -> (Tickets, Option<f64>, Option<JoinHandle<()>>) {
    match mode {
        LoadMode::Count(n) => {
            progress.set_length(n);
            (Tickets::Count { left: n.into() }, None, None)
        }
        LoadMode::Duration(secs) => {
            progress.set_length((secs * 10.0) as u64);
            (
                Tickets::Until {
                    deadline: start + Duration::from_secs_f64(secs),
                },
                None,
                None,
            )
        }
        LoadMode::Rate { per_s, secs } => {
            progress.set_length((secs * 10.0) as u64);
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            let total = (per_s * secs).round() as u64;
            let generator = tokio::spawn(async move {
                for k in 0..total {
                    let at = start + Duration::from_secs_f64(k as f64 / per_s);
                    tokio::time::sleep_until(at).await;
                    if tx.send(at).is_err() {
                        return;
                    }
                }
            });
            (
                Tickets::Scheduled(tokio::sync::Mutex::new(rx)),
                Some(per_s),
                Some(generator),
            )
        }
    }
}

/// Updates the progress bar every 200 ms until stopped.
struct Ticker {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<()>,
}

impl Ticker {
    fn start(phase: Arc<Phase>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let handle = tokio::spawn(async move {
            while !stopped.load(Ordering::Relaxed) {
                if !phase.counted {
                    let tenths = (phase.start.elapsed().as_secs_f64() * 10.0) as u64;
                    phase.progress.set_position(tenths);
                }
                let committed = phase.committed.load(Ordering::Relaxed);
                phase.progress.set_message(format!("committed {committed}"));
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        Ticker { stop, handle }
    }

    async fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.handle.await;
    }
}

/// One client: a job per ticket, committed and followed to its end; the
/// samples of the jobs that completed.
async fn client_loop(phase: Arc<Phase>) -> Vec<JobSample> {
    let mut samples = Vec::new();
    while let Some(scheduled) = phase.tickets.next().await {
        if let Some(sample) = phase.one_job(scheduled).await {
            samples.push(sample);
            if phase.counted {
                phase.progress.inc(1);
            }
        }
    }
    samples
}

impl Phase {
    /// Commits a job and follows it; its sample if it completed. `scheduled`
    /// is the arrival time in `rate` mode, where latencies count from it.
    async fn one_job(&self, scheduled: Option<Instant>) -> Option<JobSample> {
        let sent = now();
        let sent_unix_us = unix_us();
        let Some(job_id) = self.commit().await else {
            self.failures.commit.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        let commit_us = sent.elapsed().as_micros() as u64;
        self.committed.fetch_add(1, Ordering::Relaxed);
        let (record, polls) = self.follow(&job_id, sent).await?;
        let origin = scheduled.unwrap_or(sent);
        let completed_ms = record["completed_at"]
            .as_str()
            .and_then(protocol::time::parse_ms)
            .unwrap_or(0);
        let server_us = (completed_ms * 1000 - sent_unix_us).max(0) as u64;
        Some(JobSample {
            done_at_s: self.start.elapsed().as_secs_f64(),
            commit_us,
            observed_us: origin.elapsed().as_micros() as u64,
            server_us,
            start_lag_us: sent.saturating_duration_since(origin).as_micros() as u64,
            polls,
        })
    }

    /// The id of a committed job; `None` unless the commit answered 201
    /// with one.
    async fn commit(&self) -> Option<String> {
        let res = self
            .client
            .post(&self.commit_url)
            .header("content-type", "application/json")
            .body(self.body.clone())
            .send()
            .await;
        match res {
            Ok(r) if r.status().as_u16() == 201 => r
                .json::<Value>()
                .await
                .ok()
                .and_then(|v| v["job_id"].as_str().map(str::to_owned)),
            _ => None,
        }
    }

    /// Polls the job until it completes (its record and the polls it took),
    /// fails, or outlives [`JOB_TIMEOUT`] from `sent` (`None`, counted).
    async fn follow(&self, job_id: &str, sent: Instant) -> Option<(Value, u32)> {
        let poll_url = format!("{}/v1/jobs/{job_id}{}", self.base, self.plan.query);
        let mut delay = self.plan.first_delay;
        let mut polls = 0u32;
        loop {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            polls += 1;
            let record = match self.client.get(&poll_url).send().await {
                Ok(r) if r.status().is_success() => r.json::<Value>().await.ok(),
                _ => None,
            };
            let Some(record) = record else {
                self.failures.poll.fetch_add(1, Ordering::Relaxed);
                if sent.elapsed() > JOB_TIMEOUT {
                    return None;
                }
                continue;
            };
            match record["status"].as_str() {
                Some("completed") => return Some((record, polls)),
                Some("failed") => {
                    self.failures.job_failed.fetch_add(1, Ordering::Relaxed);
                    return None;
                }
                _ => {}
            }
            if sent.elapsed() > JOB_TIMEOUT {
                self.failures.timeout.fetch_add(1, Ordering::Relaxed);
                return None;
            }
            delay = self
                .plan
                .next_delay
                .unwrap_or((delay * 2).min(Duration::from_millis(16)));
        }
    }
}

/// A phase's figures from its samples, counters and CPU marks.
fn summarize_load(
    label: &str,
    seconds: f64,
    phase: &Phase,
    offered_rate: Option<f64>,
    samples: Vec<JobSample>,
    before: CpuMarks,
    after: CpuMarks,
) -> LoadResult {
    let completed = samples.len() as u64;
    let per_job = |b: Option<ProcSample>, a: Option<ProcSample>| match (b, a) {
        (Some(b), Some(a)) if completed > 0 => {
            Some((a.cpu_seconds - b.cpu_seconds) * 1e6 / completed as f64)
        }
        _ => None,
    };
    let pick = |f: fn(&JobSample) -> u64| samples.iter().map(f).collect::<Vec<u64>>();
    let failures = &phase.failures;
    LoadResult {
        label: label.to_owned(),
        seconds,
        committed: phase.committed.load(Ordering::Relaxed),
        completed,
        failures: json!({
            "commit": failures.commit.load(Ordering::Relaxed),
            "job_failed": failures.job_failed.load(Ordering::Relaxed),
            "timeout": failures.timeout.load(Ordering::Relaxed),
            "poll_errors": failures.poll.load(Ordering::Relaxed),
        }),
        jobs_per_s: completed as f64 / seconds,
        offered_rate,
        commit_latency: summarize(&pick(|s| s.commit_us)),
        commit_to_completed_observed: summarize(&pick(|s| s.observed_us)),
        commit_to_completed_server: summarize(&pick(|s| s.server_us)),
        start_lag: offered_rate.map(|_| summarize(&pick(|s| s.start_lag_us))),
        polls_per_job: samples.iter().map(|s| s.polls as f64).sum::<f64>()
            / completed.max(1) as f64,
        coordinator_cpu_us_per_job: per_job(before.coordinator, after.coordinator),
        coordinator_cpu_cores: match (before.coordinator, after.coordinator) {
            (Some(b), Some(a)) => Some((a.cpu_seconds - b.cpu_seconds) / seconds),
            _ => None,
        },
        loadgen_cpu_us_per_job: per_job(before.loadgen, after.loadgen),
        samples,
    }
}

/// Completions per second in 250 ms buckets.
pub fn throughput_series(samples: &[JobSample], seconds: f64) -> Vec<(f64, f64)> {
    let bucket = 0.25;
    let n = (seconds / bucket).ceil().max(1.0) as usize;
    let mut counts = vec![0u64; n];
    for s in samples {
        let i = ((s.done_at_s / bucket) as usize).min(n - 1);
        counts[i] += 1;
    }
    counts
        .iter()
        .enumerate()
        .map(|(i, &c)| ((i as f64 + 0.5) * bucket, c as f64 / bucket))
        .collect()
}
