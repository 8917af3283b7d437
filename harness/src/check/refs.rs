//! What each step action refers to, for `harness check`: the instance it
//! addresses, the strings templates are rendered in, the workers and stubs
//! it names; and the names `[[temporal]]` patterns and `key_of` refer to.
//! Every per-action match of the checker is here, so a new step keyword
//! touches this file and no other of `check/`.

use crate::check::{check_variables, collect_strings, Problem};
use crate::spec::frames::FramePattern;
use crate::spec::names::STUB_NAMES;
use crate::spec::{Action, Scenario, Step};
use serde_json::Value;
use std::collections::BTreeSet;

/// The workers, stubs and the like a step names exist.
pub fn check_step_refs(step: &Step, workers: &BTreeSet<String>, problem: &mut impl FnMut(String)) {
    let mut worker = |name: &str| {
        if !workers.contains(name) {
            problem(no_worker(name, workers));
        }
    };
    match &step.action {
        Action::SendFrame(send) => worker(&send.worker),
        Action::Pair(pair) => worker(&pair.worker),
        Action::Attack(attack) => match &attack.worker {
            Some(name) => worker(name),
            None if attack.kind.pairs() => problem(format!(
                "attack {} needs worker (the attacker's, to claim a code for)",
                attack.kind
            )),
            None => {}
        },
        Action::ExpectFrames(expect) => {
            if let Some(name) = &expect.worker {
                worker(name);
            }
        }
        Action::ExpectCalls(calls) => match (&calls.stub, &calls.facilitator) {
            (Some(stub), None) if !STUB_NAMES.contains(&stub.as_str()) => problem(format!(
                "expect_calls: no stub {stub:?} (stubs: {})",
                STUB_NAMES.join(", ")
            )),
            (Some(_), None) | (None, Some(_)) => {}
            _ => problem(
                "expect_calls names one of stub = \"...\" or facilitator = \"INSTANCE\"".into(),
            ),
        },
        _ => {}
    }
}

/// The users a step acts as (`user_proof`, `attack`) are `[users]`.
pub fn check_step_users(step: &Step, scenario: &Scenario, problem: &mut impl FnMut(String)) {
    let mut names = Vec::new();
    match &step.action {
        Action::Http(call) => {
            if let Some(proof) = &call.user_proof {
                match proof.signer() {
                    Ok(Some((user, key))) => names.extend([user, key]),
                    Ok(None) => {}
                    Err(e) => problem(e),
                }
            }
        }
        Action::Attack(attack) => names.extend([attack.victim.as_str(), &attack.attacker]),
        Action::Pair(pair) => names.push(pair.user.as_str()),
        Action::Cancel(cancel) => {
            if let Some(proof) = &cancel.user_proof {
                match proof.signer() {
                    Ok(Some((user, key))) => names.extend([user, key]),
                    Ok(None) => {}
                    Err(e) => problem(e),
                }
            }
        }
        _ => {}
    }
    for name in names {
        if !scenario.users.contains_key(name) {
            let known: Vec<&str> = scenario.users.keys().map(String::as_str).collect();
            problem(format!("no user {name:?} (users: {})", known.join(", ")));
        }
    }
}

fn no_worker(name: &str, workers: &BTreeSet<String>) -> String {
    let known: Vec<&str> = workers.iter().map(String::as_str).collect();
    format!("no worker {name:?} (workers: {})", known.join(", "))
}

/// The instance an action addresses, if it names one.
pub(crate) fn instance_of(action: &Action) -> Option<&str> {
    Some(match action {
        Action::Http(c) => &c.instance,
        Action::WaitUntil(w) => &w.instance,
        Action::Instance(c) => &c.name,
        Action::CommitMany(c) => &c.instance,
        Action::Facilitator(c) => &c.instance,
        Action::Sockets(s) => &s.instance,
        Action::SlowHeads(s) => &s.instance,
        Action::RawRequest(r) => &r.instance,
        Action::ExpectStore(s) => &s.instance,
        Action::Attack(a) => &a.instance,
        Action::Pair(p) => &p.instance,
        Action::Cancel(c) => &c.instance,
        Action::Poll(c) => &c.instance,
        Action::Stream(c) => &c.instance,
        Action::ExpectCalls(c) => return c.facilitator.as_deref(),
        Action::Router(_)
        | Action::Advance(_)
        | Action::Worker(_)
        | Action::Stub(_)
        | Action::ExpectFrames(_)
        | Action::SendFrame(_)
        | Action::Group(_)
        | Action::Buggify(_)
        | Action::WaitWorkload(_) => return None,
    })
}

