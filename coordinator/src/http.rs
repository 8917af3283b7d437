//! The HTTP API of spec section 4: routes, extractors and handlers. Handlers
//! only translate between HTTP and core events; decisions live in the core.

use crate::coordinator::{Coordinator, Watch};
use crate::core::{CommitError, PaidWith, Payment};
use crate::error::ApiError;
use crate::node::BudgetRefused;
use crate::session;
use crate::trust::{ClaimError, CreateError, KeyNotOnCurve, LimitScope};
use crate::validate;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, FromRequest, FromRequestParts, Path, RawQuery, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use protocol::api::{
    Claimed, CommitResponse, Health, JobSubmission, JobType, PairingCode, Policy, Quote, Tier,
    TrustList, TrustedProvider,
};
use protocol::signing;
use protocol::time::format_ms;
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tower_http::request_id::{
    MakeRequestId, PropagateRequestIdLayer, RequestId, SetRequestIdLayer,
};
use tower_http::trace::TraceLayer;

const X_REQUEST_ID: &str = "x-request-id";

/// The whole API as an axum router; tests drive it with `oneshot`, the binary serves it.
pub fn app(coordinator: Coordinator) -> Router {
    router(coordinator, true)
}

/// `GET /metrics` alone, for a listener of its own (`--metrics-listen`).
pub fn metrics_only(coordinator: Coordinator) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .fallback(no_route)
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .layer(CountRequests(coordinator.clone()))
        .with_state(coordinator)
}

/// The API without `GET /metrics` (served apart, see [`metrics_only`]).
pub fn api(coordinator: Coordinator) -> Router {
    router(coordinator, false)
}

fn router(coordinator: Coordinator, with_metrics: bool) -> Router {
    let body_limit = coordinator.config().limits.body_bytes_max;
    let routes = Router::new()
        .route("/v1/health", get(health))
        .route("/v1/quote", get(quote))
        .route("/v1/jobs/commit/fast", post(commit_fast))
        .route("/v1/jobs/commit/cheap", post(commit_cheap))
        .route("/v1/jobs/{id}", get(poll))
        .route("/v1/trust/create", post(trust_create))
        .route("/v1/trust/claim", post(trust_claim))
        .route("/v1/trust/list", get(trust_list))
        .route("/v1/workers/ws", get(session::upgrade))
        .route("/v1/openapi.json", get(openapi_json));
    let routes = if with_metrics {
        routes.route("/metrics", get(metrics))
    } else {
        routes
    };
    // One `layer` call for the whole stack: each `Router::layer` boxes the
    // routes once more, and a request clones every box at every level (seven
    // separate calls cost 49 more allocations per request than one).
    let layers = tower::ServiceBuilder::new()
        // Outermost first: a caller's malformed id is dropped, a missing one
        // made, copied to the answer, and carried by every log line the
        // request's span covers.
        .layer(tower::util::MapRequestLayer::new(drop_malformed_request_id))
        .layer(SetRequestIdLayer::x_request_id(RequestIds::new(
            coordinator.now_ms(),
        )))
        .layer(PropagateRequestIdLayer::x_request_id())
        .layer(TraceLayer::new_for_http().make_span_with(request_span))
        // Router layers run after routing, so the matched route is known;
        // outside the panic catcher, so a panic counts as its 500.
        .layer(CountRequests(coordinator.clone()))
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(
            |_: Box<dyn std::any::Any + Send>| ApiError::Internal.into_response(),
        ))
        .layer(axum::extract::DefaultBodyLimit::max(body_limit));
    routes
        .fallback(no_route)
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .layer(layers)
        .with_state(coordinator)
}

/// Longest caller-sent `x-request-id` kept.
const REQUEST_ID_BYTES_MAX: usize = 64;

/// Makes request ids: the coordinator's start time and a counter, so ids
/// are unique across restarts of one deployment and deterministic in the
/// simulation (no random source).
#[derive(Clone)]
struct RequestIds {
    /// The start time in hex and a dash, formatted once.
    prefix: Arc<str>,
    next: Arc<AtomicU64>,
}

