//! HTTP over the simulated network: a client for the router's transport
//! seam and a way to serve any axum router as a simulated host.

use crate::{host_of, Net, SimListener};
use futures_util::future::BoxFuture;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use router::{HttpRequest, HttpResponse, HttpTransport, TransportError};
use std::net::SocketAddr;

/// The router's `HttpTransport` for one simulated peer: each request opens
/// a link from the peer's own address, speaks HTTP/1.1 over it with hyper's
/// client, and reads the whole answer.
#[derive(Clone)]
pub struct SimHttp {
    net: Net,
    from: SocketAddr,
}

impl SimHttp {
    /// The transport of the peer called `peer` (its address is stable).
    pub fn new(net: &Net, peer: &str) -> Self {
        Self {
            net: net.clone(),
            from: net.peer_addr(peer),
        }
    }

    /// Sends `request` and gives its answer once the head has come; the
    /// body is read as it arrives (server-sent events), chunk by chunk.
    pub async fn open(&self, request: HttpRequest) -> Result<HttpStream, TransportError> {
        let invalid = |e: &dyn std::fmt::Display| TransportError::InvalidRequest(e.to_string());
        let host = host_of(&request.url).map_err(|e| invalid(&e))?;
        let uri: hyper::Uri = request.url.parse().map_err(|e| invalid(&e))?;
        let stream = self
            .net
            .connect(self.from, &host)
            .map_err(|e| TransportError::Connect(e.to_string()))?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| TransportError::Connect(e.to_string()))?;
        tokio::spawn(async move {
            // Ends with the exchange (the sender is dropped) or the link.
            let _ = connection.await;
        });
        let path = uri.path_and_query().map_or("/", |p| p.as_str());
        let mut builder = hyper::Request::builder()
            .method(request.method)
            .uri(path)
            .header(hyper::header::HOST, host);
        for (name, value) in &request.headers {
            builder = builder.header(name, value);
        }
        let http_request = builder
            .body(Full::new(Bytes::from(request.body)))
            .map_err(|e| invalid(&e))?;
        let response = sender
            .send_request(http_request)
            .await
            .map_err(|e| TransportError::Other(e.to_string()))?;
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(n, v)| {
                let value = String::from_utf8_lossy(v.as_bytes()).into_owned();
                (n.as_str().to_owned(), value)
            })
            .collect();
        Ok(HttpStream {
            status,
            headers,
            body: response.into_body(),
        })
    }

    async fn exchange(&self, request: HttpRequest) -> Result<HttpResponse, TransportError> {
        let HttpStream {
            status,
            headers,
            body,
        } = self.open(request).await?;
        let body = body
            .collect()
            .await
            .map_err(|e| TransportError::Other(format!("reading body: {e}")))?
            .to_bytes()
            .to_vec();
        Ok(HttpResponse {
            status,
            headers,
            body,
        })
    }
}

/// An answer whose body is still arriving; dropping it closes the link.
pub struct HttpStream {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    body: hyper::body::Incoming,
}

impl HttpStream {
    /// The next piece of the body; `None` once it ended, an error when
    /// the link broke.
    pub async fn chunk(&mut self) -> Option<Result<Bytes, TransportError>> {
        loop {
            match self.body.frame().await? {
                Ok(frame) => match frame.into_data() {
                    Ok(data) => return Some(Ok(data)),
                    Err(_trailers) => continue,
                },
                Err(e) => return Some(Err(TransportError::Other(format!("reading body: {e}")))),
            }
        }
    }
}

impl HttpTransport for SimHttp {
    fn send(&self, request: HttpRequest) -> BoxFuture<'_, Result<HttpResponse, TransportError>> {
        Box::pin(self.exchange(request))
    }
}

/// Serves `app` as the simulated host `host` with `axum::serve`, as a
/// process would on a socket. For peers that are not the coordinator
/// (provider stubs, facilitators); the coordinator is served by its own
/// composition root.
pub fn serve(net: &Net, host: &str, app: axum::Router) -> tokio::task::JoinHandle<()> {
    let listener: SimListener = net.listen(host);
    tokio::spawn(async move {
        let service = app.into_make_service_with_connect_info::<SocketAddr>();
        let listener = axum::serve::ListenerExt::tap_io(listener, |_| {});
        let _ = axum::serve(listener, service).await;
    })
}
