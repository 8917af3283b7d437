//! `harness check` for what runs beside the steps (schema version 2):
//! `[[workloads]]`, `[[faults]]` and `wait_until = { workload }` steps.
//! Each problem is reported at its table's line, in the scenario's words.

use crate::check::{declared, listing, Lines, Problem};
use crate::spec::fault::{FaultKind, FaultSpec, EVENTS_MAX};
use crate::spec::names::STUB_NAMES;
use crate::spec::workload::{WorkloadSpec, COMMITS_MAX, RATE_MAX};
use crate::spec::{Action, Scenario};
use std::collections::BTreeSet;

pub(crate) fn check(
    scenario: &Scenario,
    workers: &BTreeSet<String>,
    lines: &Lines,
    problems: &mut Vec<Problem>,
) {
    let mut names = BTreeSet::new();
    let mut from = 0;
    for spec in &scenario.workloads {
        let line = lines.find("[[workloads]]", from);
        from = line;
        let mut problem = |m: String| {
            problems.push(Problem::at(line, format!("workload {}: {m}", spec.name)));
        };
        if !names.insert(spec.name.clone()) {
            problem("two workloads have this name".into());
        }
        if workers.contains(&spec.name) {
            problem("a worker has this name too; a workload's client is named after it".into());
        }
        check_workload(scenario, spec, &mut problem);
    }
    let workloads = names;
    let mut names = BTreeSet::new();
    let mut from = 0;
    for spec in &scenario.faults {
        let line = lines.find("[[faults]]", from);
        from = line;
        let mut problem = |m: String| {
            problems.push(Problem::at(
                line,
                format!("fault {} ({}): {m}", spec.name, spec.kind),
            ));
        };
        if !names.insert(spec.name.clone()) {
            problem("two faults have this name".into());
        }
        check_fault(scenario, spec, workers, &workloads, &mut problem);
    }
    let mut from = 0;
    for (i, step) in scenario.steps.iter().enumerate() {
        let line = lines.find("[[steps]]", from);
        from = line;
        if let Action::WaitWorkload(wait) = &step.action {
            if !workloads.contains(&wait.workload) {
                problems.push(Problem::at(
                    line,
                    format!(
                        "step {}: no workload {:?} (workloads: {})",
                        i + 1,
                        wait.workload,
                        listing(&workloads)
                    ),
                ));
            }
        }
    }
}

fn check_workload(scenario: &Scenario, spec: &WorkloadSpec, problem: &mut impl FnMut(String)) {
    if spec.instances.is_empty() {
        problem("instances is empty".into());
    }
    for instance in &spec.instances {
        match scenario.instances.get(instance) {
            None => problem(format!(
                "instance {instance:?} is not declared ({})",
                declared(scenario)
            )),
            Some(i) if spec.payers.paid > 0 && i.payment.is_none() => problem(format!(
                "payers has paid commits but instance {instance} takes no payment (add [instances.{instance}] payment = {{}})"
            )),
            Some(_) => {}
        }
    }
    if spec.count == 0 || spec.count > COMMITS_MAX {
        problem(format!(
            "count = {}: a workload commits 1 to {COMMITS_MAX} jobs",
            spec.count
        ));
    }
    match (spec.rate, &spec.over) {
        (None, None) => {
            problem("give rate (commits per simulated second) or over (a duration)".into())
        }
        (Some(_), Some(_)) => problem("give rate or over, not both".into()),
        (Some(rate), None) if rate == 0 || rate > RATE_MAX => problem(format!(
            "rate = {rate}: commits per simulated second are 1 to {RATE_MAX}"
        )),
        (None, Some(over)) if over.duration.is_zero() => problem(format!(
            "over = {:?} is no time; use rate for a burst",
            over.text
        )),
        _ => {}
    }
    for (mix, total) in spec.mix_totals() {
        if total == 0 {
            problem(format!("{mix}: every weight is 0"));
        }
    }
}