impl RequestIds {
    fn new(started_ms: i64) -> Self {
        Self {
            prefix: format!("{started_ms:x}-").into(),
            next: Arc::new(AtomicU64::new(1)),
        }
    }
}

impl MakeRequestId for RequestIds {
    fn make_request_id<B>(&mut self, _: &axum::http::Request<B>) -> Option<RequestId> {
        use std::fmt::Write;
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let mut id = String::with_capacity(self.prefix.len() + 20);
        id.push_str(&self.prefix);
        let _ = write!(id, "{n}");
        // From the `String`: its buffer becomes the header's, no copy.
        HeaderValue::try_from(id).ok().map(RequestId::new)
    }
}

/// A caller's `x-request-id` is kept only when short and made of
/// `[A-Za-z0-9._:-]`, so it cannot forge log lines or bloat them.
fn drop_malformed_request_id(mut req: Request) -> Request {
    let ok = req.headers().get(X_REQUEST_ID).is_none_or(|v| {
        v.len() <= REQUEST_ID_BYTES_MAX
            && v.as_bytes()
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || b".:_-".contains(b))
    });
    if !ok {
        req.headers_mut().remove(X_REQUEST_ID);
    }
    req
}

/// The span of one request: its id, method and path. Never headers, the
/// query or the body: they may carry payments, keys or prompts.
fn request_span(req: &axum::http::Request<axum::body::Body>) -> tracing::Span {
    let request_id = req
        .headers()
        .get(X_REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    tracing::info_span!(
        "http",
        request_id,
        method = %req.method(),
        path = req.uri().path()
    )
}

/// Counts each request by method, route template (never the raw path: ids
/// would make a series per job) and status. A plain tower layer: axum's
/// `middleware::from_fn` clones the inner service and boxes per request,
/// about 4,300 instructions (benches/results/metrics-cost-2026-11-24.md).
#[derive(Clone)]
struct CountRequests(Coordinator);

impl<S> tower::Layer<S> for CountRequests {
    type Service = Counted<S>;

    fn layer(&self, inner: S) -> Counted<S> {
        Counted {
            inner,
            coordinator: self.0.clone(),
        }
    }
}

#[derive(Clone)]
struct Counted<S> {
    inner: S,
    coordinator: Coordinator,
}

impl<S, B> tower::Service<Request> for Counted<S>
where
    S: tower::Service<Request, Response = axum::http::Response<B>>,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = futures_util::future::BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        // Router layers run after routing, so the matched route is known.
        let route = req
            .extensions()
            .get::<axum::extract::MatchedPath>()
            .cloned();
        let method = req.method().clone();
        let answer = self.inner.call(req);
        let c = self.coordinator.clone();
        Box::pin(async move {
            let response = answer.await?;
            let route = route.as_ref().map_or("unmatched", |p| p.as_str());
            c.metrics()
                .http_request(method.as_str(), route, response.status().as_u16());
            Ok(response)
        })
    }
}

async fn no_route(method: Method, uri: Uri) -> ApiError {
    ApiError::NoRoute {
        method: method.to_string(),
        path: uri.path().to_owned(),
    }
}

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

/// A commit request: its headers (payments read them; moved out of the
/// request, not cloned) and its body as a submission, or why it is not
/// one. Checked and parsed as [`JsonBody`] then `validate::submission`
/// would, through `validate::plain_submission` when the body is plain.
pub struct CommitRequest {
    headers: HeaderMap,
    submission: Result<JobSubmission, String>,
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
        let bytes = read_body(Request::from_parts(parts, body), state).await?;
        let limits = &state.config().limits;
        let submission = match validate::plain_submission(&bytes, limits) {
            Some(judged) => judged,
            None => validate::submission(&parse_json(&bytes)?, limits),
        };
        Ok(Self {
            headers,
            submission,
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

/// The whole body, within the configured size limit.
async fn read_body(req: Request, state: &Coordinator) -> Result<Bytes, ApiError> {
    let limit_bytes = state.config().limits.body_bytes_max;
    Bytes::from_request(req, state).await.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::PayloadTooLarge { limit_bytes }
        } else {
            ApiError::BadRequest(format!("could not read the request body: {rejection}"))
        }
    })
}

