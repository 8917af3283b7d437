//! `/v1/health`, `/metrics` and `/v1/openapi.json`.

use crate::shell::Coordinator;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use protocol::api::Health;
use protocol::time::format_ms;

#[utoipa::path(get, path = "/v1/health", tag = "service",
    responses((status = 200, description = "The coordinator runs", body = Health)))]
pub(super) async fn health(State(c): State<Coordinator>) -> Json<Health> {
    let workers_online = crate::node::workers_online(&c).await;
    Json(Health {
        status: "ok".into(),
        workers_online,
        network: c.config().network.clone(),
        timestamp: format_ms(c.now_ms()),
    })
}

#[utoipa::path(get, path = "/metrics", tag = "service",
    responses((status = 200, description = "Prometheus metrics (text exposition format 0.0.4); see the README's Metrics section",
        content_type = "text/plain; version=0.0.4; charset=utf-8", body = String)))]
pub(super) async fn metrics(State(c): State<Coordinator>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        c.render_metrics(),
    )
        .into_response()
}

#[utoipa::path(get, path = "/v1/openapi.json", tag = "service",
    responses((status = 200, description = "This contract (OpenAPI 3.1)", content_type = "application/json")))]
pub(super) async fn openapi_json() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        super::document_json(),
    )
        .into_response()
}
