//! The ceiling: a bare axum handler (this binary re-run with
//! `--serve-bare`) measured with the same client code as the coordinator,
//! so every figure can be given as a ratio to it.

use crate::cli::{Args, Mode};
use crate::endpoints::{hammer, EndpointResult, Req};
use crate::process::{spawn_bare, wait_ready};
use indicatif::ProgressBar;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::Path;

/// The bare handler's GET, and (in endpoints mode) POST, measurements.
#[derive(Default)]
pub struct Ceiling {
    pub get: Option<EndpointResult>,
    pub post: Option<EndpointResult>,
}

/// Starts the bare handler, warms the connection pool, measures it for
/// `--ceiling-secs` and stops it.
pub async fn measure(
    client: &reqwest::Client,
    this_exe: &Path,
    args: &Args,
    progress: &ProgressBar,
) -> Result<Ceiling, String> {
    progress.set_message("bare axum handler");
    let mut bare = spawn_bare(this_exe)?;
    wait_ready(client, &bare.base).await?;
    let body = bytes::Bytes::from(
        serde_json::to_vec(&benches::fixtures::task_body("loadgen")).expect("json"),
    );
    // Warm the connection pool.
    hammer(
        client,
        "warm-up",
        Req::Get(format!("{}/v1/health", bare.base)),
        args.clients,
        0.3,
        None,
    )
    .await;
    let get = hammer(
        client,
        "bare GET",
        Req::Get(format!("{}/v1/health", bare.base)),
        args.clients,
        args.ceiling_secs,
        bare.pid,
    )
    .await;
    let mut post = None;
    if args.mode == Mode::Endpoints {
        post = Some(
            hammer(
                client,
                "bare POST",
                Req::Post(format!("{}/v1/jobs/commit/cheap", bare.base), body),
                args.clients,
                args.ceiling_secs,
                bare.pid,
            )
            .await,
        );
    }
    bare.stop().await;
    Ok(Ceiling {
        get: Some(get),
        post,
    })
}

/// Serves the bare handler on `addr` (the hidden `--serve-bare`): health's
/// answer, and a commit that parses its body and answers 201.
pub async fn serve_bare(addr: SocketAddr) {
    use axum::http::StatusCode;
    use axum::routing::{get, post};
    use axum::{Json, Router};
    let app = Router::new()
        .route(
            "/v1/health",
            get(|| async {
                Json(
                    json!({"status": "ok", "workers_online": 0, "network": "eip155:84532",
                            "timestamp": "2026-11-21T10:00:00.000Z"}),
                )
            }),
        )
        .route(
            "/v1/jobs/commit/cheap",
            post(|Json(v): Json<Value>| async move {
                let _ = v;
                (
                    StatusCode::CREATED,
                    Json(json!({"job_id": "00000000-0000-0000-0000-000000000000"})),
                )
            }),
        );
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .expect("bind bare server");
    axum::serve(listener, app).await.expect("serve");
}
