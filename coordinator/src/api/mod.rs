//! The HTTP API of spec section 4: routes, extractors and handlers. Handlers
//! only translate between HTTP and core events; decisions live in the core.
//!
//! Each route is registered once, in [`routes`], with the handler's
//! `#[utoipa::path]` operation (utoipa-axum's `OpenApiRouter`): the router
//! and the OpenAPI document ([`document_json`]) both come from that list.
//! Files: `jobs.rs`, `cancel.rs`, `events.rs` (a job's server-sent events), `openai.rs`
//! (the OpenAI-compatible door), `trust.rs`,
//! `service.rs`, `worker_ws.rs` (the route groups), `extract.rs` (extractors), `layers.rs` (request ids, spans,
//! counts), `docs.rs` (the document's own types), `error.rs`, `validate.rs`,
//! `user_auth.rs` (acting for a user: the `X-User-Proof` check).

pub mod docs;
pub mod error;
pub mod validate;
pub mod worker_ws;

mod cancel;
mod events;
mod extract;
mod jobs;
mod layers;
mod openai;
mod service;
mod trust;
mod user_auth;

pub use extract::{
    client_ip, rate_limit_key, ClientAddr, CommitRequest, JsonBody, ProvenJson, QueryMap,
};
pub use user_auth::ProofContext;

use crate::shell::Coordinator;
use axum::http::{Method, Uri};
use axum::response::IntoResponse;
use axum::Router;
use error::ApiError;
use layers::{drop_malformed_request_id, request_span, CountRequests, RequestIds};
use std::sync::LazyLock;
use tower_http::request_id::{PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// Every route but `GET /metrics`, each once, with its OpenAPI operation.
fn routes() -> OpenApiRouter<Coordinator> {
    OpenApiRouter::new()
        .routes(routes!(service::health))
        .routes(routes!(jobs::quote))
        .routes(routes!(jobs::commit_fast))
        .routes(routes!(jobs::commit_cheap))
        .routes(routes!(jobs::poll))
        .routes(routes!(events::events))
        .routes(routes!(openai::chat_completions))
        .routes(routes!(openai::models))
        .routes(routes!(cancel::cancel))
        .routes(routes!(trust::trust_create))
        .routes(routes!(trust::trust_claim))
        .routes(routes!(trust::trust_list))
        .routes(routes!(worker_ws::upgrade))
        .routes(routes!(service::openapi_json))
}

/// `GET /metrics`: on the API, or on a listener of its own.
fn metrics_routes() -> OpenApiRouter<Coordinator> {
    OpenApiRouter::new().routes(routes!(service::metrics))
}

/// The API contract: [`docs::ApiDoc`] (info, shared types, tags) with the
/// operations of every route.
pub fn document() -> utoipa::openapi::OpenApi {
    OpenApiRouter::<Coordinator>::with_openapi(docs::ApiDoc::openapi())
        .merge(routes())
        .merge(metrics_routes())
        .into_openapi()
}

/// The contract as pretty JSON with a final newline, built once. Served at
/// `GET /v1/openapi.json`; `docs/openapi.json` is a copy a test keeps equal.
pub fn document_json() -> &'static str {
    static DOCUMENT: LazyLock<String> = LazyLock::new(|| {
        let mut json = document()
            .to_pretty_json()
            .expect("the OpenAPI document serializes");
        json.push('\n');
        json
    });
    &DOCUMENT
}

/// The whole API as an axum router; tests drive it with `oneshot`, the binary serves it.
pub fn app(coordinator: Coordinator) -> Router {
    router(coordinator, true)
}

/// `GET /metrics` alone, for a listener of its own (`--metrics-listen`).
pub fn metrics_only(coordinator: Coordinator) -> Router {
    let (routes, _) = metrics_routes().split_for_parts();
    routes
        .fallback(no_route)
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .layer(CountRequests(coordinator.clone()))
        .with_state(coordinator)
}

/// The API without `GET /metrics` (served apart, see [`metrics_only`]).
pub fn api(coordinator: Coordinator) -> Router {
    router(coordinator, false)
}

/// The route table without state or layers, built once per process and
/// cloned for each server. Why: `routes()` also builds every operation's
/// OpenAPI item, which the router discards; the simulation starts a server
/// per instance and restart, and that was 4 % of the swarm's CPU (see
/// `benches/results/swarm-speed-2026-11-28.md`). A clone is the same table.
fn route_table(with_metrics: bool) -> Router<Coordinator> {
    static WITH_METRICS: LazyLock<Router<Coordinator>> =
        LazyLock::new(|| routes().merge(metrics_routes()).split_for_parts().0);
    static WITHOUT_METRICS: LazyLock<Router<Coordinator>> =
        LazyLock::new(|| routes().split_for_parts().0);
    match with_metrics {
        true => WITH_METRICS.clone(),
        false => WITHOUT_METRICS.clone(),
    }
}

fn router(coordinator: Coordinator, with_metrics: bool) -> Router {
    let body_limit = coordinator.config().limits.body_bytes_max;
    let routes = route_table(with_metrics);
    // One `layer` call for the whole stack: each `Router::layer` boxes the
    // routes once more, and a request clones every box at every level (seven
    // separate calls cost 49 more allocations per request than one).
    let layers = tower::ServiceBuilder::new()
        // Outermost first: a caller's malformed id is dropped, a missing one
        // made, copied to the answer, and carried by every log line the
        // request's span covers.
        .layer(tower::util::MapRequestLayer::new(drop_malformed_request_id))
        .layer(SetRequestIdLayer::x_request_id(RequestIds::new(
            coordinator.now_ms(),
        )))
        .layer(PropagateRequestIdLayer::x_request_id())
        .layer(TraceLayer::new_for_http().make_span_with(request_span))
        // Router layers run after routing, so the matched route is known;
        // outside the panic catcher, so a panic counts as its 500.
        .layer(CountRequests(coordinator.clone()))
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(
            |_: Box<dyn std::any::Any + Send>| ApiError::Internal(None).into_response(),
        ))
        .layer(axum::extract::DefaultBodyLimit::max(body_limit));
    routes
        .fallback(no_route)
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .layer(layers)
        .with_state(coordinator)
}

async fn no_route(method: Method, uri: Uri) -> ApiError {
    ApiError::NoRoute {
        method: method.to_string(),
        path: uri.path().to_owned(),
    }
}
