//! A scriptable in-process facilitator (`/verify`, `/settle`, `/supported`)
//! for tests and the simulation. It checks nothing: it answers what the
//! script says and records every call. Delays use tokio time, so under a
//! paused clock a "slow facilitator" costs no real time.
//!
//! [`RouterTransport`] is the x402 settler's way to call it (or any axum
//! router) in process, without sockets.

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tower::ServiceExt;
use x402::evm::Bytes32;
use x402::settle::{BoxFuture, FacilitatorTransport, TransportError, TransportResponse};
use x402::wire::{SettleResponse, SupportedKind, SupportedResponse, VerifyResponse};

/// What the stub answers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StubScript {
    /// `None`: `/verify` says valid; `Some(code)`: invalid with that reason.
    pub verify_invalid_reason: Option<String>,
    /// `None`: `/settle` succeeds; `Some(code)`: fails with that reason.
    pub settle_error_reason: Option<String>,
    pub verify_delay: Duration,
    pub settle_delay: Duration,
    /// When set, the next `/settle` answer is lost (see
    /// [`FacilitatorStub::lose_settles`]).
    pub settle_lost_once: bool,
    /// When set, the next `/settle` of a payment not sent before is refused
    /// `invalid_exact_evm_nonce_already_used` (see
    /// [`StubScript::settle_spent_elsewhere_once`]).
    pub settle_spent_elsewhere_once: bool,
}

impl StubScript {
    pub fn success() -> Self {
        Self::default()
    }

    /// `/verify` refuses with `insufficient_funds`.
    pub fn insufficient_funds() -> Self {
        Self {
            verify_invalid_reason: Some("insufficient_funds".into()),
            ..Self::default()
        }
    }

    /// `/verify` passes, `/settle` fails with `code`.
    pub fn settle_failure(code: &str) -> Self {
        Self {
            settle_error_reason: Some(code.into()),
            ..Self::default()
        }
    }

    /// `/verify` and `/settle` succeed, but the next `/settle` answer is lost.
    pub fn settle_lost_once() -> Self {
        Self {
            settle_lost_once: true,
            ..Self::default()
        }
    }

    /// `/verify` and `/settle` succeed, but the next payment sent to
    /// `/settle` for the first time is refused
    /// `invalid_exact_evm_nonce_already_used`: its payer spent the
    /// authorization elsewhere between `/verify` and this first `/settle` (a
    /// front-run), so nothing is settled for this payee. The stub does not
    /// remember that spend: a later `/settle` of the same payment (one
    /// resent after a crash) settles, as if the front-run had not landed,
    /// so the simulation never makes a retry ambiguous (decision 0021
    /// counts "already used" after our own send as our settlement).
    pub fn settle_spent_elsewhere_once() -> Self {
        Self {
            settle_spent_elsewhere_once: true,
            ..Self::default()
        }
    }

    /// `/settle` answers only after `delay` (longer than the client's
    /// timeout to simulate a hung facilitator).
    pub fn settle_delay(delay: Duration) -> Self {
        Self {
            settle_delay: delay,
            ..Self::default()
        }
    }
}

/// One recorded request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StubCall {
    /// `/verify`, `/settle` or `/supported`.
    pub path: &'static str,
    pub body: Value,
}

#[derive(Debug, Default)]
struct Inner {
    script: StubScript,
    calls: Vec<StubCall>,
    settled: u64,
    /// `/settle` calls still to answer 503 without settling.
    lose_settles: u32,
    /// `/settle` calls still to settle and then answer 503.
    lose_settled: u32,
    /// First `/settle` calls of a payment still to refuse as spent elsewhere.
    front_runs: u32,
    /// Payments settled, as the chain remembers them: settling one again is
    /// refused `invalid_exact_evm_nonce_already_used`.
    spent: std::collections::BTreeSet<String>,
}

