//! Expectations over JSON, captures and templates.
//!
//! An expected value matches an actual one when:
//! - objects: every expected key is present and matches (extra actual keys are fine);
//! - arrays: same length, element by element;
//! - strings: equal, or a matcher: `any`, `any_string`, `any_number`, `any_uuid`,
//!   `iso8601`, `absent_or_null`, `contains:TEXT`, `starts_with:TEXT`, `regex:PATTERN`;
//! - a table of exactly one of `regex`, `all_of`, `any_of`, `not` is a combined
//!   matcher: `{ regex = "^[0-9a-f]{6}$" }`, `{ all_of = [M, ...] }` (each
//!   matches), `{ any_of = [M, ...] }` (one matches), `{ not = M }` (M does not);
//! - other scalars: equal.
//!
//! [`problems`] finds, before anything runs, what would otherwise pass as a
//! literal by mistake: a misspelt `any_` matcher, a bad regex, a combined
//! matcher of the wrong shape.
//!
//! Templates: `{{name}}` in any string of a step is replaced by a captured
//! value, through the filters of [`crate::expr::template`].
//! Captures: `$.a.b[0]` paths into a JSON answer.

use super::ExprError;
use serde_json::Value;
use std::collections::BTreeMap;

pub type Vars = BTreeMap<String, Value>;

/// The keys that make a one-key table a combined matcher.
pub const COMBINED: [&str; 4] = ["regex", "all_of", "any_of", "not"];

/// `None` if `actual` matches `expected`, else the first mismatch with its path.
pub fn mismatch(expected: &Value, actual: &Value, path: &str) -> Option<String> {
    if let Some((key, arg)) = combined(expected) {
        return combined_mismatch(key, arg, actual, path);
    }
    match (expected, actual) {
        (Value::String(m), a) if is_matcher(m) => {
            (!string_matcher(m, a)).then(|| format!("{path}: expected {m}, got {a}"))
        }
        (Value::Object(e), Value::Object(a)) => e.iter().find_map(|(k, ev)| {
            let sub = format!("{path}.{k}");
            match a.get(k) {
                Some(av) => mismatch(ev, av, &sub),
                None if ev == "absent_or_null" => None,
                // A combined matcher decides about a missing key as about null.
                None if combined(ev).is_some() => mismatch(ev, &Value::Null, &sub),
                None => Some(format!("{sub}: missing")),
            }
        }),
        (Value::Array(e), Value::Array(a)) => {
            if e.len() != a.len() {
                return Some(format!(
                    "{path}: expected {} elements, got {}",
                    e.len(),
                    a.len()
                ));
            }
            e.iter()
                .zip(a)
                .enumerate()
                .find_map(|(i, (ev, av))| mismatch(ev, av, &format!("{path}[{i}]")))
        }
        (e, a) if numbers_equal(e, a) || e == a => None,
        (e, a) => Some(format!("{path}: expected {e}, got {a}")),
    }
}

/// `Some((key, argument))` when `expected` is a one-key table whose key is
/// a combined matcher.
fn combined(expected: &Value) -> Option<(&str, &Value)> {
    let map = expected.as_object()?;
    if map.len() != 1 {
        return None;
    }
    let (key, arg) = map.iter().next()?;
    COMBINED
        .contains(&key.as_str())
        .then_some((key.as_str(), arg))
}

fn combined_mismatch(key: &str, arg: &Value, actual: &Value, path: &str) -> Option<String> {
    let items = || arg.as_array().map(Vec::as_slice).unwrap_or_default();
    match key {
        "regex" => {
            let ok = arg.as_str().is_some_and(|p| regex_matches(p, actual));
            (!ok).then(|| format!("{path}: expected regex {arg}, got {actual}"))
        }
        "all_of" => items().iter().find_map(|m| mismatch(m, actual, path)),
        "any_of" => {
            let ok = items().iter().any(|m| mismatch(m, actual, path).is_none());
            (!ok).then(|| format!("{path}: expected any of {arg}, got {actual}"))
        }
        _ => mismatch(arg, actual, path)
            .is_none()
            .then(|| format!("{path}: expected not {arg}, got {actual}")),
    }
}

