//! `worker-sim`: runs N simulated (or real-backend) workers against a
//! coordinator over WebSocket, or serves a hosted-provider stub.

use clap::{Args, Parser, Subcommand, ValueEnum};
use protocol::api::JobType;
use protocol::signing::Keypair;
use rand::SeedableRng;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use testkit::{ProviderKind, ProviderStub, StubConfig};
use worker_sim::event::TracingObserver;
use worker_sim::owner;
use worker_sim::{
    Backend, FaultPlan, Latency, OpenAiBackend, ReconnectPolicy, SharedClock, SimBackend, Worker,
    WorkerConfig, WsConnector,
};

#[derive(Parser, Debug)]
#[command(
    name = "worker-sim",
    version,
    about,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve a hosted-provider stub (OpenAI Chat Completions or Anthropic Messages).
    StubProvider(StubArgs),
    /// Write a new key file (mode 0600), a worker's or a user's, and print its public key.
    Keygen(KeygenArgs),
    /// Claim a user's pairing code for the key in a key file, so the user's
    /// PRIVATE jobs may go to the worker running with that key.
    Claim(ClaimArgs),
    /// As the user (with the user's key): create a pairing code bound to
    /// the worker's key, proven by the user's signature, and claim it.
    Pair(PairArgs),
}

#[derive(Args, Debug)]
struct PairArgs {
    /// Coordinator HTTP base URL (the worker URL `ws://HOST/v1/workers/ws` works too).
    #[arg(
        long,
        env = "WORKER_SIM_COORDINATOR",
        default_value = "http://127.0.0.1:8080"
    )]
    coordinator: String,
    /// The user's key file (hex secret, one line; `worker-sim keygen` writes one).
    #[arg(long)]
    user_key_file: PathBuf,
    /// The user id the key proves: its address (default) or a CAIP-10
    /// account `eip155:<chain id>:<address>`.
    #[arg(long)]
    user_id: Option<String>,
    /// The worker's key file (from `worker-sim keygen`).
    #[arg(long, default_value = "worker.key")]
    key_file: PathBuf,
}

#[derive(Args, Debug)]
struct KeygenArgs {
    /// Where to write the secret (hex, one line; what `--key-file` reads).
    #[arg(long, default_value = "worker.key")]
    key_file: PathBuf,
    /// Overwrite an existing key file (its key is lost).
    #[arg(long)]
    force: bool,
}

#[derive(Args, Debug)]
struct ClaimArgs {
    /// Coordinator HTTP base URL (the worker URL `ws://HOST/v1/workers/ws` works too).
    #[arg(
        long,
        env = "WORKER_SIM_COORDINATOR",
        default_value = "http://127.0.0.1:8080"
    )]
    coordinator: String,
    /// The pairing code the user got from `POST /v1/trust/create`.
    #[arg(long)]
    code: String,
    /// The worker's key file (from `worker-sim keygen`).
    #[arg(long, default_value = "worker.key")]
    key_file: PathBuf,
}

