//! `harness check FILES`: everything a scenario refers to is resolved before
//! anything runs, and each mistake is reported in the scenario's own words
//! with its file, line and the valid choices. `harness run` performs the
//! same check first, so a misspelt name never surfaces halfway through a run.
//!
//! What is checked beyond what loading already refuses (unknown keys, bad
//! choices, bad durations, statuses):
//! - the file is named after the scenario's `name`, and it has a step;
//! - instances are `chain_a` or `chain_b` (the router knows these two), and
//!   every instance a worker or step names is declared;
//! - worker names are unique, and every worker a step names exists;
//! - every `{{variable}}` is defined before the step that uses it (by an
//!   earlier `capture`, a worker's `pubkey.NAME`, `last_payment` after a
//!   paying step, or `i` inside `commit_many`);
//! - a string that looks like a matcher (`any_…`) is one, since an unknown
//!   one would silently compare as a literal.

pub mod answers;
pub mod background;
pub mod refs;

use crate::expr::matcher;
use crate::spec::names::INSTANCE_NAMES;
use crate::spec::{Action, Scenario};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;

/// One mistake, at a line of the file (1-based; 0 when the whole file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub line: usize,
    pub message: String,
}

impl Problem {
    pub(crate) fn at(line: usize, message: impl Into<String>) -> Self {
        Self {
            line,
            message: message.into(),
        }
    }
}

/// Every problem of a loaded scenario; `text` is its file's contents.
pub fn check(path: &Path, text: &str, scenario: &Scenario) -> Vec<Problem> {
    let lines = Lines::new(text);
    let mut problems = Vec::new();
    check_file(path, scenario, &lines, &mut problems);
    let workers = check_workers(scenario, &lines, &mut problems);
    let defined = check_steps(scenario, &workers, &lines, &mut problems);
    refs::check(
        scenario,
        &workers,
        &defined,
        &text_lines(text),
        &mut problems,
    );
    crate::check::background::check(scenario, &workers, &lines, &mut problems);
    problems.sort_by_key(|p| p.line);
    // Steps expanded from one `repeat`/`for_each` table share its line: say
    // each mistake once, for the first of them.
    let mut seen = BTreeSet::new();
    problems.retain(|p| {
        let what = p.message.split_once(": ").map_or(&*p.message, |(_, m)| m);
        seen.insert((p.line, what.to_owned()))
    });
    problems
}

fn check_file(path: &Path, scenario: &Scenario, lines: &Lines, problems: &mut Vec<Problem>) {
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    if stem != scenario.name {
        problems.push(Problem::at(
            lines.find("name", 0),
            format!(
                "name = {:?} but the file is {stem}.toml: name the file after the scenario",
                scenario.name
            ),
        ));
    }
    if scenario.steps.is_empty() {
        problems.push(Problem::at(0, "the scenario has no [[steps]]"));
    }
    for name in scenario.instances.keys() {
        if !INSTANCE_NAMES.contains(&name.as_str()) {
            problems.push(Problem::at(
                lines.find(&format!("[instances.{name}]"), 0),
                format!(
                    "instance {name:?}: instances are {}",
                    INSTANCE_NAMES.join(" or ")
                ),
            ));
        }
    }
}

/// Checks the worker declarations; returns every worker name.
fn check_workers(
    scenario: &Scenario,
    lines: &Lines,
    problems: &mut Vec<Problem>,
) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut from = 0;
    for spec in &scenario.workers {
        let line = lines.find("[[workers]]", from);
        from = line;
        if !scenario.instances.contains_key(&spec.instance) {
            problems.push(Problem::at(
                line,
                format!(
                    "worker {} connects to instance {:?}, which is not declared ({})",
                    spec.name,
                    spec.instance,
                    declared(scenario)
                ),
            ));
        }
        for name in spec.names() {
            if !names.insert(name.clone()) {
                problems.push(Problem::at(line, format!("two workers are named {name}")));
            }
        }
    }
    names
}

pub(crate) fn declared(scenario: &Scenario) -> String {
    let names: Vec<&str> = scenario.instances.keys().map(String::as_str).collect();
    if names.is_empty() {
        "none is declared".into()
    } else {
        format!("declared: {}", names.join(", "))
    }
}

