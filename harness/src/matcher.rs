//! Expectations over JSON, captures and templates.
//!
//! An expected value matches an actual one when:
//! - objects: every expected key is present and matches (extra actual keys are fine);
//! - arrays: same length, element by element;
//! - strings: equal, or a matcher: `any`, `any_string`, `any_number`, `any_uuid`,
//!   `iso8601`, `absent_or_null`, `contains:TEXT`, `starts_with:TEXT`;
//! - other scalars: equal.
//!
//! Templates: `{{name}}` in any string of a step is replaced by a captured value.
//! Captures: `$.a.b[0]` paths into a JSON answer.

use serde_json::Value;
use std::collections::BTreeMap;

pub type Vars = BTreeMap<String, Value>;

/// `None` if `actual` matches `expected`, else the first mismatch with its path.
pub fn mismatch(expected: &Value, actual: &Value, path: &str) -> Option<String> {
    match (expected, actual) {
        (Value::String(m), a) if is_matcher(m) => {
            (!string_matcher(m, a)).then(|| format!("{path}: expected {m}, got {a}"))
        }
        (Value::Object(e), Value::Object(a)) => e.iter().find_map(|(k, ev)| {
            let sub = format!("{path}.{k}");
            match a.get(k) {
                Some(av) => mismatch(ev, av, &sub),
                None if ev == "absent_or_null" => None,
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

fn numbers_equal(e: &Value, a: &Value) -> bool {
    match (e, a) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => false,
    }
}

/// The whole-value matchers; `contains:TEXT` and `starts_with:TEXT` take an argument.
pub const MATCHERS: [&str; 8] = [
    "any",
    "any_string",
    "any_number",
    "any_uuid",
    "iso8601",
    "absent_or_null",
    "contains:TEXT",
    "starts_with:TEXT",
];

pub fn is_matcher(s: &str) -> bool {
    matches!(
        s,
        "any" | "any_string" | "any_number" | "any_uuid" | "iso8601" | "absent_or_null"
    ) || s.starts_with("contains:")
        || s.starts_with("starts_with:")
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
            } else {
                false
            }
        }
    }
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
pub fn render(value: &Value, vars: &Vars) -> Result<Value, String> {
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
                .collect::<Result<_, String>>()?,
        ),
        other => other.clone(),
    })
}

fn render_str_value(s: &str, vars: &Vars) -> Result<Value, String> {
    if let Some(name) = s.strip_prefix("{{").and_then(|r| r.strip_suffix("}}")) {
        if !name.contains("{{") {
            return vars
                .get(name.trim())
                .cloned()
                .ok_or_else(|| format!("unknown variable {{{{{name}}}}}"));
        }
    }
    render_str(s, vars).map(Value::String)
}

/// Replaces `{{name}}` inside a string; non-string values are inserted as JSON.
pub fn render_str(s: &str, vars: &Vars) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = s;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find("}}")
            .ok_or_else(|| format!("unclosed {{{{ in {s:?}"))?;
        let name = after[..end].trim();
        let value = vars
            .get(name)
            .ok_or_else(|| format!("unknown variable {{{{{name}}}}}"))?;
        match value {
            Value::String(text) => out.push_str(text),
            other => out.push_str(&other.to_string()),
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
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
