//! What a worker's owner does once, by hand: make the worker's key
//! (`worker-sim keygen`) and claim a user's pairing code for it
//! (`worker-sim claim`), so the user's PRIVATE jobs may go to that worker.
//! With the user's key at hand, `worker-sim pair` does both halves: it
//! creates a code bound to the worker's key with the user's proof
//! (`X-User-Proof`, decision 0017), then claims it.
//!
//! The key file is the format `--key-file` and [`KeySource::File`] read: the
//! secret as `0x`-prefixed hex on one line.

use crate::config::{KeyError, KeySource};
use protocol::api::{ClaimPairing, Claimed, CreatePairing, PairingCode};
use protocol::signing::Keypair;
use protocol::user_proof::{self, ProofRequest};
use rand_chacha::ChaCha20Rng;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The longest coordinator answer `claim` reads; a claim's answer is a few
/// dozen bytes, so anything longer is not a coordinator.
const CLAIM_RESPONSE_BYTES_MAX: usize = 16 * 1024;

/// How long `claim` waits for the coordinator.
const CLAIM_TIMEOUT_MS: u64 = 10_000;

#[derive(Debug, thiserror::Error)]
pub enum KeygenError {
    #[error("{0} already exists; pass --force to overwrite it (the old key is lost)")]
    Exists(PathBuf),
    #[error("writing key file {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Writes a new secret to `path` (mode 0600 on Unix) and returns its keypair.
/// An existing file is kept unless `force`: it may be a live worker's key.
/// The binary passes an RNG seeded from OS entropy; tests pass a fixed seed.
pub fn keygen(path: &Path, force: bool, rng: &mut ChaCha20Rng) -> Result<Keypair, KeygenError> {
    let keypair = Keypair::generate(rng);
    let write_error = |source| KeygenError::Write {
        path: path.to_owned(),
        source,
    };
    let mut options = std::fs::OpenOptions::new();
    options.write(true);
    if force {
        options.create(true).truncate(true);
    } else {
        // create_new is atomic: no window between "does it exist" and the write.
        options.create_new(true);
    }
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path).map_err(|source| {
        if source.kind() == std::io::ErrorKind::AlreadyExists {
            KeygenError::Exists(path.to_owned())
        } else {
            write_error(source)
        }
    })?;
    // `mode` applies only to a file this call creates; an overwritten one
    // keeps its old mode, which may let others read the new secret.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(write_error)?;
    }
    file.write_all(format!("{}\n", keypair.secret_hex()).as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(write_error)?;
    Ok(keypair)
}

#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    #[error(transparent)]
    Key(#[from] KeyError),
    #[error("bad coordinator URL {url:?}: {reason}")]
    Url { url: String, reason: String },
    #[error("could not reach the coordinator at {url}: {source}")]
    Request { url: String, source: reqwest::Error },
    /// The coordinator's own refusal (`invalid_code`, `already_claimed`,
    /// `expired`, `user_proof_required`, ...), with its message when it has one.
    #[error("the coordinator refused: {error} (HTTP {status}){}", message.as_deref().map(|m| format!(": {m}")).unwrap_or_default())]
    Refused {
        status: u16,
        error: String,
        message: Option<String>,
    },
    #[error("unexpected answer from the coordinator (HTTP {status}): {body}")]
    Unexpected { status: u16, body: String },
}

/// `POST /v1/trust/claim` of the coordinator at `coordinator` for the key
/// in `key_file`. `coordinator` is the HTTP base URL (`http://host:port`);
/// the workers' `ws://host:port/v1/workers/ws` is accepted too.
pub async fn claim(
    http: &reqwest::Client,
    coordinator: &str,
    code: &str,
    key_file: &Path,
) -> Result<Claimed, ClaimError> {
    let keypair = KeySource::File(key_file.to_owned()).load(0)?;
    claim_for(http, coordinator, code, &keypair).await
}

async fn claim_for(
    http: &reqwest::Client,
    coordinator: &str,
    code: &str,
    keypair: &Keypair,
) -> Result<Claimed, ClaimError> {
    let url = endpoint_url(coordinator, "/v1/trust/claim")?;
    let body = ClaimPairing {
        pairing_code: code.trim().to_owned(),
        provider_pubkey: keypair.public_key_hex(),
    };
    let body = serde_json::to_vec(&body).expect("a claim serializes");
    post_json(http, url, body, None, 200).await
}

/// `worker-sim pair`: as the user (`user`, proving `user_id`, its address
/// by default), creates a pairing code bound to `worker`'s key with the
/// user's proof issued at `now_ms` (nonce from `rng`), then claims it for
/// that key. Nobody else can claim the code in between.
pub async fn pair(
    http: &reqwest::Client,
    coordinator: &str,
    user: &Keypair,
    user_id: Option<&str>,
    worker: &Keypair,
    now_ms: i64,
    rng: &mut ChaCha20Rng,
) -> Result<Claimed, ClaimError> {
    let user_id = user_id.map_or_else(|| user.address(), str::to_owned);
    let url = endpoint_url(coordinator, "/v1/trust/create")?;
    let body = CreatePairing {
        user_id: user_id.clone(),
        provider_pubkey: Some(worker.public_key_hex()),
    };
    let body = serde_json::to_vec(&body).expect("a create serializes");
    let request = ProofRequest {
        method: "POST",
        path_and_query: &path_and_query(&url),
        body: &body,
    };
    let proof = user_proof::sign_now(user, &user_id, &request, now_ms, rng);
    let code: PairingCode = post_json(http, url, body, Some(proof), 201).await?;
    claim_for(http, coordinator, &code.pairing_code, worker).await
}