fn parse_json(bytes: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(bytes)
        .map_err(|e| ApiError::BadRequest(format!("request body is not valid JSON: {e}")))
}

/// Query parameters as a map; a malformed query string is a 400.
pub struct QueryMap(pub BTreeMap<String, String>);

impl<S: Send + Sync> FromRequestParts<S> for QueryMap {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let query = parts.uri.query().unwrap_or("");
        serde_urlencoded::from_str(query)
            .map(QueryMap)
            .map_err(|e| ApiError::BadRequest(format!("malformed query string: {e}")))
    }
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

#[utoipa::path(get, path = "/v1/health", tag = "service",
    responses((status = 200, description = "The coordinator runs", body = Health)))]
async fn health(State(c): State<Coordinator>) -> Json<Health> {
    let workers_online = crate::node::workers_online(&c).await;
    Json(Health {
        status: "ok".into(),
        workers_online,
        network: c.config().network.clone(),
        timestamp: format_ms(c.now_ms()),
    })
}

#[utoipa::path(get, path = "/v1/quote", tag = "jobs",
    params(
        ("job_type" = JobType, Query, description = "What the job is"),
        ("policy" = Option<Policy>, Query, description = "Default `AUTO`: FAST for LLM_INFER, CHEAP for TASK"),
    ),
    responses(
        (status = 200, description = "Price and endpoint for the job", body = Quote),
        (status = 400, response = crate::openapi::BadRequest),
    ))]
async fn quote(
    State(c): State<Coordinator>,
    QueryMap(q): QueryMap,
) -> Result<Json<Quote>, ApiError> {
    let job_type = q
        .get("job_type")
        .and_then(|s| JobType::parse(s))
        .ok_or_else(|| ApiError::BadRequest(validate::INVALID_JOB_TYPE.into()))?;
    let policy = match q.get("policy") {
        None => Policy::Auto,
        Some(p) => {
            Policy::parse(p).ok_or_else(|| ApiError::BadRequest(validate::INVALID_POLICY.into()))?
        }
    };
    let tier = policy.resolve(job_type);
    Ok(Json(Quote {
        price: c.config().prices.price(tier, job_type),
        endpoint: tier.commit_path().into(),
        policy_resolved: tier,
        network: c.config().network.clone(),
        expires_at: None,
    }))
}

#[utoipa::path(post, path = "/v1/jobs/commit/fast", tag = "jobs",
    request_body = crate::openapi::SubmissionRequest,
    params(
        ("X-PAYMENT" = Option<String>, Header, description = "x402 v1 payment (base64 JSON); required when payments are on"),
        ("PAYMENT-SIGNATURE" = Option<String>, Header, description = "x402 v2 payment (base64 JSON), instead of X-PAYMENT"),
    ),
    responses(
        (status = 201, description = "Job accepted", body = CommitResponse,
            headers(
                ("PAYMENT-RESPONSE" = String, description = "x402 v2 settlement (base64 JSON); paid commits only"),
                ("X-PAYMENT-RESPONSE" = String, description = "x402 v1 settlement (base64 JSON); paid commits only"),
            )),
        (status = 400, response = crate::openapi::BadRequest),
        (status = 402, response = crate::openapi::PaymentRequired),
        (status = 413, response = crate::openapi::PayloadTooLarge),
        (status = 415, response = crate::openapi::UnsupportedMediaType),
        (status = 422, response = crate::openapi::NoTrustedWorkerAnswer),
        (status = 503, response = crate::openapi::Unavailable),
    ))]
async fn commit_fast(
    State(c): State<Coordinator>,
    request: CommitRequest,
) -> Result<Response, ApiError> {
    commit(c, Tier::Fast, request).await
}

