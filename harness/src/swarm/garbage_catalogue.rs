//! The catalogue the `garbage` kind draws its malformed requests from
//! (see [`super::garbage`]). Every entry is refused by the API's contract
//! (spec 4 and 7, `coordinator/src/api/validate.rs`): none is a request a
//! correct coordinator may accept.

use super::garbage::{pick, GarbageRequest, Needs};
use rand::Rng;
use rand_chacha::ChaCha20Rng;

/// Characters no identifier may hold (`user_id`; none is one of an enum's
/// words either), as JSON escapes.
const ID_CHARS: &[&str] = &[
    "\\u0000", "\\u0001", "\\u001b", "\\u007f", "\\u0085", "\\t", "\\n", "\\u2028", "\\u200b",
    "\\ufeff",
];
/// Control characters free text may not hold (tab, line feed and carriage
/// return it may), as JSON escapes; a model may hold none of them.
const TEXT_CHARS: &[&str] = &[
    "\\u0000", "\\u0001", "\\u001b", "\\u007f", "\\u0085", "\\u009f",
];
/// Lone surrogates, which no JSON text may escape.
const SURROGATES: &[&str] = &["\\ud800", "\\udfff", "\\udbff\\u0041"];

/// One malformed request for `instance`.
pub fn draw(
    rng: &mut ChaCha20Rng,
    instance: &'static str,
    paid: bool,
    user_auth: bool,
) -> GarbageRequest {
    let mut r = GarbageRequest {
        instance,
        what: String::new(),
        method: "POST",
        path: format!("/v1/jobs/commit/{}", pick(rng, &["fast", "cheap"])),
        raw_body: None,
        body_toml: None,
        headers: vec![("content-type", "application/json".into())],
        needs: Needs::Nothing,
        raw: None,
    };
    match rng.gen_range(0..16) {
        0 => not_json(rng, &mut r),
        1 | 2 => wrong_field(rng, &mut r),
        3 | 4 => control_in_field(rng, &mut r),
        5 => overlong_or_missing(rng, &mut r),
        6 | 7 => bad_job_path(rng, &mut r),
        8 => bad_query(rng, &mut r),
        9 => bad_pairing(rng, &mut r),
        10 => bad_door(rng, &mut r),
        11 => raw_head(rng, &mut r),
        12 if paid => bad_payment(rng, &mut r),
        13 if user_auth => bad_proof(rng, &mut r),
        _ => control_in_field(rng, &mut r),
    }
    r
}

/// A commit body (JSON text) with `user_id`, `job_type` and its payload's
/// fields, each value JSON text; `None` leaves a field out.
struct Body {
    job_type: Option<String>,
    user_id: Option<String>,
    privacy_class: Option<String>,
    payload: Vec<(&'static str, String)>,
}

impl Body {
    /// A valid body of either job type.
    fn valid(rng: &mut ChaCha20Rng) -> Self {
        let llm = rng.gen_bool(0.5);
        let payload = match llm {
            true => vec![("prompt", "\"garbage\"".into()), ("max_tokens", "8".into())],
            false => vec![
                ("task_type", "\"classify\"".into()),
                ("input", "\"garbage\"".into()),
            ],
        };
        Body {
            job_type: Some(if llm { "\"LLM_INFER\"" } else { "\"TASK\"" }.into()),
            user_id: Some("\"garbage\"".into()),
            privacy_class: None,
            payload,
        }
    }

    fn llm(&self) -> bool {
        self.payload.iter().any(|(k, _)| *k == "prompt")
    }

    /// Sets (or adds) a payload field.
    fn set(&mut self, name: &'static str, value: String) {
        self.payload.retain(|(k, _)| *k != name);
        self.payload.push((name, value));
    }

