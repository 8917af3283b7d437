//! Strict validation of request bodies into typed submissions. Each refusal
//! names the field at fault; the messages are part of the API (spec 7).

use crate::config::Limits;
use protocol::api::{JobSubmission, JobType, Payload, PrivacyClass, TaskType};
use serde_json::{Map, Value};

pub const MISSING_COMMIT_FIELDS: &str = "Missing required fields: job_type, payload, user_id";
pub const INVALID_JOB_TYPE: &str = "job_type must be LLM_INFER or TASK";
pub const INVALID_POLICY: &str = "policy must be FAST, CHEAP or AUTO";
pub const KEY_SHAPE: &str = "provider_pubkey must be a compressed secp256k1 public key: 0x followed by 66 hex characters, starting 02 or 03";

/// Whether `key` has the shape of a compressed SEC1 key: `0x`, then 66 hex
/// characters of which the first byte is 02 or 03. A key of this shape may
/// still not be a point on the curve.
pub fn is_compressed_key_shape(key: &str) -> bool {
    let Some(hex) = key.strip_prefix("0x") else {
        return false;
    };
    hex.len() == 66
        && hex.bytes().all(|b| b.is_ascii_hexdigit())
        && (hex.starts_with("02") || hex.starts_with("03"))
}

/// Turns a commit body into a submission. Unknown top-level fields are
/// ignored so older coordinators accept newer clients' bodies.
pub fn submission(body: &Value, limits: &Limits) -> Result<JobSubmission, String> {
    let obj = body
        .as_object()
        .ok_or_else(|| MISSING_COMMIT_FIELDS.to_owned())?;
    let payload = match obj.get("payload") {
        None | Some(Value::Null) => PayloadFields::Missing,
        Some(Value::Object(p)) => PayloadFields::Object(PayloadObject {
            job_type: Field::get(p, "job_type"),
            prompt: Field::get(p, "prompt"),
            max_tokens: Field::get(p, "max_tokens"),
            task_type: Field::get(p, "task_type"),
            input: Field::get(p, "input"),
            model: Field::get(p, "model"),
        }),
        Some(_) => PayloadFields::NotObject,
    };
    CommitFields {
        job_type: Field::get(obj, "job_type"),
        user_id: Field::get(obj, "user_id"),
        payload,
        privacy_class: Field::get(obj, "privacy_class"),
    }
    .submission(limits)
}

/// The same as [`submission`] of the parsed body, read straight from the
/// bytes when the body is plain: an object of the known fields only, each
/// once, strings without escapes. Anything else is `None`: parse it into a
/// `Value` and take [`submission`], which then gives the same answer with
/// the message it always gave.
///
/// Both read the body into the same [`CommitFields`] and judge it with one
/// function; this one skips the `Value` tree (a dozen allocations).
pub fn plain_submission(body: &[u8], limits: &Limits) -> Option<Result<JobSubmission, String>> {
    let Object(fields): Object<PlainBody<'_>> = serde_json::from_slice(body).ok()?;
    let payload = match fields.payload {
        None => PayloadFields::Missing,
        Some(Object(p)) => PayloadFields::Object(p),
    };
    Some(
        CommitFields {
            job_type: fields.job_type,
            user_id: fields.user_id,
            payload,
            privacy_class: fields.privacy_class,
        }
        .submission(limits),
    )
}

/// A commit body's fields as validation reads them.
struct CommitFields<'a> {
    job_type: Field<'a>,
    user_id: Field<'a>,
    payload: PayloadFields<'a>,
    privacy_class: Field<'a>,
}

/// One field: absent, `null`, a string, an integer `Value::as_u64` reads,
/// or anything else.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Field<'a> {
    #[default]
    Absent,
    Null,
    Str(&'a str),
    U64(u64),
    Other,
}

enum PayloadFields<'a> {
    /// Absent or `null`.
    Missing,
    NotObject,
    Object(PayloadObject<'a>),
}

