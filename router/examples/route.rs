//! Runs one job through the router with configuration from the environment
//! and prints the ComputeResult as JSON, after (on stderr) the routes it
//! tried: a coordinator job given up on at its timeout shows whether it
//! was cancelled before the next route ran (decision 0022).
//!
//! ```text
//! cargo run -p router --example route -- llm "Why is the sky blue?" --user-id alice
//! cargo run -p router --example route -- task summarize "Long text..." --user-id alice
//! cargo run -p router --example route -- llm "Private text" --private --user-key-file user.key
//! cargo run -p router --example route -- llm "Tell me a story" --stream
//! ```
//!
//! `--stream` (LLM jobs) runs `stream_llm`: the text goes to stderr as it
//! comes, a restart as a line saying which route took over and why (drop
//! the text above it), and the result JSON to stdout as without it.
//!
//! `--user-key-file` proves the user (`X-User-Proof`) on PRIVATE jobs, which a
//! coordinator with `--user-auth on` (its default) requires; the user id is
//! then the key's address unless `--user-id` names another form of it.

use clap::{Parser, Subcommand, ValueEnum};
use futures_util::StreamExt;
use rand::SeedableRng;
use router::{
    AdapterError, AttemptOutcome, Chain, ComputeResult, ComputeRouter, LlmRequest, Policy,
    PrivacyClass, RestartReason, RouterConfig, RouterError, StreamEvent, TaskRequest, TaskType,
};
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

#[derive(Parser)]
#[command(about = "Run an LLM_INFER or TASK job through the compute router")]
struct Cli {
    #[command(subcommand)]
    job: Job,
    /// Default: the address of --user-key-file, else `anonymous`.
    #[arg(long, global = true)]
    user_id: Option<String>,
    /// The user's secret key (hex, first non-empty line; `worker-sim keygen`
    /// writes one): signs the user's proof on PRIVATE jobs.
    #[arg(long, global = true)]
    user_key_file: Option<std::path::PathBuf>,
    #[arg(long, global = true, value_enum)]
    policy: Option<PolicyArg>,
    #[arg(long, global = true)]
    private: bool,
    #[arg(long, global = true, value_enum)]
    chain: Option<ChainArg>,
    /// Skip a coordinator quoting more than this (e.g. `$0.005`).
    #[arg(long, global = true)]
    max_price: Option<protocol::money::Price>,
    /// Run the job this many times with one router, so its circuit breaker
    /// carries from call to call (a coordinator that failed is then skipped
    /// for `ROUTER_BREAKER_COOLDOWN_MS`).
    #[arg(long, global = true, default_value_t = 1)]
    repeat: u32,
    /// Wait this long between repeated calls (to stop a coordinator
    /// meanwhile, say).
    #[arg(long, global = true, default_value_t = 0)]
    pause_ms: u64,
}

