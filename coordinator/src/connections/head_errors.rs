//! hyper's own answers to request heads it cannot parse, given the API's
//! JSON error body (principle 4; issue 33, item 1).
//!
//! hyper's HTTP/1 server answers a head it cannot parse itself, before any
//! service runs: a control character in a header value or in the request
//! line, a malformed request line or header, a head over its buffer, a
//! target too long. That answer has no body (`HTTP/1.1 400 Bad Request`,
//! `connection: close`, `content-length: 0`, `date`) and hyper offers no
//! hook to give it one (hyper 1.x, `proto::h1::role::Server::on_error`).
//! So each connection's IO passes through [`JsonHeadErrors`], which knows
//! that answer by its exact form and writes it with the JSON error body of
//! [`ApiError::HeadMalformed`], [`ApiError::HeadTooLarge`] or
//! [`ApiError::UriTooLong`] instead. No answer of a route has that form:
//! every error the API gives carries a content type and a body (one enum,
//! `api::error`).

use crate::api::error::ApiError;
use axum::http::StatusCode;
use protocol::api::ErrorBody;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The longest automatic answer hyper writes: a status line, three short
/// headers (about 120 bytes).
const AUTOMATIC_ANSWER_BYTES_MAX: usize = 256;

/// A connection's IO whose automatic head-error answers carry JSON bodies.
pub struct JsonHeadErrors<I> {
    inner: I,
    /// An answer rewritten for hyper, and how much of it has gone out.
    pending: Vec<u8>,
    sent_bytes: usize,
    /// The head buffer's bound where it is enforced, for the 431's message.
    head_bytes_max: Option<usize>,
}

impl<I> JsonHeadErrors<I> {
    pub fn new(inner: I, head_bytes_max: Option<usize>) -> Self {
        Self {
            inner,
            pending: Vec::new(),
            sent_bytes: 0,
            head_bytes_max,
        }
    }
}

