//! Every HTTP error the API gives, mapped to its status and JSON body in one
//! place. No handler builds an error response by hand, and no axum default
//! (text) rejection reaches a client.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use protocol::api::{ErrorBody, JobNotCancellable, JobRecord, NoTrustedWorker, UserProofRefused};
use protocol::user_proof::RefusalCode;
use uuid::Uuid;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 400 with the given message.
    #[error("{0}")]
    BadRequest(String),
    #[error("job not found")]
    JobNotFound,
    /// 409 of a cancel: the job ended; the body carries its record.
    #[error("job_not_cancellable")]
    NotCancellable(Box<JobRecord>),
    #[error("no route for {method} {path}")]
    NoRoute { method: String, path: String },
    #[error("method not allowed")]
    MethodNotAllowed,
    #[error("Content-Type must be application/json")]
    UnsupportedMediaType,
    #[error("request body is larger than {limit_bytes} bytes")]
    PayloadTooLarge { limit_bytes: usize },
    /// 408: the body did not arrive within its deadline.
    #[error("the request body did not arrive within {timeout_ms} ms")]
    BodyTimeout { timeout_ms: u64 },
    /// 400 before any route: hyper could not parse the request head (a
    /// control character in a header or the request line, a malformed
    /// request line or header). Given by `connections::head_errors`.
    #[error("the request head is not valid HTTP/1.1 (a malformed request line or header, or a control character in one)")]
    HeadMalformed,
    /// 431 before any route: the request head outgrew its buffer
    /// (`http_head_bytes_max` where it is enforced).
    #[error("the request head is larger than {}", head_limit(*.limit_bytes))]
    HeadTooLarge { limit_bytes: Option<usize> },
    /// 414 before any route: the request target alone outgrew hyper's bound.
    #[error("the request target is too long")]
    UriTooLong,
    #[error("no_trusted_worker")]
    NoTrustedWorker(Uuid),
    #[error("{message}")]
    RateLimited { message: String, retry_after_s: u64 },
    /// 401: the request acts for a user without that user's proof; the
    /// body is `{"error": code, "message": ...}`.
    #[error("{code}: {message}")]
    UserProof { code: RefusalCode, message: String },
    /// 503: a bounded resource is full; retry later.
    #[error("{0}")]
    Unavailable(String),
    /// 502: a job the OpenAI-compatible door waited for failed.
    #[error("{0}")]
    JobFailed(String),
    /// 504: a job the door waited for did not end while it waited.
    #[error("{0}")]
    JobPending(String),
    /// A streamed chat completion whose job restarted after text was sent
    /// (only ever an error chunk of the stream).
    #[error("{0}")]
    StreamRestarted(String),
    /// 402: no payment, or a payment that was refused (x402 answer).
    #[error("payment required")]
    Payment(Box<x402::Refusal>),
    /// 500: the cause is logged where it happened and kept as the source
    /// (`None` for a panic), never shown to the client.
    #[error("internal error")]
    Internal(#[source] Option<Box<dyn std::error::Error + Send + Sync>>),
}

/// The bound a too-large head passed, as its error message names it.
fn head_limit(limit_bytes: Option<usize>) -> String {
    match limit_bytes {
        Some(limit) => format!("{limit} bytes"),
        None => "the server accepts".to_owned(),
    }
}