#[utoipa::path(post, path = "/v1/jobs/commit/cheap", tag = "jobs",
    request_body = crate::openapi::SubmissionRequest,
    params(
        ("X-PAYMENT" = Option<String>, Header, description = "x402 v1 payment (base64 JSON); required when payments are on"),
        ("PAYMENT-SIGNATURE" = Option<String>, Header, description = "x402 v2 payment (base64 JSON), instead of X-PAYMENT"),
    ),
    responses(
        (status = 201, description = "Job accepted", body = CommitResponse,
            headers(
                ("PAYMENT-RESPONSE" = String, description = "x402 v2 settlement (base64 JSON); paid commits only"),
                ("X-PAYMENT-RESPONSE" = String, description = "x402 v1 settlement (base64 JSON); paid commits only"),
            )),
        (status = 400, response = crate::openapi::BadRequest),
        (status = 402, response = crate::openapi::PaymentRequired),
        (status = 413, response = crate::openapi::PayloadTooLarge),
        (status = 415, response = crate::openapi::UnsupportedMediaType),
        (status = 422, response = crate::openapi::NoTrustedWorkerAnswer),
        (status = 503, response = crate::openapi::Unavailable),
    ))]
async fn commit_cheap(
    State(c): State<Coordinator>,
    request: CommitRequest,
) -> Result<Response, ApiError> {
    commit(c, Tier::Cheap, request).await
}

/// Validates (400, never charged), then with payments on: authorizes the
/// payment (402), decides admission once (422/503: the refusal is recorded
/// in the same event, the payment's nonce is released, nothing is charged),
/// settles (402 on failure, no job), and only then creates the job with the
/// settlement as its `payment_ref`, spending the nonce in the same write.
/// A retry of a payment that already bought this job gets the same 201.
async fn commit(c: Coordinator, tier: Tier, request: CommitRequest) -> Result<Response, ApiError> {
    let CommitRequest {
        headers,
        submission,
    } = request;
    let submission = submission.map_err(ApiError::BadRequest)?;
    let job_type = submission.job_type;
    // Cluster mode: the user's trusted worker may be on another node.
    let elsewhere = crate::node::trusted_elsewhere(&c, &submission).await;
    let Some(gate) = c.payments() else {
        let committed = c.with(|core, now_ms| match elsewhere {
            true => core.commit_trusted_elsewhere(submission, tier, None, now_ms),
            false => core.commit(submission, tier, None, now_ms),
        });
        count_commit(&c, &committed, tier, job_type);
        return answer_commit(&c, committed, None).await;
    };
    let price = c.config().prices.price(tier, submission.job_type);
    let url = format!("{}{}", public_base_url(&c, &headers), tier.commit_path());
    let offer = gate.offer(
        price,
        &url,
        &format!("{tier} {} compute job", submission.job_type),
    );
    let now_seconds = u64::try_from(c.now_ms() / 1000).unwrap_or(0);
    let auth = match gate.authorize(&offer, &headers, now_seconds) {
        Ok(auth) => {
            c.metrics().payment_verified();
            auth
        }
        Err(refusal) => {
            if refusal.reason() == Some(&x402::Reason::NonceAlreadyUsed) {
                let key = gate.nonce_key(&offer, &headers, now_seconds);
                let mut bought = match key.and_then(|key| c.read(|core| core.paid_job_id(&key))) {
                    Some(id) => read_job(&c, &id)?
                        .and_then(|job| crate::core::bought_with(&job, &submission, tier)),
                    None => None,
                };
                if let (None, Some(key)) = (&bought, key) {
                    // Cluster mode: the job may be held by another node.
                    bought = crate::node::shared_paid_job(&c, key, &submission, tier).await;
                }
                if let Some((job_id, response_header)) = bought {
                    return answer_commit(&c, Ok(job_id), Some(&response_header)).await;
                }
            }
            c.metrics().payment_refused(refusal.reason());
            return Err(ApiError::Payment(Box::new(refusal)));
        }
    };
    // One decision: a refusal is recorded here, under the same lock, and
    // admission is never asked again for this request.
    let admitted = c.with(|core, now_ms| match elsewhere {
        true => core.admit_trusted_elsewhere(&submission),
        false => core.admit(&submission, tier, now_ms),
    });
    if let Err(refused) = admitted {
        gate.cancel(&auth);
        return answer_commit(&c, Err(refused), None).await;
    }
    let paid = gate.settle_unspent(auth).await;
    c.metrics().payment_settled(paid.is_ok());
    let paid = paid.map_err(|refusal| {
        // A 402 like any other: counted by its reason too.
        c.metrics().payment_refused(refusal.reason());
        ApiError::Payment(Box::new(refusal))
    })?;
    let response_header = paid.settlement.payment_response_header();
    let payment = Payment {
        payment_ref: paid.payment_ref().to_owned(),
        paid_with: PaidWith {
            nonce: paid.nonce_key,
            response_header: response_header.clone(),
        },
    };
    let committed = c.with(|core, now_ms| core.commit(submission, tier, Some(payment), now_ms));
    count_commit(&c, &committed, tier, job_type);
    answer_commit(&c, committed, Some(&response_header)).await
}