impl<I: AsyncWrite + Unpin> JsonHeadErrors<I> {
    /// Writes out what is left of a rewritten answer.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent_bytes < self.pending.len() {
            let rest = &self.pending[self.sent_bytes..];
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, rest))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent_bytes += n;
        }
        self.pending.clear();
        self.sent_bytes = 0;
        Poll::Ready(Ok(()))
    }

    /// Takes `bytes` whole if they are hyper's automatic answer: hyper has
    /// written them as far as it knows, and the JSON answer goes out now or
    /// with the flush and shutdown that follow it.
    fn poll_rewrite(&mut self, cx: &mut Context<'_>, bytes: &[u8]) -> Option<io::Result<usize>> {
        let answer = json_answer(bytes, self.head_bytes_max)?;
        debug_assert!(
            self.pending.is_empty(),
            "a rewritten answer is still going out"
        );
        self.pending = answer;
        match self.poll_pending(cx) {
            Poll::Ready(Err(e)) => Some(Err(e)),
            Poll::Ready(Ok(())) | Poll::Pending => Some(Ok(bytes.len())),
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for JsonHeadErrors<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for JsonHeadErrors<I> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_pending(cx))?;
        if let Some(written) = this.poll_rewrite(cx, buf) {
            return Poll::Ready(written);
        }
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_pending(cx))?;
        // hyper's automatic answer is a head alone: one slice.
        let mut filled = bufs.iter().filter(|b| !b.is_empty());
        if let (Some(only), None) = (filled.next(), filled.next()) {
            if let Some(written) = this.poll_rewrite(cx, only) {
                return Poll::Ready(written);
            }
        }
        Pin::new(&mut this.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_pending(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_pending(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

/// hyper's automatic answer to an unparseable head, rewritten with its
/// JSON error body; `None` for anything else. The form is exact: a status
/// hyper gives a parse error, its canonical reason, then only
/// `connection: close`, `content-length: 0` and `date`, and nothing after
/// the head.
fn json_answer(bytes: &[u8], head_bytes_max: Option<usize>) -> Option<Vec<u8>> {
    // Every write passes here: refuse the others before reading them.
    if bytes.len() > AUTOMATIC_ANSWER_BYTES_MAX || !bytes.starts_with(b"HTTP/1.1 4") {
        return None;
    }
    let head = std::str::from_utf8(bytes).ok()?.strip_suffix("\r\n\r\n")?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next()?;
    let (code, reason) = status_line.strip_prefix("HTTP/1.1 ")?.split_once(' ')?;
    let status = StatusCode::from_bytes(code.as_bytes()).ok()?;
    if status.canonical_reason() != Some(reason) {
        return None;
    }
    let error = match status {
        StatusCode::BAD_REQUEST => ApiError::HeadMalformed,
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => ApiError::HeadTooLarge {
            limit_bytes: head_bytes_max,
        },
        StatusCode::URI_TOO_LONG => ApiError::UriTooLong,
        _ => return None,
    };
    debug_assert_eq!(error.status(), status);
    let (mut empty, mut closing, mut kept) = (false, false, Vec::new());
    for line in lines {
        match line.split_once(": ")? {
            ("content-length", "0") => empty = true,
            ("connection", "close") => closing = true,
            ("date", _) => kept.push(line),
            _ => return None,
        }
    }
    if !(empty && closing) {
        return None;
    }
    let body = serde_json::to_vec(&ErrorBody {
        error: error.to_string(),
    })
    .ok()?;
    let mut answer = format!(
        "{status_line}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    for line in kept {
        answer.push_str(line);
        answer.push_str("\r\n");
    }
    answer.push_str("\r\n");
    let mut answer = answer.into_bytes();
    answer.extend_from_slice(&body);
    Some(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYPER_400: &[u8] = b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\ndate: Sat, 28 Nov 2026 19:21:14 GMT\r\n\r\n";

    fn body_of(answer: &[u8]) -> serde_json::Value {
        let text = std::str::from_utf8(answer).unwrap();
        let (_, body) = text.split_once("\r\n\r\n").unwrap();
        serde_json::from_str(body).unwrap()
    }

    #[test]
    fn hypers_answer_gets_the_json_body_and_keeps_its_status_and_date() {
        let answer = json_answer(HYPER_400, None).unwrap();
        let text = String::from_utf8(answer.clone()).unwrap();
        assert!(text.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{text}");
        assert!(
            text.contains("\r\ncontent-type: application/json\r\n"),
            "{text}"
        );
        assert!(
            text.contains("\r\ndate: Sat, 28 Nov 2026 19:21:14 GMT\r\n"),
            "{text}"
        );
        let body = body_of(&answer);
        assert_eq!(body["error"], ApiError::HeadMalformed.to_string());
        let (_, body_text) = text.split_once("\r\n\r\n").unwrap();
        let length = format!("content-length: {}\r\n", body_text.len());
        assert!(text.contains(&length), "{text}");
    }

    #[test]
    fn a_head_too_large_names_its_bound_where_one_is_enforced() {
        let hyper = b"HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";
        let body = body_of(&json_answer(hyper, Some(16_384)).unwrap());
        assert_eq!(body["error"], "the request head is larger than 16384 bytes");
        assert!(json_answer(hyper, None).is_some());
    }

    #[test]
    fn no_other_answer_is_touched() {
        let others: [&[u8]; 6] = [
            // A route's error: a content type and a body.
            b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n{\"error\":1}",
            // Empty, but kept alive: not hyper's closing answer.
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n",
            // A status hyper never gives a parse error.
            b"HTTP/1.1 404 Not Found\r\nconnection: close\r\ncontent-length: 0\r\n\r\n",
            // A reason that is not the canonical one.
            b"HTTP/1.1 400 Nope\r\nconnection: close\r\ncontent-length: 0\r\n\r\n",
            // Bytes after the head.
            b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\n\r\nx",
            // Part of a body.
            b"{\"status\":\"completed\"}",
        ];
        for bytes in others {
            assert!(
                json_answer(bytes, None).is_none(),
                "{:?}",
                String::from_utf8_lossy(bytes)
            );
        }
    }
}
