//! The HTTP API of spec section 4: routes, extractors and handlers. Handlers
//! only translate between HTTP and core events; decisions live in the core.

pub mod docs;
pub mod error;
pub mod validate;
pub mod worker_ws;

mod extract;
mod jobs;
mod layers;
mod service;
mod trust;

pub use extract::{client_ip, rate_limit_key, ClientAddr, CommitRequest, JsonBody, QueryMap};

use crate::shell::Coordinator;
use axum::http::{Method, Uri};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::Router;
use error::ApiError;
use jobs::{commit_cheap, commit_fast, poll, quote};
use layers::{drop_malformed_request_id, request_span, CountRequests, RequestIds};
use service::{health, metrics, openapi_json};
use tower_http::request_id::{PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;
use trust::{trust_claim, trust_create, trust_list};

/// The whole API as an axum router; tests drive it with `oneshot`, the binary serves it.
pub fn app(coordinator: Coordinator) -> Router {
    router(coordinator, true)
}

/// `GET /metrics` alone, for a listener of its own (`--metrics-listen`).
pub fn metrics_only(coordinator: Coordinator) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .fallback(no_route)
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .layer(CountRequests(coordinator.clone()))
        .with_state(coordinator)
}

/// The API without `GET /metrics` (served apart, see [`metrics_only`]).
pub fn api(coordinator: Coordinator) -> Router {
    router(coordinator, false)
}

fn router(coordinator: Coordinator, with_metrics: bool) -> Router {
    let body_limit = coordinator.config().limits.body_bytes_max;
    let routes = Router::new()
        .route("/v1/health", get(health))
        .route("/v1/quote", get(quote))
        .route("/v1/jobs/commit/fast", post(commit_fast))
        .route("/v1/jobs/commit/cheap", post(commit_cheap))
        .route("/v1/jobs/{id}", get(poll))
        .route("/v1/trust/create", post(trust_create))
        .route("/v1/trust/claim", post(trust_claim))
        .route("/v1/trust/list", get(trust_list))
        .route("/v1/workers/ws", get(worker_ws::upgrade))
        .route("/v1/openapi.json", get(openapi_json));
    let routes = if with_metrics {
        routes.route("/metrics", get(metrics))
    } else {
        routes
    };
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
            |_: Box<dyn std::any::Any + Send>| ApiError::Internal.into_response(),
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
