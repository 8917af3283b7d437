//! `/v1/trust/{create,claim,list}`: pairing users with their trusted workers.

use super::error::ApiError;
use super::extract::{ClientAddr, JsonBody, ProvenJson, QueryMap};
use super::user_auth::{self, ProofContext};
use super::validate;
use crate::core::trust::{ClaimError, CreateError, KeyNotOnCurve, LimitScope};
use crate::node::BudgetRefused;
use crate::shell::Coordinator;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use protocol::api::{Claimed, PairingCode, TrustList, TrustedProvider};
use protocol::signing;
use protocol::time::format_ms;

#[utoipa::path(post, path = "/v1/trust/create", tag = "trust",
    request_body = protocol::api::CreatePairing,
    params(("X-User-Proof" = Option<String>, Header, description = crate::api::docs::USER_PROOF_HEADER)),
    responses(
        (status = 201, description = "A pairing code, valid for one hour; with `provider_pubkey`, claimable only by that key", body = PairingCode),
        (status = 400, response = crate::api::docs::BadRequest),
        (status = 401, response = crate::api::docs::UserProofRequired),
        (status = 413, response = crate::api::docs::PayloadTooLarge),
        (status = 415, response = crate::api::docs::UnsupportedMediaType),
        (status = 429, response = crate::api::docs::RateLimited),
        (status = 503, response = crate::api::docs::Unavailable),
    ))]
pub(super) async fn trust_create(
    State(c): State<Coordinator>,
    ClientAddr(client): ClientAddr,
    ProvenJson { body, proof }: ProvenJson,
) -> Result<Response, ApiError> {
    if let Some(message) = validate::missing_fields(&body, &["user_id"]) {
        return Err(ApiError::BadRequest(message));
    }
    let user_id =
        validate::user_id(&body["user_id"], &c.config().limits).map_err(ApiError::BadRequest)?;
    let bound_to = bound_key(&body)?;
    // Validation first (400), then the proof (401), then the budgets.
    let user_id = user_auth::normal_user_id(&c, &user_id)?;
    user_auth::prove_user(&c, &proof, &user_id, None)?;
    let budgets = crate::node::take_create_budgets(&c, &user_id, &client)
        .await
        .map_err(|refused| {
            budget_refused(refused, |scope, retry_after_ms| {
                create_refused(CreateError::RateLimited {
                    scope,
                    retry_after_ms,
                })
            })
        })?;
    // Cluster mode: a code another node drew first for another user is
    // not ours to hand out; draw again (each draw counts against the
    // node's create budgets, as a client's retry would).
    for _ in 0..PAIRING_DRAWS_MAX {
        let created = c.with(|core, now_ms| {
            core.create_pairing(&user_id, bound_to.as_deref(), &client, now_ms)
        });
        let pairing = match created {
            Ok(pairing) => pairing,
            Err(e) => {
                budgets.give_back().await;
                return Err(create_refused(e));
            }
        };
        c.durable().await.map_err(ApiError::internal)?;
        let ours = crate::node::pairing_is_ours(&c, &pairing)
            .await
            .map_err(|e| shared_store_unavailable(&e))?;
        if ours {
            return Ok((
                StatusCode::CREATED,
                Json(PairingCode {
                    pairing_code: pairing.code,
                    expires_at: format_ms(pairing.expires_at_ms),
                }),
            )
                .into_response());
        }
        tracing::warn!("a drawn pairing code is another user's on another node; drawing again");
    }
    Err(ApiError::Unavailable(
        "no unused pairing code could be drawn; retry".into(),
    ))
}

/// The optional `provider_pubkey` of a create, canonical: only that key
/// may claim the code. A wrong shape or a point off the curve is a 400.
fn bound_key(body: &serde_json::Value) -> Result<Option<String>, ApiError> {
    match &body["provider_pubkey"] {
        serde_json::Value::Null => Ok(None),
        key => key
            .as_str()
            .filter(|k| validate::is_compressed_key_shape(k))
            .ok_or_else(|| ApiError::BadRequest(validate::KEY_SHAPE.into()))
            .and_then(|k| {
                signing::parse_public_key(k)
                    .map(|k| Some(k.to_hex()))
                    .map_err(|_| ApiError::BadRequest(KeyNotOnCurve.to_string()))
            }),
    }
}

/// Draws of a pairing code per create in cluster mode, where a code may be
/// another node's already (about one in 16.7 M per live code).
const PAIRING_DRAWS_MAX: usize = 3;

#[utoipa::path(post, path = "/v1/trust/claim", tag = "trust",
    request_body = protocol::api::ClaimPairing,
    responses(
        (status = 200, description = "The worker's key is now trusted by the code's user", body = Claimed),
        (status = 400, response = crate::api::docs::BadRequest),
        (status = 413, response = crate::api::docs::PayloadTooLarge),
        (status = 415, response = crate::api::docs::UnsupportedMediaType),
        (status = 429, response = crate::api::docs::RateLimited),
        (status = 503, response = crate::api::docs::Unavailable),
    ))]
