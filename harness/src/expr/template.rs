//! `{{...}}` template expressions: a variable, then filters.
//!
//! ```text
//! {{code}}              the captured value
//! {{code | upper}}      ASCII upper case (`lower`: lower case)
//! {{t + 5s}}            a timestamp (`2026-11-21T10:00:00.001Z`) or a number of
//! {{t - 250ms}}         milliseconds, moved by a duration (`ms`, `s`, `m`, `h`)
//! {{t | upper + 1s}}    filters apply left to right
//! ```
//!
//! An expression is parsed before anything runs (`harness check` and the
//! loader): an unknown filter or a bad duration is a load-time error, never
//! a literal. Evaluation fails only on a value of the wrong kind (`upper`
//! on a number), naming the expression.

use super::ExprError;
use serde_json::Value;
use std::fmt;

/// The filters, as the error for an unknown one lists them.
pub const FILTERS: &str = "upper, lower, + DURATION, - DURATION";

/// One parsed `{{...}}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expr {
    pub var: String,
    pub filters: Vec<Filter>,
    /// The text between the braces, for messages.
    text: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Filter {
    Upper,
    Lower,
    /// Adds milliseconds (negative to subtract).
    AddMs(i64),
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{{{{{}}}}}", self.text)
    }
}

impl Expr {
    /// Parses the text between `{{` and `}}`.
    pub fn parse(text: &str) -> Result<Self, ExprError> {
        let wrong = |problem: String| ExprError::Template {
            text: text.to_owned(),
            problem,
        };
        let (var, mut rest) = split_var(text.trim());
        if var.is_empty() {
            return Err(wrong("no variable name".into()));
        }
        let mut filters = Vec::new();
        loop {
            rest = rest.trim_start();
            let Some(op) = rest.chars().next() else { break };
            let after = rest[op.len_utf8()..].trim_start();
            let (word, tail) = after
                .split_once(|c: char| c.is_whitespace() || c == '|' || c == '+' || c == '-')
                .map_or((after, ""), |(w, _)| (w, &after[w.len()..]));
            let filter = match op {
                '|' => match word {
                    "upper" => Filter::Upper,
                    "lower" => Filter::Lower,
                    other => {
                        return Err(wrong(format!(
                            "unknown filter {other:?} (filters: {FILTERS})"
                        )))
                    }
                },
                '+' | '-' => {
                    let ms = crate::expr::duration::parse_duration(word)
                        .map_err(|e| wrong(e.to_string()))?
                        .as_millis();
                    let ms = i64::try_from(ms).map_err(|_| wrong("too long".into()))?;
                    Filter::AddMs(if op == '-' { -ms } else { ms })
                }
                other => {
                    return Err(wrong(format!(
                        "expected | or + or - after the variable, found {other:?} \
                         (filters: {FILTERS})"
                    )))
                }
            };
            filters.push(filter);
            rest = tail;
        }
        Ok(Self {
            var: var.to_owned(),
            filters,
            text: text.trim().to_owned(),
        })
    }

    /// Applies the filters to the variable's value.
    pub fn apply(&self, value: &Value) -> Result<Value, ExprError> {
        let wrong = |problem: String| ExprError::Filter {
            expr: self.to_string(),
            problem,
        };
        let mut value = value.clone();
        for filter in &self.filters {
            value = match (filter, &value) {
                (Filter::Upper, Value::String(s)) => Value::String(s.to_ascii_uppercase()),
                (Filter::Lower, Value::String(s)) => Value::String(s.to_ascii_lowercase()),
                (Filter::AddMs(ms), Value::Number(n)) => {
                    let n = n
                        .as_i64()
                        .ok_or_else(|| wrong(format!("{n} is not a whole number")))?;
                    Value::from(n + ms)
                }
                (Filter::AddMs(ms), Value::String(s)) => {
                    let at = protocol::time::parse_ms(s)
                        .ok_or_else(|| wrong(format!("{s:?} is not a timestamp")))?;
                    Value::String(protocol::time::format_ms(at + ms))
                }
                (_, other) => {
                    return Err(wrong(format!("the filter does not apply to {other}")));
                }
            };
        }
        Ok(value)
    }
}

/// The variable name (up to a space or an operator) and the rest.
fn split_var(text: &str) -> (&str, &str) {
    let end = text
        .find(|c: char| c.is_whitespace() || c == '|' || c == '+' || c == '-')
        .unwrap_or(text.len());
    // Worker names hold dashes (`pubkey.w-0`): a dash followed by a digit
    // and a unit is arithmetic only when spaced (`{{t - 5s}}`); unspaced
    // it is part of the name.
    if text[end..].starts_with('-') && !text[..end].is_empty() {
        let name_end = text[end..]
            .find(|c: char| c.is_whitespace() || c == '|' || c == '+')
            .map_or(text.len(), |i| end + i);
        return (&text[..name_end], &text[name_end..]);
    }
    (&text[..end], &text[end..])
}

