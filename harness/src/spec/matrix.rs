//! `repeat` and `for_each`: one `[[steps]]` table that stands for several
//! steps, expanded when the file loads (version 2).
//!
//! ```toml
//! [[steps]]
//! repeat = 3                              # three steps, {{i}} = 0, 1, 2
//! http = { path = "/v1/jobs/commit/fast", method = "POST", body = { user_id = "u{{i}}" } }
//!
//! [[steps]]                               # 2 x 2 = 4 runs of the group, in the order
//! for_each = { job_type = ["LLM_INFER", "TASK"], tier = ["fast", "cheap"] }
//! [[steps.group]]                         # LLM_INFER/fast, LLM_INFER/cheap,
//! http = { path = "/v1/quote?job_type={{job_type}}" }   # TASK/fast, TASK/cheap
//! [[steps.group]]
//! http = { path = "/v1/jobs/commit/{{tier}}" }
//! ```
//!
//! Order: the cartesian product with the keys in alphabetical order, the
//! first key outermost (it changes slowest), values in the order written.
//! `{{i}}` is the case's index from 0 in both forms. Loop variables are
//! replaced in every string of the table (a string that is exactly
//! `{{var}}` takes the value as it is, so a number stays a number), with
//! the template filters; other `{{...}}` are left for the run. Fields with
//! fixed choices (`status`, `tier` of `commit_many`, ...) are checked before
//! the expansion, so they cannot hold a loop variable.
//!
//! Each expanded step keeps the index of its table in
//! [`Scenario::step_sources`], so `harness check` points at the table.

use crate::spec::{Action, Scenario, Step};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// The most steps one table may expand to, and a whole scenario may hold.
pub const REPEAT_MAX: u32 = 10_000;
pub const STEPS_MAX: usize = 10_000;

/// What a version-1 file may not use.
pub const V2_FEATURES: &str = "repeat, for_each, group, expect_frames, expect_calls, \
     send_frame, [[temporal]], key_of, prices, payment asset, pay version";

/// A step's `repeat` and `for_each`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Each {
    pub repeat: Option<u32>,
    pub for_each: Option<BTreeMap<String, Vec<Value>>>,
}

impl Each {
    /// Checks the loop against the step's action; `None` when the step has none.
    pub fn check(self, action: &Action) -> Result<Option<Each>, String> {
        if self.repeat.is_none() && self.for_each.is_none() {
            return Ok(None);
        }
        if self.repeat.is_some() && self.for_each.is_some() {
            return Err("a step takes repeat or for_each, not both".into());
        }
        if let Some(n) = self.repeat {
            if n == 0 || n > REPEAT_MAX {
                return Err(format!("repeat = {n}: from 1 to {REPEAT_MAX}"));
            }
        }
        if let Some(table) = &self.for_each {
            if table.is_empty() {
                return Err("for_each needs at least one variable".into());
            }
            for (name, values) in table {
                if values.is_empty() {
                    return Err(format!("for_each {name}: give at least one value"));
                }
                if name == "i" {
                    return Err("for_each: i is the case index; name the variable otherwise".into());
                }
                if values.iter().any(|v| v.is_array() || v.is_object()) {
                    return Err(format!(
                        "for_each {name}: values are strings, numbers or booleans"
                    ));
                }
            }
        }
        let commit_many = |a: &Action| matches!(a, Action::CommitMany(_));
        let holds_commit_many = match action {
            Action::Group(steps) => steps.iter().any(|s| commit_many(&s.action)),
            other => commit_many(other),
        };
        if holds_commit_many {
            return Err("commit_many has its own {{i}}; it cannot be repeated".into());
        }
        Ok(Some(self))
    }

    /// The cases, each a set of variable values, in the documented order.
    fn cases(&self) -> Vec<BTreeMap<String, Value>> {
        if let Some(n) = self.repeat {
            return (0..n)
                .map(|i| BTreeMap::from([("i".to_owned(), Value::from(i))]))
                .collect();
        }
        let mut cases = vec![BTreeMap::new()];
        for (name, values) in self.for_each.iter().flatten() {
            cases = cases
                .into_iter()
                .flat_map(|case| {
                    values.iter().map(move |v| {
                        let mut case = case.clone();
                        case.insert(name.clone(), v.clone());
                        case
                    })
                })
                .collect();
        }
        for (i, case) in cases.iter_mut().enumerate() {
            case.insert("i".into(), Value::from(i));
        }
        cases
    }
}

