//! What both providers' streamed answers share: the request retried on its
//! status, then either server-sent events or, from a server that ignored
//! `stream: true`, one whole answer.

use super::retry::{send_streaming_with_retry, RetryPolicy};
use crate::error::AdapterError;
use crate::route::HostedProvider;
use crate::sse::{SseError, SseEvent, SseReader};
use crate::transport::{HttpRequest, HttpResponse, HttpTransport};

/// A streamed answer as it began.
pub(crate) enum Opened {
    Events(Events),
    /// Not `text/event-stream`: the whole answer, to read as a plain one.
    Whole(HttpResponse),
}

/// A provider's events, with its errors in the provider's terms.
pub(crate) struct Events {
    provider: HostedProvider,
    reader: SseReader,
}

/// Sends `request` (a body with `stream: true`) and opens its answer.
pub(crate) async fn open(
    transport: &dyn HttpTransport,
    provider: HostedProvider,
    retry: &RetryPolicy,
    request: HttpRequest,
    bytes_max: usize,
) -> Result<Opened, AdapterError> {
    let response =
        send_streaming_with_retry(transport, provider, retry, request, bytes_max).await?;
    let is_events = response
        .header("content-type")
        .is_some_and(|t| t.trim_start().starts_with("text/event-stream"));
    if !is_events {
        let whole = response
            .collect(bytes_max)
            .await
            .map_err(|source| AdapterError::ProviderTransport { provider, source })?;
        return Ok(Opened::Whole(whole));
    }
    let reader = SseReader::new(response.body, bytes_max);
    Ok(Opened::Events(Events { provider, reader }))
}

impl Events {
    /// The next event; a stream that ends here, before the provider's end
    /// marker, is cut.
    pub(crate) async fn next(&mut self) -> Result<SseEvent, AdapterError> {
        let provider = self.provider;
        match self.reader.next().await {
            Ok(Some(event)) => Ok(event),
            Ok(None) => Err(AdapterError::ProviderStreamCut {
                provider,
                message: "the stream ended before its end marker".into(),
            }),
            Err(SseError::Transport(source)) => Err(AdapterError::ProviderStreamCut {
                provider,
                message: source.to_string(),
            }),
            Err(e) => Err(AdapterError::ProviderMalformed {
                provider,
                message: e.to_string(),
            }),
        }
    }

    /// An event's data as JSON.
    pub(crate) fn json(&self, event: &SseEvent) -> Result<serde_json::Value, AdapterError> {
        serde_json::from_str(&event.data).map_err(|e| AdapterError::ProviderMalformed {
            provider: self.provider,
            message: format!("a stream event is not JSON: {e}"),
        })
    }
}