/// Every string of a step that templates are rendered in.
pub(crate) fn strings_of(step: &Step) -> Vec<String> {
    let mut out = Vec::new();
    let mut add = |v: &Value| collect_strings(v, &mut out);
    match &step.action {
        Action::Http(c) => {
            add(&Value::String(c.path.clone()));
            if let Some(body) = &c.body {
                add(body);
            }
            for (k, v) in &c.headers {
                add(&Value::String(k.clone()));
                add(&Value::String(v.clone()));
            }
        }
        Action::Router(c) => add(&c.request),
        Action::WaitUntil(w) => add(&Value::String(w.job.clone())),
        Action::Cancel(c) => add(&Value::String(c.job.clone())),
        Action::Poll(c) => add(&Value::String(c.job.clone())),
        Action::Stream(c) => {
            for text in [&c.job, &c.last_event_id].into_iter().flatten() {
                add(&Value::String(text.clone()));
            }
            if let Some(chat) = &c.chat {
                add(chat);
            }
        }
        Action::ExpectStore(s) => add(&Value::String(s.job.clone())),
        Action::CommitMany(c) => add(&c.body),
        Action::SendFrame(c) => add(&c.frame),
        Action::ExpectFrames(c) => add(&c.frame),
        _ => {}
    }
    if let Some(expect) = &step.expect {
        if let Some(body) = &expect.body {
            add(body);
        }
    }
    out
}

/// `[[temporal]]` properties and `key_of`.
pub fn check(
    scenario: &Scenario,
    workers: &BTreeSet<String>,
    defined: &BTreeSet<String>,
    lines: &[&str],
    problems: &mut Vec<Problem>,
) {
    let headers = |start: &str| -> Vec<usize> {
        lines
            .iter()
            .enumerate()
            .filter(|(_, l)| l.trim_start().starts_with(start))
            .map(|(i, _)| i + 1)
            .collect()
    };
    let temporal_lines = headers("[[temporal]]");
    for (i, property) in scenario.temporal.iter().enumerate() {
        let line = temporal_lines.get(i).copied().unwrap_or(0);
        let mut problem = |message: String| {
            problems.push(Problem::at(line, format!("temporal {}: {message}", i + 1)));
        };
        if let Some(p) = property.shape_problem() {
            problem(p);
        }
        let patterns = [
            ("event", Some(&property.event)),
            ("first", property.first.as_ref()),
        ];
        for (key, pattern) in patterns {
            let Some(pattern) = pattern else { continue };
            check_pattern(key, pattern, workers, defined, &mut problem);
        }
    }
    let worker_lines = headers("[[workers]]");
    let mut earlier = BTreeSet::new();
    for (i, spec) in scenario.workers.iter().enumerate() {
        if let Some(other) = &spec.key_of {
            if !earlier.contains(other) {
                problems.push(Problem::at(
                    worker_lines.get(i).copied().unwrap_or(0),
                    format!(
                        "worker {}: key_of {other:?} is not an earlier worker (earlier: {})",
                        spec.name,
                        crate::check::listing(&earlier)
                    ),
                ));
            }
        }
        earlier.insert(spec.name.clone());
    }
}

fn check_pattern(
    key: &str,
    pattern: &FramePattern,
    workers: &BTreeSet<String>,
    defined: &BTreeSet<String>,
    problem: &mut impl FnMut(String),
) {
    if let Some(name) = &pattern.worker {
        if !workers.contains(name) {
            problem(format!("{key}: {}", no_worker(name, workers)));
        }
    }
    for p in crate::expr::matcher::problems(&pattern.frame, &format!("{key}.frame $")) {
        problem(p);
    }
    let mut strings = Vec::new();
    collect_strings(&pattern.frame, &mut strings);
    for text in strings {
        check_variables(&text, defined, &mut *problem);
    }
}

#[cfg(test)]
mod tests {
    use crate::check::answers::{JOB_KEYS, QUOTE_KEYS, RECEIPT_KEYS};
    use crate::check::{check, Problem};
    use crate::Scenario;
    use std::path::Path;

    const HEAD: &str = "schema_version = 2\nname = \"t\"\nlive = false\n\n[instances.chain_a]\nnetwork = \"eip155:84532\"\n\n[[workers]]\nname = \"w\"\n\n";