/// The stub; clones share state.
#[derive(Debug, Clone, Default)]
pub struct FacilitatorStub {
    inner: Arc<Mutex<Inner>>,
    network: Arc<str>,
}

impl FacilitatorStub {
    /// A stub that reports `network` (CAIP-2) as supported and succeeds.
    pub fn new(network: &str) -> Self {
        Self {
            inner: Arc::default(),
            network: network.into(),
        }
    }

    pub fn set_script(&self, script: StubScript) {
        let mut inner = self.lock();
        if script.settle_lost_once {
            inner.lose_settles = 1;
        }
        // A new script replaces a front-run still due (a world's heal).
        inner.front_runs = u32::from(script.settle_spent_elsewhere_once);
        inner.script = script;
    }

    pub fn calls(&self) -> Vec<StubCall> {
        self.lock().calls.clone()
    }

    /// How many `/settle` calls succeeded.
    pub fn settled(&self) -> u64 {
        self.lock().settled
    }

    /// The next `n` `/settle` calls answer 503 and settle nothing: an
    /// answer lost on the way (the caller cannot tell it from a settlement
    /// whose answer was lost, and must retry the same payment).
    pub fn lose_settles(&self, n: u32) {
        self.lock().lose_settles = n;
    }

    /// The next `n` `/settle` calls settle, then answer 503: the answer is
    /// lost after the money moved.
    pub fn lose_settled(&self, n: u32) {
        self.lock().lose_settled = n;
    }

    /// The recorded `/settle` calls.
    pub fn settle_calls(&self) -> Vec<StubCall> {
        let calls = self.calls();
        calls.into_iter().filter(|c| c.path == "/settle").collect()
    }

