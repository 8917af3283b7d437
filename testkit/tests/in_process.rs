//! The in-process transport on its own.

use router::{HttpRequest, HttpTransport, TransportError};
use serde_json::json;
use testkit::InProcessTransport;

#[tokio::test]
async fn in_process_routes_by_origin_and_can_take_a_peer_down() {
    let transport = InProcessTransport::new().with(
        "http://a.test/ignored/path",
        axum::Router::new().route(
            "/hello",
            axum::routing::post(|body: String| async move { format!("a got {body}") }),
        ),
    );
    // Any tower service, not only axum routers.
    transport.insert_service(
        "https://b.test:8443",
        tower::service_fn(|request: axum::extract::Request| async move {
            let answer = format!("b saw {}", request.uri().path());
            Ok::<_, std::convert::Infallible>(axum::response::IntoResponse::into_response(answer))
        }),
    );

    let response = transport
        .send(HttpRequest::post_json(
            "http://A.TEST:80/hello",
            &json!("hi"),
        ))
        .await
        .unwrap();
    assert_eq!(response.status, 200);
    assert_eq!(response.body, b"a got \"hi\"");
    assert!(response
        .header("Content-Type")
        .unwrap()
        .starts_with("text/plain"));

    let response = transport
        .send(HttpRequest::get("https://b.test:8443/any/where?x=1"))
        .await
        .unwrap();
    assert_eq!(response.body, b"b saw /any/where");

    assert!(transport.remove("http://a.test"));
    assert!(matches!(
        transport
            .send(HttpRequest::get("http://a.test/hello"))
            .await,
        Err(TransportError::Connect(_))
    ));
    assert!(matches!(
        transport.send(HttpRequest::get("not a url")).await,
        Err(TransportError::InvalidRequest(_))
    ));
}
