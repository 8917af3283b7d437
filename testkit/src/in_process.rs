//! Calls `axum::Router`s (or any tower service wrapped in one) directly, with
//! no sockets, so a simulation can drive the real coordinator and provider
//! stubs under a paused tokio clock.

use axum::body::Body;
use futures_util::future::BoxFuture;
use router::{HttpRequest, HttpResponse, HttpTransport, StreamingResponse, TransportError};
use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, RwLock};
use tower::ServiceExt;

/// Maps origins (`scheme://host:port`) to in-process services.
///
/// Services can be added and removed while requests are in flight, which is
/// how a simulation takes a peer "down": a request to an origin with no
/// service fails with [`TransportError::Connect`].
#[derive(Clone, Default)]
pub struct InProcessTransport {
    services: Arc<RwLock<HashMap<String, axum::Router>>>,
}

impl std::fmt::Debug for InProcessTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let origins: Vec<String> = self.lock_read().keys().cloned().collect();
        f.debug_struct("InProcessTransport")
            .field("origins", &origins)
            .finish()
    }
}

impl InProcessTransport {
    pub fn new() -> Self {
        Self::default()
    }

    /// Builder form of [`InProcessTransport::insert`].
    pub fn with(self, base_url: &str, router: axum::Router) -> Self {
        self.insert(base_url, router);
        self
    }

    /// Serves `base_url`'s origin with `router`; any path of the base URL is
    /// ignored because routing is by origin. Panics on a URL without scheme
    /// and host, which is a bug in the caller's setup.
    pub fn insert(&self, base_url: &str, router: axum::Router) {
        let origin = origin_of(base_url)
            .unwrap_or_else(|e| panic!("InProcessTransport::insert({base_url:?}): {e}"));
        self.services
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(origin, router);
    }

    /// Serves `base_url`'s origin with any tower service.
    pub fn insert_service<S>(&self, base_url: &str, service: S)
    where
        S: tower::Service<
                axum::extract::Request,
                Response = axum::response::Response,
                Error = Infallible,
            > + Clone
            + Send
            + Sync
            + 'static,
        S::Future: Send + 'static,
    {
        self.insert(base_url, axum::Router::new().fallback_service(service));
    }

    /// Takes an origin down; returns whether it was served.
    pub fn remove(&self, base_url: &str) -> bool {
        match origin_of(base_url) {
            Ok(origin) => self
                .services
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&origin)
                .is_some(),
            Err(_) => false,
        }
    }

    fn lock_read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, axum::Router>> {
        self.services.read().unwrap_or_else(|p| p.into_inner())
    }
}

impl InProcessTransport {
    /// The service's answer to `request`, its body not read yet.
    async fn call(&self, request: HttpRequest) -> Result<axum::response::Response, TransportError> {
        let origin = origin_of(&request.url)?;
        // Clone the router out so no lock is held across the await.
        let router = self
            .lock_read()
            .get(&origin)
            .cloned()
            .ok_or_else(|| TransportError::Connect(format!("nothing serves {origin}")))?;
        let mut builder = http::Request::builder()
            .method(request.method)
            .uri(&request.url);
        for (name, value) in &request.headers {
            builder = builder.header(name, value);
        }
        let http_request = builder
            .body(Body::from(request.body))
            .map_err(|e| TransportError::InvalidRequest(e.to_string()))?;
        match router.oneshot(http_request).await {
            Ok(response) => Ok(response),
            Err(never) => match never {},
        }
    }
}

impl HttpTransport for InProcessTransport {
    fn send(&self, request: HttpRequest) -> BoxFuture<'_, Result<HttpResponse, TransportError>> {
        Box::pin(async move {
            let (parts, body) = self.call(request).await?.into_parts();
            let body = axum::body::to_bytes(body, usize::MAX)
                .await
                .map_err(|e| TransportError::Other(format!("reading body: {e}")))?
                .to_vec();
            Ok(HttpResponse::from_http(parts.status, &parts.headers, body))
        })
    }

    /// The body chunk by chunk as the service makes it (server-sent events).
    fn send_streaming(
        &self,
        request: HttpRequest,
    ) -> BoxFuture<'_, Result<StreamingResponse, TransportError>> {
        Box::pin(async move {
            let (parts, body) = self.call(request).await?.into_parts();
            let head = HttpResponse::from_http(parts.status, &parts.headers, Vec::new());
            let chunks = futures_util::StreamExt::map(body.into_data_stream(), |chunk| {
                chunk
                    .map(|bytes| bytes.to_vec())
                    .map_err(|e| TransportError::Other(format!("reading body: {e}")))
            });
            Ok(StreamingResponse {
                status: head.status,
                headers: head.headers,
                body: Box::pin(chunks),
            })
        })
    }
}

/// `scheme://host:port` in lowercase with the default port filled in, so
/// `http://A.sim` and `http://a.sim:80/v1` name the same service.
fn origin_of(url: &str) -> Result<String, TransportError> {
    let uri: http::Uri = url
        .parse()
        .map_err(|e| TransportError::InvalidRequest(format!("{url:?}: {e}")))?;
    let scheme = uri
        .scheme_str()
        .ok_or_else(|| TransportError::InvalidRequest(format!("{url:?} has no scheme")))?
        .to_ascii_lowercase();
    let host = uri
        .host()
        .ok_or_else(|| TransportError::InvalidRequest(format!("{url:?} has no host")))?
        .to_ascii_lowercase();
    let port = uri.port_u16().unwrap_or(match scheme.as_str() {
        "https" => 443,
        _ => 80,
    });
    Ok(format!("{scheme}://{host}:{port}"))
}

#[cfg(test)]
mod tests {
    use super::origin_of;

    #[test]
    fn origins_normalise_case_path_and_default_port() {
        assert_eq!(origin_of("http://A.sim/v1").unwrap(), "http://a.sim:80");
        assert_eq!(
            origin_of("https://api.openai.com").unwrap(),
            "https://api.openai.com:443"
        );
        assert_eq!(
            origin_of("http://127.0.0.1:8080/v1/quote?x=1").unwrap(),
            "http://127.0.0.1:8080"
        );
        assert!(origin_of("/v1/quote").is_err());
    }
}