fn count_commit(
    c: &Coordinator,
    committed: &Result<uuid::Uuid, CommitError>,
    tier: Tier,
    job_type: JobType,
) {
    if committed.is_ok() {
        c.metrics().job_committed(tier, job_type);
    }
}

/// The answer to a commit, once what it reports is durable: 201 with the
/// job id (and the payment's `PAYMENT-RESPONSE` when paid), or the refusal.
async fn answer_commit(
    c: &Coordinator,
    committed: Result<uuid::Uuid, CommitError>,
    payment_response: Option<&str>,
) -> Result<Response, ApiError> {
    // The 201 promises the job exists, so it must survive a crash first.
    c.durable().await.map_err(|_| ApiError::Internal)?;
    match committed {
        Ok(job_id) => {
            let mut response =
                (StatusCode::CREATED, Json(CommitResponse { job_id })).into_response();
            if let Some(value) = payment_response.and_then(|v| HeaderValue::from_str(v).ok()) {
                for name in [x402::wire::PAYMENT_RESPONSE, x402::wire::X_PAYMENT_RESPONSE] {
                    if let Ok(name) = header::HeaderName::from_bytes(name.as_bytes()) {
                        response.headers_mut().insert(name, value.clone());
                    }
                }
            }
            Ok(response)
        }
        Err(CommitError::NoTrustedWorker(job_id)) => Err(ApiError::NoTrustedWorker(job_id)),
        Err(e @ (CommitError::QueueFull | CommitError::StorageFull)) => {
            Err(ApiError::Unavailable(e.to_string()))
        }
    }
}

/// The base URL clients reach us at, for the payment's `resource`: the
/// configured public URL, else `http://` + the Host header.
fn public_base_url(c: &Coordinator, headers: &HeaderMap) -> String {
    if let Some(url) = c.config().public_urls.first() {
        return url.trim_end_matches('/').to_owned();
    }
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| !h.is_empty() && h.len() <= 255)
        .unwrap_or("localhost");
    format!("http://{host}")
}

/// `GET /v1/jobs/{id}`, the spec's poll; with `?wait_ms=N` a long poll: a
/// job that is not terminal is answered when its status changes, the
/// coordinator shuts down, or N ms pass, whichever is first. Polls beyond
/// the held-poll bounds (total, per client) are answered at once.
#[utoipa::path(get, path = "/v1/jobs/{id}", tag = "jobs",
    params(
        ("id" = String, Path, description = "The job id a commit returned (a UUID)"),
        ("wait_ms" = Option<u64>, Query, description = "Long poll: hold the request until the job's \
            status changes, the coordinator shuts down, or this many milliseconds pass (0 to 30000 by \
            default, `--poll-wait-ms-max`). A terminal job is answered at once; polls beyond the \
            held-poll bounds are answered at once, never refused. Without it, the spec's poll."),
    ),
    responses(
        (status = 200, description = "The job", body = protocol::api::JobRecord),
        (status = 400, response = crate::openapi::BadRequest),
        (status = 404, response = crate::openapi::NotFound),
    ))]
