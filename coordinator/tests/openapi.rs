//! The contract: `docs/openapi.json` is the generated document, the server
//! serves it, and it covers every route and answer the API has.

mod common;

use axum::http::StatusCode;
use common::*;
use coordinator::api::document_json;
use coordinator::config::Config;
use coordinator::{app, ManualClock};
use serde_json::Value;
use std::sync::Arc;

const COMMITTED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/openapi.json");

/// Fails when the committed copy differs from the generated document. Run
/// with `UPDATE_OPENAPI=1` to rewrite the copy after changing the API.
#[test]
fn committed_document_is_the_generated_one() {
    let generated = document_json();
    if std::env::var_os("UPDATE_OPENAPI").is_some() {
        std::fs::write(COMMITTED, generated).expect("write docs/openapi.json");
    }
    let committed = std::fs::read_to_string(COMMITTED).unwrap_or_default();
    assert!(
        committed == generated,
        "docs/openapi.json is out of date: run `UPDATE_OPENAPI=1 cargo test -p coordinator --test openapi` and commit it"
    );
}

#[tokio::test]
async fn served_document_is_the_generated_one() {
    let clock = ManualClock::new(EPOCH_MS);
    let app = app(coordinator(Config::default(), Arc::new(clock), 1).await);
    let r = call(&app, "GET", "/v1/openapi.json", None).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.headers["content-type"], "application/json");
    assert_eq!(r.raw, document_json().as_bytes());
}

fn document() -> Value {
    serde_json::from_str(document_json()).unwrap()
}

fn statuses(doc: &Value, path: &str, method: &str) -> Vec<String> {
    doc["paths"][path][method]["responses"]
        .as_object()
        .unwrap_or_else(|| panic!("{method} {path} is documented"))
        .keys()
        .cloned()
        .collect()
}

#[test]
fn every_route_and_status_is_documented() {
    let doc = document();
    assert_eq!(doc["openapi"], "3.1.0");
    let commit = [
        "201", "400", "401", "402", "413", "415", "422", "429", "503",
    ];
    for path in ["/v1/jobs/commit/fast", "/v1/jobs/commit/cheap"] {
        assert_eq!(statuses(&doc, path, "post"), commit, "{path}");
    }
    let expected: &[(&str, &str, &[&str])] = &[
        ("/v1/health", "get", &["200"]),
        ("/v1/quote", "get", &["200", "400"]),
        ("/v1/jobs/{id}", "get", &["200", "400", "404"]),
        ("/v1/jobs/{id}/events", "get", &["200", "404", "503"]),
        (
            "/v1/chat/completions",
            "post",
            &["200", "400", "402", "429", "502", "503", "504"],
        ),
        ("/v1/models", "get", &["200"]),
        (
            "/v1/jobs/{id}/cancel",
            "post",
            &["200", "401", "404", "409", "503"],
        ),
        (
            "/v1/trust/create",
            "post",
            &["201", "400", "401", "413", "415", "429", "503"],
        ),
        (
            "/v1/trust/claim",
            "post",
            &["200", "400", "413", "415", "429", "503"],
        ),
        ("/v1/trust/list", "get", &["200", "400", "401", "503"]),
        ("/v1/openapi.json", "get", &["200"]),
        ("/metrics", "get", &["200"]),
        ("/v1/workers/ws", "get", &["101", "400", "503"]),
    ];
    for (path, method, codes) in expected {
        assert_eq!(statuses(&doc, path, method), *codes, "{method} {path}");
    }
    assert_eq!(doc["paths"].as_object().unwrap().len(), 15);
}

#[test]
fn limited_answers_document_their_headers_and_examples() {
    let doc = document();
    let responses = &doc["components"]["responses"];
    assert!(responses["RateLimited"]["headers"]["Retry-After"].is_object());
    assert!(responses["PaymentRequired"]["headers"]["PAYMENT-REQUIRED"].is_object());
    for name in [
        "BadRequest",
        "NotFound",
        "UnsupportedMediaType",
        "PayloadTooLarge",
        "RateLimited",
        "Unavailable",
        "NoTrustedWorkerAnswer",
        "NotCancellableAnswer",
    ] {
        let content = &responses[name]["content"]["application/json"];
        assert!(
            content["example"].is_object() || content["examples"].is_object(),
            "{name} has an example"
        );
    }
}

/// Regression: a plain GET of the WebSocket route got axum's plain-text
/// rejection, while the contract (and every other error) promises JSON.
#[tokio::test]
async fn a_non_upgrade_websocket_request_is_a_json_400() {
    let clock = ManualClock::new(EPOCH_MS);
    let app = app(coordinator(Config::default(), Arc::new(clock), 1).await);
    let r = call(&app, "GET", "/v1/workers/ws", None).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(r.body["error"].is_string(), "{}", r.body);
}
