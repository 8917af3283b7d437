//! The load's WebSocket workers (worker-sim, signing real receipts the
//! coordinator verifies), and idle mode: workers connected and held.

use crate::cli::Args;
use crate::clock::{now, unix_us};
use crate::process::{health, workers_online, Server};
use indicatif::ProgressBar;
use serde_json::{json, Value};
use std::time::Duration;
use tokio::task::JoinHandle;
use worker_sim::{ReconnectPolicy, Worker, WorkerConfig, WsConnector};

/// Workers connected per batch, each batch waited for before the next, so
/// the listen backlog is never overrun.
const BATCH: u32 = 250;

/// Connects `count` workers to `base` (or round robin to `--worker-node`s)
/// and returns once the target's health counts them all online.
pub async fn connect_workers(
    client: &reqwest::Client,
    base: &str,
    args: &Args,
    count: u32,
    progress: &ProgressBar,
) -> Result<Vec<JoinHandle<()>>, String> {
    let ws_of = |base: &str| format!("{}/v1/workers/ws", base.replacen("http://", "ws://", 1));
    let ws_urls: Vec<String> = match args.worker_nodes.is_empty() {
        true => vec![ws_of(base)],
        false => args.worker_nodes.iter().map(|b| ws_of(b)).collect(),
    };
    let epoch_ms = unix_us() / 1000;
    let online_before = workers_online(client, base).await.unwrap_or(0);
    // Workers sign only for the network they serve: the target's.
    let network = health(client, base)
        .await
        .and_then(|v| v["network"].as_str().map(str::to_owned))
        .ok_or("the target's /v1/health names no network")?;
    let mut handles = Vec::with_capacity(count as usize);
    progress.set_length(count as u64);
    progress.set_position(0);
    progress.set_message("connecting workers");
    let mut spawned = 0u32;
    while spawned < count {
        let n = BATCH.min(count - spawned);
        for i in spawned..spawned + n {
            let mut worker = Worker::new(
                worker_config(args, i, &network),
                worker_sim::TokioClock::shared(epoch_ms),
            )
            .map_err(|e| e.to_string())?;
            let ws_url = ws_urls[i as usize % ws_urls.len()].clone();
            let connector = worker_connector(ws_url, args.nagle_workers);
            handles.push(tokio::spawn(async move {
                let _ = worker.run(connector).await;
            }));
        }
        spawned += n;
        wait_online(client, base, online_before, spawned, progress).await?;
    }
    Ok(handles)
}

/// Worker `i`: both job types, `--slots`, `--worker-latency`, no reconnects.
fn worker_config(args: &Args, i: u32, network: &str) -> WorkerConfig {
    WorkerConfig {
        name: format!("lg-{i}"),
        seed: worker_sim::worker_seed(0x10AD, i),
        capabilities: vec![
            protocol::api::JobType::Task,
            protocol::api::JobType::LlmInfer,
        ],
        slots: args.slots,
        latency: args.worker_latency.clone(),
        reconnect: ReconnectPolicy {
            enabled: false,
            ..ReconnectPolicy::default()
        },
        network: network.to_owned(),
        ..WorkerConfig::default()
    }
}

/// Waits (at most 60 s) until `spawned` workers more than `online_before`
/// are online.
async fn wait_online(
    client: &reqwest::Client,
    base: &str,
    online_before: u64,
    spawned: u32,
    progress: &ProgressBar,
) -> Result<(), String> {
    let deadline = now() + Duration::from_secs(60);
    loop {
        let online = workers_online(client, base).await.unwrap_or(0);
        progress.set_position(online.saturating_sub(online_before));
        if online >= online_before + spawned as u64 {
            return Ok(());
        }
        if now() > deadline {
            return Err(format!(
                "only {} of {spawned} workers online after 60 s",
                online.saturating_sub(online_before)
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// TCP_NODELAY is on unless `nagle_workers`: with Nagle's algorithm a worker's
/// back-to-back `accept` and `result` wait for the coordinator's delayed ACK
/// (~40 ms on Linux), a stall of the workers that would count against the
/// coordinator.
fn worker_connector(ws_url: String, nagle_workers: bool) -> WsConnector {
    WsConnector::new(ws_url).with_nodelay(!nagle_workers)
}

/// Idle mode: connects `--workers` workers, holds them `--hold` seconds and
/// reports the coordinator's RSS and CPU meanwhile (the `idle` JSON object),
/// with the workers' handles.
pub async fn hold_idle(
    client: &reqwest::Client,
    server: &Server,
    args: &Args,
    progress: &ProgressBar,
) -> Result<(Value, Vec<JoinHandle<()>>), String> {
    let base = &server.base;
    let before = server.sample();
    let handles = connect_workers(client, base, args, args.workers, progress).await?;
    progress.set_message(format!("holding {} workers", args.workers));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let held_from = server.sample();
    let t0 = now();
    tokio::time::sleep(Duration::from_secs_f64(args.hold)).await;
    let held_secs = t0.elapsed().as_secs_f64();
    let held_to = server.sample();
    let online = workers_online(client, base).await.unwrap_or(0);
    let idle = json!({
        "workers": args.workers,
        "online_at_end": online,
        "hold_seconds": held_secs,
        "rss_before_workers_bytes": before.map(|s| s.rss_bytes),
        "rss_held_bytes": held_to.map(|s| s.rss_bytes),
        "peak_rss_bytes": held_to.map(|s| s.peak_rss_bytes),
        "rss_per_worker_bytes": match (before, held_to) {
            (Some(b), Some(a)) => Some((a.rss_bytes.saturating_sub(b.rss_bytes)) as f64 / args.workers.max(1) as f64),
            _ => None,
        },
        "heartbeat_cpu_fraction_of_core": match (held_from, held_to) {
            (Some(b), Some(a)) => Some((a.cpu_seconds - b.cpu_seconds) / held_secs),
            _ => None,
        },
        "connect_cpu_seconds": match (before, held_from) {
            (Some(b), Some(a)) => Some(a.cpu_seconds - b.cpu_seconds),
            _ => None,
        },
    });
    Ok((idle, handles))
}

#[cfg(test)]
mod tests {
    use super::worker_connector;

    #[test]
    fn nagle_workers_keeps_nagle_on() {
        assert!(!worker_connector("ws://x.test".into(), true).nodelay());
        assert!(worker_connector("ws://x.test".into(), false).nodelay());
    }
}