    fn text(&self) -> String {
        let payload: Vec<String> = (self.payload.iter())
            .map(|(k, v)| format!("\"{k}\":{v}"))
            .collect();
        let mut fields = Vec::new();
        let top = [
            ("job_type", &self.job_type),
            ("user_id", &self.user_id),
            ("privacy_class", &self.privacy_class),
        ];
        for (k, v) in top {
            if let Some(v) = v {
                fields.push(format!("\"{k}\":{v}"));
            }
        }
        fields.push(format!("\"payload\":{{{}}}", payload.join(",")));
        format!("{{{}}}", fields.join(","))
    }
}

/// A commit body that is not JSON: cut short, unbalanced, a literal
/// control character in a string, a duplicate key, nesting past the limit.
fn not_json(rng: &mut ChaCha20Rng, r: &mut GarbageRequest) {
    let valid = Body::valid(rng).text();
    let (what, body) = match rng.gen_range(0..6) {
        0 => {
            let cut = rng.gen_range(1..valid.len() - 1);
            ("a body cut short", valid[..cut].to_owned())
        }
        1 => (
            "a body that is not JSON",
            pick(
                rng,
                &[
                    "nul",
                    "{\"a\":1}}",
                    "[",
                    "{,}",
                    "'x'",
                    "{\"job_type\" \"TASK\"}",
                ],
            )
            .to_owned(),
        ),
        2 => (
            "a literal control character in a string",
            valid.replacen("garbage", "gar\u{1}bage", 1),
        ),
        3 => (
            "a duplicate key",
            valid.replacen('{', "{\"user_id\":\"other\",", 1),
        ),
        4 => (
            "nesting past the limit",
            format!("{}{}", "[".repeat(200), "]".repeat(200)),
        ),
        _ => ("an empty body", String::new()),
    };
    r.what = what.into();
    r.raw_body = Some(body);
}

/// A commit field of the wrong type or out of its range.
fn wrong_field(rng: &mut ChaCha20Rng, r: &mut GarbageRequest) {
    let mut body = Body::valid(rng);
    let (field, value) = match rng.gen_range(0..7) {
        0 => ("job_type", pick(rng, &["5", "null", "\"GPU\"", "[]"])),
        1 => (
            "user_id",
            pick(rng, &["7", "null", "\"\"", "\"  \"", "{}", "true"]),
        ),
        2 => ("privacy_class", pick(rng, &["null", "1", "\"SECRET\""])),
        3 => ("payload", pick(rng, &["\"x\"", "[]", "5", "null"])),
        4 if body.llm() => {
            let values = [
                "-1",
                "0",
                "32769",
                "1.5",
                "\"8\"",
                "true",
                "18446744073709551616",
                "1e400",
                "-0.0",
            ];
            ("max_tokens", pick(rng, &values))
        }
        4 => ("task_type", pick(rng, &["3", "\"poem\"", "null"])),
        5 if body.llm() => (
            "prompt",
            pick(rng, &["5", "\"\"", "\" \"", "null", "[\"hi\"]"]),
        ),
        5 => ("input", pick(rng, &["5", "null", "[]", "{}"])),
        _ if body.llm() => ("model", pick(rng, &["\"\"", "5", "[]"])),
        _ => ("job_type", pick(rng, &["\"LLM_INFER\""])),
    };
    match field {
        "job_type" => body.job_type = Some(value.into()),
        "user_id" => body.user_id = Some(value.into()),
        "privacy_class" => body.privacy_class = Some(value.into()),
        "payload" => {
            r.what = format!("payload {value}");
            r.raw_body = Some(body.text().replacen(&payload_of(&body), value, 1));
            return;
        }
        _ => body.set(field_name(field), value.into()),
    }
    r.what = format!("{field} {value}");
    r.raw_body = Some(body.text());
}

/// The payload object of `body`'s text.
fn payload_of(body: &Body) -> String {
    let text = body.text();
    let at = text.find("\"payload\":").expect("a payload") + "\"payload\":".len();
    text[at..text.len() - 1].to_owned()
}

/// A payload field's name, as a `'static` key.
fn field_name(field: &str) -> &'static str {
    ["prompt", "max_tokens", "task_type", "input", "model"]
        .into_iter()
        .find(|f| *f == field)
        .unwrap_or("input")
}

/// A control character or a lone surrogate in one string field.
fn control_in_field(rng: &mut ChaCha20Rng, r: &mut GarbageRequest) {
    let mut body = Body::valid(rng);
    let surrogate = rng.gen_bool(0.2);
    let text_field = rng.gen_bool(0.5);
    let bad = match (surrogate, text_field) {
        (true, _) => pick(rng, SURROGATES),
        (false, true) => pick(rng, TEXT_CHARS),
        (false, false) => pick(rng, ID_CHARS),
    };
    let spliced = |word: &str| {
        let at = word.len() / 2;
        format!("\"{}{bad}{}\"", &word[..at], &word[at..])
    };
    let field = match (text_field, body.llm()) {
        (true, true) => pick(rng, &["prompt", "model"]),
        (true, false) => "input",
        (false, llm) => pick(
            rng,
            &[
                "user_id",
                "job_type",
                if llm { "privacy_class" } else { "task_type" },
            ],
        ),
    };
    match field {
        "user_id" => body.user_id = Some(spliced("garbage")),
        "job_type" if body.llm() => body.job_type = Some(spliced("LLM_INFER")),
        "job_type" => body.job_type = Some(spliced("TASK")),
        "privacy_class" => body.privacy_class = Some(spliced("PUBLIC")),
        "task_type" => body.set("task_type", spliced("classify")),
        "model" => body.set("model", spliced("llama3.2")),
        f => body.set(field_name(f), spliced("garbage")),
    }
    r.what = format!("{bad} in {field}");
    r.raw_body = Some(body.text());
}