impl ApiError {
    /// A 500 caused by `source`.
    pub fn internal(source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        ApiError::Internal(Some(source.into()))
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::JobNotFound | ApiError::NoRoute { .. } => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::BodyTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            ApiError::HeadMalformed => StatusCode::BAD_REQUEST,
            ApiError::HeadTooLarge { .. } => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            ApiError::UriTooLong => StatusCode::URI_TOO_LONG,
            ApiError::NoTrustedWorker(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::NotCancellable(_) => StatusCode::CONFLICT,
            ApiError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::UserProof { .. } => StatusCode::UNAUTHORIZED,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Payment(_) => StatusCode::PAYMENT_REQUIRED,
            ApiError::JobFailed(_) | ApiError::StreamRestarted(_) => StatusCode::BAD_GATEWAY,
            ApiError::JobPending(_) => StatusCode::GATEWAY_TIMEOUT,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl ApiError {
    /// The OpenAI-compatible door's error body, OpenAI's shape
    /// `{"error": {"message", "type", "code"}}`, and its status.
    pub fn openai_body(&self) -> (StatusCode, serde_json::Value) {
        let status = self.status();
        let (kind, code) = match self {
            ApiError::BadRequest(_)
            | ApiError::UnsupportedMediaType
            | ApiError::PayloadTooLarge { .. }
            | ApiError::MethodNotAllowed
            | ApiError::HeadMalformed
            | ApiError::HeadTooLarge { .. }
            | ApiError::UriTooLong => ("invalid_request_error", "invalid_request"),
            ApiError::JobNotFound | ApiError::NoRoute { .. } => {
                ("invalid_request_error", "not_found")
            }
            ApiError::BodyTimeout { .. } => ("invalid_request_error", "request_timeout"),
            ApiError::NotCancellable(_) => ("invalid_request_error", "job_not_cancellable"),
            ApiError::NoTrustedWorker(_) => ("invalid_request_error", "no_trusted_worker"),
            ApiError::RateLimited { .. } => ("rate_limit_error", "rate_limit_exceeded"),
            ApiError::UserProof { .. } => ("authentication_error", "user_proof_required"),
            ApiError::Payment(_) => ("invalid_request_error", "payment_required"),
            ApiError::Unavailable(_) => ("server_error", "unavailable"),
            ApiError::JobFailed(_) => ("server_error", "job_failed"),
            ApiError::JobPending(_) => ("server_error", "job_pending"),
            ApiError::StreamRestarted(_) => ("server_error", "stream_restarted"),
            ApiError::Internal(_) => ("server_error", "internal_error"),
        };
        let body =
            serde_json::json!({"error": {"message": self.to_string(), "type": kind, "code": code}});
        (status, body)
    }

    /// This error as the OpenAI-compatible door answers it: OpenAI's shape,
    /// but for 402, which stays x402's answer (its `accepts` and header are
    /// what a paying client reads), and 429's `Retry-After`.
    pub fn openai_response(self) -> Response {
        if let ApiError::Payment(refusal) = self {
            return refusal.into_response();
        }
        let (status, body) = self.openai_body();
        let mut response = (status, Json(body)).into_response();
        if let ApiError::RateLimited { retry_after_s, .. } = self {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(retry_after_s));
        }
        response
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let ApiError::Payment(refusal) = self {
            // Body with `error` and `accepts`, plus the PAYMENT-REQUIRED header.
            return refusal.into_response();
        }
        let status = self.status();
        let mut response = match &self {
            ApiError::NoTrustedWorker(job_id) => (
                status,
                Json(NoTrustedWorker {
                    error: self.to_string(),
                    job_id: *job_id,
                }),
            )
                .into_response(),
            ApiError::NotCancellable(job) => (
                status,
                Json(JobNotCancellable {
                    error: protocol::api::JOB_NOT_CANCELLABLE.to_owned(),
                    job: (**job).clone(),
                }),
            )
                .into_response(),
            ApiError::UserProof { code, message } => (
                status,
                Json(UserProofRefused {
                    error: code.as_str().to_owned(),
                    message: message.clone(),
                }),
            )
                .into_response(),
            _ => (
                status,
                Json(ErrorBody {
                    error: self.to_string(),
                }),
            )
                .into_response(),
        };
        if let ApiError::RateLimited { retry_after_s, .. } = self {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(retry_after_s));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreError;
    use http_body_util::BodyExt;
    use std::error::Error as _;

    #[tokio::test]
    async fn an_internal_error_keeps_its_source_and_answers_the_same_bytes() {
        let e = ApiError::internal(StoreError("disk full".into()));
        assert_eq!(e.source().unwrap().to_string(), "store: disk full");
        let panicked = ApiError::Internal(None);
        assert!(panicked.source().is_none());
        for e in [e, panicked] {
            let response = e.into_response();
            assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
            let body = response.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(&body[..], br#"{"error":"internal error"}"#);
        }
    }
}
