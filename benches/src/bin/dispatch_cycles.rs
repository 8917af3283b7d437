//! A fixed amount of dispatch work, for instruction counts under callgrind
//! (repeatable on a busy machine, where wall time is not):
//!
//! ```sh
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!   target/release/dispatch_cycles shell 64 20000
//! ```
//!
//! Run it twice with different counts and divide the difference in
//! instructions by the difference in counts: set-up cancels out.
//! - `core WORKERS N [QUEUE_DEPTH]`: N cycles of `dispatch_core` (the same
//!   cycle on the bare core); QUEUE_DEPTH jobs wait behind the busy workers
//!   (10,000 unless given, as in the benches), to see what a deep queue's
//!   cold memory costs.
//! - `shell WORKERS N [QUEUE_DEPTH]`: N cycles of `dispatch_shell` (commit → assign →
//!   accept → complete through the coordinator's lock, a plain memory store
//!   and the session outboxes; 4 slots a worker, QUEUE_DEPTH jobs queued).
//! - `commit N`: N `POST /v1/jobs/commit/cheap` through the whole axum
//!   router in-process (no workers: each job is queued).

use axum::body::Body;
use axum::http::Request;
use benches::rig::{CoreRig, ShellRig};
use coordinator::server::{self, Parts, Settings};
use coordinator::{Config, ManualClock};
use futures_util::FutureExt;
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use std::process::ExitCode;
use std::sync::Arc;
use tower::ServiceExt;

const SLOTS: u32 = 4;
const QUEUE_DEPTH: usize = 10_000;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number = |i: usize| args.get(i).and_then(|a| a.parse::<u64>().ok());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let _guard = rt.enter();
    // Jobs queued behind the busy workers: the benches' 10,000 unless given.
    let depth = match args.get(3) {
        None => QUEUE_DEPTH,
        Some(_) => match number(3).and_then(|d| usize::try_from(d).ok()) {
            Some(depth) => depth,
            None => return usage(),
        },
    };
    match (args.first().map(String::as_str), number(1), number(2)) {
        (Some("shell"), Some(workers), Some(cycles)) => {
            let workers = u32::try_from(workers).expect("workers fit u32");
            let mut rig = ShellRig::new(workers, SLOTS, depth);
            for _ in 0..cycles {
                rig.cycle();
            }
            println!("{} jobs", rig.jobs());
        }
        (Some("core"), Some(workers), Some(cycles)) => {
            let workers = u32::try_from(workers).expect("workers fit u32");
            let mut rig = CoreRig::new(workers, SLOTS, depth);
            for _ in 0..cycles {
                rig.cycle();
            }
            println!("{} jobs", rig.jobs());
        }
        (Some("commit"), Some(commits), None) => rt.block_on(commit(commits)),
        _ => return usage(),
    }
    ExitCode::SUCCESS
}

fn usage() -> ExitCode {
    eprintln!("usage: dispatch_cycles core|shell WORKERS N [QUEUE_DEPTH] | commit N");
    ExitCode::from(2)
}

async fn commit(commits: u64) {
    let mut config = Config::default();
    config.limits.queue_len_max = usize::MAX;
    config.limits.queued_bytes_max = usize::MAX;
    config.check_invariants = false;
    let settings = Settings {
        config,
        db: server::NO_STORE.into(),
        ..Settings::default()
    };
    let clock = ManualClock::new(benches::fixtures::EPOCH_MS);
    let parts = Parts::new(Arc::new(clock), ChaCha20Rng::seed_from_u64(1));
    let server = server::start(settings, parts)
        .now_or_never()
        .expect("starts without waiting")
        .expect("starts");
    let app = server.app();
    let body = serde_json::to_vec(&benches::fixtures::task_body("bench")).expect("json");
    for _ in 0..commits {
        let req = Request::post("/v1/jobs/commit/cheap")
            .header("content-type", "application/json")
            .body(Body::from(body.clone()))
            .expect("request");
        let res = app.clone().oneshot(req).await.expect("infallible");
        assert_eq!(res.status(), 201);
    }
    println!(
        "{} pending",
        server.coordinator().read(|c| c.pending_jobs())
    );
}
