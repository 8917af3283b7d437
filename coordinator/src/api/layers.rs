//! The layers every request goes through: request ids (kept when well
//! formed, made otherwise), the request's log span, and the request count
//! by route and status.

use crate::shell::Coordinator;
use axum::extract::Request;
use axum::http::HeaderValue;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tower_http::request_id::{MakeRequestId, RequestId};

pub(super) const X_REQUEST_ID: &str = "x-request-id";

/// Longest caller-sent `x-request-id` kept.
pub(super) const REQUEST_ID_BYTES_MAX: usize = 64;

/// Makes request ids: the coordinator's start time and a counter, so ids
/// are unique across restarts of one deployment and deterministic in the
/// simulation (no random source).
#[derive(Clone)]
pub(super) struct RequestIds {
    /// The start time in hex and a dash, formatted once.
    prefix: Arc<str>,
    next: Arc<AtomicU64>,
}

impl RequestIds {
    pub(super) fn new(started_ms: i64) -> Self {
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
pub(super) fn drop_malformed_request_id(mut req: Request) -> Request {
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
pub(super) fn request_span(req: &axum::http::Request<axum::body::Body>) -> tracing::Span {
    let request_id = req
        .headers()
        .get(X_REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    tracing::info_span!(
        "http",
        request_id,
        method = %req.method(),
        path = %shown_path(req.uri().path())
    )
}

/// A request path as logs show it: a job id in it (a bearer capability
/// for the output) cut to its first 8 characters, as `shell::job_ref`
/// does (issue 29, finding 9).
fn shown_path(path: &str) -> std::borrow::Cow<'_, str> {
    match path.strip_prefix("/v1/jobs/") {
        Some(rest) if !rest.starts_with("commit/") && rest.len() > 8 => {
            let cut: String = rest.chars().take(8).collect();
            format!("/v1/jobs/{cut}…").into()
        }
        _ => path.into(),
    }
}

/// Counts each request by method, route template (never the raw path: ids
/// would make a series per job) and status. A plain tower layer: axum's
/// `middleware::from_fn` clones the inner service and boxes per request,
/// about 4,300 instructions (benches/results/metrics-cost-2026-11-24.md).
#[derive(Clone)]
pub(super) struct CountRequests(pub(super) Coordinator);

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
pub(super) struct Counted<S> {
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