/// Whether a string (or a non-string's JSON) matches the pattern; an
/// invalid pattern matches nothing (the loader refuses it first).
fn regex_matches(pattern: &str, actual: &Value) -> bool {
    let Ok(re) = regex::Regex::new(pattern) else {
        return false;
    };
    match actual {
        Value::String(t) => re.is_match(t),
        Value::Null => false,
        other => re.is_match(&other.to_string()),
    }
}

fn numbers_equal(e: &Value, a: &Value) -> bool {
    match (e, a) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => false,
    }
}

/// The whole-value matchers; `contains:`, `starts_with:` and `regex:` take an argument.
pub const MATCHERS: [&str; 9] = [
    "any",
    "any_string",
    "any_number",
    "any_uuid",
    "iso8601",
    "absent_or_null",
    "contains:TEXT",
    "starts_with:TEXT",
    "regex:PATTERN",
];

pub fn is_matcher(s: &str) -> bool {
    matches!(
        s,
        "any" | "any_string" | "any_number" | "any_uuid" | "iso8601" | "absent_or_null"
    ) || s.starts_with("contains:")
        || s.starts_with("starts_with:")
        || s.starts_with("regex:")
}

fn string_matcher(m: &str, actual: &Value) -> bool {
    let text = actual.as_str();
    match m {
        "any" => !actual.is_null(),
        "any_string" => text.is_some(),
        "any_number" => actual.is_number(),
        "any_uuid" => text.is_some_and(|t| uuid::Uuid::parse_str(t).is_ok()),
        "iso8601" => text.is_some_and(|t| {
            t.len() == 24 && t.ends_with('Z') && protocol::time::parse_ms(t).is_some()
        }),
        "absent_or_null" => actual.is_null(),
        _ => {
            if let Some(needle) = m.strip_prefix("contains:") {
                text.is_some_and(|t| t.contains(needle))
                    || (!actual.is_string() && actual.to_string().contains(needle))
            } else if let Some(prefix) = m.strip_prefix("starts_with:") {
                text.is_some_and(|t| t.starts_with(prefix))
            } else if let Some(pattern) = m.strip_prefix("regex:") {
                regex_matches(pattern, actual)
            } else {
                false
            }
        }
    }
}

/// What would make `expected` compare wrongly: an unknown `any_` matcher
/// (it would silently be a literal), an invalid regex, a combined matcher
/// of the wrong shape. Each problem names the JSON path.
pub fn problems(expected: &Value, path: &str) -> Vec<String> {
    let mut out = Vec::new();
    collect_problems(expected, path, &mut out);
    out
}

fn collect_problems(expected: &Value, path: &str, out: &mut Vec<String>) {
    if let Some((key, arg)) = combined(expected) {
        match (key, arg) {
            ("regex", Value::String(p)) => check_regex(p, path, out),
            ("regex", other) => out.push(format!("{path}: regex takes a string, not {other}")),
            ("all_of" | "any_of", Value::Array(items)) if !items.is_empty() => items
                .iter()
                .enumerate()
                .for_each(|(i, m)| collect_problems(m, &format!("{path}.{key}[{i}]"), out)),
            ("all_of" | "any_of", other) => out.push(format!(
                "{path}: {key} takes a non-empty array of matchers, not {other}"
            )),
            (_, arg) => collect_problems(arg, &format!("{path}.not"), out),
        }
        return;
    }
    match expected {
        Value::String(s) if s.starts_with("any_") && !is_matcher(s) => out.push(format!(
            "{path}: {s:?} is not a matcher ({}); a literal starting with any_ is not allowed",
            MATCHERS.join(", ")
        )),
        Value::String(s) => {
            if let Some(p) = s.strip_prefix("regex:") {
                check_regex(p, path, out);
            }
        }
        Value::Array(items) => items
            .iter()
            .enumerate()
            .for_each(|(i, v)| collect_problems(v, &format!("{path}[{i}]"), out)),
        Value::Object(map) => map
            .iter()
            .for_each(|(k, v)| collect_problems(v, &format!("{path}.{k}"), out)),
        _ => {}
    }
}

