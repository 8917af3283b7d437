//! The transport's request type on its own.

use router::HttpRequest;

#[test]
fn request_debug_hides_credentials() {
    let request = HttpRequest::get("http://x.test/")
        .header("Authorization", "Bearer sk-secret")
        .header("x-api-key", "sk-ant-secret")
        .header("X-PAYMENT", "signed")
        .header("accept", "application/json");
    let debug = format!("{request:?}");
    assert!(
        !debug.contains("secret") && !debug.contains("signed"),
        "{debug}"
    );
    assert!(debug.contains("application/json"));
}