#[derive(Args, Debug)]
struct RunArgs {
    /// Coordinator worker endpoint. Its origin is signed at login, so it
    /// must be the URL the coordinator's operator published.
    #[arg(
        long,
        env = "WORKER_SIM_COORDINATOR",
        default_value = "ws://127.0.0.1:8080/v1/workers/ws"
    )]
    coordinator: String,
    /// CAIP-2 network the workers serve; a coordinator on another is refused.
    #[arg(long, env = "WORKER_SIM_NETWORK", default_value = worker_sim::DEFAULT_NETWORK)]
    network: String,
    /// How many workers to run.
    #[arg(long, env = "WORKER_SIM_COUNT", default_value_t = 1)]
    count: u32,
    /// Base seed; worker i uses `worker_seed(seed, i)` for its key and draws.
    #[arg(long, env = "WORKER_SIM_SEED", default_value_t = 0)]
    seed: u64,
    /// Job latency: MS, MIN..MAX (uniform) or MEAN~STDDEV (normal-ish).
    #[arg(long, env = "WORKER_SIM_LATENCY_MS", default_value = "50")]
    latency_ms: Latency,
    /// Job types offered, comma-separated.
    #[arg(long, env = "WORKER_SIM_CAPABILITIES", value_delimiter = ',', default_value = "LLM_INFER,TASK", value_parser = parse_job_type)]
    capabilities: Vec<JobType>,
    /// Concurrent jobs per worker.
    #[arg(long, env = "WORKER_SIM_SLOTS", default_value_t = 4)]
    slots: u32,
    /// File of hex secrets, one per line; worker i uses line i (instead of seed-derived keys).
    #[arg(long, env = "WORKER_SIM_KEY_FILE")]
    key_file: Option<PathBuf>,
    /// TOML fault plan applied to every worker (see the `fault` module docs).
    #[arg(long, env = "WORKER_SIM_FAULTS")]
    faults: Option<PathBuf>,
    /// Stream text outputs as deltas (the protocol's `deltas` feature):
    /// `--backend sim` spreads each output over its latency, `--backend
    /// openai` forwards the server's stream. `--stream false` sends results only.
    #[arg(long, env = "WORKER_SIM_STREAM", default_value_t = true, action = clap::ArgAction::Set)]
    stream: bool,
    /// How jobs are executed.
    #[arg(long, env = "WORKER_SIM_BACKEND", value_enum, default_value_t = BackendKind::Sim)]
    backend: BackendKind,
    /// OpenAI-compatible base URL (ending in /v1) for `--backend openai`.
    #[arg(
        long,
        env = "WORKER_SIM_BACKEND_URL",
        default_value = "http://127.0.0.1:11434/v1"
    )]
    backend_url: String,
    /// Model name for `--backend openai`.
    #[arg(long, env = "WORKER_SIM_MODEL", default_value = "llama3.2")]
    model: String,
    /// Bearer key for `--backend openai`, if the server wants one.
    #[arg(long, env = "WORKER_SIM_BACKEND_API_KEY", hide_env_values = true)]
    backend_api_key: Option<String>,
    /// Longest pause between reconnect attempts.
    #[arg(long, env = "WORKER_SIM_MAX_BACKOFF_MS", default_value_t = 30_000)]
    max_backoff_ms: u64,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum BackendKind {
    Sim,
    Openai,
}

#[derive(Args, Debug)]
struct StubArgs {
    #[arg(long, value_parser = parse_kind)]
    kind: ProviderKind,
    #[arg(long, env = "WORKER_SIM_STUB_LISTEN", default_value = "127.0.0.1:8090")]
    listen: String,
    /// The key callers must present.
    #[arg(
        long,
        env = "WORKER_SIM_STUB_API_KEY",
        default_value = "test-key",
        hide_env_values = true
    )]
    api_key: String,
    #[arg(long, env = "WORKER_SIM_STUB_SEED", default_value_t = 0)]
    seed: u64,
    /// TOML StubConfig faults (`[[faults]] call = 0, kind = "rate_limited"`, `default_fault = ...`).
    #[arg(long, env = "WORKER_SIM_STUB_FAULTS")]
    faults: Option<PathBuf>,
}

fn parse_job_type(text: &str) -> Result<JobType, String> {
    JobType::parse(text.trim()).ok_or_else(|| format!("unknown job type {text:?}"))
}

fn parse_kind(text: &str) -> Result<ProviderKind, String> {
    text.parse()
}

/// The real clock every worker and stub of this program uses.
fn real_clock() -> SharedClock {
    Arc::new(protocol::clock::SystemClock)
}

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let cli = Cli::parse();
    // The owner's commands answer a person at a terminal: plain lines on
    // stderr, not log records.
    let (result, for_a_person) = match cli.command {
        Some(Command::StubProvider(args)) => (stub_provider(args).await, false),
        Some(Command::Keygen(args)) => (keygen(args), true),
        Some(Command::Claim(args)) => (claim(args).await, true),
        Some(Command::Pair(args)) => (pair(args).await, true),
        None => (run_workers(cli.run).await, false),
    };
    if let Err(message) = result {
        if for_a_person {
            eprintln!("error: {message}");
        } else {
            tracing::error!("{message}");
        }
        std::process::exit(1);
    }
}

