//! Real HTTP over sockets (rustls for https).

use super::{HttpRequest, HttpResponse, HttpTransport, StreamingResponse, TransportError};
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

    /// The request timeout bounds the wait for the head and then each
    /// wait for a chunk, not the whole body: a stream may run longer than
    /// any one request, but not go quiet for longer.
    fn send_streaming(
        &self,
        request: HttpRequest,
    ) -> BoxFuture<'_, Result<StreamingResponse, TransportError>> {
        Box::pin(async move {
            let mut builder = self
                .client
                .request(request.method, &request.url)
                .body(request.body);
            for (name, value) in &request.headers {
                builder = builder.header(name, value);
            }
            let quiet = self.request_timeout;
            let response = tokio::time::timeout(quiet, builder.send())
                .await
                .map_err(|_| TransportError::Timeout)?
                .map_err(classify)?;
            let head = HttpResponse::from_http(response.status(), response.headers(), Vec::new());
            let body = futures_util::stream::unfold(Some(response), move |response| async move {
                let mut response = response?;
                match tokio::time::timeout(quiet, response.chunk()).await {
                    Err(_) => Some((Err(TransportError::Timeout), None)),
                    Ok(Err(e)) => Some((Err(classify(e)), None)),
                    Ok(Ok(None)) => None,
                    Ok(Ok(Some(chunk))) => Some((Ok(chunk.to_vec()), Some(response))),
                }
            });
            Ok(StreamingResponse {
                status: head.status,
                headers: head.headers,
                body: Box::pin(body),
            })
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