/// The payload fields either job type reads. Another field makes the body
/// not plain (refused here); the `Value` path then ignores it.
#[derive(Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PayloadObject<'a> {
    #[serde(default, borrow)]
    job_type: Field<'a>,
    #[serde(default, borrow)]
    prompt: Field<'a>,
    #[serde(default, borrow)]
    max_tokens: Field<'a>,
    #[serde(default, borrow)]
    task_type: Field<'a>,
    #[serde(default, borrow)]
    input: Field<'a>,
    #[serde(default, borrow)]
    model: Field<'a>,
}

/// A plain commit body. Unknown fields are refused here (not ignored as
/// [`submission`] does), so that nothing is skipped unread: serde_json
/// skips a value without its nesting limit, and `Value` parsing has one.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PlainBody<'a> {
    #[serde(default, borrow)]
    job_type: Field<'a>,
    #[serde(default, borrow)]
    user_id: Field<'a>,
    /// `None`: absent or `null`.
    #[serde(default, borrow)]
    payload: Option<Object<PayloadObject<'a>>>,
    #[serde(default, borrow)]
    privacy_class: Field<'a>,
}

/// A struct read from a JSON object only (serde reads structs from arrays
/// too, field by field in order).
struct Object<T>(T);

impl<'de, T: serde::Deserialize<'de>> serde::Deserialize<'de> for Object<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor<T>(std::marker::PhantomData<T>);
        impl<'de, T: serde::Deserialize<'de>> serde::de::Visitor<'de> for Visitor<T> {
            type Value = Object<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<Object<T>, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(Object)
            }
        }
        d.deserialize_map(Visitor(std::marker::PhantomData))
    }
}

/// A number with no fractional part is an integer, as JSON Schema has it
/// (`8.0` is 8; `8.5` is not one): issue 29, finding 9.
fn integral(n: f64) -> Option<u64> {
    // Past 2^53 an f64 no longer holds every integer; such counts are
    // refused by every range check anyway.
    (n.fract() == 0.0 && (0.0..=9_007_199_254_740_992.0).contains(&n)).then_some(n as u64)
}

impl<'a> Field<'a> {
    fn get(obj: &'a Map<String, Value>, name: &str) -> Self {
        match obj.get(name) {
            None => Field::Absent,
            Some(Value::Null) => Field::Null,
            Some(Value::String(s)) => Field::Str(s),
            Some(v) => v
                .as_u64()
                .or_else(|| v.as_f64().and_then(integral))
                .map_or(Field::Other, Field::U64),
        }
    }

    fn as_str(self) -> Option<&'a str> {
        match self {
            Field::Str(s) => Some(s),
            _ => None,
        }
    }

    fn is_missing(self) -> bool {
        matches!(self, Field::Absent | Field::Null)
    }
}

/// Reads a field's value as [`Field::get`] sees it in a `Value`; a string
/// with escapes, an object or an array is refused (the plain path then
/// gives way to the `Value` one).
impl<'de: 'a, 'a> serde::Deserialize<'de> for Field<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Field<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("null, a number, a boolean or an unescaped string")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Field<'de>, E> {
                Ok(Field::Str(s))
            }
            fn visit_unit<E>(self) -> Result<Field<'de>, E> {
                Ok(Field::Null)
            }
            fn visit_none<E>(self) -> Result<Field<'de>, E> {
                Ok(Field::Null)
            }
            fn visit_u64<E>(self, n: u64) -> Result<Field<'de>, E> {
                Ok(Field::U64(n))
            }
            fn visit_i64<E>(self, n: i64) -> Result<Field<'de>, E> {
                // As `Value` stores it: non-negative is an unsigned integer.
                Ok(u64::try_from(n).map_or(Field::Other, Field::U64))
            }
            fn visit_f64<E>(self, n: f64) -> Result<Field<'de>, E> {
                Ok(integral(n).map_or(Field::Other, Field::U64))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Field<'de>, E> {
                Ok(Field::Other)
            }
        }
        d.deserialize_any(Visitor)
    }
}

