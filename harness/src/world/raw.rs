//! `raw_request`: bytes sent as they are, for request heads that no HTTP
//! client would send (a control character in a header or in the request
//! line, a malformed request line): what hyper's parser refuses before any
//! route runs (principle 4).

use super::{sim_host, World, WorldError};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// How long a raw request waits for its whole answer (simulated time in
/// the simulation): the instance answers a head at once, and closes the
/// connection after an answer to a head it could not parse.
const ANSWER_WAIT_MS: u64 = 10_000;

/// The most of an answer a raw request reads.
const ANSWER_BYTES_MAX: usize = 64 * 1024;

/// The answer to a raw request: its status and body bytes.
pub struct RawAnswer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl World {
    /// Sends `bytes` on a new connection from `client` to node 0 of
    /// `instance` and reads the answer: until the instance closes the
    /// connection, the answer's `content-length` is in, or
    /// [`ANSWER_WAIT_MS`] pass.
    pub async fn raw_exchange(
        &self,
        instance: &str,
        client: &str,
        bytes: &[u8],
    ) -> Result<RawAnswer, WorldError> {
        let received = match &self.net {
            Some(net) => {
                let link = net
                    .connect(net.peer_addr(client), &sim_host(instance))
                    .map_err(|e| WorldError::Failed(format!("raw request: {e}")))?;
                exchange(link, bytes).await?
            }
            None => {
                let base = self.base_url(instance)?;
                let authority = (base.strip_prefix("http://"))
                    .map(|rest| rest.split('/').next().unwrap_or(rest))
                    .ok_or_else(|| format!("raw request: {base} is not an http:// URL"))?;
                let link = tokio::net::TcpStream::connect(authority)
                    .await
                    .map_err(|e| format!("raw request: {authority}: {e}"))?;
                exchange(link, bytes).await?
            }
        };
        parse_answer(&received)
    }
}

async fn exchange<L>(mut link: L, bytes: &[u8]) -> Result<Vec<u8>, WorldError>
where
    L: AsyncRead + AsyncWrite + Unpin,
{
    link.write_all(bytes)
        .await
        .map_err(|e| format!("raw request: {e}"))?;
    let mut received = Vec::new();
    let mut chunk = [0u8; 4096];
    let reading = async {
        while received.len() < ANSWER_BYTES_MAX && !is_whole(&received) {
            match link.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => received.extend_from_slice(&chunk[..n]),
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_millis(ANSWER_WAIT_MS), reading).await;
    Ok(received)
}

/// Whether `received` holds an answer's head and all of the body its
/// `content-length` announces.
fn is_whole(received: &[u8]) -> bool {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut response = httparse::Response::new(&mut headers);
    let Ok(httparse::Status::Complete(head_len)) = response.parse(received) else {
        return false;
    };
    let length = (response.headers.iter())
        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
        .and_then(|h| std::str::from_utf8(h.value).ok()?.parse::<usize>().ok());
    length.is_some_and(|n| received.len() >= head_len + n)
}

fn parse_answer(received: &[u8]) -> Result<RawAnswer, WorldError> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut response = httparse::Response::new(&mut headers);
    let head_len = match response.parse(received) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if received.is_empty() => {
            return Err("raw request: the connection closed without an answer".into())
        }
        Ok(httparse::Status::Partial) => return Err("raw request: an unfinished answer".into()),
        Err(e) => return Err(format!("raw request: the answer is not HTTP: {e}").into()),
    };
    let headers = (response.headers.iter())
        .map(|h| {
            let value = String::from_utf8_lossy(h.value).into_owned();
            (h.name.to_ascii_lowercase(), value)
        })
        .collect();
    Ok(RawAnswer {
        status: response.code.unwrap_or_default(),
        headers,
        body: received[head_len..].to_vec(),
    })
}