fn check_fault(
    scenario: &Scenario,
    spec: &FaultSpec,
    workers: &BTreeSet<String>,
    workloads: &BTreeSet<String>,
    problem: &mut impl FnMut(String),
) {
    check_fault_keys(spec, problem);
    match spec.kind {
        FaultKind::Attrition => {
            let groups: BTreeSet<&str> = scenario.workers.iter().map(|w| w.name.as_str()).collect();
            for w in &spec.workers {
                if !workers.contains(w) && !groups.contains(w.as_str()) {
                    problem(format!("no worker {w:?} (workers: {})", listing(workers)));
                }
            }
            if scenario.workers.iter().all(|w| w.names().is_empty()) {
                problem("the scenario has no worker to lose".into());
            }
        }
        FaultKind::Reboot => {
            if let Some(instance) = &spec.instance {
                if !scenario.instances.contains_key(instance) {
                    problem(format!(
                        "instance {instance:?} is not declared ({})",
                        declared(scenario)
                    ));
                }
            }
            match (&spec.at, &spec.window, spec.count) {
                (None, None, _) => problem("give at (a time) or window (random times)".into()),
                (Some(_), Some(_), _) => problem("give at or window, not both".into()),
                (Some(_), None, Some(_)) => problem("count goes with window".into()),
                (_, _, Some(n)) if n == 0 || n > EVENTS_MAX => {
                    problem(format!("count = {n}: 1 to {EVENTS_MAX} reboots"))
                }
                _ => {}
            }
        }
        FaultKind::Partition | FaultKind::Delay | FaultKind::Hold => {
            if let Some(between) = &spec.between {
                check_between(scenario, between, workers, workloads, problem);
            }
        }
        FaultKind::ProviderErrors => {
            if let Some(stub) = &spec.stub {
                if !STUB_NAMES.contains(&stub.as_str()) {
                    problem(format!(
                        "no stub {stub:?} (stubs: {})",
                        STUB_NAMES.join(", ")
                    ));
                }
            }
        }
    }
}

/// The keys a fault of its kind needs and takes, and its times.
fn check_fault_keys(spec: &FaultSpec, problem: &mut impl FnMut(String)) {
    let (needs, may) = spec.kind.keys();
    let set = spec.keys_set();
    let missing: Vec<&str> = needs
        .iter()
        .filter(|k| !set.contains(k))
        .filter(|k| !(spec.kind == FaultKind::Reboot && **k == "at"))
        .copied()
        .collect();
    if !missing.is_empty() {
        problem(format!("needs {}", missing.join(", ")));
    }
    for key in &set {
        if !needs.contains(key) && !may.contains(key) {
            let mut takes: Vec<&str> = needs.to_vec();
            takes.extend(may);
            problem(format!(
                "takes no {key} (a {} fault takes {})",
                spec.kind,
                takes.join(", ")
            ));
        }
    }
    if let Some([from, to]) = &spec.window {
        if from.duration >= to.duration {
            problem(format!(
                "window = [{:?}, {:?}] ends before it starts",
                from.text, to.text
            ));
        }
    }
    for (key, d) in [
        ("every", &spec.every),
        ("delay", &spec.delay),
        ("for", &spec.lasting),
    ] {
        if let Some(d) = d {
            if d.duration.is_zero() && !(key == "for" && spec.kind == FaultKind::Reboot) {
                problem(format!("{key} = {:?} is no time", d.text));
            }
        }
    }
}

/// `between` names one host (an instance or a stub) and one peer (a
/// worker, a workload, `router`, or an `http` step's client).
fn check_between(
    scenario: &Scenario,
    between: &[String; 2],
    workers: &BTreeSet<String>,
    workloads: &BTreeSet<String>,
    problem: &mut impl FnMut(String),
) {
    let is_host = |n: &str| scenario.instances.contains_key(n) || STUB_NAMES.contains(&n);
    let clients: BTreeSet<String> = scenario
        .steps
        .iter()
        .filter_map(|s| match &s.action {
            Action::Http(call) => call.client.clone(),
            Action::Sockets(s) => Some(s.client.clone()),
            Action::SlowHeads(s) => Some(s.client.clone()),
            Action::RawRequest(r) => Some(r.client.clone()),
            _ => None,
        })
        .collect();
    let is_peer = |n: &str| {
        workers.contains(n) || workloads.contains(n) || n == "router" || clients.contains(n)
    };
    let hosts: Vec<&String> = between.iter().filter(|n| is_host(n)).collect();
    if hosts.len() != 1 {
        let mut instances: Vec<&str> = scenario.instances.keys().map(String::as_str).collect();
        instances.extend(STUB_NAMES);
        problem(format!(
            "between = [{:?}, {:?}] needs exactly one host (an instance or a stub: {})",
            between[0],
            between[1],
            instances.join(", ")
        ));
        return;
    }
    let peer = if is_host(&between[0]) {
        &between[1]
    } else {
        &between[0]
    };
    if !is_peer(peer) {
        let mut peers: Vec<String> = workers.iter().chain(workloads).cloned().collect();
        peers.push("router".into());
        peers.extend(clients);
        problem(format!("no peer {peer:?} (peers: {})", peers.join(", ")));
    }
}