fn keygen(args: KeygenArgs) -> Result<(), String> {
    // A key is the one thing here that must not come from a seed.
    let mut rng = rand_chacha::ChaCha20Rng::from_entropy();
    let keypair = owner::keygen(&args.key_file, args.force, &mut rng).map_err(|e| e.to_string())?;
    eprintln!(
        "wrote a secret key (a worker's or a user's) to {} (keep it private); its public key:",
        args.key_file.display()
    );
    println!("{}", keypair.public_key_hex());
    Ok(())
}

async fn claim(args: ClaimArgs) -> Result<(), String> {
    let http = reqwest::Client::new();
    let claimed = owner::claim(&http, &args.coordinator, &args.code, &args.key_file)
        .await
        .map_err(|e| e.to_string())?;
    eprintln!(
        "paired at {}: PRIVATE jobs of this user may now go to this worker; user id:",
        claimed.paired_at
    );
    println!("{}", claimed.user_id);
    Ok(())
}

async fn pair(args: PairArgs) -> Result<(), String> {
    let load = |path: &Path| {
        worker_sim::KeySource::File(path.to_owned())
            .load(0)
            .map_err(|e| e.to_string())
    };
    let (user, worker) = (load(&args.user_key_file)?, load(&args.key_file)?);
    // The proof's issue time: the one wall-clock read, at this edge.
    let now_ms = protocol::clock::Clock::now_ms(&protocol::clock::SystemClock);
    let mut rng = rand_chacha::ChaCha20Rng::from_entropy();
    let http = reqwest::Client::new();
    let claimed = owner::pair(
        &http,
        &args.coordinator,
        &user,
        args.user_id.as_deref(),
        &worker,
        now_ms,
        &mut rng,
    )
    .await
    .map_err(|e| e.to_string())?;
    eprintln!(
        "paired at {}: PRIVATE jobs of this user may now go to the worker {}; user id:",
        claimed.paired_at,
        worker.public_key_hex()
    );
    println!("{}", claimed.user_id);
    Ok(())
}