async fn poll(
    State(c): State<Coordinator>,
    ClientAddr(client): ClientAddr,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    // A malformed id names no job, so it is a 404 like an unknown one.
    let id = uuid::Uuid::parse_str(&id).map_err(|_| ApiError::JobNotFound)?;
    let wait_ms = wait_ms(query.as_deref(), c.config().limits.poll_wait_ms_max)?;
    // The job is read under the state lock and shared; its record (copies
    // of the output and receipt) is built after the lock is let go.
    let job = match wait_ms {
        None | Some(0) => None,
        Some(wait_ms) => match c.watch_job(id, &client) {
            Watch::Unknown => None,
            Watch::Now(job) => Some(job),
            Watch::Held(held) => {
                held.wait(wait_ms).await;
                None
            }
        },
    };
    // The core's job, else a finished job it no longer holds, from the store.
    let job = match job {
        Some(job) => Some(job),
        None => read_job(&c, &id)?,
    };
    let record = job.map(|job| job.record());
    // In cluster mode a job this node does not hold is read from the
    // shared store, committed, whoever holds it (a held poll waits there).
    let record = match record {
        Some(record) => Some(record),
        None => crate::node::shared_record(&c, id, wait_ms, &client)
            .await
            .map_err(|e| {
                tracing::error!(error = %e, job = %id, "reading a job from the shared store failed");
                ApiError::Internal
            })?,
    };
    // Memory runs ahead of the disk under group commit: show a state (a
    // `completed`, say) only once it would survive a crash.
    c.durable().await.map_err(|_| ApiError::Internal)?;
    record
        .map(|record| Json(record).into_response())
        .ok_or(ApiError::JobNotFound)
}

/// [`Coordinator::job`]: the core's job or the store's; a store that
/// cannot answer is a 500 (logged).
fn read_job(
    c: &Coordinator,
    id: &uuid::Uuid,
) -> Result<Option<std::sync::Arc<crate::core::Job>>, ApiError> {
    c.job(id).map_err(|e| {
        tracing::error!(error = %e, job = %id, "reading a job from the store failed");
        ApiError::Internal
    })
}

/// The `wait_ms` of a job poll: absent, or one whole number of
/// milliseconds from 0 to `max_ms`. Other parameters are ignored, as the
/// spec's poll ignores its query.
fn wait_ms(query: Option<&str>, max_ms: u64) -> Result<Option<u64>, ApiError> {
    let invalid = || {
        ApiError::BadRequest(format!(
            "wait_ms must be a whole number of milliseconds from 0 to {max_ms}"
        ))
    };
    let Some(query) = query else {
        return Ok(None);
    };
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query)
        .map_err(|e| ApiError::BadRequest(format!("malformed query string: {e}")))?;
    let mut values = pairs.iter().filter(|(name, _)| name == "wait_ms");
    let Some((_, value)) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(ApiError::BadRequest("wait_ms given more than once".into()));
    }
    // `u64::from_str` takes a leading `+`; only digits are a number here.
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid());
    }
    match value.parse::<u64>() {
        Ok(ms) if ms <= max_ms => Ok(Some(ms)),
        _ => Err(invalid()),
    }
}

#[utoipa::path(post, path = "/v1/trust/create", tag = "trust",
    request_body = protocol::api::CreatePairing,
    responses(
        (status = 201, description = "A pairing code, valid for one hour", body = PairingCode),
        (status = 400, response = crate::openapi::BadRequest),
        (status = 413, response = crate::openapi::PayloadTooLarge),
        (status = 415, response = crate::openapi::UnsupportedMediaType),
        (status = 429, response = crate::openapi::RateLimited),
        (status = 503, response = crate::openapi::Unavailable),
    ))]
async fn trust_create(
    State(c): State<Coordinator>,
    ClientAddr(client): ClientAddr,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    if let Some(message) = validate::missing_fields(&body, &["user_id"]) {
        return Err(ApiError::BadRequest(message));
    }
    let user_id =
        validate::user_id(&body["user_id"], &c.config().limits).map_err(ApiError::BadRequest)?;
    let budgets = crate::node::take_create_budgets(&c, &user_id, &client)
        .await
        .map_err(|refused| {
            budget_refused(refused, |scope, retry_after_ms| {
                create_refused(CreateError::RateLimited {
                    scope,
                    retry_after_ms,
                })
            })
        })?;
    // Cluster mode: a code another node drew first for another user is
    // not ours to hand out; draw again (each draw counts against the
    // node's create budgets, as a client's retry would).
    for _ in 0..PAIRING_DRAWS_MAX {
        let created = c.with(|core, now_ms| core.create_pairing(&user_id, &client, now_ms));
        let pairing = match created {
            Ok(pairing) => pairing,
            Err(e) => {
                budgets.give_back().await;
                return Err(create_refused(e));
            }
        };
        c.durable().await.map_err(|_| ApiError::Internal)?;
        let ours = crate::node::pairing_is_ours(&c, &pairing)
            .await
            .map_err(|e| shared_store_unavailable(&e))?;
        if ours {
            return Ok((
                StatusCode::CREATED,
                Json(PairingCode {
                    pairing_code: pairing.code,
                    expires_at: format_ms(pairing.expires_at_ms),
                }),
            )
                .into_response());
        }
        tracing::warn!("a drawn pairing code is another user's on another node; drawing again");
    }
    Err(ApiError::Unavailable(
        "no unused pairing code could be drawn; retry".into(),
    ))
}