/// Checks the steps; returns the variables defined at the end.
fn check_steps(
    scenario: &Scenario,
    workers: &BTreeSet<String>,
    lines: &Lines,
    problems: &mut Vec<Problem>,
) -> BTreeSet<String> {
    let mut defined: BTreeSet<String> = workers.iter().map(|w| format!("pubkey.{w}")).collect();
    defined.extend(scenario.users.keys().map(|u| format!("user.{u}")));
    // The line of each `[[steps]]` table; expanded steps point at theirs.
    let mut tables = Vec::new();
    let mut from = 0;
    while let Some(line) = lines.find_next("[[steps]]", from) {
        tables.push(line);
        from = line;
    }
    for (i, step) in scenario.steps.iter().enumerate() {
        let source = scenario.step_sources.get(i).copied().unwrap_or(i);
        let line = tables.get(source).copied().unwrap_or(0);
        let number = i + 1;
        let mut problem = |message: String| {
            problems.push(Problem::at(line, format!("step {number}: {message}")));
        };
        if let Some(instance) = refs::instance_of(&step.action) {
            if !scenario.instances.contains_key(instance) {
                problem(format!(
                    "instance {instance:?} is not declared ({})",
                    declared(scenario)
                ));
            }
        }
        if let Action::Worker(control) = &step.action {
            if !workers.contains(&control.name) {
                let known: Vec<&str> = workers.iter().map(String::as_str).collect();
                problem(format!(
                    "no worker {:?} (workers: {})",
                    control.name,
                    known.join(", ")
                ));
            }
        }
        refs::check_step_refs(step, workers, &mut problem);
        refs::check_step_users(step, scenario, &mut problem);
        let mut local = defined.clone();
        if matches!(step.action, Action::CommitMany(_)) {
            local.insert("i".into());
        }
        for text in refs::strings_of(step) {
            check_variables(&text, &local, &mut problem);
        }
        answers::schema_problems(step)
            .into_iter()
            .for_each(&mut problem);
        for (path, expected) in answers::expected_values(step) {
            for p in matcher::problems(&expected, &path) {
                problem(p);
            }
        }
        defined.extend(step.capture.keys().cloned());
        if let Action::Http(call) = &step.action {
            if call.pay.is_some() {
                defined.insert("last_payment".into());
                defined.insert("last_payment_header".into());
            }
        }
    }
    defined
}

/// Each `{{expression}}` of `text` parses and names a defined variable.
pub(crate) fn check_variables(
    text: &str,
    defined: &BTreeSet<String>,
    problem: &mut impl FnMut(String),
) {
    match crate::expr::template::expressions(text) {
        Err(e) => problem(e.to_string()),
        Ok(exprs) => {
            for e in exprs {
                if !defined.contains(&e.var) {
                    problem(format!(
                        "{{{{{}}}}} is not defined by an earlier step (defined here: {})",
                        e.var,
                        listing(defined)
                    ));
                }
            }
        }
    }
}

pub(crate) fn listing(names: &BTreeSet<String>) -> String {
    if names.is_empty() {
        "none".into()
    } else {
        names.iter().cloned().collect::<Vec<_>>().join(", ")
    }
}

pub(crate) fn collect_strings(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) => out.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|v| collect_strings(v, out)),
        Value::Object(map) => map.iter().for_each(|(k, v)| {
            out.push(k.clone());
            collect_strings(v, out);
        }),
        _ => {}
    }
}

fn text_lines(text: &str) -> Vec<&str> {
    text.lines().collect()
}

/// Line lookup in the file's text.
pub(crate) struct Lines<'a> {
    lines: Vec<&'a str>,
}

impl<'a> Lines<'a> {
    fn new(text: &'a str) -> Self {
        Self {
            lines: text.lines().collect(),
        }
    }

    /// The first line after line `from` (1-based) whose text starts with
    /// `start`, ignoring indentation.
    fn find_next(&self, start: &str, from: usize) -> Option<usize> {
        self.lines
            .iter()
            .enumerate()
            .skip(from)
            .find(|(_, l)| l.trim_start().starts_with(start))
            .map(|(i, _)| i + 1)
    }