async fn stub_provider(args: StubArgs) -> Result<(), String> {
    let mut config = match &args.faults {
        Some(path) => read_toml::<StubConfig>(path)?,
        None => StubConfig::default(),
    };
    config.api_key = args.api_key;
    config.seed = args.seed;
    let stub = ProviderStub::new(args.kind, config, real_clock());
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .map_err(|e| format!("listen on {}: {e}", args.listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    tracing::info!(kind = ?args.kind, %addr, "stub provider listening");
    tokio::select! {
        biased;
        _ = tokio::signal::ctrl_c() => Ok(()),
        served = testkit::provider::serve(listener, stub.router()) => served.map_err(|e| e.to_string()),
    }
}

async fn run_workers(args: RunArgs) -> Result<(), String> {
    let faults = match &args.faults {
        Some(path) => read_toml::<FaultPlan>(path)?,
        None => FaultPlan::default(),
    };
    let keys = match &args.key_file {
        Some(path) => Some(read_keys(path, args.count)?),
        None => None,
    };
    let backend = backend(&args);
    let clock = real_clock();
    let mut tasks = tokio::task::JoinSet::new();
    for index in 0..args.count {
        let mut worker = Worker::new(worker_config(&args, &faults, index), clock.clone())
            .map_err(|e| e.to_string())?
            .with_backend(backend.clone())
            .with_observer(Arc::new(TracingObserver));
        if let Some(keys) = &keys {
            worker = worker.with_keypair(keys[index as usize].clone());
        }
        tracing::info!(worker = index, provider_pubkey = %worker.public_key_hex(), "starting worker");
        let connector = WsConnector::new(args.coordinator.clone()).with_nodelay(true);
        tasks.spawn(async move { (index, worker.run(connector).await) });
    }
    supervise(tasks).await
}

/// A TOML file as `T`; errors name the file.
fn read_toml<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    toml::from_str::<T>(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// The hex secrets of a `--key-file`, one per line; at least `count` of them.
fn read_keys(path: &Path, count: u32) -> Result<Vec<Keypair>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let keys: Vec<Keypair> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| {
            Keypair::from_secret_hex(l)
                .ok_or_else(|| format!("{}: a line is not a hex secret", path.display()))
        })
        .collect::<Result<_, _>>()?;
    if keys.len() < count as usize {
        return Err(format!(
            "{} holds {} keys, --count is {}",
            path.display(),
            keys.len(),
            count
        ));
    }
    Ok(keys)
}

/// The backend every worker shares.
fn backend(args: &RunArgs) -> Arc<dyn Backend> {
    match args.backend {
        BackendKind::Sim => Arc::new(SimBackend),
        BackendKind::Openai => Arc::new(OpenAiBackend::new(
            args.backend_url.clone(),
            args.model.clone(),
            args.backend_api_key.clone(),
        )),
    }
}

/// Worker `index`'s configuration: its seed-derived identity and draws, the
/// command line's capacity, latency, faults and network.
fn worker_config(args: &RunArgs, faults: &FaultPlan, index: u32) -> WorkerConfig {
    WorkerConfig {
        capabilities: args.capabilities.clone(),
        slots: args.slots,
        latency: match args.backend {
            // Real work takes its own time.
            BackendKind::Openai => Latency::Fixed { ms: 0 },
            BackendKind::Sim => args.latency_ms.clone(),
        },
        faults: faults.clone(),
        reconnect: ReconnectPolicy {
            max_ms: args.max_backoff_ms,
            jitter_ms: 250,
            ..ReconnectPolicy::default()
        },
        network: args.network.clone(),
        stream: args.stream,
        ..WorkerConfig::for_index(args.seed, index)
    }
}

/// Logs each worker that stops until all have, or stops them all on Ctrl-C.
async fn supervise(
    mut tasks: tokio::task::JoinSet<(u32, Result<worker_sim::WorkerExit, worker_sim::WorkerError>)>,
) -> Result<(), String> {
    loop {
        tokio::select! {
            biased;
            _ = tokio::signal::ctrl_c() => {
                tracing::info!("interrupted; stopping workers");
                tasks.abort_all();
                return Ok(());
            }
            done = tasks.join_next() => match done {
                None => return Ok(()),
                Some(Ok((index, Ok(exit)))) => tracing::warn!(worker = index, ?exit, "worker stopped"),
                Some(Ok((index, Err(e)))) => tracing::error!(worker = index, "worker stopped: {e}"),
                Some(Err(e)) => tracing::error!("worker task failed: {e}"),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent_and_parses_both_modes() {
        Cli::command().debug_assert();
        let cli = Cli::try_parse_from([
            "worker-sim",
            "--coordinator",
            "ws://127.0.0.1:9/v1/workers/ws",
            "--count",
            "3",
            "--seed",
            "7",
            "--latency-ms",
            "20..80",
            "--capabilities",
            "TASK",
            "--slots",
            "2",
        ])
        .unwrap();
        assert!(cli.command.is_none());
        assert_eq!(cli.run.count, 3);
        assert_eq!(
            cli.run.latency_ms,
            Latency::Uniform {
                min_ms: 20,
                max_ms: 80
            }
        );
        assert_eq!(cli.run.capabilities, vec![JobType::Task]);
        assert!(Cli::try_parse_from(["worker-sim", "--capabilities", "GPU"]).is_err());

        let cli = Cli::try_parse_from([
            "worker-sim",
            "stub-provider",
            "--kind",
            "anthropic",
            "--listen",
            "127.0.0.1:0",
        ])
        .unwrap();
        match cli.command {
            Some(Command::StubProvider(args)) => assert_eq!(args.kind, ProviderKind::Anthropic),
            other => panic!("expected the stub-provider subcommand, got {other:?}"),
        }

        let cli = Cli::try_parse_from([
            "worker-sim",
            "claim",
            "--coordinator",
            "http://127.0.0.1:9",
            "--code",
            "3f9a1c",
        ])
        .unwrap();
        match cli.command {
            Some(Command::Claim(args)) => {
                assert_eq!(args.code, "3f9a1c");
                assert_eq!(args.key_file, PathBuf::from("worker.key"));
            }
            other => panic!("expected the claim subcommand, got {other:?}"),
        }
        assert!(
            Cli::try_parse_from(["worker-sim", "claim"]).is_err(),
            "--code"
        );
    }
}