/// Draws of a pairing code per create in cluster mode, where a code may be
/// another node's already (about one in 16.7 M per live code).
const PAIRING_DRAWS_MAX: usize = 3;

#[utoipa::path(post, path = "/v1/trust/claim", tag = "trust",
    request_body = protocol::api::ClaimPairing,
    responses(
        (status = 200, description = "The worker's key is now trusted by the code's user", body = Claimed),
        (status = 400, response = crate::openapi::BadRequest),
        (status = 413, response = crate::openapi::PayloadTooLarge),
        (status = 415, response = crate::openapi::UnsupportedMediaType),
        (status = 429, response = crate::openapi::RateLimited),
        (status = 503, response = crate::openapi::Unavailable),
    ))]
async fn trust_claim(
    State(c): State<Coordinator>,
    ClientAddr(client): ClientAddr,
    JsonBody(body): JsonBody,
) -> Result<Json<Claimed>, ApiError> {
    if let Some(message) = validate::missing_fields(&body, &["pairing_code", "provider_pubkey"]) {
        return Err(ApiError::BadRequest(message));
    }
    let code = body["pairing_code"]
        .as_str()
        .ok_or_else(|| ApiError::BadRequest(ClaimError::InvalidCode.to_string()))?;
    let key = body["provider_pubkey"]
        .as_str()
        .filter(|k| validate::is_compressed_key_shape(k))
        .ok_or_else(|| ApiError::BadRequest(validate::KEY_SHAPE.into()))?;
    // The shape is right; whether it is a curve point is told only after
    // the code is judged, so the spec's code errors come first.
    let key = signing::parse_public_key(key)
        .map(|k| k.to_hex())
        .map_err(|_| KeyNotOnCurve);
    // Cluster mode: the failure budgets are the cluster's, taken before
    // the code is claimed in the store; a claim that succeeds gives back.
    let budgets = crate::node::take_claim_budgets(&c, &client)
        .await
        .map_err(|refused| {
            budget_refused(refused, |scope, retry_after_ms| {
                claim_refused(ClaimError::RateLimited {
                    scope,
                    retry_after_ms,
                })
            })
        })?;
    // Cluster mode: the code may have been made, or claimed, on another node.
    let stored = crate::node::pairing_for_claim(&c, code, key.as_deref().ok(), &client)
        .await
        .map_err(|e| shared_store_unavailable(&e))?;
    let claimed = c.with(|core, now_ms| {
        if let Some(pairing) = stored {
            core.learn_pairing(pairing, now_ms);
        }
        core.claim_pairing(code, key.as_deref().map_err(|e| *e), &client, now_ms)
    });
    // Only failures count: a claim that succeeded, or that the node's own
    // budgets refused, gives back what it took.
    if matches!(claimed, Ok(_) | Err(ClaimError::RateLimited { .. })) {
        budgets.give_back().await;
    }
    c.durable().await.map_err(|_| ApiError::Internal)?;
    let entry = claimed.map_err(claim_refused)?;
    Ok(Json(Claimed {
        user_id: entry.user_id,
        paired_at: format_ms(entry.paired_at_ms),
    }))
}

