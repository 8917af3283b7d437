//! Reading server-sent events (the WHATWG `text/event-stream` format) from
//! a streamed body, with a bound on every buffer.
//!
//! Not a crate: the SSE parsers on crates.io we looked at (eventsource-stream
//! and its kin) grow their line buffer until a newline comes, which lets a
//! server that never sends one fill the client's memory. Here a line longer
//! than `line_bytes_max`, or an event whose data is, ends the stream with
//! [`SseError::TooLong`].

use crate::transport::{BodyStream, TransportError};
use futures_util::StreamExt;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field; `message` when absent.
    pub event: String,
    /// The `data:` lines joined by `\n`.
    pub data: String,
}

/// Why a stream of events could not be read on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    #[error("the connection failed mid-stream: {0}")]
    Transport(TransportError),
    #[error("a line or event is longer than {max} bytes")]
    TooLong { max: usize },
    #[error("the stream is not UTF-8")]
    NotUtf8,
}

/// Events from a body, read as its chunks come.
pub struct SseReader {
    body: BodyStream,
    max: usize,
    /// Bytes received and not yet cut into lines (at most `max` of them).
    pending: Vec<u8>,
    ended: bool,
    /// The spec's "last event ID buffer": kept across events.
    last_id: Option<String>,
    event: String,
    data: String,
    has_data: bool,
    first_line: bool,
}

impl SseReader {
    pub fn new(body: BodyStream, line_bytes_max: usize) -> Self {
        Self {
            body,
            max: line_bytes_max,
            pending: Vec::new(),
            ended: false,
            last_id: None,
            event: String::new(),
            data: String::new(),
            has_data: false,
            first_line: true,
        }
    }

    /// The id of the last event that set one (`Last-Event-ID` on a resume).
    pub fn last_event_id(&self) -> Option<&str> {
        self.last_id.as_deref()
    }

    /// The next event; `None` when the body ended (an event left without
    /// its blank line is dropped, as the spec says).
    pub async fn next(&mut self) -> Result<Option<SseEvent>, SseError> {
        loop {
            while let Some(line) = self.take_line()? {
                if let Some(event) = self.field(&line)? {
                    return Ok(Some(event));
                }
            }
            if self.ended {
                return Ok(None);
            }
            match self.body.next().await {
                Some(Ok(chunk)) => self.pending.extend_from_slice(&chunk),
                Some(Err(e)) => return Err(SseError::Transport(e)),
                None => self.ended = true,
            }
        }
    }

    /// The next whole line of `pending`, without its end (CR, LF or CRLF).
    fn take_line(&mut self) -> Result<Option<String>, SseError> {
        let Some(end) = self.pending.iter().position(|b| *b == b'\n' || *b == b'\r') else {
            if self.pending.len() > self.max {
                return Err(SseError::TooLong { max: self.max });
            }
            return Ok(None);
        };
        if end > self.max {
            return Err(SseError::TooLong { max: self.max });
        }
        let crlf = self.pending[end] == b'\r';
        if crlf && end + 1 == self.pending.len() && !self.ended {
            // A CR at the end of a chunk: an LF may follow in the next.
            return Ok(None);
        }
        let skip = if crlf && self.pending.get(end + 1) == Some(&b'\n') {
            2
        } else {
            1
        };
        let bytes: Vec<u8> = self.pending.drain(..end + skip).take(end).collect();
        let mut line = String::from_utf8(bytes).map_err(|_| SseError::NotUtf8)?;
        if std::mem::take(&mut self.first_line) && line.starts_with('\u{feff}') {
            line.remove(0);
        }
        Ok(Some(line))
    }

    /// Applies one line; the event it completes, if any.
    fn field(&mut self, line: &str) -> Result<Option<SseEvent>, SseError> {
        if line.is_empty() {
            let event = std::mem::take(&mut self.event);
            let data = std::mem::take(&mut self.data);
            if !std::mem::take(&mut self.has_data) {
                return Ok(None);
            }
            let event = if event.is_empty() {
                "message".to_owned()
            } else {
                event
            };
            return Ok(Some(SseEvent { event, data }));
        }
        if line.starts_with(':') {
            return Ok(None);
        }
        let (name, value) = match line.split_once(':') {
            Some((name, value)) => (name, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match name {
            "event" => self.event = value.to_owned(),
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
                if self.data.len() > self.max {
                    return Err(SseError::TooLong { max: self.max });
                }
            }
            "id" if !value.contains('\0') => self.last_id = Some(value.to_owned()),
            _ => {}
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader(chunks: &[&str], max: usize) -> SseReader {
        let chunks: Vec<Result<Vec<u8>, TransportError>> =
            chunks.iter().map(|c| Ok(c.as_bytes().to_vec())).collect();
        SseReader::new(Box::pin(futures_util::stream::iter(chunks)), max)
    }

    async fn all(mut r: SseReader) -> Result<Vec<(String, String, Option<String>)>, SseError> {
        let mut out = Vec::new();
        while let Some(e) = r.next().await? {
            out.push((e.event, e.data, r.last_event_id().map(str::to_owned)));
        }
        Ok(out)
    }

    fn ev(event: &str, data: &str, id: Option<&str>) -> (String, String, Option<String>) {
        (event.into(), data.into(), id.map(str::to_owned))
    }

    #[tokio::test]
    async fn events_across_chunks_with_every_line_end() {
        let r = reader(
            &[
                "\u{feff}: comment\nevent: delta\nid: 1.3\nda",
                "ta: {\"text\":\"abc\"}\r",
                "\n\r\ndata:x\rdata: y\r\rdata: tail-without-blank-line",
            ],
            1024,
        );
        assert_eq!(
            all(r).await.unwrap(),
            vec![
                ev("delta", "{\"text\":\"abc\"}", Some("1.3")),
                ev("message", "x\ny", Some("1.3")),
            ]
        );
    }

    #[tokio::test]
    async fn a_line_or_an_event_beyond_the_bound_ends_the_stream() {
        let long = "x".repeat(40);
        let r = reader(&[&format!("data: {long}")], 16);
        assert_eq!(all(r).await, Err(SseError::TooLong { max: 16 }));
        // Short lines, but too many of them for one event.
        let r = reader(&["data: 0123456789\ndata: 0123456789\n\n"], 16);
        assert_eq!(all(r).await, Err(SseError::TooLong { max: 16 }));
    }

    #[tokio::test]
    async fn a_cut_connection_is_an_error_not_an_end() {
        let chunks: Vec<Result<Vec<u8>, TransportError>> = vec![
            Ok(b"data: a\n\n".to_vec()),
            Err(TransportError::Other("reset".into())),
        ];
        let mut r = SseReader::new(Box::pin(futures_util::stream::iter(chunks)), 64);
        assert_eq!(r.next().await.unwrap().unwrap().data, "a");
        assert!(matches!(r.next().await, Err(SseError::Transport(_))));
    }
}
