//! Version-2 assertions fail when what they state is false, and say where:
//! the job, the frame and the transcript line.

use harness::{run_simulated, Outcome, Scenario};

const HEAD: &str = r#"schema_version = 2
name = "t"
seed = 5
live = false

[instances.chain_a]
network = "eip155:84532"

[[workers]]
name = "a-first"
latency = "10ms"

[[workers]]
name = "b-second"
latency = "10ms"

[[steps]]
http = { method = "POST", path = "/v1/jobs/commit/cheap", body = { job_type = "TASK", user_id = "u", payload = { task_type = "classify", input = "x" } } }
capture = { job = "$.job_id" }

[[steps]]
wait_until = { job = "{{job}}", status = "completed", within = "5s" }
"#;

fn run(tail: &str) -> (Outcome, Vec<String>) {
    let scenario = Scenario::parse(&format!("{HEAD}{tail}")).expect("loads");
    let report = run_simulated(&scenario, None);
    (report.outcome, report.transcript)
}

fn invariant_message(outcome: Outcome) -> String {
    match outcome {
        Outcome::InvariantBroken { message, .. } => message,
        other => panic!("expected a broken property, got {other:?}"),
    }
}

#[test]
fn a_violated_never_names_the_job_the_frame_and_its_line() {
    let (outcome, transcript) = run(
        "[[temporal]]\nkind = \"never\"\nevent = { worker = \"a-first\", direction = \"received\", frame = { type = \"assign\", job_id = \"{{job}}\" } }\n",
    );
    let message = invariant_message(outcome);
    assert!(
        message.starts_with("temporal 1 (never a-first received"),
        "{message}"
    );
    let line: usize = message
        .rsplit("at transcript line ")
        .next()
        .and_then(|t| t.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .expect("a line number");
    assert!(
        transcript[line - 1].contains("a-first <- {\"type\":\"assign\""),
        "{}",
        transcript[line - 1]
    );
    let job = message
        .split("job ")
        .nth(1)
        .unwrap()
        .split(':')
        .next()
        .unwrap();
    assert!(transcript[line - 1].contains(job), "{message}");
}

#[test]
fn exactly_once_fails_for_a_job_that_never_got_it() {
    let (outcome, _) = run(
        "[[temporal]]\nkind = \"exactly_once\"\nper = \"job\"\nevent = { worker = \"b-second\", direction = \"received\", frame = { type = \"result_accepted\" } }\n",
    );
    let message = invariant_message(outcome);
    assert!(message.contains(": job "), "{message}");
    assert!(message.ends_with("it never happened"), "{message}");
}

#[test]
fn before_fails_when_the_order_is_reversed() {
    let (outcome, _) = run(
        "[[temporal]]\nkind = \"before\"\nper = \"job\"\nfirst = { direction = \"sent\", frame = { type = \"result\" } }\nevent = { direction = \"sent\", frame = { type = \"accept\" } }\n",
    );
    let message = invariant_message(outcome);
    assert!(message.contains("came before any"), "{message}");
}

#[test]
fn expect_frames_and_expect_calls_fail_with_what_came() {
    let (outcome, _) = run(
        "[[steps]]\nexpect_frames = { worker = \"a-first\", direction = \"received\", frame = { type = \"error\" } }\n",
    );
    let Outcome::Failed { step: 3, message } = outcome else {
        panic!("{outcome:?}")
    };
    assert!(
        message.starts_with("expected at least 1 frame(s) where a-first received"),
        "{message}"
    );
    assert!(message.contains("the last such frames:"), "{message}");
    assert!(message.contains("result_accepted"), "{message}");
    let (outcome, _) = run("[[steps]]\nexpect_calls = { stub = \"provider_a\", count = 1 }\n");
    assert_eq!(
        outcome,
        Outcome::Failed {
            step: 3,
            message: "stub provider_a received 0 calls, expected 1".into()
        }
    );
}

#[test]
fn the_properties_that_hold_pass() {
    let (outcome, transcript) = run(
        "[[temporal]]\nkind = \"exactly_once\"\nper = \"job\"\nevent = { direction = \"received\", frame = { type = \"result_accepted\" } }\n\n[[temporal]]\nkind = \"never\"\nevent = { worker = \"b-second\", direction = \"received\", frame = { type = \"assign\" } }\n",
    );
    assert_eq!(outcome, Outcome::Passed);
    assert!(transcript
        .iter()
        .any(|l| l.ends_with("temporal 2 (never b-second received {\"type\":\"assign\"}) holds")));
}

#[test]
fn at_least_once_fails_when_the_state_is_never_reached_and_holds_when_it_is() {
    let (outcome, _) = run(
        "[[temporal]]\nkind = \"at_least_once\"\nevent = { direction = \"sent\", frame = { type = \"reject\" } }\n",
    );
    let message = invariant_message(outcome);
    assert!(
        message.starts_with("temporal 1 (at_least_once"),
        "{message}"
    );
    assert!(message.ends_with("it never happened"), "{message}");
    let (outcome, transcript) = run(
        "[[temporal]]\nkind = \"at_least_once\"\nper = \"job\"\nevent = { direction = \"received\", frame = { type = \"assign\" } }\n",
    );
    assert_eq!(outcome, Outcome::Passed);
    assert!(transcript.iter().any(|l| l.ends_with("holds")));
}

/// A commit refused with 422 leaves a record with a `job_id`: `per = "job"`
/// counts it (and so cannot state "every job is accepted once" in a run
/// with refusals), `per = "acknowledged_job"` judges only the 201s.
#[test]
fn per_acknowledged_job_leaves_out_commits_that_were_refused() {
    let refused = "[[steps]]\nhttp = { method = \"POST\", path = \"/v1/jobs/commit/cheap\", body = { job_type = \"TASK\", user_id = \"nobody\", privacy_class = \"PRIVATE\", payload = { task_type = \"classify\", input = \"x\" } } }\nexpect = { status = 422 }\n\n";
    let property = |per: &str| {
        format!("{refused}[[temporal]]\nkind = \"exactly_once\"\nper = \"{per}\"\nevent = {{ direction = \"received\", frame = {{ type = \"result_accepted\" }} }}\n")
    };
    let (outcome, _) = run(&property("job"));
    let message = invariant_message(outcome);
    assert!(message.ends_with("it never happened"), "{message}");
    let (outcome, _) = run(&property("acknowledged_job"));
    assert_eq!(outcome, Outcome::Passed);
}
