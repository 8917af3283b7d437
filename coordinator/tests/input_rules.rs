//! Issue 29, findings 2 and 9: one `user_id` rule on every endpoint, before
//! any store sees it; duplicate JSON keys refused.

mod common;

use common::*;
use coordinator::{app, SystemClock};
use serde_json::json;
use std::sync::Arc;

#[tokio::test]
async fn every_endpoint_takes_one_user_id_rule() {
    let c = coordinator(spec_config(), Arc::new(SystemClock), 1).await;
    let router = app(c);
    let long = "u".repeat(5_000);
    for bad in ["%20", long.as_str(), "a%00b", "a%E2%80%8Bb"] {
        let r = call(
            &router,
            "GET",
            &format!("/v1/trust/list?user_id={bad}"),
            None,
        )
        .await;
        assert_eq!(r.status, 400, "trust/list {bad}: {:?}", r.body);
    }
    for bad in [" ", long.as_str(), "a\u{0}b", "a\u{200b}b", "a\u{1b}[2J"] {
        let r = call(
            &router,
            "POST",
            "/v1/trust/create",
            Some(json!({"user_id": bad})),
        )
        .await;
        assert_eq!(r.status, 400, "trust/create {bad:?}: {:?}", r.body);
        let r = commit(&router, "fast", task_job(bad)).await;
        assert_eq!(r.status, 400, "commit {bad:?}: {:?}", r.body);
    }
    let r = call(&router, "GET", "/v1/trust/list?user_id=alice", None).await;
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn duplicate_json_keys_are_refused() {
    let c = coordinator(spec_config(), Arc::new(SystemClock), 1).await;
    let router = app(c);
    let body = r#"{"job_type":"TASK","user_id":"alice","user_id":"bob",
        "payload":{"task_type":"summarize","input":"x"}}"#;
    let req = axum::http::Request::post("/v1/jobs/commit/fast")
        .header("content-type", "application/json")
        .body(axum::body::Body::from(body))
        .unwrap();
    let r = send(&router, req).await;
    assert_eq!(r.status, 400, "{:?}", r.body);
    assert!(
        r.body["error"]
            .as_str()
            .unwrap_or_default()
            .contains("duplicate key"),
        "{:?}",
        r.body
    );
}
