//! The processes a run talks to: the coordinator (started here or given by
//! `--target`) and the bare handler (this binary re-run with
//! `--serve-bare`), and the health reads that tell they are up.

use crate::cli::{Args, Mode};
use crate::clock::now;
use benches::procfs::{self, ProcSample};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::process::{Child, Command};

/// The queue bound endpoints mode gives a coordinator it starts: above what
/// any run of `--duration` seconds commits on this hardware.
const ENDPOINTS_QUEUE_LEN_MAX: usize = 10_000_000;

/// A server process this run started (killed on drop), or the `--target`.
pub struct Server {
    child: Option<Child>,
    pub pid: Option<u32>,
    pub base: String,
}

impl Server {
    pub fn sample(&self) -> Option<ProcSample> {
        self.pid.and_then(procfs::sample)
    }

    pub async fn stop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
        self.child = None;
    }
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("local addr").port()
}

pub async fn wait_ready(client: &reqwest::Client, base: &str) -> Result<(), String> {
    let deadline = now() + Duration::from_secs(15);
    loop {
        if let Ok(r) = client.get(format!("{base}/v1/health")).send().await {
            if r.status().is_success() {
                return Ok(());
            }
        }
        if now() > deadline {
            return Err(format!("{base} did not answer /v1/health within 15 s"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// This binary re-run as the bare axum handler on a free port (not yet
/// waited for).
pub fn spawn_bare(this_exe: &Path) -> Result<Server, String> {
    let bare_port = free_port();
    let mut cmd = Command::new(this_exe);
    cmd.arg("--serve-bare")
        .arg(format!("127.0.0.1:{bare_port}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .kill_on_drop(true);
    let child = cmd.spawn().map_err(|e| e.to_string())?;
    Ok(Server {
        pid: child.id(),
        child: Some(child),
        base: format!("http://127.0.0.1:{bare_port}"),
    })
}

/// The coordinator under load: the `--target`, or one started from
/// `--coordinator-bin` (default: `coordinator` next to this binary) with its
/// log in `log_dir` and, under `--db fresh`, `fresh_db` as its store.
pub async fn coordinator(
    args: &Args,
    this_exe: &Path,
    log_dir: &Path,
    fresh_db: Option<&Path>,
    client: &reqwest::Client,
) -> Result<Server, String> {
    if let Some(url) = &args.target {
        return Ok(Server {
            child: None,
            pid: args.pid,
            base: url.trim_end_matches('/').to_owned(),
        });
    }
    let bin = match &args.coordinator_bin {
        Some(b) => b.clone(),
        None => this_exe
            .parent()
            .map(|d| d.join("coordinator"))
            .ok_or("cannot locate the coordinator binary")?,
    };
    if !bin.exists() {
        return Err(format!(
            "{} not found: build it with `cargo build --release -p coordinator` or pass --coordinator-bin",
            bin.display()
        ));
    }
    let coord_args = coordinator_args(args, fresh_db);
    spawn_server(&bin, &coord_args, &log_dir.join("coordinator.log"), client).await
}

/// The started coordinator's arguments: `--coordinator-arg`s, the queue
/// bound of endpoints mode and the `--db` flag. A fresh database left over
/// at `fresh_db` is removed first.
fn coordinator_args(args: &Args, fresh_db: Option<&Path>) -> Vec<String> {
    let mut coord_args = args.coordinator_args.clone();
    // Endpoints mode measures what a commit costs the handler: since
    // round 5 a 3-second run commits more than the default 100,000
    // pending jobs, and admission control's 503s would be measured
    // instead. An explicit --queue-len-max still wins.
    if matches!(args.mode, Mode::Endpoints)
        && !coord_args.iter().any(|a| a.starts_with("--queue-len-max"))
    {
        coord_args.push(format!("--queue-len-max={ENDPOINTS_QUEUE_LEN_MAX}"));
    }
    match args.db.as_str() {
        "none" => {}
        "fresh" => {
            let path = fresh_db.expect("fresh db path");
            remove_db(path);
            coord_args.push(format!("--db={}", path.display()));
        }
        other => coord_args.push(format!("--db={other}")),
    }
    coord_args
}

async fn spawn_server(
    program: &Path,
    args: &[String],
    log: &Path,
    client: &reqwest::Client,
) -> Result<Server, String> {
    let port = free_port();
    let log_file = std::fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env("RUST_LOG", "warn")
        .env("COORDINATOR_LISTEN", format!("127.0.0.1:{port}"))
        // Every load-tool worker dials from 127.0.0.1, one client as the
        // coordinator counts them: let them all handshake at once.
        .env("COORDINATOR_HANDSHAKES_PER_CLIENT_MAX", "1024")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(log_file))
        .kill_on_drop(true);
    let child = cmd
        .spawn()
        .map_err(|e| format!("starting {}: {e}", program.display()))?;
    let server = Server {
        pid: child.id(),
        child: Some(child),
        base: format!("http://127.0.0.1:{port}"),
    };
    wait_ready(client, &server.base).await?;
    Ok(server)
}

/// Removes a SQLite database and its WAL and shared-memory files.
pub fn remove_db(path: &Path) {
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(p));
    }
}

pub async fn workers_online(client: &reqwest::Client, base: &str) -> Option<u64> {
    health(client, base).await?["workers_online"].as_u64()
}

pub async fn health(client: &reqwest::Client, base: &str) -> Option<Value> {
    client
        .get(format!("{base}/v1/health"))
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()
}
