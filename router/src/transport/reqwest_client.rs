//! Real HTTP over sockets (rustls for https).

use super::{HttpRequest, HttpResponse, HttpTransport, TransportError};
use futures_util::future::BoxFuture;
use std::time::Duration;

/// Default per-request timeout: long enough for a slow hosted completion.
pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 120_000;

/// [`HttpTransport`] over `reqwest` with a per-request timeout.
#[derive(Debug, Clone)]
pub struct ReqwestTransport {
    client: reqwest::Client,
    request_timeout: Duration,
}

impl ReqwestTransport {
    pub fn new(request_timeout_ms: u64) -> Self {
        Self::with_client(reqwest::Client::new(), request_timeout_ms)
    }

    pub fn with_client(client: reqwest::Client, request_timeout_ms: u64) -> Self {
        Self {
            client,
            request_timeout: Duration::from_millis(request_timeout_ms),
        }
    }
}

impl Default for ReqwestTransport {
    fn default() -> Self {
        Self::new(DEFAULT_REQUEST_TIMEOUT_MS)
    }
}

impl HttpTransport for ReqwestTransport {
    fn send(&self, request: HttpRequest) -> BoxFuture<'_, Result<HttpResponse, TransportError>> {
        Box::pin(async move {
            let mut builder = self
                .client
                .request(request.method, &request.url)
                .timeout(self.request_timeout)
                .body(request.body);
            for (name, value) in &request.headers {
                builder = builder.header(name, value);
            }
            let response = builder.send().await.map_err(classify)?;
            let mut answer =
                HttpResponse::from_http(response.status(), response.headers(), Vec::new());
            answer.body = response.bytes().await.map_err(classify)?.to_vec();
            Ok(answer)
        })
    }
}

fn classify(e: reqwest::Error) -> TransportError {
    if e.is_timeout() {
        TransportError::Timeout
    } else if e.is_connect() {
        TransportError::Connect(e.to_string())
    } else if e.is_builder() {
        TransportError::InvalidRequest(e.to_string())
    } else {
        TransportError::Other(e.to_string())
    }
}
