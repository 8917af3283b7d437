//! A live world (`harness --live`): one `coordinator` process per instance
//! (or per node, with `--live-db`) on loopback, or coordinators already
//! running somewhere (`--target`); stubs served on loopback ports, real HTTP
//! and real WebSockets.

use super::*;
use crate::spec::names::STUB_NAMES;

impl World {
    /// Builds a live run: one `coordinator` process per instance on
    /// loopback (from `bin`), stubs served on loopback ports, real HTTP and
    /// real WebSockets. Must run in a runtime with I/O enabled.
    pub async fn build_live(
        scenario: &Scenario,
        seed: u64,
        target: &LiveTarget,
    ) -> Result<Self, WorldError> {
        let epoch_ms = coordinator::Clock::now_ms(&coordinator::SystemClock);
        let (_, transcript, worker_clock) = clocks(epoch_ms);
        let mut master = ChaCha20Rng::seed_from_u64(seed);
        let http: Arc<dyn HttpTransport> = Arc::new(router::ReqwestTransport::new(30_000));
        let mut instances = BTreeMap::new();
        for (name, spec) in &scenario.instances {
            let instance_seed: u64 = master.gen();
            let handle = match target {
                LiveTarget::Spawn { bin, cluster } => {
                    let cluster = cluster.as_ref();
                    live_instance(name, spec, instance_seed, bin, cluster, &transcript).await?
                }
                LiveTarget::Remote(urls) => remote_instance(name, urls, &transcript)?,
            };
            instances.insert(name.clone(), handle);
        }
        // Stubs get ports before the world exists; `expose` hands out their URLs.
        let mut stub_urls = BTreeMap::new();
        for name in STUB_NAMES {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
            stub_urls.insert(name.to_owned(), listener);
        }
        let expose = |name: &str, router: axum::Router| {
            let listener = stub_urls
                .remove(name)
                .ok_or_else(|| format!("no port for {name}"))?;
            let addr = listener.local_addr().map_err(|e| e.to_string())?;
            listener.set_nonblocking(true).map_err(|e| e.to_string())?;
            let listener =
                tokio::net::TcpListener::from_std(listener).map_err(|e| e.to_string())?;
            tokio::spawn(async move {
                let _ = axum::serve(listener, router).await;
            });
            Ok(format!("http://{addr}"))
        };
        let mut world = assemble(
            scenario,
            Parts {
                master,
                transcript,
                http,
                instances,
                epoch_ms,
                worker_clock,
                seed,
            },
            expose,
        )?;
        world.start_workers()?;
        Ok(world)
    }
}

/// Starts the coordinator process(es) of live instance `name`.
async fn live_instance(
    name: &str,
    spec: &Instance,
    instance_seed: u64,
    bin: &std::path::Path,
    cluster: Option<&LiveCluster>,
    transcript: &Transcript,
) -> Result<InstanceHandle, String> {
    let mut args = live_args(spec);
    let facilitator = payment_args(spec, &mut args).await?;
    let schema = cluster.map(|_| live_schema(name));
    let mut processes = Vec::new();
    let mut addrs = Vec::new();
    for node in 0..cluster.map_or(1, |c| c.nodes.max(1)) {
        let mut args = args.clone();
        // Nodes draw their ids from seeds of their own.
        let seed = instance_seed.wrapping_add(node as u64).to_string();
        args.extend(["--seed".into(), seed]);
        match (cluster, &schema) {
            (Some(c), Some(schema)) => args.extend([
                "--db".into(),
                c.db.clone(),
                "--db-schema".into(),
                schema.clone(),
                "--node-id".into(),
                format!("{name}-{node}"),
            ]),
            _ => args.extend(["--db".into(), ":memory:".into()]),
        }
        let (process, addr) = start_coordinator(bin, &args).await?;
        let node_name = match cluster {
            Some(_) => format!("{name} node {node}"),
            None => name.to_owned(),
        };
        transcript.log(
            "harness",
            format!("started coordinator {node_name} on {addr}"),
        );
        processes.push(process);
        addrs.push(addr);
    }
    Ok(InstanceHandle {
        base_url: format!("http://{}", addrs[0]),
        poll_url: format!("http://{}", addrs[addrs.len() - 1]),
        facilitator,
        settlements: None,
        driver: Driver::Live {
            ws_urls: addrs
                .iter()
                .map(|addr| format!("ws://{addr}/v1/workers/ws"))
                .collect(),
            _processes: processes,
        },
        more_nodes: Vec::new(),
        shared: None,
        user_suffix: None,
    })
}