/// An overlong `user_id` or `model`, or a required field left out.
fn overlong_or_missing(rng: &mut ChaCha20Rng, r: &mut GarbageRequest) {
    let mut body = Body::valid(rng);
    match rng.gen_range(0..4) {
        0 => {
            let n = rng.gen_range(257..=400);
            body.user_id = Some(format!("\"{}\"", "g".repeat(n)));
            r.what = format!("a user_id of {n} characters");
        }
        1 if body.llm() => {
            let n = rng.gen_range(257..=300);
            body.set("model", format!("\"{}\"", "m".repeat(n)));
            r.what = format!("a model of {n} characters");
        }
        _ => {
            let field = pick(rng, &["job_type", "user_id", "payload", "inner"]);
            match field {
                "job_type" => body.job_type = None,
                "user_id" => body.user_id = None,
                "payload" => body.payload.clear(),
                // The prompt, or the task type.
                _ => drop(body.payload.remove(0)),
            }
            r.what = format!("{field} missing");
            if field == "payload" {
                r.raw_body = Some(body.text().replacen(",\"payload\":{}", "", 1));
                return;
            }
        }
    }
    r.raw_body = Some(body.text());
}

/// A poll, cancel or events path whose job id is malformed.
fn bad_job_path(rng: &mut ChaCha20Rng, r: &mut GarbageRequest) {
    let ids = [
        "not-a-uuid",
        "%00",
        "%1b%5b2J",
        "{latest}%00",
        "{latest}x",
        "%ff",
        "%c3%28",
        "..%2f..%2fhealth",
        "00000000-0000-0000-0000-00000000000g",
        "%e2%80%a8",
    ];
    let id = pick(rng, &ids);
    let (method, path) = match rng.gen_range(0..3) {
        0 => ("GET", format!("/v1/jobs/{id}")),
        1 => ("POST", format!("/v1/jobs/{id}/cancel")),
        _ => ("GET", format!("/v1/jobs/{id}/events")),
    };
    r.what = format!("job id {id}");
    r.method = method;
    r.path = path;
    r.headers.clear();
}

/// A `wait_ms` that is not a whole number of ms in range, of the latest
/// job; or a quote of no job type.
fn bad_query(rng: &mut ChaCha20Rng, r: &mut GarbageRequest) {
    r.method = "GET";
    r.headers.clear();
    if rng.gen_bool(0.75) {
        let waits = [
            "abc",
            "-1",
            "1e3",
            "%2b5",
            "99999999999999999999",
            "30001",
            "%00",
            "1&wait_ms=2",
            "%ff",
            "",
            "1.5",
        ];
        let wait = pick(rng, &waits);
        r.what = format!("wait_ms={wait}");
        r.path = format!("/v1/jobs/{{latest}}?wait_ms={wait}");
    } else {
        let query = pick(
            rng,
            &[
                "job_type=%00",
                "job_type=GPU",
                "job_type=TASK%00",
                "",
                "job_type=TASK&policy=%1b",
            ],
        );
        r.what = format!("quote {query}");
        r.path = format!("/v1/quote?{query}");
    }
}

/// A pairing call with a malformed body or query.
fn bad_pairing(rng: &mut ChaCha20Rng, r: &mut GarbageRequest) {
    let (path, body) = match rng.gen_range(0..7) {
        0 => ("/v1/trust/create", "{}"),
        1 => ("/v1/trust/create", "{\"user_id\":\"gar\\u0000bage\"}"),
        2 => (
            "/v1/trust/create",
            "{\"user_id\":\"garbage\",\"provider_pubkey\":\"0x02zz\"}",
        ),
        3 => ("/v1/trust/create", "{\"user_id\":5"),
        4 => ("/v1/trust/claim", "{}"),
        5 => (
            "/v1/trust/claim",
            "{\"pairing_code\":\"\\u001b[2J\",\"provider_pubkey\":7}",
        ),
        _ => {
            let query = pick(
                rng,
                &[
                    "",
                    "user_id=",
                    "user_id=a%00",
                    "user_id=%1b",
                    "user_id=%e2%80%a8",
                    "user_id=%ff",
                ],
            );
            r.what = format!("trust list {query}");
            r.method = "GET";
            r.path = format!("/v1/trust/list?{query}");
            r.headers.clear();
            return;
        }
    };
    r.what = format!("{path} {body}");
    r.path = path.into();
    r.raw_body = Some(body.into());
}