/// Expands the steps of `scenario` in place, reading the raw tables from
/// `text`, and checks the version-2 features against `schema_version`.
pub fn expand(text: &str, scenario: &mut Scenario) -> Result<(), String> {
    if scenario.schema_version < 2 {
        if let Some(feature) = v2_feature(scenario) {
            return Err(format!(
                "{feature} needs schema_version = 2 (version 2 adds: {V2_FEATURES})"
            ));
        }
    }
    let loops = scenario
        .steps
        .iter()
        .any(|s| s.each.is_some() || matches!(s.action, Action::Group(_)));
    if !loops {
        scenario.step_sources = (0..scenario.steps.len()).collect();
        return Ok(());
    }
    let raw: toml::Table = toml::from_str(text).map_err(|e| e.to_string())?;
    let tables = raw
        .get("steps")
        .and_then(toml::Value::as_array)
        .ok_or("steps: not an array of tables")?;
    let mut steps = Vec::new();
    let mut sources = Vec::new();
    for (source, (table, typed)) in tables.iter().zip(&scenario.steps).enumerate() {
        let mut table = table.as_table().ok_or("steps: not a table")?.clone();
        table.remove("repeat");
        table.remove("for_each");
        let cases = typed
            .each
            .as_ref()
            .map_or_else(|| vec![BTreeMap::new()], Each::cases);
        let members = group_members(source, &mut table, typed)?;
        for case in &cases {
            for member in &members {
                let lookup = |name: &str| case.get(name).cloned();
                let expanded = substitute(&toml::Value::Table(member.clone()), &lookup)?;
                let step = Step::deserialize(expanded).map_err(|e| {
                    format!("step {} after expanding repeat/for_each: {e}", source + 1)
                })?;
                steps.push(step);
                sources.push(source);
                if steps.len() > STEPS_MAX {
                    return Err(format!(
                        "step {}: the scenario expands to more than {STEPS_MAX} steps",
                        source + 1
                    ));
                }
            }
        }
    }
    scenario.steps = steps;
    scenario.step_sources = sources;
    Ok(())
}