fn claim_refused(e: ClaimError) -> ApiError {
    match e {
        ClaimError::RateLimited {
            scope,
            retry_after_ms,
        } => rate_limited(
            match scope {
                LimitScope::Everyone => {
                    "too many failed pairing claims on this coordinator; retry later"
                }
                _ => "too many pairing claims from this address; retry later",
            },
            retry_after_ms,
        ),
        e => ApiError::BadRequest(e.to_string()),
    }
}

/// The cluster's shared budgets refused a request: 429 as `limited` words
/// it for the scope, or 503 if the store could not be asked.
fn budget_refused(
    refused: BudgetRefused,
    limited: impl FnOnce(LimitScope, i64) -> ApiError,
) -> ApiError {
    match refused {
        BudgetRefused::Limited {
            scope,
            retry_after_ms,
        } => limited(scope, retry_after_ms),
        BudgetRefused::Unavailable(e) => shared_store_unavailable(&e),
    }
}

/// A shared-store call a request needed failed (cluster mode): 503, the
/// cause logged.
fn shared_store_unavailable(e: &crate::cluster::ClusterError) -> ApiError {
    tracing::error!(error = %e, "a shared store call failed");
    ApiError::Unavailable("the shared store is unavailable; retry".into())
}

fn create_refused(e: CreateError) -> ApiError {
    match e {
        CreateError::RateLimited {
            scope,
            retry_after_ms,
        } => rate_limited(
            match scope {
                LimitScope::User => "too many pairing codes created for this user; retry later",
                _ => "too many pairing codes created from this address; retry later",
            },
            retry_after_ms,
        ),
        CreateError::UserCodesFull { retry_after_ms } => rate_limited(
            "this user has too many live pairing codes; claim one or retry later",
            retry_after_ms,
        ),
        CreateError::TooManyCodes => ApiError::Unavailable(e.to_string()),
    }
}

fn rate_limited(message: &str, retry_after_ms: i64) -> ApiError {
    ApiError::RateLimited {
        message: message.into(),
        retry_after_s: (retry_after_ms.max(0) as u64).div_ceil(1000),
    }
}

#[utoipa::path(get, path = "/v1/trust/list", tag = "trust",
    params(("user_id" = String, Query, min_length = 1, description = "The user whose trusted workers to list")),
    responses(
        (status = 200, description = "The user's trusted workers", body = TrustList),
        (status = 400, response = crate::openapi::BadRequest),
    ))]
async fn trust_list(
    State(c): State<Coordinator>,
    QueryMap(q): QueryMap,
) -> Result<Json<TrustList>, ApiError> {
    let user_id = q
        .get("user_id")
        .filter(|u| !u.is_empty())
        .ok_or_else(|| ApiError::BadRequest("Missing required query parameter: user_id".into()))?;
    // Cluster mode: pairings claimed on other nodes count at once.
    crate::node::learn_trust_of(&c, user_id).await;
    let providers = c.read(|core| core.trusted_providers(user_id));
    c.durable().await.map_err(|_| ApiError::Internal)?;
    let providers = providers
        .into_iter()
        .map(|e| TrustedProvider {
            provider_pubkey: e.provider_pubkey,
            paired_at: format_ms(e.paired_at_ms),
        })
        .collect();
    Ok(Json(TrustList { providers }))
}

#[utoipa::path(get, path = "/metrics", tag = "service",
    responses((status = 200, description = "Prometheus metrics (text exposition format 0.0.4); see the README's Metrics section",
        content_type = "text/plain; version=0.0.4; charset=utf-8", body = String)))]
async fn metrics(State(c): State<Coordinator>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        c.render_metrics(),
    )
        .into_response()
}

#[utoipa::path(get, path = "/v1/openapi.json", tag = "service",
    responses((status = 200, description = "This contract (OpenAPI 3.1)", content_type = "application/json")))]
pub(crate) async fn openapi_json() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        crate::openapi::document_json(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_are_the_start_time_in_hex_and_a_count() {
        let mut ids = RequestIds::new(0x19a_b6f2_4f3c);
        let req = axum::http::Request::new(());
        for n in 1..=3 {
            let id = ids.make_request_id(&req).unwrap();
            assert_eq!(id.header_value(), &format!("19ab6f24f3c-{n}"));
        }
    }
}