/// The other doors with what they refuse: the OpenAI-compatible door's
/// malformed bodies, a worker upgrade that is not one, a method or a route
/// that does not exist, a body that does not say it is JSON.
fn bad_door(rng: &mut ChaCha20Rng, r: &mut GarbageRequest) {
    match rng.gen_range(0..5) {
        0 => {
            let bodies = [
                "{",
                "{\"messages\":5}",
                "{\"messages\":[{\"role\":\"user\",\"content\":\"h\\u0000i\"}]}",
            ];
            let body = pick(rng, &bodies);
            r.what = format!("chat {body}");
            r.path = "/v1/chat/completions".into();
            r.raw_body = Some(body.into());
        }
        1 => {
            r.what = "a worker upgrade without its headers".into();
            (r.method, r.path) = ("GET", "/v1/workers/ws".into());
            r.headers.clear();
        }
        2 => {
            r.what = "a method no route has".into();
            r.method = pick(rng, &["DELETE", "PUT", "PATCH"]);
            r.path = pick(rng, &["/v1/jobs/commit/fast", "/v1/jobs/{latest}"]).into();
            r.headers.clear();
        }
        3 => {
            r.what = "no such route".into();
            (r.method, r.path) = (
                "GET",
                pick(rng, &["/v1/jobs/%00/x", "/v1/%1b", "/v2/jobs"]).into(),
            );
            r.headers.clear();
        }
        _ => {
            r.what = "a body without its JSON content type".into();
            r.raw_body = Some(Body::valid(rng).text());
            r.headers = match rng.gen_bool(0.5) {
                true => vec![("content-type", "text/plain".into())],
                false => Vec::new(),
            };
        }
    }
}

/// A request head no HTTP client sends (`raw_request`).
fn raw_head(rng: &mut ChaCha20Rng, r: &mut GarbageRequest) {
    let heads = [
        (
            "a control character in a user proof",
            "GET /v1/health HTTP/1.1\r\nhost: garbage\r\nx-user-proof: \u{1}abc\r\n\r\n",
        ),
        (
            "ESC in the request target",
            "GET /v1/jobs/\u{1b}[2J HTTP/1.1\r\nhost: garbage\r\n\r\n",
        ),
        (
            "NUL in the method",
            "PO\u{0}ST /v1/jobs/commit/fast HTTP/1.1\r\nhost: garbage\r\n\r\n",
        ),
        (
            "an unknown HTTP version",
            "GET /v1/health HTTP/7.0\r\nhost: garbage\r\n\r\n",
        ),
        (
            "a content length that is not a number",
            "POST /v1/jobs/commit/fast HTTP/1.1\r\nhost: garbage\r\ncontent-length: x\r\n\r\n",
        ),
        (
            "a header without a colon",
            "GET /v1/health HTTP/1.1\r\nhost garbage\r\n\r\n",
        ),
    ];
    let (what, bytes) = pick(rng, &heads);
    r.what = what.into();
    r.raw = Some(bytes.into());
}

/// A valid commit paid with a payment header that is garbage.
fn bad_payment(rng: &mut ChaCha20Rng, r: &mut GarbageRequest) {
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let values = [
        "!!! not base64 !!!".to_owned(),
        b64("hello"),
        b64("{}"),
        b64("[1,2]"),
        b64("{\"x402Version\":1,\"scheme\":\"exact\",\"payload\":5}"),
        b64("{\"x402Version\":2,\"payload\":{\"signature\":\"0x\",\"authorization\":{}}}"),
    ];
    let header = pick(rng, &["x-payment", "payment-signature"]);
    let value = values[rng.gen_range(0..values.len())].clone();
    r.what = format!("{header}: {value}");
    r.raw_body = Some(Body::valid(rng).text());
    r.headers.push((header, value));
    r.needs = Needs::Payments;
}

/// A pairing or listing of a scenario user with a user proof that is
/// garbage (instances with user auth).
fn bad_proof(rng: &mut ChaCha20Rng, r: &mut GarbageRequest) {
    let proof = pick(rng, &["garbage", "v1.%%%", "eyJ9", "v1.e30.e30", ""]);
    let user = pick(rng, &["u0", "u1", "u2", "u3"]);
    r.what = format!("x-user-proof {proof:?} for {user}");
    if rng.gen_bool(0.5) {
        r.body_toml = Some(format!("{{ user_id = \"{{{{user.{user}}}}}\" }}"));
        r.path = "/v1/trust/create".into();
        r.headers.clear();
    } else {
        r.method = "GET";
        r.path = format!("/v1/trust/list?user_id={{{{user.{user}}}}}");
        r.headers.clear();
    }
    r.headers.push(("x-user-proof", proof.into()));
    r.needs = Needs::UserAuth;
}