#[cfg(test)]
mod tests {
    use crate::check::{check, Problem};
    use crate::Scenario;
    use std::path::Path;

    /// A version-2 head: chain_a, worker `w` (2 of them), workload `load`; 16 lines.
    const HEAD: &str = "schema_version = 2\nname = \"t\"\nlive = false\n\n\
        [instances.chain_a]\nnetwork = \"eip155:84532\"\n\n\
        [[workers]]\nname = \"w\"\ncount = 2\n\n\
        [[workloads]]\nname = \"load\"\ncount = 10\nrate = 5\n\n";

    const STEP: &str = "\n[[steps]]\nwait_until = { workload = \"load\" }\n";

    fn problems(tail: &str) -> Vec<Problem> {
        let text = format!("{HEAD}{tail}{STEP}");
        let scenario = Scenario::parse(&text).expect("loads");
        check(Path::new("scenarios/t.toml"), &text, &scenario)
    }

    /// The one problem of `tail`, at `line`, containing `message`.
    fn only(tail: &str, line: usize, message: &str) {
        let found = problems(tail);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].line, line, "{found:?}");
        assert!(found[0].message.contains(message), "{found:?}");
    }

    #[test]
    fn a_clean_version_2_scenario_has_no_problem() {
        let found = problems(
            "[[faults]]\nname = \"a\"\nkind = \"attrition\"\nevery = \"1s\"\nfor = \"2s\"\n\n\
             [[faults]]\nname = \"p\"\nkind = \"partition\"\nbetween = [\"w-0\", \"chain_a\"]\nat = \"1s\"\n\n\
             [[faults]]\nname = \"r\"\nkind = \"reboot\"\ninstance = \"chain_a\"\nwindow = [\"1s\", \"2s\"]\ncount = 2\n\n\
             [[faults]]\nname = \"b\"\nkind = \"provider_errors\"\nstub = \"provider_a\"\nfault = { kind = \"server_error\" }\nat = \"0ms\"\n",
        );
        assert_eq!(found, vec![]);
    }

    #[test]
    fn a_workload_on_an_undeclared_instance() {
        only(
            "[[workloads]]\nname = \"more\"\ninstances = [\"chain_b\"]\ncount = 1\nrate = 1\n",
            17,
            "workload more: instance \"chain_b\" is not declared (declared: chain_a)",
        );
    }

    #[test]
    fn a_workload_rate_out_of_bounds_or_missing() {
        let w = |extra: &str| format!("[[workloads]]\nname = \"more\"\ncount = 1\n{extra}");
        only(
            &w("rate = 0\n"),
            17,
            "rate = 0: commits per simulated second are 1 to 10000",
        );
        only(
            &w(""),
            17,
            "give rate (commits per simulated second) or over",
        );
        only(
            &w("rate = 1\nover = \"1s\"\n"),
            17,
            "give rate or over, not both",
        );
        only(&w("over = \"0s\"\n"), 17, "over = \"0s\" is no time");
    }

    #[test]
    fn a_workload_count_out_of_bounds() {
        only(
            "[[workloads]]\nname = \"more\"\ncount = 0\nrate = 1\n",
            17,
            "count = 0: a workload commits 1 to 100000 jobs",
        );
    }

    #[test]
    fn a_mix_with_no_weight() {
        only(
            "[[workloads]]\nname = \"more\"\ncount = 1\nrate = 1\ntiers = { fast = 0 }\n",
            17,
            "tiers: every weight is 0",
        );
    }

    #[test]
    fn paying_commits_to_an_instance_without_payment() {
        only(
            "[[workloads]]\nname = \"more\"\ncount = 1\nrate = 1\npayers = { paid = 1 }\n",
            17,
            "payers has paid commits but instance chain_a takes no payment",
        );
    }

    #[test]
    fn two_workloads_with_one_name() {
        only(
            "[[workloads]]\nname = \"load\"\ncount = 1\nrate = 1\n",
            17,
            "workload load: two workloads have this name",
        );
    }

    #[test]
    fn a_fault_missing_a_key_or_with_a_foreign_one() {
        only(
            "[[faults]]\nname = \"a\"\nkind = \"attrition\"\n",
            17,
            "fault a (attrition): needs every",
        );
        only(
            "[[faults]]\nname = \"a\"\nkind = \"attrition\"\nevery = \"1s\"\ndelay = \"5ms\"\n",
            17,
            "takes no delay (a attrition fault takes every, window, for, workers)",
        );
    }

    #[test]
    fn attrition_of_an_unknown_worker() {
        only(
            "[[faults]]\nname = \"a\"\nkind = \"attrition\"\nevery = \"1s\"\nworkers = [\"x\"]\n",
            17,
            "no worker \"x\" (workers: w-0, w-1)",
        );
    }

    #[test]
    fn a_reboot_of_an_undeclared_instance_or_without_a_time() {
        only(
            "[[faults]]\nname = \"r\"\nkind = \"reboot\"\ninstance = \"chain_b\"\nat = \"1s\"\n",
            17,
            "instance \"chain_b\" is not declared (declared: chain_a)",
        );
        only(
            "[[faults]]\nname = \"r\"\nkind = \"reboot\"\ninstance = \"chain_a\"\n",
            17,
            "give at (a time) or window (random times)",
        );
    }

    #[test]
    fn a_window_that_ends_before_it_starts() {
        only(
            "[[faults]]\nname = \"r\"\nkind = \"reboot\"\ninstance = \"chain_a\"\nwindow = [\"5s\", \"1s\"]\n",
            17,
            "window = [\"5s\", \"1s\"] ends before it starts",
        );
    }

    #[test]
    fn a_network_fault_between_unknown_peers() {
        only(
            "[[faults]]\nname = \"p\"\nkind = \"hold\"\nbetween = [\"w-7\", \"chain_a\"]\nat = \"1s\"\n",
            17,
            "no peer \"w-7\" (peers: w-0, w-1, load, router)",
        );
        only(
            "[[faults]]\nname = \"p\"\nkind = \"partition\"\nbetween = [\"w-0\", \"w-1\"]\nat = \"1s\"\n",
            17,
            "needs exactly one host (an instance or a stub: chain_a, provider_a, provider_b)",
        );
    }

    #[test]
    fn a_delay_of_no_time() {
        only(
            "[[faults]]\nname = \"d\"\nkind = \"delay\"\nbetween = [\"w-0\", \"chain_a\"]\nat = \"1s\"\ndelay = \"0ms\"\n",
            17,
            "delay = \"0ms\" is no time",
        );
    }

    #[test]
    fn a_burst_on_an_unknown_stub() {
        only(
            "[[faults]]\nname = \"b\"\nkind = \"provider_errors\"\nstub = \"provider_c\"\nfault = { kind = \"server_error\" }\nat = \"0ms\"\n",
            17,
            "no stub \"provider_c\" (stubs: provider_a, provider_b)",
        );
    }

    #[test]
    fn waiting_for_an_unknown_workload() {
        let text = format!("{HEAD}[[steps]]\nwait_until = {{ workload = \"lod\" }}\n");
        let scenario = Scenario::parse(&text).expect("loads");
        let found = check(Path::new("scenarios/t.toml"), &text, &scenario);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].line, 17);
        assert!(
            found[0]
                .message
                .contains("step 1: no workload \"lod\" (workloads: load)"),
            "{found:?}"
        );
    }

    #[test]
    fn version_2_tables_in_a_version_1_file_are_refused() {
        let text = HEAD.replace("schema_version = 2", "schema_version = 1");
        let err = Scenario::parse(&format!("{text}{STEP}")).unwrap_err();
        assert_eq!(err, "[[workloads]] needs schema_version = 2");
        let err = Scenario::parse(
            "schema_version = 1\nname = \"t\"\nlive = false\n[[steps]]\nwait_until = { workload = \"x\" }\n",
        )
        .unwrap_err();
        assert_eq!(
            err,
            "step 1 (wait_until a workload) needs schema_version = 2"
        );
        let err = Scenario::parse("schema_version = 3\nname = \"t\"\n").unwrap_err();
        assert!(err.contains("this harness reads 1 or 2"), "{err}");
    }

    #[test]
    fn unknown_fault_kinds_and_keys_are_load_errors_at_their_line() {
        let err = Scenario::parse(&format!(
            "{HEAD}[[faults]]\nname = \"x\"\nkind = \"reboots\"\n{STEP}"
        ))
        .unwrap_err();
        assert!(err.contains("line 19"), "{err}");
        assert!(
            err.contains("unknown variant `reboots`, expected one of `attrition`, `reboot`"),
            "{err}"
        );
        let err = Scenario::parse(&format!(
            "{HEAD}[[workloads]]\nname = \"x\"\ncount = 1\nrate = 1\ntiers = {{ FAST = 1 }}\n{STEP}"
        ))
        .unwrap_err();
        assert!(
            err.contains("unknown field `FAST`, expected `fast` or `cheap`"),
            "{err}"
        );
    }
}