fn check_regex(pattern: &str, path: &str, out: &mut Vec<String>) {
    if let Err(e) = regex::Regex::new(pattern) {
        let first = e.to_string().lines().last().unwrap_or_default().to_owned();
        out.push(format!("{path}: invalid regex {pattern:?}: {first}"));
    }
}

/// Why a capture path cannot select anything, whatever the answer: it must
/// be `$` followed by `.key` and `[index]` segments.
pub fn path_problem(path: &str) -> Option<String> {
    let why = |what: &str| {
        Some(format!(
            "capture path {path:?}: {what} (paths are $, $.key, $.list[0].key)"
        ))
    };
    let Some(mut rest) = path.strip_prefix('$') else {
        return why("it must start with $");
    };
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            if end == 0 {
                return why("an empty key");
            }
            rest = &after[end..];
        } else if let Some(after) = rest.strip_prefix('[') {
            let Some(end) = after.find(']') else {
                return why("an unclosed [");
            };
            if after[..end].parse::<usize>().is_err() {
                return why(&format!("[{}] is not an index", &after[..end]));
            }
            rest = &after[end + 1..];
        } else {
            return why(&format!("unexpected {rest:?}"));
        }
    }
    None
}

/// Reads `$.a.b[0].c` from `value`.
pub fn select<'v>(value: &'v Value, path: &str) -> Option<&'v Value> {
    let rest = path.strip_prefix('$')?;
    let mut current = value;
    let mut chars = rest.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '.' => {
                let mut key = String::new();
                while let Some(&n) = chars.peek() {
                    if n == '.' || n == '[' {
                        break;
                    }
                    key.push(n);
                    chars.next();
                }
                current = current.get(&key)?;
            }
            '[' => {
                let mut idx = String::new();
                for n in chars.by_ref() {
                    if n == ']' {
                        break;
                    }
                    idx.push(n);
                }
                current = current.get(idx.parse::<usize>().ok()?)?;
            }
            _ => return None,
        }
    }
    Some(current)
}

/// Replaces `{{name}}` in every string of `value`. A string that is exactly
/// one template takes the captured value as is (it may be a number or object).
pub fn render(value: &Value, vars: &Vars) -> Result<Value, ExprError> {
    Ok(match value {
        Value::String(s) => render_str_value(s, vars)?,
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|v| render(v, vars))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| Ok((render_str(k, vars)?, render(v, vars)?)))
                .collect::<Result<_, ExprError>>()?,
        ),
        other => other.clone(),
    })
}

fn render_str_value(s: &str, vars: &Vars) -> Result<Value, ExprError> {
    crate::expr::template::render(s, &|name| vars.get(name).cloned(), false)
}