    pub fn router(&self) -> Router {
        Router::new()
            .route("/verify", post(verify))
            .route("/settle", post(settle))
            .route("/supported", get(supported))
            .with_state(self.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether this `/settle` (already recorded) is refused as spent
    /// elsewhere: a front-run is due and it is its payment's first `/settle`.
    fn front_run(&self, body: &Value) -> bool {
        let mut inner = self.lock();
        if inner.front_runs == 0 {
            return false;
        }
        let payment = &body["paymentPayload"];
        let sends = (inner.calls.iter())
            .filter(|c| c.path == "/settle" && c.body["paymentPayload"] == *payment)
            .count();
        let first = sends == 1;
        if first {
            inner.front_runs -= 1;
        }
        first
    }

    fn record(&self, path: &'static str, body: &Value) -> StubScript {
        let mut inner = self.lock();
        inner.calls.push(StubCall {
            path,
            body: body.clone(),
        });
        inner.script.clone()
    }
}

fn payer(body: &Value) -> Option<String> {
    body.pointer("/paymentPayload/payload/authorization/from")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

fn network(stub: &FacilitatorStub, body: &Value) -> String {
    body.pointer("/paymentRequirements/network")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| stub.network.to_string())
}

async fn verify(
    State(stub): State<FacilitatorStub>,
    Json(body): Json<Value>,
) -> Json<VerifyResponse> {
    let script = stub.record("/verify", &body);
    tokio::time::sleep(script.verify_delay).await;
    Json(VerifyResponse {
        is_valid: script.verify_invalid_reason.is_none(),
        invalid_reason: script.verify_invalid_reason,
        payer: payer(&body),
    })
}

async fn settle(
    State(stub): State<FacilitatorStub>,
    Json(body): Json<Value>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let script = stub.record("/settle", &body);
    tokio::time::sleep(script.settle_delay).await;
    {
        let mut inner = stub.lock();
        if inner.lose_settles > 0 {
            inner.lose_settles -= 1;
            return axum::http::StatusCode::SERVICE_UNAVAILABLE.into_response();
        }
    }
    if stub.front_run(&body) {
        return Json(SettleResponse {
            success: false,
            error_reason: Some("invalid_exact_evm_nonce_already_used".into()),
            payer: payer(&body),
            transaction: String::new(),
            network: network(&stub, &body),
        })
        .into_response();
    }
    let lose_answer = {
        let mut inner = stub.lock();
        let lose = inner.lose_settled > 0;
        inner.lose_settled = inner.lose_settled.saturating_sub(1);
        lose
    };
    let answer = settled(&stub, script, body);
    if lose_answer && answer.success {
        return axum::http::StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    answer.into_response()
}

/// The answer to a `/settle` that is not lost.
fn settled(stub: &FacilitatorStub, script: StubScript, body: Value) -> Json<SettleResponse> {
    let network = network(stub, &body);
    if let Some(reason) = script.settle_error_reason {
        return Json(SettleResponse {
            success: false,
            error_reason: Some(reason),
            payer: payer(&body),
            transaction: String::new(),
            network,
        });
    }
    let payment = body["paymentPayload"].to_string();
    let count = {
        let mut inner = stub.lock();
        if !inner.spent.insert(payment) {
            return Json(SettleResponse {
                success: false,
                error_reason: Some("invalid_exact_evm_nonce_already_used".into()),
                payer: payer(&body),
                transaction: String::new(),
                network,
            });
        }
        inner.settled += 1;
        inner.settled
    };
    // A deterministic fake transaction hash: same calls, same hashes.
    let mut seed = body.to_string().into_bytes();
    seed.extend_from_slice(&count.to_be_bytes());
    let transaction = Bytes32(protocol::signing::keccak256(&seed)).to_string();
    Json(SettleResponse {
        success: true,
        error_reason: None,
        payer: payer(&body),
        transaction,
        network,
    })
}

async fn supported(State(stub): State<FacilitatorStub>) -> Json<SupportedResponse> {
    stub.record("/supported", &Value::Null);
    Json(SupportedResponse {
        kinds: [1, 2]
            .into_iter()
            .map(|v| SupportedKind {
                x402_version: v,
                scheme: "exact".into(),
                network: stub.network.to_string(),
            })
            .collect(),
    })
}

/// Facilitator as an in-process axum router: no sockets, so it runs under
/// the simulation's paused clock.
#[derive(Debug, Clone)]
pub struct RouterTransport {
    router: axum::Router,
}

/// Facilitator answers are small; anything bigger is refused.
const MAX_FACILITATOR_BODY_BYTES: usize = 64 * 1024;

impl RouterTransport {
    pub fn new(router: axum::Router) -> Self {
        Self { router }
    }

    async fn call(
        &self,
        req: axum::http::Request<axum::body::Body>,
    ) -> Result<TransportResponse, TransportError> {
        let resp = self
            .router
            .clone()
            .oneshot(req)
            .await
            .map_err(|e| TransportError::Http(e.to_string()))?;
        let status = resp.status().as_u16();
        let body = axum::body::to_bytes(resp.into_body(), MAX_FACILITATOR_BODY_BYTES)
            .await
            .map_err(|e| TransportError::Http(e.to_string()))?;
        Ok(TransportResponse {
            status,
            body: body.to_vec(),
        })
    }
}

impl FacilitatorTransport for RouterTransport {
    fn get<'a>(
        &'a self,
        path: &'a str,
    ) -> BoxFuture<'a, Result<TransportResponse, TransportError>> {
        Box::pin(async move {
            let req = axum::http::Request::get(path)
                .body(axum::body::Body::empty())
                .map_err(|e| TransportError::Http(e.to_string()))?;
            self.call(req).await
        })
    }

    fn post_json<'a>(
        &'a self,
        path: &'a str,
        body: &'a serde_json::Value,
    ) -> BoxFuture<'a, Result<TransportResponse, TransportError>> {
        Box::pin(async move {
            let req = axum::http::Request::post(path)
                .header("content-type", "application/json")
                .body(axum::body::Body::from(body.to_string()))
                .map_err(|e| TransportError::Http(e.to_string()))?;
            self.call(req).await
        })
    }
}