impl CommitFields<'_> {
    fn submission(self, limits: &Limits) -> Result<JobSubmission, String> {
        if self.job_type.is_missing()
            || matches!(self.payload, PayloadFields::Missing)
            || self.user_id.is_missing()
        {
            return Err(MISSING_COMMIT_FIELDS.into());
        }
        let job_type = self
            .job_type
            .as_str()
            .and_then(JobType::parse)
            .ok_or_else(|| INVALID_JOB_TYPE.to_owned())?;
        let user_id = user_id_field(self.user_id, limits)?;
        let payload = match self.payload {
            PayloadFields::Object(p) => payload(p, job_type, limits)?,
            _ => return Err("payload must be an object".into()),
        };
        // An optional field is absent or has its type: `null` is neither, so it
        // is a 400 like any other wrong type (spec 4.3; docs/decisions/0005-request-validation.md).
        let privacy_class = match self.privacy_class {
            Field::Absent => PrivacyClass::Public,
            v => v
                .as_str()
                .and_then(PrivacyClass::parse)
                .ok_or("privacy_class must be PUBLIC or PRIVATE")?,
        };
        Ok(JobSubmission {
            job_type,
            user_id,
            payload,
            privacy_class,
        })
    }
}

/// A user id: a non-empty string of bounded length.
pub fn user_id(v: &Value, limits: &Limits) -> Result<String, String> {
    let field = match v {
        Value::String(s) => Field::Str(s),
        _ => Field::Other,
    };
    user_id_field(field, limits)
}

/// The one `user_id` rule, for every endpoint (issue 29, finding 2): not
/// blank; no control character (U+0000 among them: PostgreSQL refuses it,
/// and it stopped a cluster node), no format character (zero-width and
/// bidirectional marks make two ids that look alike), no line or
/// paragraph separator; then normalised to Unicode NFC (so the composed
/// and decomposed forms of one name are one user) and at most
/// `user_id_chars_max` characters after that. Taken before any store sees
/// the id.
pub fn user_id_str(s: &str, limits: &Limits) -> Result<String, String> {
    use unicode_normalization::UnicodeNormalization;
    // The spec's message (its error strings are the contract), for every
    // refusal; docs/spec.md and security.md name the character rules.
    let refused = || {
        format!(
            "user_id must be a non-empty string of at most {} characters",
            limits.user_id_chars_max
        )
    };
    // Counted before normalising too: NFC of a huge string is work.
    let too_long = |s: &str| s.chars().nth(limits.user_id_chars_max).is_some();
    if s.trim().is_empty() || too_long(s) || s.chars().any(forbidden_in_id) {
        return Err(refused());
    }
    let normal: String = s.nfc().collect();
    if too_long(&normal) {
        return Err(refused());
    }
    Ok(normal)
}

fn user_id_field(v: Field<'_>, limits: &Limits) -> Result<String, String> {
    match v.as_str() {
        Some(s) => user_id_str(s, limits),
        None => user_id_str("", limits),
    }
}

/// Characters no identifier may hold: controls, separators of lines and
/// paragraphs, and Unicode's format characters (category Cf).
fn forbidden_in_id(c: char) -> bool {
    c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') || is_format(c)
}

/// Unicode general category Cf (format), Unicode 15.
fn is_format(c: char) -> bool {
    matches!(u32::from(c),
        0xAD | 0x600..=0x605 | 0x61C | 0x6DD | 0x70F | 0x890..=0x891 | 0x8E2 | 0x180E
        | 0x200B..=0x200F | 0x202A..=0x202E | 0x2060..=0x2064 | 0x2066..=0x206F | 0xFEFF
        | 0xFFF9..=0xFFFB | 0x110BD | 0x110CD | 0x13430..=0x1343F | 0x1BCA0..=0x1BCA3
        | 0x1D173..=0x1D17A | 0xE0001 | 0xE0020..=0xE007F)
}