/// Replaces `{{name}}` (with its filters) inside a string; non-string
/// values are inserted as JSON.
pub fn render_str(s: &str, vars: &Vars) -> Result<String, ExprError> {
    Ok(match render_str_value(s, vars)? {
        Value::String(text) => text,
        other => other.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn subset_and_matchers() {
        let actual = json!({"job_id": "6f1c1c0e-3a4b-4c5d-8e9f-000000000000", "t": "2026-11-21T10:00:00.000Z", "n": 3, "x": [1]});
        assert_eq!(
            mismatch(
                &json!({"job_id": "any_uuid", "t": "iso8601", "n": 3}),
                &actual,
                "$"
            ),
            None
        );
        assert!(mismatch(&json!({"job_id": "iso8601"}), &actual, "$")
            .unwrap()
            .contains("$.job_id"));
        assert!(mismatch(&json!({"missing": 1}), &actual, "$").is_some());
        assert!(mismatch(&json!({"x": [1, 2]}), &actual, "$").is_some());
        assert_eq!(
            mismatch(&json!({"gone": "absent_or_null"}), &actual, "$"),
            None
        );
        assert_eq!(mismatch(&json!("contains:10:00"), &actual["t"], "$"), None);
    }

    #[test]
    fn regex_and_combined_matchers() {
        let code = json!({"code": "a1b2c3", "n": 7});
        let ok = |e: Value| assert_eq!(mismatch(&e, &code, "$"), None, "{e}");
        let bad = |e: Value| assert!(mismatch(&e, &code, "$").is_some(), "{e}");
        ok(json!({"code": "regex:^[0-9a-f]{6}$"}));
        ok(json!({"code": {"regex": "^[0-9a-f]+$"}, "n": {"regex": "^7$"}}));
        bad(json!({"code": "regex:^[A-F]+$"}));
        ok(json!({"code": {"all_of": ["any_string", "starts_with:a1"]}}));
        bad(json!({"code": {"all_of": ["any_string", "starts_with:b"]}}));
        ok(json!({"n": {"any_of": [6, 7]}}));
        bad(json!({"n": {"any_of": [6, 8]}}));
        ok(json!({"n": {"not": 8}}));
        bad(json!({"n": {"not": "any_number"}}));
        // A missing key is null to a combined matcher.
        ok(json!({"gone": {"not": "any"}}));
        bad(json!({"gone": {"any_of": ["any_string"]}}));
        // A two-key table is an ordinary subset.
        ok(json!({"code": "a1b2c3", "n": 7}));
    }

    #[test]
    fn problems_name_the_path() {
        let p = problems(
            &json!({"a": ["any_strin"], "b": {"regex": "("}, "c": {"all_of": 3}, "d": {"not": "regex:["}}),
            "$",
        );
        assert_eq!(p.len(), 4, "{p:?}");
        assert!(
            p[0].starts_with("$.a[0]: \"any_strin\" is not a matcher"),
            "{p:?}"
        );
        assert!(p[1].starts_with("$.b: invalid regex"), "{p:?}");
        assert!(p[2].contains("all_of takes a non-empty array"), "{p:?}");
        assert!(p[3].starts_with("$.d.not: invalid regex"), "{p:?}");
        assert!(problems(&json!({"x": "any_uuid", "y": "regex:^a$"}), "$").is_empty());
    }

    #[test]
    fn capture_paths_that_can_never_select_are_named() {
        for good in ["$", "$.a", "$.a.b[0].c", "$[2]"] {
            assert_eq!(path_problem(good), None, "{good}");
        }
        for (bad, why) in [
            ("job_id", "must start with $"),
            ("$..a", "an empty key"),
            ("$.a[x]", "[x] is not an index"),
            ("$.a[0", "an unclosed ["),
            ("$a", "unexpected \"a\""),
        ] {
            let p = path_problem(bad).unwrap();
            assert!(p.contains(why), "{p}");
        }
    }

    #[test]
    fn select_paths() {
        let v = json!({"a": {"b": [{"c": 5}]}});
        assert_eq!(select(&v, "$.a.b[0].c"), Some(&json!(5)));
        assert_eq!(select(&v, "$.a.x"), None);
        assert_eq!(select(&v, "$"), Some(&v));
    }

    #[test]
    fn templates() {
        let mut vars = Vars::new();
        vars.insert("job".into(), json!("abc"));
        vars.insert("n".into(), json!(3));
        assert_eq!(
            render(&json!({"p": "/v1/jobs/{{job}}", "k": "{{n}}"}), &vars).unwrap(),
            json!({"p": "/v1/jobs/abc", "k": 3})
        );
        assert!(render(&json!("{{nope}}"), &vars).is_err());
    }
}