pub(super) async fn trust_claim(
    State(c): State<Coordinator>,
    ClientAddr(client): ClientAddr,
    JsonBody(body): JsonBody,
) -> Result<Json<Claimed>, ApiError> {
    if let Some(message) = validate::missing_fields(&body, &["pairing_code", "provider_pubkey"]) {
        return Err(ApiError::BadRequest(message));
    }
    // A code is six hex digits; one with a control character (which no
    // store takes in text) is no code, answered before any store sees it.
    let code = body["pairing_code"]
        .as_str()
        .filter(|code| !code.chars().any(char::is_control))
        .ok_or_else(|| ApiError::BadRequest(ClaimError::InvalidCode.to_string()))?;
    let key = body["provider_pubkey"]
        .as_str()
        .filter(|k| validate::is_compressed_key_shape(k))
        .ok_or_else(|| ApiError::BadRequest(validate::KEY_SHAPE.into()))?;
    // The shape is right; whether it is a curve point is told only after
    // the code is judged, so the spec's code errors come first.
    let key = signing::parse_public_key(key)
        .map(|k| k.to_hex())
        .map_err(|_| KeyNotOnCurve);
    // Cluster mode: the failure budgets are the cluster's, taken before
    // the code is claimed in the store; a claim that succeeds gives back.
    let budgets = crate::node::take_claim_budgets(&c, &client)
        .await
        .map_err(|refused| {
            budget_refused(refused, |scope, retry_after_ms| {
                claim_refused(ClaimError::RateLimited {
                    scope,
                    retry_after_ms,
                })
            })
        })?;
    // Cluster mode: the code may have been made, or claimed, on another node.
    let stored = crate::node::pairing_for_claim(&c, code, key.as_deref().ok(), &client)
        .await
        .map_err(|e| shared_store_unavailable(&e))?;
    let claimed = c.with(|core, now_ms| {
        if let Some(pairing) = stored {
            core.learn_pairing(pairing, now_ms);
        }
        core.claim_pairing(code, key.as_deref().map_err(|e| *e), &client, now_ms)
    });
    // Only failures count: a claim that succeeded, or that the node's own
    // budgets refused, gives back what it took.
    if matches!(claimed, Ok(_) | Err(ClaimError::RateLimited { .. })) {
        budgets.give_back().await;
    }
    c.durable().await.map_err(ApiError::internal)?;
    let entry = claimed.map_err(claim_refused)?;
    Ok(Json(Claimed {
        user_id: entry.user_id,
        paired_at: format_ms(entry.paired_at_ms),
    }))
}

fn claim_refused(e: ClaimError) -> ApiError {
    match e {
        ClaimError::RateLimited {
            scope,
            retry_after_ms,
        } => rate_limited(
            match scope {
                LimitScope::Everyone => {
                    "too many failed pairing claims on this coordinator; retry later"
                }
                _ => "too many pairing claims from this address; retry later",
            },
            retry_after_ms,
        ),
        e => ApiError::BadRequest(e.to_string()),
    }
}

/// The cluster's shared budgets refused a request: 429 as `limited` words
/// it for the scope, or 503 if the store could not be asked.
fn budget_refused(
    refused: BudgetRefused,
    limited: impl FnOnce(LimitScope, i64) -> ApiError,
) -> ApiError {
    match refused {
        BudgetRefused::Limited {
            scope,
            retry_after_ms,
        } => limited(scope, retry_after_ms),
        BudgetRefused::Unavailable(e) => shared_store_unavailable(&e),
    }
}

/// A shared-store call a request needed failed (cluster mode): 503, the
/// cause logged.
fn shared_store_unavailable(e: &crate::cluster::ClusterError) -> ApiError {
    tracing::error!(error = %e, "a shared store call failed");
    ApiError::Unavailable("the shared store is unavailable; retry".into())
}

fn create_refused(e: CreateError) -> ApiError {
    match e {
        CreateError::RateLimited {
            scope,
            retry_after_ms,
        } => rate_limited(
            match scope {
                LimitScope::User => "too many pairing codes created for this user; retry later",
                _ => "too many pairing codes created from this address; retry later",
            },
            retry_after_ms,
        ),
        CreateError::UserCodesFull { retry_after_ms } => rate_limited(
            "this user has too many live pairing codes; claim one or retry later",
            retry_after_ms,
        ),
        CreateError::TooManyCodes => ApiError::Unavailable(e.to_string()),
    }
}

fn rate_limited(message: &str, retry_after_ms: i64) -> ApiError {
    ApiError::RateLimited {
        message: message.into(),
        retry_after_s: (retry_after_ms.max(0) as u64).div_ceil(1000),
    }
}

#[utoipa::path(get, path = "/v1/trust/list", tag = "trust",
    params(
        ("user_id" = String, Query, min_length = 1, description = "The user whose trusted workers to list"),
        ("X-User-Proof" = Option<String>, Header, description = crate::api::docs::USER_PROOF_HEADER),
    ),
    responses(
        (status = 200, description = "The user's trusted workers", body = TrustList),
        (status = 400, response = crate::api::docs::BadRequest),
        (status = 401, response = crate::api::docs::UserProofRequired),
        (status = 503, response = crate::api::docs::Unavailable),
    ))]
pub(super) async fn trust_list(
    State(c): State<Coordinator>,
    QueryMap(q): QueryMap,
    proof: ProofContext,
) -> Result<Json<TrustList>, ApiError> {
    let user_id = q
        .get("user_id")
        .filter(|u| !u.is_empty())
        .ok_or_else(|| ApiError::BadRequest("Missing required query parameter: user_id".into()))?;
    // The same rule as every other endpoint's, before any store sees it.
    let user_id =
        &validate::user_id_str(user_id, &c.config().limits).map_err(ApiError::BadRequest)?;
    let user_id = &user_auth::normal_user_id(&c, user_id)?;
    user_auth::prove_user(&c, &proof, user_id, None)?;
    // Cluster mode: pairings claimed on other nodes count at once.
    crate::node::learn_trust_of(&c, user_id).await;
    let providers = c.read(|core| core.trusted_providers(user_id));
    c.durable().await.map_err(ApiError::internal)?;
    let providers = providers
        .into_iter()
        .map(|e| TrustedProvider {
            provider_pubkey: e.provider_pubkey,
            paired_at: format_ms(e.paired_at_ms),
        })
        .collect();
    Ok(Json(TrustList { providers }))
}
