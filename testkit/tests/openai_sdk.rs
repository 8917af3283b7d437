//! Runs `openai_sdk_check.py` (official OpenAI Python SDK) against the OpenAI
//! stub served on loopback: plain and streamed calls, faults in both. Needs `python3` with `pip install openai`; a
//! missing package fails the test, it does not skip.

use protocol::clock::FixedClock;
use std::process::Command;
use std::sync::Arc;
use testkit::{ProviderStub, StubConfig, StubFault};

#[test]
fn official_openai_sdk_parses_stub_answers() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let stub = ProviderStub::openai(
        StubConfig {
            api_key: "sk-sdk".into(),
            ..StubConfig::default()
        },
        Arc::new(FixedClock(1_795_255_200_000)),
    );
    stub.script(3, StubFault::RateLimited { retry_after_s: 2 });
    stub.script(4, StubFault::ServerError);
    stub.script(5, StubFault::MalformedJson);
    stub.script(9, StubFault::CutStream { after_events: 3 });
    stub.script(10, StubFault::MalformedJson);
    let base = runtime.block_on(testkit::serve_loopback(stub.router()));

    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/openai_sdk_check.py");
    let output = Command::new("python3")
        .arg(script)
        .arg(format!("{base}/v1"))
        .arg("sk-sdk")
        .env("NO_PROXY", "127.0.0.1")
        .output()
        .expect("python3 must be installed to run the OpenAI SDK check");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "OpenAI SDK check failed (if the openai package is missing: pip install openai)\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(stdout.contains("all checks passed"), "{stdout}");
    let statuses: Vec<u16> = stub.calls().iter().map(|c| c.status).collect();
    assert_eq!(
        statuses,
        vec![200, 200, 401, 429, 500, 200, 200, 200, 200, 200, 200]
    );
    let streamed: Vec<bool> = stub.calls().iter().map(|c| c.stream).collect();
    assert_eq!(streamed[..6], [false; 6]);
    assert_eq!(streamed[6..], [true; 5]);
    println!("{stdout}");
}
