//! The one seam all HTTP of the router goes through.
//!
//! Request and response are plain owned structs so that a transport can be a
//! socket client ([`ReqwestTransport`]), an in-process call into an
//! `axum::Router` (`testkit::InProcessTransport`, for tests and the
//! simulation) or a test double, and so that the trait stays object-safe
//! (`Arc<dyn HttpTransport>`).
//!
//! A streamed answer ([`HttpTransport::send_streaming`], server-sent events)
//! hands its body out in chunks as they arrive; a transport that cannot
//! stream answers it with the whole body as one chunk.

mod reqwest_client;

pub use reqwest_client::ReqwestTransport;

use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
pub use http::Method;

/// An HTTP request with its whole body in memory. Its `Debug` hides the
/// values of credential headers, so requests can be logged.
#[derive(Clone, PartialEq, Eq)]
pub struct HttpRequest {
    pub method: Method,
    /// Absolute URL: `scheme://host[:port]/path?query`.
    pub url: String,
    /// Header names as written; compared case-insensitively by readers.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// An HTTP response with its whole body in memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// Why no HTTP answer came back at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    #[error("request timed out")]
    Timeout,
    #[error("could not connect: {0}")]
    Connect(String),
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    #[error("transport failure: {0}")]
    Other(String),
}

/// The chunks of a body as they arrive; an error ends it (a cut connection).
pub type BodyStream = BoxStream<'static, Result<Vec<u8>, TransportError>>;

/// An HTTP response whose body is still arriving.
pub struct StreamingResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: BodyStream,
}

impl std::fmt::Debug for StreamingResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamingResponse")
            .field("status", &self.status)
            .field("headers", &self.headers)
            .finish_non_exhaustive()
    }
}

impl StreamingResponse {
    /// A whole response as a stream of one chunk.
    pub fn from_whole(response: HttpResponse) -> Self {
        let body = futures_util::stream::iter([Ok(response.body)]);
        Self {
            status: response.status,
            headers: response.headers,
            body: Box::pin(body),
        }
    }

    /// The first header called `name`, ignoring case.
    pub fn header(&self, name: &str) -> Option<&str> {
        find_header(&self.headers, name)
    }

    /// Reads the rest of the body, at most `max_bytes` of it (an error
    /// past that), into a whole response: for answers that are not streams
    /// (errors, a server that ignored `stream: true`).
    pub async fn collect(self, max_bytes: usize) -> Result<HttpResponse, TransportError> {
        use futures_util::StreamExt;
        let mut body = Vec::new();
        let mut chunks = self.body;
        while let Some(chunk) = chunks.next().await {
            body.extend_from_slice(&chunk?);
            if body.len() > max_bytes {
                return Err(TransportError::Other(format!(
                    "answer body longer than {max_bytes} bytes"
                )));
            }
        }
        Ok(HttpResponse {
            status: self.status,
            headers: self.headers,
            body,
        })
    }
}

/// Sends one request and returns the whole response.
pub trait HttpTransport: Send + Sync {
    fn send(&self, request: HttpRequest) -> BoxFuture<'_, Result<HttpResponse, TransportError>>;

    /// Sends one request and returns the response as soon as its head is
    /// in, its body following in chunks. By default the whole body as one
    /// chunk, which is correct but shows nothing before the end.
    fn send_streaming(
        &self,
        request: HttpRequest,
    ) -> BoxFuture<'_, Result<StreamingResponse, TransportError>> {
        Box::pin(async move { self.send(request).await.map(StreamingResponse::from_whole) })
    }
}

impl HttpRequest {
    pub fn get(url: impl Into<String>) -> Self {
        Self {
            method: Method::GET,
            url: url.into(),
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// A POST with a JSON body and `content-type: application/json`.
    pub fn post_json(url: impl Into<String>, body: &serde_json::Value) -> Self {
        Self {
            method: Method::POST,
            url: url.into(),
            headers: vec![("content-type".into(), "application/json".into())],
            body: serde_json::to_vec(body).expect("a JSON value always serialises"),
        }
    }

    /// A POST without a body (`POST /v1/jobs/{id}/cancel`).
    pub fn post_empty(url: impl Into<String>) -> Self {
        Self {
            method: Method::POST,
            url: url.into(),
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }
}

impl HttpResponse {
    /// From an `http` status and header map (what reqwest and axum hand
    /// out); header values that are not UTF-8 are read lossily.
    pub fn from_http(status: http::StatusCode, headers: &http::HeaderMap, body: Vec<u8>) -> Self {
        let headers = headers
            .iter()
            .map(|(n, v)| {
                (
                    n.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        Self {
            status: status.as_u16(),
            headers,
            body,
        }
    }

    /// The first header called `name`, ignoring case.
    pub fn header(&self, name: &str) -> Option<&str> {
        find_header(&self.headers, name)
    }

    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_slice(&self.body)
    }

    /// The body as text, cut to `max_chars`, for error messages.
    pub fn body_snippet(&self, max_chars: usize) -> String {
        let text = String::from_utf8_lossy(&self.body);
        let mut out: String = text.chars().take(max_chars).collect();
        if text.chars().count() > max_chars {
            out.push('…');
        }
        out
    }
}

/// Headers whose values are secrets: API keys and signed payments.
const SECRET_HEADERS: [&str; 4] = [
    "authorization",
    "x-api-key",
    "x-payment",
    "proxy-authorization",
];

impl std::fmt::Debug for HttpRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let headers: Vec<(&str, &str)> = self
            .headers
            .iter()
            .map(|(name, value)| {
                let secret = SECRET_HEADERS.iter().any(|s| name.eq_ignore_ascii_case(s));
                (
                    name.as_str(),
                    if secret { "<redacted>" } else { value.as_str() },
                )
            })
            .collect();
        f.debug_struct("HttpRequest")
            .field("method", &self.method)
            .field("url", &self.url)
            .field("headers", &headers)
            .field("body_len", &self.body.len())
            .finish()
    }
}

pub(crate) fn find_header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// `base` without trailing slashes, followed by `path`.
pub(crate) fn join_url(base: &str, path: &str) -> String {
    format!("{}{}", base.trim_end_matches('/'), path)
}