/// Free text (a prompt, a task's input): any character but the controls
/// other than tab, line feed and carriage return (U+0000 first among them:
/// no store takes it in text).
pub fn free_text(name: &str, s: &str) -> Result<(), String> {
    let bad = |c: char| c.is_control() && !matches!(c, '\t' | '\n' | '\r');
    if may_hold_controls(s) && s.chars().any(bad) {
        return Err(format!(
            "{name} must not contain control characters other than tab, line feed and carriage return"
        ));
    }
    Ok(())
}

/// Whether `s` has a byte a control character can be made of: one below
/// 0x20 (tab, line feed and carriage return too), 0x7f, or 0xc2, the lead
/// byte of U+0080..=U+009F. Counted without branches, in byte-wide lanes
/// (chunks of 255 cannot overflow a `u8`), so that a 200 KiB input without
/// any is not decoded character by character.
fn may_hold_controls(s: &str) -> bool {
    s.as_bytes().chunks(255).any(|chunk| {
        let n: u8 = chunk
            .iter()
            .map(|&b| u8::from(b < 0x20) | u8::from(b == 0x7f) | u8::from(b == 0xc2))
            .sum();
        n > 0
    })
}

/// Most characters of an `LLM_INFER` payload's `model`.
pub const MODEL_CHARS_MAX: usize = 256;

/// An `LLM_INFER` payload's optional `model` (decision 0023): absent or
/// `null` is none; else a non-empty string of at most [`MODEL_CHARS_MAX`]
/// characters without control characters.
fn llm_model(field: Field<'_>) -> Result<Option<String>, String> {
    let invalid = || {
        format!("payload.model must be a non-empty string of at most {MODEL_CHARS_MAX} characters without control characters")
    };
    match field {
        Field::Absent | Field::Null => Ok(None),
        Field::Str(s)
            if !s.is_empty()
                && s.chars().count() <= MODEL_CHARS_MAX
                && !s.chars().any(char::is_control) =>
        {
            Ok(Some(s.to_owned()))
        }
        _ => Err(invalid()),
    }
}

fn payload(p: PayloadObject<'_>, job_type: JobType, limits: &Limits) -> Result<Payload, String> {
    if p.job_type != Field::Absent && p.job_type.as_str() != Some(job_type.as_str()) {
        return Err("payload.job_type must match job_type".into());
    }
    match job_type {
        JobType::LlmInfer => {
            let prompt = match p.prompt.as_str() {
                Some(s) if !s.trim().is_empty() => s.to_owned(),
                _ => return Err("payload.prompt must be a non-empty string".into()),
            };
            free_text("payload.prompt", &prompt)?;
            let max_tokens = match p.max_tokens {
                Field::Absent => limits.max_tokens_default,
                Field::U64(n) if (1..=u64::from(limits.max_tokens_max)).contains(&n) => n as u32,
                _ => {
                    return Err(format!(
                        "payload.max_tokens must be an integer from 1 to {}",
                        limits.max_tokens_max
                    ))
                }
            };
            let model = llm_model(p.model)?;
            Ok(Payload::Llm {
                prompt,
                max_tokens,
                model,
            })
        }
        JobType::Task => {
            let task_type = p
                .task_type
                .as_str()
                .and_then(TaskType::parse)
                .ok_or("payload.task_type must be summarize, classify or extract_json")?;
            let input = p
                .input
                .as_str()
                .ok_or("payload.input must be a string")?
                .to_owned();
            free_text("payload.input", &input)?;
            Ok(Payload::Task { task_type, input })
        }
    }
}