/// The path and query of `url` as its request line carries them.
fn path_and_query(url: &reqwest::Url) -> String {
    match url.query() {
        Some(query) => format!("{}?{query}", url.path()),
        None => url.path().to_owned(),
    }
}

/// POSTs `body` (JSON) with an optional user proof and reads a bounded
/// answer: `T` when the status is `ok`, else the coordinator's refusal.
async fn post_json<T: serde::de::DeserializeOwned>(
    http: &reqwest::Client,
    url: reqwest::Url,
    body: Vec<u8>,
    proof: Option<String>,
    ok: u16,
) -> Result<T, ClaimError> {
    let request_error = |source| ClaimError::Request {
        url: url.to_string(),
        source,
    };
    let mut request = http
        .post(url.clone())
        .timeout(std::time::Duration::from_millis(CLAIM_TIMEOUT_MS))
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body);
    if let Some(proof) = proof {
        request = request.header(user_proof::HEADER, proof);
    }
    let mut response = request.send().await.map_err(request_error)?;
    let status = response.status().as_u16();
    let mut bytes = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(request_error)? {
        bytes.extend_from_slice(&chunk);
        if bytes.len() > CLAIM_RESPONSE_BYTES_MAX {
            return Err(ClaimError::Unexpected {
                status,
                body: format!("more than {CLAIM_RESPONSE_BYTES_MAX} bytes"),
            });
        }
    }
    if status == ok {
        if let Ok(answer) = serde_json::from_slice::<T>(&bytes) {
            return Ok(answer);
        }
    } else if let Ok(refusal) = serde_json::from_slice::<serde_json::Value>(&bytes) {
        if let Some(error) = refusal["error"].as_str() {
            return Err(ClaimError::Refused {
                status,
                error: error.to_owned(),
                message: refusal["message"].as_str().map(str::to_owned),
            });
        }
    }
    Err(ClaimError::Unexpected {
        status,
        body: String::from_utf8_lossy(&bytes).chars().take(200).collect(),
    })
}

/// The claim endpoint under an HTTP base URL, or beside a worker WebSocket URL.
#[cfg(test)]
fn claim_url(coordinator: &str) -> Result<reqwest::Url, ClaimError> {
    endpoint_url(coordinator, "/v1/trust/claim")
}

/// `endpoint` (`/v1/trust/...`) under an HTTP base URL, or beside a worker
/// WebSocket URL.
fn endpoint_url(coordinator: &str, endpoint: &str) -> Result<reqwest::Url, ClaimError> {
    let bad = |reason: &str| ClaimError::Url {
        url: coordinator.to_owned(),
        reason: reason.to_owned(),
    };
    let mut url = reqwest::Url::parse(coordinator.trim()).map_err(|e| bad(&e.to_string()))?;
    let scheme = match url.scheme() {
        "http" | "ws" => "http",
        "https" | "wss" => "https",
        _ => return Err(bad("want http://, https://, ws:// or wss://")),
    };
    if url.scheme() != scheme {
        url.set_scheme(scheme)
            .map_err(|()| bad("cannot change the scheme"))?;
    }
    let base = url.path().trim_end_matches('/');
    let base = base.strip_suffix("/v1/workers/ws").unwrap_or(base);
    let path = format!("{base}{endpoint}");
    url.set_path(&path);
    url.set_query(None);
    url.set_fragment(None);
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("worker-sim-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn claim_url_accepts_http_bases_and_the_worker_socket_url() {
        let url = |s: &str| claim_url(s).map(|u| u.to_string());
        assert_eq!(
            url("http://127.0.0.1:8080").unwrap(),
            "http://127.0.0.1:8080/v1/trust/claim"
        );
        assert_eq!(
            url("https://c.example/base/").unwrap(),
            "https://c.example/base/v1/trust/claim"
        );
        assert_eq!(
            url("ws://127.0.0.1:8080/v1/workers/ws").unwrap(),
            "http://127.0.0.1:8080/v1/trust/claim"
        );
        assert_eq!(
            url("wss://c.example/v1/workers/ws").unwrap(),
            "https://c.example/v1/trust/claim"
        );
        assert!(matches!(url("ftp://x"), Err(ClaimError::Url { .. })));
        assert!(matches!(url("not a url"), Err(ClaimError::Url { .. })));
    }

    #[test]
    fn keygen_writes_a_loadable_private_key_and_keeps_an_existing_one() {
        let dir = temp_dir("keygen");
        let path = dir.join("worker.key");
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        let first = keygen(&path, false, &mut rng).unwrap();
        let loaded = KeySource::File(path.clone()).load(0).unwrap();
        assert_eq!(loaded.public_key_hex(), first.public_key_hex());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }

        assert!(matches!(
            keygen(&path, false, &mut rng),
            Err(KeygenError::Exists(_))
        ));
        let kept = KeySource::File(path.clone()).load(0).unwrap();
        assert_eq!(kept.public_key_hex(), first.public_key_hex());

        // --force replaces the key and tightens a loose mode.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
        let second = keygen(&path, true, &mut rng).unwrap();
        assert_ne!(second.public_key_hex(), first.public_key_hex());
        let loaded = KeySource::File(path.clone()).load(0).unwrap();
        assert_eq!(loaded.public_key_hex(), second.public_key_hex());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