/// The tables one `[[steps]]` table runs per case: its `group`'s members,
/// or itself.
fn group_members(
    source: usize,
    table: &mut toml::Table,
    typed: &Step,
) -> Result<Vec<toml::Table>, String> {
    let members: Vec<toml::Table> = match table.remove("group") {
        Some(toml::Value::Array(items)) => items
            .into_iter()
            .map(|t| match t {
                toml::Value::Table(t) => Ok(t),
                _ => Err("group: not an array of tables".to_owned()),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err("group: not an array of tables".into()),
        None => vec![table.clone()],
    };
    if let Action::Group(inner) = &typed.action {
        if table.keys().any(|k| k != "name") {
            return Err(format!(
                "step {}: a group step holds only name, repeat or for_each beside group",
                source + 1
            ));
        }
        if let Some(s) = inner
            .iter()
            .find(|s| s.each.is_some() || matches!(s.action, Action::Group(_)))
        {
            let name = s.name.clone().unwrap_or_default();
            return Err(format!(
                "step {} group member {name:?}: groups do not nest; repeat the outer step",
                source + 1
            ));
        }
    }
    Ok(members)
}

/// The first version-2 feature a scenario uses, by its key.
fn v2_feature(scenario: &Scenario) -> Option<&'static str> {
    for step in &scenario.steps {
        if step.each.as_ref().is_some_and(|e| e.repeat.is_some()) {
            return Some("repeat");
        }
        if step.each.is_some() {
            return Some("for_each");
        }
        if step.action.version() >= 2 {
            return Some(step.action.key().as_str());
        }
        if let Action::Http(call) = &step.action {
            if call.pay.as_ref().is_some_and(|p| p.version.is_some()) {
                return Some("pay version");
            }
        }
    }
    if !scenario.temporal.is_empty() {
        return Some("[[temporal]]");
    }
    if scenario.workers.iter().any(|w| w.key_of.is_some()) {
        return Some("key_of");
    }
    for instance in scenario.instances.values() {
        if instance.prices.is_set() {
            return Some("prices");
        }
        if instance.payment.as_ref().is_some_and(|p| {
            p.asset.is_some()
                || p.asset_name.is_some()
                || p.asset_version.is_some()
                || p.max_timeout_seconds.is_some()
        }) {
            return Some("payment asset");
        }
    }
    None
}

/// Replaces the loop variables in every string (keys included) of `value`.
fn substitute(
    value: &toml::Value,
    lookup: &dyn Fn(&str) -> Option<Value>,
) -> Result<toml::Value, String> {
    Ok(match value {
        toml::Value::String(s) => {
            let rendered = crate::expr::template::render(s, lookup, true)?;
            toml::Value::try_from(rendered).map_err(|e| e.to_string())?
        }
        toml::Value::Array(items) => toml::Value::Array(
            items
                .iter()
                .map(|v| substitute(v, lookup))
                .collect::<Result<_, _>>()?,
        ),
        toml::Value::Table(map) => toml::Value::Table(
            map.iter()
                .map(|(k, v)| {
                    let key = match crate::expr::template::render(k, lookup, true)? {
                        Value::String(k) => k,
                        other => other.to_string(),
                    };
                    Ok((key, substitute(v, lookup)?))
                })
                .collect::<Result<_, String>>()?,
        ),
        other => other.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str =
        "schema_version = 2\nname = \"x\"\nlive = false\n\n[instances.chain_a]\nnetwork = \"n\"\n\n";

    fn steps(tail: &str) -> Vec<Step> {
        Scenario::parse(&format!("{HEAD}{tail}")).unwrap().steps
    }

    fn path(step: &Step) -> String {
        match &step.action {
            Action::Http(c) => c.path.clone(),
            _ => panic!("not http"),
        }
    }

    #[test]
    fn repeat_counts_from_zero() {
        let s = steps(
            "[[steps]]\nname = \"n{{i}}\"\nrepeat = 3\nhttp = { path = \"/{{i}}/{{job}}\" }\n",
        );
        let paths: Vec<String> = s.iter().map(path).collect();
        assert_eq!(paths, ["/0/{{job}}", "/1/{{job}}", "/2/{{job}}"]);
        assert_eq!(s[2].name.as_deref(), Some("n2"));
    }

    #[test]
    fn for_each_is_a_cartesian_product_in_key_order() {
        let s = steps(
            "[[steps]]\nfor_each = { b = [\"x\", \"y\"], a = [1, 2] }\n\
             [[steps.group]]\nhttp = { path = \"/{{a}}/{{b | upper}}/{{i}}\" }\n\
             [[steps.group]]\nadvance = \"1s\"\n",
        );
        let paths: Vec<String> = s.iter().step_by(2).map(path).collect();
        assert_eq!(paths, ["/1/X/0", "/1/Y/1", "/2/X/2", "/2/Y/3"]);
        assert_eq!(s.len(), 8);
        let scenario = Scenario::parse(&format!(
            "{HEAD}[[steps]]\nadvance = \"1s\"\n[[steps]]\nrepeat = 2\nadvance = \"1s\"\n"
        ))
        .unwrap();
        assert_eq!(scenario.step_sources, [0, 1, 1]);
    }

    #[test]
    fn an_exact_template_keeps_the_value_type() {
        let s = steps("[[steps]]\nrepeat = 2\nhttp = { path = \"/\", body = { n = \"{{i}}\" } }\n");
        let Action::Http(call) = &s[1].action else {
            panic!()
        };
        assert_eq!(call.body.as_ref().unwrap()["n"], Value::from(1));
    }

    #[test]
    fn bounds_and_misuse_are_load_errors() {
        let err = |tail: &str| Scenario::parse(&format!("{HEAD}{tail}")).unwrap_err();
        assert!(err("[[steps]]\nrepeat = 10001\nadvance = \"1s\"\n").contains("from 1 to 10000"));
        assert!(
            err("[[steps]]\nrepeat = 2\nfor_each = { a = [1] }\nadvance = \"1s\"\n")
                .contains("not both")
        );
        assert!(
            err("[[steps]]\nrepeat = 2\ncommit_many = { count = 1, body = {} }\n")
                .contains("cannot be repeated")
        );
        assert!(err("[[steps]]\nfor_each = { a = [] }\nadvance = \"1s\"\n")
            .contains("at least one value"));
        let v1 = Scenario::parse(
            "schema_version = 1\nname = \"x\"\nlive = false\n[[steps]]\nrepeat = 2\nadvance = \"1s\"\n",
        )
        .unwrap_err();
        assert!(v1.contains("repeat needs schema_version = 2"), "{v1}");
    }
}
