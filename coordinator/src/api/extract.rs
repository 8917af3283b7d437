//! Extractors: JSON bodies and commit requests (content type, size, parse,
//! validation), the query map, and the client's address for rate limits.

use super::error::ApiError;
use super::user_auth::ProofContext;
use super::validate;
use crate::shell::Coordinator;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, StatusCode};
use protocol::api::JobSubmission;
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

/// A JSON object body: checks the content type and size, parses, and maps
/// every failure to an [`ApiError`].
pub struct JsonBody(pub Value);

impl FromRequest<Coordinator> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &Coordinator) -> Result<Self, Self::Rejection> {
        if !is_json(req.headers()) {
            return Err(ApiError::UnsupportedMediaType);
        }
        let bytes = read_body(req, state).await?;
        parse_json(&bytes).map(JsonBody)
    }
}

/// A JSON object body with what a user's proof is checked against (the
/// `X-User-Proof` header, method, path and the exact body bytes).
pub struct ProvenJson {
    pub body: Value,
    pub proof: ProofContext,
}

impl FromRequest<Coordinator> for ProvenJson {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &Coordinator) -> Result<Self, Self::Rejection> {
        if !is_json(req.headers()) {
            return Err(ApiError::UnsupportedMediaType);
        }
        let (parts, body) = req.into_parts();
        let (headers, method, uri) = (
            parts.headers.clone(),
            parts.method.clone(),
            parts.uri.clone(),
        );
        let bytes = read_body(Request::from_parts(parts, body), state).await?;
        Ok(Self {
            body: parse_json(&bytes)?,
            proof: ProofContext::new(&headers, &method, &uri, bytes),
        })
    }
}

/// A commit request: its headers (payments read them; moved out of the
/// request, not cloned) and its body as a submission, or why it is not
/// one. Checked and parsed as [`JsonBody`] then `validate::submission`
/// would, through `validate::plain_submission` when the body is plain.
pub struct CommitRequest {
    pub(super) headers: HeaderMap,
    pub(super) submission: Result<JobSubmission, String>,
    /// What a PRIVATE commit's user proof is checked against.
    pub(super) proof: ProofContext,
}

impl FromRequest<Coordinator> for CommitRequest {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &Coordinator) -> Result<Self, Self::Rejection> {
        if !is_json(req.headers()) {
            return Err(ApiError::UnsupportedMediaType);
        }
        let (mut parts, body) = req.into_parts();
        // Reading the body needs the extensions (the size limit), not the headers.
        let headers = std::mem::take(&mut parts.headers);
        let (method, uri) = (parts.method.clone(), parts.uri.clone());
        let bytes = read_body(Request::from_parts(parts, body), state).await?;
        let limits = &state.config().limits;
        let submission = match validate::plain_submission(&bytes, limits) {
            Some(judged) => judged,
            None => validate::submission(&parse_json(&bytes)?, limits),
        };
        let proof = ProofContext::new(&headers, &method, &uri, bytes);
        Ok(Self {
            headers,
            submission,
            proof,
        })
    }
}

/// Whether the content type is JSON: `application/json` or `*/*+json`,
/// any parameters, any ASCII case.
fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|mime| {
            let mime = mime.trim().as_bytes();
            mime.eq_ignore_ascii_case(b"application/json")
                || mime.len() >= 5 && mime[mime.len() - 5..].eq_ignore_ascii_case(b"+json")
        })
}

/// The body, bounded in bytes and in time: past `http_body_timeout_ms`
/// the request is answered 408 and its buffer freed.
pub(super) async fn read_body(req: Request, state: &Coordinator) -> Result<Bytes, ApiError> {
    let limit_bytes = state.config().limits.body_bytes_max;
    let timeout_ms = state.config().timing.http_body_timeout_ms;
    let read = Bytes::from_request(req, state);
    let read = tokio::time::timeout(std::time::Duration::from_millis(timeout_ms), read)
        .await
        .map_err(|_| ApiError::BodyTimeout { timeout_ms })?;
    read.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::PayloadTooLarge { limit_bytes }
        } else {
            ApiError::BadRequest(format!("could not read the request body: {rejection}"))
        }
    })
}

fn parse_json(bytes: &[u8]) -> Result<Value, ApiError> {
    let value = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::BadRequest(format!("request body is not valid JSON: {e}")))?;
    // serde_json keeps the last of two equal keys; a proxy or a validator in
    // front may have read the first, so two are refused (issue 29, finding 9).
    serde_json::from_slice::<NoDuplicateKeys>(bytes)
        .map_err(|e| ApiError::BadRequest(format!("request body is not valid JSON: {e}")))?;
    Ok(value)
}

/// Any JSON value whose objects name each key once (reading it fails
/// otherwise, naming the key).
struct NoDuplicateKeys;

impl<'de> serde::Deserialize<'de> for NoDuplicateKeys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NoDuplicateKeysVisitor)
    }
}

struct NoDuplicateKeysVisitor;