#[derive(Subcommand)]
enum Job {
    /// Text generation from a prompt.
    Llm {
        prompt: String,
        #[arg(long)]
        max_tokens: Option<u32>,
        /// Print the text to stderr as it is made.
        #[arg(long)]
        stream: bool,
    },
    /// summarize, classify or extract_json over an input text.
    Task {
        #[arg(value_enum)]
        task_type: TaskArg,
        input: String,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum PolicyArg {
    Auto,
    Fast,
    Cheap,
}

#[derive(Clone, Copy, ValueEnum)]
enum ChainArg {
    #[value(name = "chain_a")]
    ChainA,
    #[value(name = "chain_b")]
    ChainB,
}

#[derive(Clone, Copy, ValueEnum)]
enum TaskArg {
    Summarize,
    Classify,
    #[value(name = "extract_json")]
    ExtractJson,
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let mut config = match RouterConfig::from_env() {
        Ok(config) => config,
        Err(e) => {
            eprintln!("configuration error: {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = add_payer_from_env(&mut config) {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    let mut cli = cli;
    match add_user_signer(&mut config, cli.user_key_file.as_deref()) {
        Ok(address) => {
            cli.user_id = cli.user_id.or(address);
        }
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    }
    run_calls(&ComputeRouter::new(config), &cli).await
}

/// Runs the job `--repeat` times; prints each call's routes and result.
async fn run_calls(router: &ComputeRouter, cli: &Cli) -> ExitCode {
    let mut code = ExitCode::SUCCESS;
    for call in 1..=cli.repeat {
        if call > 1 {
            tokio::time::sleep(std::time::Duration::from_millis(cli.pause_ms)).await;
        }
        if cli.repeat > 1 {
            eprintln!("call {call} of {}", cli.repeat);
        }
        match run_job(router, cli).await {
            Ok(result) => {
                print_attempts(&result);
                println!(
                    "{}",
                    serde_json::to_string_pretty(&result).expect("a ComputeResult serialises")
                );
            }
            Err(e) => {
                eprintln!("error: {e}");
                code = ExitCode::FAILURE;
            }
        }
    }
    code
}

/// The routes tried, one line each, on stderr (stdout is the result).
fn print_attempts(result: &ComputeResult) {
    for (n, attempt) in result.attempts.iter().enumerate() {
        let outcome = match &attempt.outcome {
            AttemptOutcome::Answered => "answered".to_owned(),
            AttemptOutcome::Failed(AdapterError::PollTimeout {
                job_id,
                timeout_ms,
                cancel,
            }) => format!("gave up on job {job_id} after {timeout_ms} ms; cancel: {cancel}"),
            AttemptOutcome::Failed(e) => format!("failed: {e}"),
        };
        eprintln!("attempt {}: {} {outcome}", n + 1, attempt.route);
    }
}

/// `--stream`: the text on stderr as it comes; the result at the end.
async fn print_stream(
    router: &ComputeRouter,
    request: LlmRequest,
) -> Result<ComputeResult, RouterError> {
    let mut events = router.stream_llm(request);
    let mut stderr = std::io::stderr();
    while let Some(event) = events.next().await {
        match event? {
            StreamEvent::Delta(text) => {
                let _ = write!(stderr, "{text}");
                let _ = stderr.flush();
            }
            StreamEvent::Restart { route, reason } => {
                let why = match reason {
                    RestartReason::JobRetried => "the coordinator retried the job".to_owned(),
                    RestartReason::Fallback { from, error } => format!("{from} failed: {error}"),
                };
                let _ = writeln!(stderr, "\n[restart on {route}: {why}; drop the text above]");
            }
            StreamEvent::Done(result) => {
                let _ = writeln!(stderr);
                return Ok(result);
            }
        }
    }
    panic!("the stream ended without a result: the router's task panicked")
}

/// `--user-key-file`: prove the user on PRIVATE jobs with this key; its
/// address, the user id it proves.
fn add_user_signer(
    config: &mut RouterConfig,
    file: Option<&std::path::Path>,
) -> Result<Option<String>, String> {
    let Some(file) = file else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let secret = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let key = protocol::signing::Keypair::from_secret_hex(secret)
        .ok_or_else(|| format!("{}: not a 32-byte hex secret", file.display()))?;
    let clock: router::WallClock = Arc::new(protocol::clock::SystemClock);
    let signer = router::KeyUserSigner::new(key, clock, rand_chacha::ChaCha20Rng::from_entropy());
    let address = signer.address();
    config.user_signer = Some(Arc::new(signer));
    Ok(Some(address))
}

/// X402_PAYER_KEY: pay 402 answers on both chains from this key.
fn add_payer_from_env(config: &mut RouterConfig) -> Result<(), &'static str> {
    let Ok(secret) = std::env::var("X402_PAYER_KEY") else {
        return Ok(());
    };
    let signer = x402::LocalEvmSigner::from_secret_hex(&secret)
        .ok_or("X402_PAYER_KEY is not a 32-byte hex secret")?;
    let clock: router::WallClock = Arc::new(protocol::clock::SystemClock);
    let payer: Arc<dyn router::PaymentClient> = Arc::new(router::X402Payer::new(
        signer,
        clock,
        rand_chacha::ChaCha20Rng::from_entropy(),
    ));
    config.payment_clients.chain_a = Some(payer.clone());
    config.payment_clients.chain_b = Some(payer);
    Ok(())
}

/// The job the command line names, run through `router`.
async fn run_job(router: &ComputeRouter, cli: &Cli) -> Result<ComputeResult, RouterError> {
    let policy = cli.policy.map(|p| match p {
        PolicyArg::Auto => Policy::Auto,
        PolicyArg::Fast => Policy::Fast,
        PolicyArg::Cheap => Policy::Cheap,
    });
    let privacy = Some(if cli.private {
        PrivacyClass::Private
    } else {
        PrivacyClass::Public
    });
    let chain = cli.chain.map(|c| match c {
        ChainArg::ChainA => Chain::ChainA,
        ChainArg::ChainB => Chain::ChainB,
    });
    let user_id = cli.user_id.clone().unwrap_or_else(|| "anonymous".into());
    match &cli.job {
        Job::Llm {
            prompt,
            max_tokens,
            stream,
        } => {
            let request = LlmRequest {
                prompt: prompt.clone(),
                max_tokens: *max_tokens,
                policy,
                privacy,
                user_id,
                chain_preference: chain,
                max_price: cli.max_price,
            };
            match *stream {
                true => print_stream(router, request).await,
                false => router.run_llm(request).await,
            }
        }
        Job::Task { task_type, input } => {
            let task_type = match task_type {
                TaskArg::Summarize => TaskType::Summarize,
                TaskArg::Classify => TaskType::Classify,
                TaskArg::ExtractJson => TaskType::ExtractJson,
            };
            router
                .run_task(TaskRequest {
                    task_type,
                    input: input.clone(),
                    policy,
                    privacy,
                    user_id,
                    chain_preference: chain,
                    max_price: cli.max_price,
                })
                .await
        }
    }
}
