//! Issue 29, finding 2: a cluster node survives a request with U+0000 in
//! every string field. Before the fix, a commit whose `user_id` held U+0000
//! was accepted, PostgreSQL refused the text, and the node took the write
//! error for a fence and exited (status 75) within 10 ms.
//!
//! Runs when `COORDINATOR_TEST_PG` names a PostgreSQL database
//! (`scripts/pg-throwaway.sh start DIR` starts one); skipped otherwise.

mod common;

use serde_json::{json, Value};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

const NUL: &str = "a\u{0}b";

#[tokio::test]
async fn a_node_survives_nul_in_every_string_field() {
    let Ok(url) = std::env::var("COORDINATOR_TEST_PG") else {
        eprintln!("skipped: set COORDINATOR_TEST_PG=postgres://… to run");
        return;
    };
    let schema = format!("nul{}", std::process::id());
    let mut child = Command::new(env!("CARGO_BIN_EXE_coordinator"))
        .args(["--listen", "127.0.0.1:0"])
        .args(["--db", &url, "--db-schema", &schema])
        .args(["--node-id", "n0"])
        .env("RUST_LOG", "info")
        .env_remove("COORDINATOR_LISTEN")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("coordinator binary starts");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let base = common::wait_listening(&mut lines, Duration::from_secs(30)).await;
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let http = reqwest::Client::new();
    let post = |path: &str, body: Value| {
        let req = http.post(format!("{base}{path}")).json(&body);
        async move {
            req.send()
                .await
                .expect("the node answers")
                .status()
                .as_u16()
        }
    };
    let llm = json!({"job_type": "LLM_INFER", "user_id": "alice",
        "payload": {"prompt": "hi", "max_tokens": 8}});
    let task = json!({"job_type": "TASK", "user_id": "alice",
        "payload": {"task_type": "summarize", "input": "x"}});
    // One string field at a time set to hold U+0000, in each body.
    let mut bodies: Vec<(&str, Value)> = Vec::new();
    for (path, body) in [
        ("/v1/jobs/commit/fast", &llm),
        ("/v1/jobs/commit/cheap", &task),
    ] {
        for pointer in [
            "/job_type",
            "/user_id",
            "/payload/prompt",
            "/payload/task_type",
            "/payload/input",
            "/payload/job_type",
        ] {
            let mut b = body.clone();
            let (parent, key) = pointer.rsplit_once('/').unwrap();
            if let Some(obj) = b.pointer_mut(if parent.is_empty() { "" } else { parent }) {
                obj[key] = json!(NUL);
            }
            bodies.push((path, b));
        }
        let mut private = body.clone();
        private["privacy_class"] = json!(NUL);
        bodies.push((path, private));
    }
    bodies.push(("/v1/trust/create", json!({"user_id": NUL})));
    bodies.push((
        "/v1/trust/claim",
        json!({"pairing_code": NUL, "provider_pubkey": NUL}),
    ));
    // A field the body's job type reads is refused (400); one it does not
    // read (`task_type` of an LLM job) is ignored, never stored. Never 5xx.
    for (path, body) in bodies {
        let status = post(path, body.clone()).await;
        assert!(status < 500, "{path} {body}: {status}");
        let has = |p: &str| body.pointer(p).is_some();
        let read = !(path.ends_with("fast")
            && (has("/payload/task_type") || has("/payload/input"))
            || path.ends_with("cheap") && has("/payload/prompt"));
        if read {
            assert!((400..500).contains(&status), "{path} {body}: {status}");
        }
    }
    let list = http
        .get(format!("{base}/v1/trust/list?user_id=a%00b"))
        .send()
        .await
        .expect("the node answers");
    assert_eq!(list.status(), 400);
    // The node is up and takes an ordinary commit.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(child.try_wait().unwrap().is_none(), "the node exited");
    assert_eq!(post("/v1/jobs/commit/fast", llm.clone()).await, 201);
    assert!(child.try_wait().unwrap().is_none(), "the node exited");
}