    /// The first line at or after `from` (1-based) whose text starts with
    /// `start`, ignoring indentation; `from` itself when none does.
    pub(crate) fn find(&self, start: &str, from: usize) -> usize {
        // `from` is 1-based, so skipping `from` lines starts after it.
        self.lines
            .iter()
            .enumerate()
            .skip(from)
            .find(|(_, l)| l.trim_start().starts_with(start))
            .map_or(from, |(i, _)| i + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(name: &str, text: &str) -> Vec<Problem> {
        let scenario = Scenario::parse(text).expect("loads");
        check(
            Path::new(&format!("scenarios/{name}.toml")),
            text,
            &scenario,
        )
    }

    const HEAD: &str = "schema_version = 1\nname = \"t\"\nlive = false\n\n[instances.chain_a]\nnetwork = \"eip155:84532\"\n\n[[workers]]\nname = \"w\"\n\n";

    fn only(text: &str) -> Problem {
        let found = problems("t", &format!("{HEAD}{text}"));
        assert_eq!(found.len(), 1, "{found:?}");
        found[0].clone()
    }

    #[test]
    fn a_clean_scenario_has_no_problem() {
        let found = problems(
            "t",
            &format!("{HEAD}[[steps]]\nhttp = {{ path = \"/v1/health\" }}\ncapture = {{ t = \"$.timestamp\" }}\n\n[[steps]]\nhttp = {{ path = \"/x/{{{{t}}}}/{{{{pubkey.w}}}}\" }}\n"),
        );
        assert_eq!(found, vec![]);
    }

    #[test]
    fn the_file_is_named_after_the_scenario() {
        let text = format!("{HEAD}[[steps]]\nadvance = \"1s\"\n");
        let found = problems("other", &text);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].line, 2);
        assert!(
            found[0].message.contains("the file is other.toml"),
            "{found:?}"
        );
    }

    #[test]
    fn a_scenario_needs_a_step() {
        let found = problems("t", HEAD);
        assert!(found[0].message.contains("no [[steps]]"), "{found:?}");
    }

    #[test]
    fn unknown_variables_name_the_step_line_and_what_is_defined() {
        let p = only("[[steps]]\nhttp = { path = \"/v1/jobs/{{job}}\" }\n");
        assert_eq!(p.line, 11);
        assert!(
            p.message.contains("step 1: {{job}} is not defined"),
            "{p:?}"
        );
        assert!(p.message.contains("pubkey.w"), "{p:?}");
    }

    #[test]
    fn a_capture_defines_a_variable_only_for_later_steps() {
        let p = only("[[steps]]\nhttp = { path = \"/{{id}}\" }\ncapture = { id = \"$.x\" }\n");
        assert!(p.message.contains("{{id}} is not defined"), "{p:?}");
    }

    #[test]
    fn unknown_workers_and_instances_list_the_choices() {
        let p = only("[[steps]]\nworker = { name = \"x\", action = \"stop\" }\n");
        assert!(p.message.contains("no worker \"x\" (workers: w)"), "{p:?}");
        let p = only("[[steps]]\nhttp = { instance = \"chain_b\", path = \"/\" }\n");
        assert!(
            p.message
                .contains("instance \"chain_b\" is not declared (declared: chain_a)"),
            "{p:?}"
        );
    }

    #[test]
    fn instances_are_chain_a_or_chain_b() {
        let text = "schema_version = 1\nname = \"t\"\nlive = false\n\n[instances.chain_c]\nnetwork = \"eip155:1\"\n\n[[steps]]\nadvance = \"1s\"\n";
        let found = problems("t", text);
        assert_eq!(found[0].line, 5);
        assert!(
            found[0]
                .message
                .contains("instances are chain_a or chain_b"),
            "{found:?}"
        );
    }

    #[test]
    fn duplicate_worker_names_point_at_the_second_declaration() {
        let p = only("[[workers]]\nname = \"w\"\n\n[[steps]]\nadvance = \"1s\"\n");
        assert_eq!(p.line, 11);
        assert_eq!(p.message, "two workers are named w");
    }

    #[test]
    fn a_mistyped_matcher_is_an_error_not_a_literal() {
        let p =
            only("[[steps]]\nhttp = { path = \"/\" }\nexpect = { body = { x = \"any_strin\" } }\n");
        assert!(
            p.message.contains("\"any_strin\" is not a matcher"),
            "{p:?}"
        );
        assert!(p.message.contains("any_string"), "{p:?}");
    }
}