/// Adds the payment flags of `spec` to `args`; serves its scripted
/// facilitator, if it has one, and returns it.
async fn payment_args(
    spec: &Instance,
    args: &mut Vec<String>,
) -> Result<Option<testkit::FacilitatorStub>, String> {
    let Some(payment) = &spec.payment else {
        return Ok(None);
    };
    args.extend([
        "--payment-required".into(),
        "--pay-to".into(),
        payment.pay_to.clone(),
    ]);
    let Some(script) = payment.facilitator.script() else {
        return Ok(None);
    };
    let stub = testkit::FacilitatorStub::new(&spec.network);
    stub.set_script(facilitator_script(script));
    let url = serve_on_loopback(stub.router()).await?;
    args.extend(["--facilitator-url".into(), url]);
    Ok(Some(stub))
}

/// Instance `name` on coordinators the harness did not start (`--target`):
/// one base URL per node. Its network was checked before the run
/// (`run::live::skip_reason`).
fn remote_instance(
    name: &str,
    urls: &BTreeMap<String, Vec<String>>,
    transcript: &Transcript,
) -> Result<InstanceHandle, String> {
    let nodes = urls
        .get(name)
        .filter(|nodes| !nodes.is_empty())
        .ok_or_else(|| format!("no --target for instance {name}"))?;
    for url in nodes {
        transcript.log("harness", format!("using coordinator {name} at {url}"));
    }
    // Unique per run: the wall clock of the harness in milliseconds.
    let run_ms = coordinator::Clock::now_ms(&coordinator::SystemClock);
    Ok(InstanceHandle {
        base_url: nodes[0].clone(),
        poll_url: nodes[nodes.len() - 1].clone(),
        facilitator: None,
        settlements: None,
        driver: Driver::Live {
            ws_urls: nodes.iter().map(|url| ws_url(url)).collect(),
            _processes: Vec::new(),
        },
        more_nodes: Vec::new(),
        shared: None,
        user_suffix: Some(format!("-run{run_ms:x}")),
    })
}

/// The worker endpoint of the coordinator at `base_url` (`http` → `ws`,
/// `https` → `wss`).
fn ws_url(base_url: &str) -> String {
    let rest = base_url.strip_prefix("http").unwrap_or(base_url);
    format!("ws{rest}/v1/workers/ws")
}

/// The command line of an instance's coordinator process, before its
/// payment, node and store arguments.
fn live_args(spec: &Instance) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "--listen".into(),
        "127.0.0.1:0".into(),
        "--network".into(),
        spec.network.clone(),
        // Scenarios name their users plainly unless they say otherwise.
        "--user-auth".into(),
        spec.user_auth.flag().into(),
    ];
    let t = &spec.timing;
    let flags: [(&str, Option<String>); 11] = [
        (
            "--pending-timeout-ms",
            t.pending_timeout_ms.map(|v| v.to_string()),
        ),
        ("--lease-ms", t.lease_ms.map(|v| v.to_string())),
        ("--attempts-max", t.attempts_max.map(|v| v.to_string())),
        (
            "--heartbeat-interval-ms",
            t.heartbeat_interval_ms.map(|v| v.to_string()),
        ),
        (
            "--heartbeat-timeout-ms",
            t.heartbeat_timeout_ms.map(|v| v.to_string()),
        ),
        (
            "--queue-len-max",
            spec.limits.queue_len_max.map(|v| v.to_string()),
        ),
        (
            "--claims-per-minute-max",
            spec.limits.claims_per_minute_max.map(|v| v.to_string()),
        ),
        (
            "--finished-jobs-cached-max",
            spec.limits.finished_jobs_cached_max.map(|v| v.to_string()),
        ),
        (
            "--kept-bytes-max",
            spec.limits.kept_bytes_max.map(|v| v.to_string()),
        ),
        (
            "--kept-share-per-client-percent",
            spec.limits
                .kept_share_per_client_percent
                .map(|v| v.to_string()),
        ),
        (
            "--retention-hours",
            spec.retention_hours.map(|v| v.to_string()),
        ),
    ];
    let extra = bounds_flags(spec).into_iter().chain(queued_args(spec));
    for (flag, value) in flags.into_iter().chain(extra) {
        if let Some(v) = value {
            args.push(flag.into());
            args.push(v);
        }
    }
    args
}

