//! Runs `anthropic_sdk_check.py` (official Anthropic Python SDK) against the
//! Anthropic stub served on loopback: plain and streamed calls, a cut stream.
//! Needs `python3` with `pip install anthropic` (scripts/test.sh installs it);
//! a missing package fails the test, it does not skip.

use protocol::clock::FixedClock;
use std::process::Command;
use std::sync::Arc;
use testkit::{ProviderStub, StubConfig, StubFault};

#[test]
fn official_anthropic_sdk_parses_stub_answers_and_streams() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let stub = ProviderStub::anthropic(
        StubConfig {
            api_key: "sk-ant-sdk".into(),
            ..StubConfig::default()
        },
        Arc::new(FixedClock(1_795_255_200_000)),
    );
    stub.script(4, StubFault::CutStream { after_events: 4 });
    stub.script(5, StubFault::MalformedJson);
    let base = runtime.block_on(testkit::serve_loopback(stub.router()));

    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/anthropic_sdk_check.py");
    let output = Command::new("python3")
        .arg(script)
        .arg(&base)
        .arg("sk-ant-sdk")
        .env("NO_PROXY", "127.0.0.1")
        .output()
        .expect("python3 must be installed to run the Anthropic SDK check");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "Anthropic SDK check failed (if the anthropic package is missing: pip install anthropic)\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(stdout.contains("all checks passed"), "{stdout}");
    let calls = stub.calls();
    let statuses: Vec<u16> = calls.iter().map(|c| c.status).collect();
    assert_eq!(statuses, vec![200, 401, 200, 200, 200, 200]);
    let streamed: Vec<bool> = calls.iter().map(|c| c.stream).collect();
    assert_eq!(streamed, vec![false, false, true, true, true, true]);
    assert_eq!(calls[4].fault.as_deref(), Some("cut_stream"));
    println!("{stdout}");
}
