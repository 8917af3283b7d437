//! Acting for a user: with `--user-auth on` (the default), `trust/create`,
//! `trust/list` and PRIVATE commits need the user's proof, the
//! `X-User-Proof` header of `protocol::user_proof` (decision 0017), or for a
//! paid PRIVATE commit a payment from the user's address. With `off`, the
//! user id alone, as the spec shows it.

use super::error::ApiError;
use crate::config::UserAuth;
use crate::shell::{Coordinator, NonceRefused};
use axum::body::Bytes;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method};
use protocol::user_proof::{self, Account, ProofError, ProofRequest, RefusalCode};

/// What a user's proof is checked against: the request as received.
pub struct ProofContext {
    /// The `X-User-Proof` value, if sent (and readable as text).
    header: Option<String>,
    method: Method,
    path_and_query: String,
    body: Bytes,
}

impl ProofContext {
    pub(super) fn new(
        headers: &HeaderMap,
        method: &Method,
        uri: &axum::http::Uri,
        body: Bytes,
    ) -> Self {
        Self {
            header: headers
                .get(user_proof::HEADER)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
            method: method.clone(),
            path_and_query: uri
                .path_and_query()
                .map_or_else(|| uri.path().to_owned(), |pq| pq.as_str().to_owned()),
            body,
        }
    }

    pub(super) fn has_proof(&self) -> bool {
        self.header.is_some()
    }
}

/// A GET's context: no body.
impl<S: Send + Sync> FromRequestParts<S> for ProofContext {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Self::new(
            &parts.headers,
            &parts.method,
            &parts.uri,
            Bytes::new(),
        ))
    }
}

/// The user id a request may act for, in the form the core keys it by:
/// with user auth off, `user_id` as sent; on, the account's normal form
/// once the proof (or `paid_by`, the verified payer's address) shows the
/// caller holds the account's key. Otherwise the 401 that says what is
/// missing (503 when the proof nonces are full).
pub(super) fn prove_user(
    c: &Coordinator,
    proof: &ProofContext,
    user_id: &str,
    paid_by: Option<&[u8; 20]>,
) -> Result<String, ApiError> {
    if c.config().user_auth == UserAuth::Off {
        return Ok(user_id.to_owned());
    }
    let account = Account::parse(user_id).ok_or_else(|| not_provable(user_id))?;
    if paid_by == Some(account.address()) {
        return Ok(account.normal_form());
    }
    let Some(header) = &proof.header else {
        return Err(refused(RefusalCode::Required, required_message(&account)));
    };
    let request = ProofRequest {
        method: proof.method.as_str(),
        path_and_query: &proof.path_and_query,
        body: &proof.body,
    };
    let window_ms = c.config().timing.user_proof_window_ms;
    let verified = user_proof::verify(header, &request, c.now_ms(), window_ms)
        .map_err(|e| proof_refused(&e, &account))?;
    if verified.account.normal_form() != account.normal_form() {
        return Err(refused(
            RefusalCode::Invalid,
            format!(
                "the X-User-Proof header proves {}, but this request acts for {}; sign the proof as the request's user_id",
                verified.account.normal_form(),
                account.normal_form()
            ),
        ));
    }
    let address = account.address_hex();
    c.accept_proof_nonce(&address, &verified.nonce, verified.issued_at_ms)
        .map_err(|refusal| match refusal {
            NonceRefused::Replayed => refused(
                RefusalCode::Replayed,
                "this proof's nonce was used before; sign a new X-User-Proof with a fresh random nonce for every request".into(),
            ),
            NonceRefused::Full => ApiError::Unavailable(
                "too many user proofs within the proof window; retry later".into(),
            ),
        })?;
    Ok(account.normal_form())
}

/// The user id as the core keys it: with user auth off, as sent; on, the
/// account's normal form, or 401 `user_id_not_provable` for a plain name.
pub(super) fn normal_user_id(c: &Coordinator, user_id: &str) -> Result<String, ApiError> {
    match c.config().user_auth {
        UserAuth::Off => Ok(user_id.to_owned()),
        UserAuth::On => Account::parse(user_id)
            .map(|a| a.normal_form())
            .ok_or_else(|| not_provable(user_id)),
    }
}

fn refused(code: RefusalCode, message: String) -> ApiError {
    ApiError::UserProof { code, message }
}

fn not_provable(user_id: &str) -> ApiError {
    refused(
        RefusalCode::NotProvable,
        format!(
            "user_id {user_id:?} is not an account, so no signature can prove it: use an EVM address \
             (0x + 40 hex) or a CAIP-10 account (eip155:<chain id>:0x + 40 hex) and send its proof in \
             the X-User-Proof header, or run the coordinator with --user-auth off (a closed deployment)"
        ),
    )
}

fn required_message(account: &Account) -> String {
    format!(
        "this request acts for {} and needs that user's proof: an X-User-Proof header, base64 of \
         {{user_id, issued_at_ms, nonce, signature}} with an EIP-191 personal_sign by {} over the \
         request (docs/security.md, \"User proofs\"); a paid PRIVATE commit may instead pay from that \
         address",
        account.normal_form(),
        account.address_hex()
    )
}

fn proof_refused(e: &ProofError, account: &Account) -> ApiError {
    let message = match e {
        ProofError::Signature(_) => format!(
            "{e}: it must be an EIP-191 personal_sign by {} of the text protocol::user_proof::message \
             builds for this method, path and body",
            account.address_hex()
        ),
        _ => e.to_string(),
    };
    refused(e.code(), message)
}
