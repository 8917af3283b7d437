//! Bounded retry of provider calls on 429 and 5xx.

use super::provider_message;
use crate::error::AdapterError;
use crate::route::HostedProvider;
use crate::transport::{HttpRequest, HttpResponse, HttpTransport, StreamingResponse};
use std::time::Duration;

/// How often and how long to retry a provider answering 429 or 5xx.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt; 2 means at most 3 requests.
    pub max_retries: u32,
    /// Wait before retry n (1-based) when the provider sends no
    /// `retry-after`: `backoff_ms * 2^(n-1)`.
    pub backoff_ms: u64,
    /// Cap on any single wait, including one asked for by `retry-after`, so
    /// a provider cannot park the fallback chain for minutes.
    pub max_wait_ms: u64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 2,
            backoff_ms: 1_000,
            max_wait_ms: 20_000,
        }
    }
}

impl RetryPolicy {
    /// No retries at all.
    pub fn none() -> Self {
        Self {
            max_retries: 0,
            ..Self::default()
        }
    }

    /// The wait before retry `retry` (1-based) after `response`.
    pub fn wait_ms(&self, retry: u32, response: &HttpResponse) -> u64 {
        let asked = response
            .header("retry-after-ms")
            .and_then(|v| v.trim().parse::<f64>().ok())
            .or_else(|| {
                // Only the delta-seconds form: an HTTP-date would need the
                // wall clock, which the router never reads.
                response
                    .header("retry-after")
                    .and_then(|v| v.trim().parse::<f64>().ok())
                    .map(|seconds| seconds * 1000.0)
            })
            .filter(|ms| ms.is_finite() && *ms >= 0.0)
            .map(|ms| ms.ceil() as u64);
        let backoff = self
            .backoff_ms
            .saturating_mul(1u64 << (retry.saturating_sub(1)).min(20));
        asked.unwrap_or(backoff).min(self.max_wait_ms)
    }
}

fn is_retryable(status: u16) -> bool {
    status == 429 || (500..600).contains(&status)
}

/// Sends `request` until it succeeds, fails for good or retries run out.
pub(crate) async fn send_with_retry(
    transport: &dyn HttpTransport,
    provider: HostedProvider,
    policy: &RetryPolicy,
    request: HttpRequest,
) -> Result<HttpResponse, AdapterError> {
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        let response = transport
            .send(request.clone())
            .await
            .map_err(|source| AdapterError::ProviderTransport { provider, source })?;
        if response.is_success() {
            return Ok(response);
        }
        retry_or_fail(provider, policy, attempts, &response).await?;
    }
}

/// [`send_with_retry`] for a streamed answer: retried on its status, before
/// any of its body is read; an error's body is read whole (at most
/// `error_body_max` bytes).
pub(crate) async fn send_streaming_with_retry(
    transport: &dyn HttpTransport,
    provider: HostedProvider,
    policy: &RetryPolicy,
    request: HttpRequest,
    error_body_max: usize,
) -> Result<StreamingResponse, AdapterError> {
    let failed = |source| AdapterError::ProviderTransport { provider, source };
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        let response = transport
            .send_streaming(request.clone())
            .await
            .map_err(failed)?;
        if (200..300).contains(&response.status) {
            return Ok(response);
        }
        let response = response.collect(error_body_max).await.map_err(failed)?;
        retry_or_fail(provider, policy, attempts, &response).await?;
    }
}

/// After a failed answer: waits and returns to retry, or the error.
async fn retry_or_fail(
    provider: HostedProvider,
    policy: &RetryPolicy,
    attempts: u32,
    response: &HttpResponse,
) -> Result<(), AdapterError> {
    if is_retryable(response.status) && attempts <= policy.max_retries {
        let wait_ms = policy.wait_ms(attempts, response);
        tracing::warn!(
            %provider,
            status = response.status,
            attempt = attempts,
            wait_ms,
            "hosted provider busy or failing; retrying"
        );
        tokio::time::sleep(Duration::from_millis(wait_ms)).await;
        return Ok(());
    }
    Err(AdapterError::ProviderStatus {
        provider,
        status: response.status,
        attempts,
        message: provider_message(response),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(headers: &[(&str, &str)]) -> HttpResponse {
        HttpResponse {
            status: 429,
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            body: Vec::new(),
        }
    }

    #[test]
    fn retry_after_seconds_are_honoured_and_capped() {
        let p = RetryPolicy::default();
        assert_eq!(p.wait_ms(1, &answer(&[("Retry-After", "3")])), 3_000);
        assert_eq!(p.wait_ms(1, &answer(&[("retry-after", "0.5")])), 500);
        assert_eq!(p.wait_ms(1, &answer(&[("retry-after-ms", "250")])), 250);
        assert_eq!(p.wait_ms(1, &answer(&[("retry-after", "3600")])), 20_000);
    }

    #[test]
    fn backoff_without_retry_after() {
        let p = RetryPolicy::default();
        assert_eq!(p.wait_ms(1, &answer(&[])), 1_000);
        assert_eq!(p.wait_ms(2, &answer(&[])), 2_000);
        assert_eq!(
            p.wait_ms(
                2,
                &answer(&[("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT")])
            ),
            2_000
        );
    }
}
