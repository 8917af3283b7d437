//! Hammering one endpoint with C clients for a while: the ceiling's
//! measurements and endpoints mode (health, quote, commit without workers,
//! poll).

use crate::clock::now;
use benches::procfs;
use benches::stats::{summarize, Summary};
use indicatif::ProgressBar;
use serde::Serialize;
use serde_json::Value;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Pending jobs endpoints mode creates for its poll phase.
const POLL_JOBS: usize = 1_000;

#[derive(Debug, Clone, Serialize)]
pub struct EndpointResult {
    pub name: String,
    requests: u64,
    pub failures: u64,
    seconds: f64,
    pub req_per_s: f64,
    pub latency: Summary,
    pub server_cpu_us_per_req: Option<f64>,
    #[serde(skip)]
    pub samples: Vec<u64>,
}

#[derive(Clone)]
pub enum Req {
    Get(String),
    Post(String, bytes::Bytes),
    /// GET of one of these URLs, round robin.
    GetMany(Arc<Vec<String>>),
}

/// `clients` clients sending `req` back to back for `secs` seconds; the
/// server's CPU per request when its pid is known.
pub async fn hammer(
    client: &reqwest::Client,
    name: &str,
    req: Req,
    clients: usize,
    secs: f64,
    server: Option<u32>,
) -> EndpointResult {
    let before = server.and_then(procfs::sample);
    let start = now();
    let deadline = start + Duration::from_secs_f64(secs);
    let counter = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let client = client.clone();
        let req = req.clone();
        let counter = counter.clone();
        tasks.push(tokio::spawn(async move {
            hammer_until(&client, &req, &counter, deadline).await
        }));
    }
    let mut samples = Vec::new();
    let mut failures = 0;
    for t in tasks {
        if let Ok((s, f)) = t.await {
            samples.extend(s);
            failures += f;
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    let after = server.and_then(procfs::sample);
    let requests = samples.len() as u64;
    let cpu = match (before, after) {
        (Some(b), Some(a)) if requests > 0 => {
            Some((a.cpu_seconds - b.cpu_seconds) * 1e6 / requests as f64)
        }
        _ => None,
    };
    EndpointResult {
        name: name.to_owned(),
        requests,
        failures,
        seconds,
        req_per_s: requests as f64 / seconds,
        latency: summarize(&samples),
        server_cpu_us_per_req: cpu,
        samples,
    }
}

/// One client's requests until `deadline`: the latencies (µs) of those that
/// succeeded, and how many failed. `counter` numbers the requests of all
/// clients, to spread `GetMany` over its URLs.
async fn hammer_until(
    client: &reqwest::Client,
    req: &Req,
    counter: &AtomicU64,
    deadline: Instant,
) -> (Vec<u64>, u64) {
    let mut samples = Vec::new();
    let mut failures = 0u64;
    while now() < deadline {
        let i = counter.fetch_add(1, Ordering::Relaxed) as usize;
        let builder = match req {
            Req::Get(url) => client.get(url),
            Req::Post(url, body) => client
                .post(url)
                .header("content-type", "application/json")
                .body(body.clone()),
            Req::GetMany(urls) => client.get(&urls[i % urls.len()]),
        };
        let t0 = now();
        let ok = match builder.send().await {
            Ok(r) => {
                let status = r.status();
                r.bytes().await.is_ok() && status.is_success()
            }
            Err(_) => false,
        };
        if ok {
            samples.push(t0.elapsed().as_micros() as u64);
        } else {
            failures += 1;
        }
    }
    (samples, failures)
}

/// Endpoints mode: health, quote, commit (no workers) and poll, each
/// hammered for `secs`.
pub async fn measure(
    client: &reqwest::Client,
    base: &str,
    clients: usize,
    secs: f64,
    pid: Option<u32>,
    progress: &ProgressBar,
) -> Result<Vec<EndpointResult>, String> {
    let body = bytes::Bytes::from(
        serde_json::to_vec(&benches::fixtures::task_body("loadgen")).expect("json"),
    );
    // The jobs the poll phase reads, committed first so that a full
    // queue after the commit phase cannot leave it nothing to poll.
    let poll_urls = commit_poll_jobs(client, base, &body).await?;
    let mut endpoints = Vec::new();
    for (name, req) in [
        ("health", Req::Get(format!("{base}/v1/health"))),
        (
            "quote",
            Req::Get(format!("{base}/v1/quote?job_type=TASK&policy=AUTO")),
        ),
        (
            "commit (no workers)",
            Req::Post(format!("{base}/v1/jobs/commit/cheap"), body.clone()),
        ),
    ] {
        progress.set_message(name);
        endpoints.push(hammer(client, name, req, clients, secs, pid).await);
    }
    progress.set_message("poll");
    endpoints.push(
        hammer(
            client,
            "poll",
            Req::GetMany(Arc::new(poll_urls)),
            clients,
            secs,
            pid,
        )
        .await,
    );
    Ok(endpoints)
}

/// Commits [`POLL_JOBS`] jobs and returns their status URLs; an error if
/// any commit is refused (the poll figure would then measure fewer jobs, or
/// none, without saying so).
async fn commit_poll_jobs(
    client: &reqwest::Client,
    base: &str,
    body: &bytes::Bytes,
) -> Result<Vec<String>, String> {
    let mut urls = Vec::with_capacity(POLL_JOBS);
    for _ in 0..POLL_JOBS {
        let r = client
            .post(format!("{base}/v1/jobs/commit/cheap"))
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = r.status();
        let v: Value = r.json().await.map_err(|e| e.to_string())?;
        match v["job_id"].as_str() {
            Some(id) => urls.push(format!("{base}/v1/jobs/{id}")),
            None => {
                return Err(format!(
                    "a commit for the poll phase answered {status}: {v}"
                ))
            }
        }
    }
    Ok(urls)
}
