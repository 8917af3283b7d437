//! The `coordinator` binary's command line: help text and start-up refusals.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// Runs the binary to its end; one still running after 20 s is killed and
/// the test fails (a refused start-up exits at once).
fn run(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_coordinator"))
        .args(args)
        .env_remove("COORDINATOR_ASSET")
        .env_remove("COORDINATOR_ASSET_NAME")
        .env_remove("COORDINATOR_ASSET_VERSION")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the coordinator binary runs");
    // Counted in polls: the clock reads are banned outside the clock module.
    let mut polls = 0;
    while child.try_wait().expect("wait").is_none() {
        polls += 1;
        if polls > 1_000 {
            child.kill().expect("kill");
            panic!("coordinator {args:?} kept running");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

/// Runs the binary, which must refuse to start (exit 2); returns its stderr.
fn refused(args: &[&str]) -> String {
    let out = run(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    stderr
}

/// The help text of one flag: from its line to the next flag's.
fn help_of(help: &str, flag: &str) -> String {
    let start = help
        .find(&format!("      {flag} "))
        .or_else(|| help.find(&format!("      {flag}\n")))
        .unwrap_or_else(|| panic!("{flag} in help"));
    let rest = &help[start + flag.len() + 6..];
    let end = ["\n  -", "\n      --"]
        .iter()
        .filter_map(|next| rest.find(next))
        .min()
        .unwrap_or(rest.len());
    rest[..end].to_owned()
}

#[test]
fn help_describes_db_under_db() {
    // Issue 16 finding 10: the --db description was printed under
    // --payment-required, and --db had none.
    let out = run(&["--help"]);
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(
        help_of(&help, "--db").contains("SQLite database file"),
        "{help}"
    );
    let payment = help_of(&help, "--payment-required");
    assert!(payment.contains("Require an x402 payment"), "{payment}");
    assert!(!payment.contains("SQLite"), "{payment}");
}

#[test]
fn payments_on_a_network_without_a_known_asset_refuse_to_start() {
    // Issue 16 finding 10: Monad testnet answered 402 with Base Sepolia's USDC.
    let stderr = refused(&[
        "--network",
        "eip155:10143",
        "--payment-required",
        "--pay-to",
        "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
        "--db",
        ":memory:",
        "--listen",
        "127.0.0.1:0",
    ]);
    assert!(
        stderr.contains("no payment asset is known for network eip155:10143")
            && stderr.contains("--asset"),
        "{stderr}"
    );
}

/// Found by the swarm: a heartbeat timeout at or below the heartbeat
/// interval was accepted, and then every idle worker was disconnected at each
/// timeout, so no worker ever stayed online.
#[test]
fn a_heartbeat_timeout_not_above_the_interval_refuses_to_start() {
    let stderr = refused(&[
        "--heartbeat-interval-ms",
        "5000",
        "--heartbeat-timeout-ms",
        "2000",
        "--db",
        ":memory:",
        "--listen",
        "127.0.0.1:0",
    ]);
    assert!(
        stderr.contains(
            "heartbeat timeout (2000 ms) must be longer than the heartbeat interval (5000 ms)"
        ),
        "{stderr}"
    );
}

/// Issue 16 #1: retention is on by default, and the job byte budgets are flags.
#[test]
fn retention_is_on_by_default_and_job_bytes_are_bounded() {
    let out = run(&["--help"]);
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(
        help_of(&help, "--retention-hours").contains("[default: 24]"),
        "{help}"
    );
    assert!(help_of(&help, "--queued-bytes-max").contains("[default: 268435456]"));
    assert!(help_of(&help, "--kept-bytes-max").contains("[default: 1073741824]"));
    // Issue 29: the per-client shares, the minimum keep time, the failure
    // ledger and the output limit are flags too.
    for (flag, default) in [
        ("--kept-share-per-client-percent", "12"),
        ("--kept-min-ms", "120000"),
        ("--failed-kept-bytes-max", "67108864"),
        ("--queued-bytes-per-client-max", "33554432"),
        ("--output-bytes-max", "262144"),
        ("--refusals-per-client-per-minute-max", "600"),
    ] {
        let expected = format!("[default: {default}]");
        assert!(help_of(&help, flag).contains(&expected), "{flag}: {help}");
    }
}

/// Issue 31 #7: the held-stream limits are flags (a load test of 1,000
/// readers from one address needs them), defaulting to the library's.
#[test]
fn held_stream_limits_are_flags_with_the_library_defaults() {
    let out = run(&["--help"]);
    let help = String::from_utf8(out.stdout).unwrap();
    let limits = coordinator::config::Limits::default();
    for (flag, default) in [
        ("--held-streams-max", limits.held_streams_max.to_string()),
        (
            "--held-streams-per-client-max",
            limits.held_streams_per_client_max.to_string(),
        ),
        ("--stream-ms-max", limits.stream_ms_max.to_string()),
    ] {
        let expected = format!("[default: {default}]");
        assert!(help_of(&help, flag).contains(&expected), "{flag}: {help}");
    }
}

/// Issue 16 #4: a public URL that names no worker origin refuses start-up,
/// rather than leaving every worker unable to log in.
#[test]
fn a_public_url_without_an_origin_refuses_to_start() {
    for bad in ["coord.example.com", "ftp://coord.example.com"] {
        let out = run(&[
            "--public-url",
            bad,
            "--db",
            ":memory:",
            "--listen",
            "127.0.0.1:0",
        ]);
        assert_eq!(out.status.code(), Some(2), "{bad}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("public URL") && stderr.contains(bad),
            "{stderr}"
        );
    }
}

#[test]
fn cluster_flags_need_a_postgres_db() {
    for flag in ["--node-id", "--db-schema"] {
        let stderr = refused(&["--db", ":memory:", flag, "x"]);
        assert!(stderr.contains("need a postgres:// --db"), "{stderr}");
    }
    let out = run(&["--help"]);
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(help_of(&help, "--db").contains("postgres://"), "{help}");
    assert!(
        help_of(&help, "--node-id").contains("logs and metrics"),
        "{help}"
    );
}

#[test]
fn an_unreachable_postgres_db_refuses_to_start() {
    // Port 1 on loopback: nothing listens, the connection is refused at once.
    let out = run(&[
        "--db",
        "postgres://nobody@127.0.0.1:1/none",
        "--listen",
        "127.0.0.1:0",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cannot join the cluster"), "{stderr}");
    assert!(stderr.contains("Connection refused"), "says why: {stderr}");
    assert!(
        !stderr.contains("nobody@"),
        "the URL is not logged: {stderr}"
    );
}