/// The connection bounds' flags (the binary always serves with its
/// bounds, `http_bounds` or not).
fn bounds_flags(spec: &Instance) -> [(&'static str, Option<String>); 5] {
    let (t, l) = (&spec.timing, &spec.limits);
    let text = |v: Option<usize>| v.map(|v| v.to_string());
    [
        (
            "--http-head-timeout-ms",
            t.http_head_timeout_ms.map(|v| v.to_string()),
        ),
        ("--http-connections-max", text(l.http_connections_max)),
        (
            "--http-connections-per-client-max",
            text(l.http_connections_per_client_max),
        ),
        (
            "--worker-sessions-per-client-max",
            text(l.worker_sessions_per_client_max),
        ),
        (
            "--worker-slots-per-client-max",
            l.worker_slots_per_client_max.map(|v| v.to_string()),
        ),
    ]
}

/// The queued budgets' flags (`limits.queued_bytes_max`, per client).
fn queued_args(spec: &Instance) -> [(&'static str, Option<String>); 2] {
    let l = &spec.limits;
    [
        (
            "--queued-bytes-max",
            l.queued_bytes_max.map(|v| v.to_string()),
        ),
        (
            "--queued-bytes-per-client-max",
            l.queued_bytes_per_client_max.map(|v| v.to_string()),
        ),
    ]
}

/// Where a live run's coordinators come from.
#[derive(Debug, Clone)]
pub enum LiveTarget {
    /// Processes the harness starts from `bin`; with `cluster`, several
    /// nodes per instance on PostgreSQL.
    Spawn {
        bin: std::path::PathBuf,
        cluster: Option<LiveCluster>,
    },
    /// Coordinators already running (`--target NAME=URL`): base URLs by
    /// instance name, one per node, in the order given.
    Remote(BTreeMap<String, Vec<String>>),
}

impl LiveTarget {
    /// Parses `--target` values: each `NAME=URL[,NAME=URL…]`; a name given
    /// again adds a node to that instance.
    pub fn remote(values: &[String]) -> Result<Self, String> {
        let mut urls: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for pair in values.iter().flat_map(|v| v.split(',')) {
            let (name, url) = pair
                .split_once('=')
                .ok_or_else(|| format!("--target {pair:?}: expected NAME=URL"))?;
            let url = url.trim_end_matches('/');
            if name.is_empty() || !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(format!(
                    "--target {pair:?}: expected NAME=http(s)://host[:port]"
                ));
            }
            urls.entry(name.to_owned())
                .or_default()
                .push(url.to_owned());
        }
        if urls.is_empty() {
            return Err("--target needs at least one NAME=URL".into());
        }
        Ok(Self::Remote(urls))
    }
}

/// `harness --live --live-db postgres://… --live-nodes N`: each instance is
/// N coordinator nodes on that PostgreSQL (a schema of its own per
/// instance and run), one coordinator in cluster mode. HTTP steps go to
/// the first node, and the harness's own polls of a job's status
/// (`wait_until`, `commit_many`) to the last; workers are spread over the
/// nodes in name order, so jobs, pairings, payments and reads cross nodes.
#[derive(Debug, Clone)]
pub struct LiveCluster {
    pub db: String,
    pub nodes: usize,
}

/// A PostgreSQL schema no other instance of any run uses.
pub(super) fn live_schema(instance: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::SeqCst);
    let instance: String = instance
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .take(24)
        .collect();
    format!("h{}_{n}_{instance}", std::process::id())
}

/// Serves `router` on a free loopback port; returns its base URL.
pub(super) async fn serve_on_loopback(router: axum::Router) -> Result<String, String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    Ok(format!("http://{addr}"))
}

/// Starts a coordinator process and reads the address it listens on from
/// its first log line; the process is killed when the handle drops.
pub(super) async fn start_coordinator(
    bin: &std::path::Path,
    args: &[String],
) -> Result<(tokio::process::Child, String), String> {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let mut child = tokio::process::Command::new(bin)
        .args(args)
        .env("RUST_LOG", "warn,coordinator=info")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("starting {}: {e}", bin.display()))?;
    let stderr = child.stderr.take().ok_or("no stderr")?;
    let mut lines = BufReader::new(stderr).lines();
    let wait = async {
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(rest) = line.split("listening on http://").nth(1) {
                let addr: String = rest.chars().take_while(|c| !c.is_whitespace()).collect();
                return Some(addr);
            }
        }
        None
    };
    let addr = tokio::time::timeout(std::time::Duration::from_secs(20), wait)
        .await
        .map_err(|_| "the coordinator did not start within 20 s".to_owned())?
        .ok_or("the coordinator exited before listening")?;
    // Keep draining its log so it never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok((child, addr))
}