/// Names the listed fields missing (absent or null) from a JSON object body.
pub fn missing_fields(body: &Value, fields: &[&str]) -> Option<String> {
    let missing: Vec<&str> = fields
        .iter()
        .copied()
        .filter(|f| body.get(f).is_none_or(Value::is_null))
        .collect();
    (!missing.is_empty()).then(|| format!("Missing required fields: {}", missing.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(body: Value) -> Result<JobSubmission, String> {
        submission(&body, &Limits::default())
    }

    /// The byte pre-check never hides a control character: for every
    /// character up to U+00FF and some beyond, alone and inside text,
    /// `free_text` refuses exactly the controls other than tab, line feed
    /// and carriage return.
    #[test]
    fn free_text_refuses_exactly_the_controls() {
        let chars = (0u32..0x100).chain([0x2028, 0xfeff, 0x1_f980]);
        for c in chars.filter_map(char::from_u32) {
            let refused = c.is_control() && !matches!(c, '\t' | '\n' | '\r');
            for text in [
                c.to_string(),
                format!("{}{c}{}", "a".repeat(300), "é".repeat(200)),
            ] {
                assert_eq!(free_text("t", &text).is_err(), refused, "{:?}", c);
            }
        }
    }

    /// Issue 31: an LLM job's optional `model` is kept, checked, and read
    /// the same from a plain body as from a parsed one.
    #[test]
    fn an_llm_model_is_kept_and_checked() {
        let with = |model: Value| json!({"job_type":"LLM_INFER","user_id":"u","payload":{"prompt":"hi","model":model}});
        let s = check(with(json!("llama3.2"))).unwrap();
        assert!(matches!(s.payload, Payload::Llm { model: Some(ref m), .. } if m == "llama3.2"));
        let plain = plain_submission(with(json!("m")).to_string().as_bytes(), &Limits::default());
        assert!(matches!(plain, Some(Ok(_))));
        assert!(matches!(
            check(with(Value::Null)).unwrap().payload,
            Payload::Llm { model: None, .. }
        ));
        for bad in [
            json!(""),
            json!(5),
            json!("a\u{7}b"),
            json!("m".repeat(257)),
        ] {
            assert!(
                check(with(bad.clone()))
                    .unwrap_err()
                    .contains("payload.model"),
                "{bad}"
            );
        }
    }

    #[test]
    fn accepts_both_payload_kinds_with_defaults() {
        let s =
            check(json!({"job_type":"LLM_INFER","user_id":"u","payload":{"prompt":"hi"}})).unwrap();
        assert_eq!(
            s.payload,
            Payload::Llm {
                prompt: "hi".into(),
                max_tokens: 256,
                model: None,
            }
        );
        assert_eq!(s.privacy_class, PrivacyClass::Public);
        let s = check(
            json!({"job_type":"TASK","user_id":"u","privacy_class":"PRIVATE",
            "payload":{"job_type":"TASK","task_type":"classify","input":""}}),
        )
        .unwrap();
        assert_eq!(s.privacy_class, PrivacyClass::Private);
    }

    /// Issue 29, findings 2 and 9: one user_id rule; free text without
    /// NUL; an integral float is an integer.
    #[test]
    fn one_user_id_rule_and_free_text_without_controls() {
        let limits = Limits::default();
        for bad in [
            "",
            " ",
            "a\u{0}b",
            "a\u{1b}[2J",
            "a\u{200b}b",
            "\u{feff}a",
            "a\u{2028}",
        ] {
            assert!(user_id_str(bad, &limits).is_err(), "{bad:?}");
        }
        assert!(user_id_str(&"u".repeat(5_000), &limits).is_err());
        assert!(user_id_str(&"u".repeat(256), &limits).is_ok());
        // NFC: the decomposed é is the composed one.
        assert_eq!(user_id_str("e\u{301}", &limits).unwrap(), "\u{e9}");
        let with = |field: &str, value: Value| {
            let mut body = json!({"job_type":"TASK","user_id":"u",
                "payload":{"task_type":"summarize","input":"x"}});
            body["payload"][field] = value;
            check(body)
        };
        assert!(with("input", json!("a\u{0}b"))
            .unwrap_err()
            .contains("payload.input"));
        assert!(with("input", json!("line\nnext\ttab")).is_ok());
        let llm = |max: Value| {
            check(json!({"job_type":"LLM_INFER","user_id":"u",
                "payload":{"prompt":"p","max_tokens":max}}))
        };
        assert!(llm(json!(8.0)).is_ok());
        assert!(llm(json!(8.5)).is_err());
        assert!(check(json!({"job_type":"LLM_INFER","user_id":"u",
            "payload":{"prompt":"a\u{0}"}}))
        .is_err());
        // The plain path reads 8.0 as 8 too.
        let plain =
            br#"{"job_type":"LLM_INFER","user_id":"u","payload":{"prompt":"p","max_tokens":8.0}}"#;
        assert!(plain_submission(plain, &limits).unwrap().is_ok());
    }

    #[test]
    fn each_bad_field_is_named() {
        let cases = [
            (json!([]), MISSING_COMMIT_FIELDS),
            (
                json!({"job_type":"TASK","user_id":"u"}),
                MISSING_COMMIT_FIELDS,
            ),
            (
                json!({"job_type":"GPU","user_id":"u","payload":{}}),
                INVALID_JOB_TYPE,
            ),
            (
                json!({"job_type":"TASK","user_id":"","payload":{}}),
                "user_id must be",
            ),
            (
                json!({"job_type":"TASK","user_id":7,"payload":{}}),
                "user_id must be",
            ),
            (
                json!({"job_type":"TASK","user_id":"u","payload":"x"}),
                "payload must be an object",
            ),
            (
                json!({"job_type":"TASK","user_id":"u","payload":{"job_type":"LLM_INFER"}}),
                "payload.job_type",
            ),
            (
                json!({"job_type":"TASK","user_id":"u","payload":{"task_type":"poem","input":"x"}}),
                "payload.task_type",
            ),
            (
                json!({"job_type":"TASK","user_id":"u","payload":{"task_type":"summarize"}}),
                "payload.input",
            ),
            (
                json!({"job_type":"LLM_INFER","user_id":"u","payload":{"prompt":" "}}),
                "payload.prompt",
            ),
            (
                json!({"job_type":"LLM_INFER","user_id":"u","payload":{"prompt":"p","max_tokens":0}}),
                "payload.max_tokens",
            ),
            (
                json!({"job_type":"LLM_INFER","user_id":"u","payload":{"prompt":"p","max_tokens":40000}}),
                "payload.max_tokens",
            ),
            (
                json!({"job_type":"LLM_INFER","user_id":"u","payload":{"prompt":"p","max_tokens":1.5}}),
                "payload.max_tokens",
            ),
            (
                json!({"job_type":"LLM_INFER","user_id":"u","payload":{"prompt":"p"},"privacy_class":"SECRET"}),
                "privacy_class",
            ),
        ];
        for (body, expected) in cases {
            let err = check(body.clone()).unwrap_err();
            assert!(err.starts_with(expected), "{body} gave {err}");
        }
    }

    /// Values a field may have in a body, as JSON text.
    const VALUES: &[&str] = &[
        r#""TASK""#,
        r#""LLM_INFER""#,
        r#""task""#,
        r#""PUBLIC""#,
        r#""PRIVATE""#,
        r#""summarize""#,
        r#""classify""#,
        r#""extract_json""#,
        r#""u""#,
        r#""  ""#,
        r#""""#,
        r#""h\u00e9""#,
        r#""a\"b""#,
        r#""été""#,
        "null",
        "true",
        "0",
        "1",
        "8",
        "4096",
        "4097",
        "-1",
        "-0",
        "5.0",
        "1e3",
        "18446744073709551616",
        "[]",
        "{}",
        r#"["TASK"]"#,
    ];

    fn object(fields: &[(&str, String)]) -> String {
        let inner: Vec<String> = fields.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
        format!("{{{}}}", inner.join(","))
    }

    /// Whatever the body, the plain path either steps aside (`None`) or
    /// answers exactly as `submission` of the parsed body does (`Some`:
    /// whether it accepted the body).
    fn agrees(body: &str) -> Option<bool> {
        let limits = Limits::default();
        let answer = plain_submission(body.as_bytes(), &limits)?;
        let value: Value = serde_json::from_str(body).unwrap();
        assert_eq!(answer, submission(&value, &limits), "{body}");
        Some(answer.is_ok())
    }

    #[test]
    fn the_plain_path_answers_as_the_value_path() {
        use rand::{Rng, SeedableRng};
        let top = ["job_type", "user_id", "payload", "privacy_class"];
        let inner = ["job_type", "prompt", "max_tokens", "task_type", "input"];
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(14);
        let good = |name: &str| match name {
            "job_type" => r#""TASK""#,
            "user_id" => r#""u""#,
            "privacy_class" => r#""PRIVATE""#,
            "prompt" => r#""hi""#,
            "max_tokens" => "8",
            "task_type" => r#""summarize""#,
            _ => r#""x""#,
        };
        // Half the time a value that passes, else absent or any value.
        let pick = |rng: &mut rand_chacha::ChaCha20Rng, name: &str| -> Option<String> {
            match rng.gen_range(0..8) {
                0..=3 => Some(good(name).to_owned()),
                4 => None,
                _ => Some(VALUES[rng.gen_range(0..VALUES.len())].to_owned()),
            }
        };
        let (mut refused, mut accepted) = (0, 0);
        for _ in 0..20_000 {
            let mut payload: Vec<(&str, String)> = Vec::new();
            for name in inner {
                if let Some(v) = pick(&mut rng, name) {
                    payload.push((name, v));
                }
            }
            let mut fields: Vec<(&str, String)> = Vec::new();
            for name in top {
                let v = if name == "payload" && rng.gen_range(0..5) != 0 {
                    Some(object(&payload))
                } else {
                    pick(&mut rng, name)
                };
                if let Some(v) = v {
                    fields.push((name, v));
                }
            }
            match rng.gen_range(0..10) {
                0 => fields.push(("extra", r#"{"a":[1,{"b":null}]}"#.into())),
                1 => fields.push(("user_id", r#""again""#.into())),
                _ => {}
            }
            match agrees(&object(&fields)) {
                Some(true) => accepted += 1,
                Some(false) => refused += 1,
                None => {}
            }
        }
        // Both outcomes were compared many times.
        assert!(
            refused > 1_000 && accepted > 100,
            "{refused} refused, {accepted} accepted"
        );
    }

    #[test]
    fn ordinary_bodies_take_the_plain_path() {
        for body in [
            r#"{"job_type":"TASK","user_id":"u","payload":{"task_type":"summarize","input":"x"}}"#,
            r#"{"job_type":"LLM_INFER","user_id":"u","privacy_class":"PRIVATE","payload":{"job_type":"LLM_INFER","prompt":"hi","max_tokens":8}}"#,
            r#" { "job_type" : "TASK" , "user_id" : "u" , "payload" : { "task_type" : "classify" , "input" : "" } } "#,
        ] {
            assert_eq!(agrees(body), Some(true), "{body}");
        }
        // Unknown fields, escapes and repeated keys take the `Value` path.
        for body in [
            r#"{"job_type":"TASK","user_id":"u","payload":{"task_type":"summarize","input":"x"},"v":2}"#,
            r#"{"job_type":"TASK","user_id":"\u0075","payload":{"task_type":"summarize","input":"x"}}"#,
            r#"{"job_type":"TASK","user_id":"u","user_id":"w","payload":{"task_type":"summarize","input":"x"}}"#,
            r#"{"job_type":"TASK","user_id":"u","payload":{"task_type":"summarize","input":"x","n":[[[]]]}}"#,
            "[]",
            "{",
        ] {
            assert_eq!(agrees(body), None, "{body}");
        }
    }
}