    /// The one problem of HEAD + `tail`; HEAD is 10 lines.
    fn only(tail: &str) -> Problem {
        let text = format!("{HEAD}{tail}");
        let scenario = Scenario::parse(&text).expect("loads");
        let found = check(Path::new("scenarios/t.toml"), &text, &scenario);
        assert_eq!(found.len(), 1, "{found:?}");
        found[0].clone()
    }

    fn load_error(tail: &str) -> String {
        Scenario::parse(&format!("{HEAD}{tail}")).unwrap_err()
    }

    fn says(p: &Problem, line: usize, words: &[&str]) {
        assert_eq!(p.line, line, "{p:?}");
        for w in words {
            assert!(p.message.contains(w), "{w:?} not in {p:?}");
        }
    }

    #[test]
    fn an_unknown_filter_lists_the_filters() {
        let p = only("[[steps]]\nhttp = { path = \"/\" }\ncapture = { c = \"$.x\" }\n[[steps]]\nhttp = { path = \"/{{c | uper}}\" }\n");
        says(
            &p,
            14,
            &[
                "step 2",
                "unknown filter \"uper\"",
                "upper, lower, + DURATION",
            ],
        );
    }

    #[test]
    fn a_regex_that_does_not_compile() {
        let p =
            only("[[steps]]\nhttp = { path = \"/\" }\nexpect = { body = { a = \"regex:(\" } }\n");
        says(&p, 11, &["step 1", "expect.body $.a: invalid regex \"(\""]);
    }

    #[test]
    fn a_combined_matcher_of_the_wrong_shape() {
        let p = only(
            "[[steps]]\nhttp = { path = \"/\" }\nexpect = { body = { a = { any_of = \"x\" } } }\n",
        );
        says(&p, 11, &["$.a: any_of takes a non-empty array"]);
    }

    #[test]
    fn a_mistyped_matcher_in_a_frame_pattern() {
        let p = only(
            "[[steps]]\nexpect_frames = { worker = \"w\", frame = { job_id = \"any_uid\" } }\n",
        );
        says(
            &p,
            11,
            &[
                "expect_frames.frame $.job_id: \"any_uid\" is not a matcher",
                "any_uuid",
            ],
        );
    }

    #[test]
    fn send_frame_and_expect_frames_name_known_workers() {
        let p =
            only("[[steps]]\nsend_frame = { worker = \"x\", frame = { type = \"heartbeat\" } }\n");
        says(&p, 11, &["step 1: no worker \"x\" (workers: w)"]);
        let p = only("[[steps]]\nexpect_frames = { worker = \"v\", frame = {} }\n");
        says(&p, 11, &["no worker \"v\" (workers: w)"]);
    }

    #[test]
    fn expect_calls_names_a_stub_or_a_facilitator() {
        let p = only("[[steps]]\nexpect_calls = { stub = \"openai\", count = 1 }\n");
        says(
            &p,
            11,
            &["no stub \"openai\" (stubs: provider_a, provider_b)"],
        );
        let p = only("[[steps]]\nexpect_calls = { count = 1 }\n");
        says(&p, 11, &["names one of stub"]);
        let p = only("[[steps]]\nexpect_calls = { facilitator = \"chain_b\", count = 1 }\n");
        says(
            &p,
            11,
            &["instance \"chain_b\" is not declared (declared: chain_a)"],
        );
    }

    #[test]
    fn temporal_properties_are_checked() {
        let step = "[[steps]]\nadvance = \"1s\"\n\n";
        let p = only(&format!(
            "{step}[[temporal]]\nkind = \"before\"\nevent = {{ frame = {{}} }}\n"
        ));
        says(&p, 14, &["temporal 1: kind = \"before\" needs first"]);
        let p = only(&format!(
            "{step}[[temporal]]\nkind = \"never\"\nevent = {{ worker = \"x\" }}\n"
        ));
        says(&p, 14, &["temporal 1: event: no worker \"x\" (workers: w)"]);
        let p = only(&format!(
            "{step}[[temporal]]\nkind = \"never\"\nevent = {{ frame = {{ job_id = \"{{{{job}}}}\" }} }}\n"
        ));
        says(&p, 14, &["{{job}} is not defined", "pubkey.w"]);
        let err = load_error(&format!(
            "{step}[[temporal]]\nkind = \"always\"\nevent = {{}}\n"
        ));
        assert!(
            err.contains(
                "unknown variant `always`, expected one of `never`, `exactly_once`, `at_least_once`, `before`"
            ),
            "{err}"
        );
        let err = load_error("[[steps]]\nexpect_frames = { direction = \"in\" }\n");
        assert!(err.contains("expected `received` or `sent`"), "{err}");
    }