/// A piece of a templated string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    Text(String),
    Expr(Expr),
}

/// Splits a string into text and expressions; an unclosed `{{` or a bad
/// expression is an error.
pub fn parts(s: &str) -> Result<Vec<Part>, ExprError> {
    let mut out = Vec::new();
    let mut rest = s;
    while let Some(start) = rest.find("{{") {
        if start > 0 {
            out.push(Part::Text(rest[..start].to_owned()));
        }
        let after = &rest[start + 2..];
        let end = after
            .find("}}")
            .ok_or_else(|| ExprError::Unclosed(s.to_owned()))?;
        out.push(Part::Expr(Expr::parse(&after[..end])?));
        rest = &after[end + 2..];
    }
    if !rest.is_empty() {
        out.push(Part::Text(rest.to_owned()));
    }
    Ok(out)
}

/// Every expression of a string (for `harness check`).
pub fn expressions(s: &str) -> Result<Vec<Expr>, ExprError> {
    Ok(parts(s)?
        .into_iter()
        .filter_map(|p| match p {
            Part::Expr(e) => Some(e),
            Part::Text(_) => None,
        })
        .collect())
}

/// Renders `s`, looking variables up with `lookup`. An expression whose
/// variable `lookup` does not know is kept as written when `keep_unknown`
/// (load-time expansion of loop variables), else an error. A string that is
/// exactly one expression takes its value as is (a number stays a number).
pub fn render(
    s: &str,
    lookup: &dyn Fn(&str) -> Option<Value>,
    keep_unknown: bool,
) -> Result<Value, ExprError> {
    let parts = parts(s)?;
    if let [Part::Expr(e)] = parts.as_slice() {
        return match lookup(&e.var) {
            Some(v) => e.apply(&v),
            None if keep_unknown => Ok(Value::String(s.to_owned())),
            None => Err(ExprError::UnknownVariable(e.to_string())),
        };
    }
    let mut out = String::new();
    for part in parts {
        match part {
            Part::Text(t) => out.push_str(&t),
            Part::Expr(e) => match lookup(&e.var) {
                Some(v) => match e.apply(&v)? {
                    Value::String(text) => out.push_str(&text),
                    other => out.push_str(&other.to_string()),
                },
                None if keep_unknown => out.push_str(&e.to_string()),
                None => return Err(ExprError::UnknownVariable(e.to_string())),
            },
        }
    }
    Ok(Value::String(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn eval(s: &str) -> Result<Value, String> {
        let lookup = |name: &str| match name {
            "code" => Some(json!("a1b2c3")),
            "t" => Some(json!("2026-11-21T10:00:00.001Z")),
            "n" => Some(json!(1000)),
            "pubkey.w-0" => Some(json!("0x02")),
            _ => None,
        };
        render(s, &lookup, false).map_err(String::from)
    }

    #[test]
    fn filters_apply_left_to_right() {
        assert_eq!(eval("{{code | upper}}"), Ok(json!("A1B2C3")));
        assert_eq!(eval("{{ code|upper|lower }}"), Ok(json!("a1b2c3")));
        assert_eq!(eval("x-{{code | upper}}-y"), Ok(json!("x-A1B2C3-y")));
        assert_eq!(eval("{{t + 5s}}"), Ok(json!("2026-11-21T10:00:05.001Z")));
        assert_eq!(eval("{{t - 1m}}"), Ok(json!("2026-11-21T09:59:00.001Z")));
        assert_eq!(eval("{{n + 2s}}"), Ok(json!(3000)));
        assert_eq!(eval("{{pubkey.w-0}}"), Ok(json!("0x02")));
    }

    #[test]
    fn unknown_filters_and_bad_values_are_errors() {
        let err = Expr::parse("code | uper").unwrap_err().to_string();
        assert!(err.contains("unknown filter \"uper\""), "{err}");
        assert!(err.contains("upper, lower"), "{err}");
        assert!(Expr::parse("t + 5d")
            .unwrap_err()
            .to_string()
            .contains("unit"));
        assert!(Expr::parse("t * 2")
            .unwrap_err()
            .to_string()
            .contains("expected |"));
        assert!(eval("{{n | upper}}")
            .unwrap_err()
            .contains("does not apply"));
        assert!(eval("{{nope}}").unwrap_err().contains("unknown variable"));
    }

    #[test]
    fn unknown_variables_can_be_kept_for_later() {
        let lookup = |name: &str| (name == "i").then(|| json!(3));
        assert_eq!(
            render("{{i}}/{{job | upper}}", &lookup, true),
            Ok(json!("3/{{job | upper}}"))
        );
        assert_eq!(render("{{i}}", &lookup, true), Ok(json!(3)));
    }
}