impl<'de> serde::de::Visitor<'de> for NoDuplicateKeysVisitor {
    type Value = NoDuplicateKeys;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<NoDuplicateKeys, E> {
        Ok(NoDuplicateKeys)
    }
    fn visit_i64<E>(self, _: i64) -> Result<NoDuplicateKeys, E> {
        Ok(NoDuplicateKeys)
    }
    fn visit_u64<E>(self, _: u64) -> Result<NoDuplicateKeys, E> {
        Ok(NoDuplicateKeys)
    }
    fn visit_f64<E>(self, _: f64) -> Result<NoDuplicateKeys, E> {
        Ok(NoDuplicateKeys)
    }
    fn visit_str<E>(self, _: &str) -> Result<NoDuplicateKeys, E> {
        Ok(NoDuplicateKeys)
    }
    fn visit_unit<E>(self) -> Result<NoDuplicateKeys, E> {
        Ok(NoDuplicateKeys)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<NoDuplicateKeys>()?.is_some() {}
        Ok(NoDuplicateKeys)
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut seen = std::collections::BTreeSet::new();
        while let Some(key) = map.next_key::<String>()? {
            map.next_value::<NoDuplicateKeys>()?;
            if !seen.insert(key.clone()) {
                return Err(serde::de::Error::custom(format_args!(
                    "duplicate key {key:?}"
                )));
            }
        }
        Ok(NoDuplicateKeys)
    }
}

/// The job id of a `/v1/jobs/{id}...` path. A malformed id names no job,
/// so it is a 404 like an unknown one: an id that is not a UUID, and one
/// whose percent-encoding is not UTF-8 (`%ff`), which axum's own `Path`
/// rejection answered 400 with a plain-text body (swarm kind `garbage`).
pub struct JobId(pub uuid::Uuid);

impl<S: Send + Sync> FromRequestParts<S> for JobId {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let axum::extract::Path(id) =
            axum::extract::Path::<String>::from_request_parts(parts, state)
                .await
                .map_err(|_| ApiError::JobNotFound)?;
        let id = uuid::Uuid::parse_str(&id).map_err(|_| ApiError::JobNotFound)?;
        Ok(JobId(id))
    }
}

/// Query parameters as a map; a malformed query string is a 400.
pub struct QueryMap(pub BTreeMap<String, String>);

impl<S: Send + Sync> FromRequestParts<S> for QueryMap {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let query = parts.uri.query().unwrap_or("");
        // serde_urlencoded decodes lossily: `user_id=%ff` would name the
        // user U+FFFD, as would `%fe`.
        if !percent_decodes_to_utf8(query) {
            return Err(ApiError::BadRequest(
                "malformed query string: not UTF-8 once percent-decoded".into(),
            ));
        }
        serde_urlencoded::from_str(query)
            .map(QueryMap)
            .map_err(|e| ApiError::BadRequest(format!("malformed query string: {e}")))
    }
}

/// Whether `query`, percent-decoded as `application/x-www-form-urlencoded`
/// is (a `%` without two hex digits after it stands for itself), is UTF-8.
fn percent_decodes_to_utf8(query: &str) -> bool {
    let bytes = query.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        let escaped = match bytes.get(i + 1..i + 3) {
            Some(&[hi, lo]) if bytes[i] == b'%' => hex(hi).zip(hex(lo)),
            _ => None,
        };
        match escaped {
            Some((hi, lo)) => {
                decoded.push((hi * 16 + lo) as u8);
                i += 3;
            }
            None => {
                decoded.push(bytes[i]);
                i += 1;
            }
        }
    }
    std::str::from_utf8(&decoded).is_ok()
}

/// The caller's address for rate limiting: the peer's IP, or, when the peer
/// is a configured trusted proxy, the client its `X-Forwarded-For` names.
/// IPv6 addresses are grouped by /64 (one host usually holds a whole /64);
/// `local` when served without a peer address (in-process tests and the
/// simulation).
pub struct ClientAddr(pub String);

impl FromRequestParts<Coordinator> for ClientAddr {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        c: &Coordinator,
    ) -> Result<Self, Self::Rejection> {
        let Some(ConnectInfo(peer)) = parts.extensions.get::<ConnectInfo<SocketAddr>>() else {
            return Ok(ClientAddr("local".to_owned()));
        };
        let ip = client_ip(peer.ip(), &parts.headers, &c.config().trusted_proxies);
        Ok(ClientAddr(rate_limit_key(ip)))
    }
}

/// Most `X-Forwarded-For` hops looked at, from the right.
const FORWARDED_HOPS_MAX: usize = 16;

/// The client behind `peer`: `peer` itself unless it is a trusted proxy;
/// then the rightmost `X-Forwarded-For` entry that is not a trusted proxy
/// (entries further left were written by the client and prove nothing). A
/// malformed entry stops the walk at the last address known good.
pub fn client_ip(peer: IpAddr, headers: &HeaderMap, trusted_proxies: &[IpAddr]) -> IpAddr {
    let trusted = |ip: &IpAddr| trusted_proxies.contains(&canonical_ip(*ip));
    if !trusted(&peer) {
        return peer;
    }
    let hops: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .collect();
    let mut client = peer;
    for hop in hops.iter().rev().take(FORWARDED_HOPS_MAX) {
        let Ok(ip) = hop.trim().parse::<IpAddr>() else {
            break;
        };
        client = ip;
        if !trusted(&ip) {
            break;
        }
    }
    client
}

/// IPv4-mapped IPv6 addresses as IPv4, so one host has one key.
fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    }
}

/// The rate-limit key of an address: IPv4 as is, IPv6 by its /64.
pub fn rate_limit_key(ip: IpAddr) -> String {
    match canonical_ip(ip) {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => {
            let prefix = u128::from(v6) & !((1u128 << 64) - 1);
            format!("{}/64", std::net::Ipv6Addr::from(prefix))
        }
    }
}