    #[test]
    fn key_of_names_an_earlier_worker() {
        let text = format!(
            "{HEAD}[[workers]]\nname = \"v\"\nkey_of = \"z\"\n\n[[steps]]\nadvance = \"1s\"\n"
        );
        let scenario = Scenario::parse(&text).expect("loads");
        let found = check(Path::new("scenarios/t.toml"), &text, &scenario);
        assert_eq!(found.len(), 1, "{found:?}");
        says(
            &found[0],
            11,
            &["worker v: key_of \"z\" is not an earlier worker (earlier: w)"],
        );
    }

    #[test]
    fn an_expanded_step_is_reported_at_its_table() {
        let p = only("[[steps]]\nadvance = \"1s\"\n\n[[steps]]\nrepeat = 3\nhttp = { path = \"/{{i}}/{{nope}}\" }\n");
        says(&p, 14, &["step 2: {{nope}} is not defined"]);
    }

    #[test]
    fn a_misspelt_key_of_a_known_answer_is_an_error() {
        let p = only("[[steps]]\nhttp = { path = \"/v1/jobs/x\" }\nexpect = { status = 200, body = { reciept = \"absent_or_null\" } }\n");
        says(
            &p,
            11,
            &[
                "expect.body $.reciept: the answer has no such key",
                "receipt",
            ],
        );
        let p = only("[[steps]]\nwait_until = { job = \"j\", status = \"completed\" }\ncapture = { k = \"$.receipt.provider_key\" }\n");
        says(
            &p,
            11,
            &[
                "capture k = \"$.receipt.provider_key\": $.receipt.provider_key",
                "provider_pubkey",
            ],
        );
        let p = only("[[steps]]\nhttp = { path = \"/v1/quote?job_type=TASK\" }\nexpect = { status = 200, body = { prize = \"$0.001\" } }\n");
        says(&p, 11, &["$.prize", "price, endpoint"]);
    }

    #[test]
    fn the_key_lists_match_the_types() {
        use protocol::api::{JobRecord, JobStatus, Quote};
        use rand::SeedableRng;
        let key =
            protocol::signing::Keypair::generate(&mut rand_chacha::ChaCha20Rng::seed_from_u64(1));
        let id = uuid::Uuid::nil();
        let receipt = protocol::receipt::ReceiptBody::new(
            id,
            key.public_key_hex(),
            &serde_json::json!("o"),
            "t".into(),
            None,
        )
        .sign(&key);
        let record = JobRecord {
            id,
            status: JobStatus::Completed,
            result: None,
            receipt: Some(receipt.clone()),
            created_at: "t".into(),
            completed_at: None,
            // Every optional key present, so each is listed.
            payment_transaction: Some("0xtx".into()),
        };
        let keys = |v: serde_json::Value| -> Vec<String> {
            let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
            k.sort();
            k
        };
        let sorted = |k: &[&str]| -> Vec<String> {
            let mut k: Vec<String> = k.iter().map(|s| s.to_string()).collect();
            k.sort();
            k
        };
        assert_eq!(
            keys(serde_json::to_value(&record).unwrap()),
            sorted(&JOB_KEYS)
        );
        assert_eq!(
            keys(serde_json::to_value(&receipt).unwrap()),
            sorted(&RECEIPT_KEYS)
        );
        let quote = Quote {
            price: protocol::money::Price::from_micros(1),
            endpoint: "e".into(),
            policy_resolved: protocol::api::Tier::Fast,
            network: "n".into(),
            expires_at: None,
        };
        assert_eq!(
            keys(serde_json::to_value(&quote).unwrap()),
            sorted(&QUOTE_KEYS)
        );
    }

    #[test]
    fn a_capture_path_that_can_never_select() {
        let p = only("[[steps]]\nhttp = { path = \"/\" }\ncapture = { j = \"job_id\" }\n");
        says(
            &p,
            11,
            &["step 1: capture path \"job_id\": it must start with $"],
        );
    }

    #[test]
    fn a_bad_pay_version_lists_the_versions() {
        let err = load_error("[[steps]]\nhttp = { path = \"/\", pay = { version = 3 } }\n");
        assert!(
            err.contains("x402 versions are 1 (X-PAYMENT) or 2 (PAYMENT-SIGNATURE)"),
            "{err}"
        );
        assert!(err.contains("line 12"), "{err}");
    }
}
