//! Proving the user (decision 0017): a coordinator with `--user-auth on`
//! (its default) runs a PRIVATE job only with the user's proof, the
//! `X-User-Proof` header of `protocol::user_proof`. The router adds it to
//! every PRIVATE commit when its configuration holds a [`UserSigner`].

use crate::payment::WallClock;
use protocol::signing::Keypair;
use protocol::user_proof::{self, ProofRequest};
use rand_chacha::ChaCha20Rng;
use std::sync::Mutex;

/// Signs the proof of a user for one request. A wallet, a remote signer or
/// [`KeyUserSigner`] (a local key) implements it. `Debug` must not print
/// secrets.
pub trait UserSigner: Send + Sync + std::fmt::Debug {
    /// The `X-User-Proof` value for `request`, acting as `user_id` (which
    /// must be this signer's account), or why it cannot be made.
    fn proof_header(&self, user_id: &str, request: &ProofRequest<'_>) -> Result<String, String>;
}

/// A user signer holding the user's key: a fresh nonce from its RNG and the
/// time of its clock for every proof.
pub struct KeyUserSigner {
    key: Keypair,
    clock: WallClock,
    rng: Mutex<ChaCha20Rng>,
}

impl KeyUserSigner {
    pub fn new(key: Keypair, clock: WallClock, rng: ChaCha20Rng) -> Self {
        Self {
            key,
            clock,
            rng: Mutex::new(rng),
        }
    }

    /// The user id this key proves: its address (EIP-55).
    pub fn address(&self) -> String {
        self.key.address()
    }
}

impl std::fmt::Debug for KeyUserSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyUserSigner")
            .field("address", &self.address())
            .finish_non_exhaustive()
    }
}

impl UserSigner for KeyUserSigner {
    fn proof_header(&self, user_id: &str, request: &ProofRequest<'_>) -> Result<String, String> {
        let account = user_proof::Account::parse(user_id).ok_or_else(|| {
            format!("user id {user_id:?} is not an account, so it cannot be proven")
        })?;
        if !account.address_hex().eq_ignore_ascii_case(&self.address()) {
            return Err(format!(
                "user id {user_id} is not this signer's account ({})",
                self.address()
            ));
        }
        let mut rng = self
            .rng
            .lock()
            .map_err(|_| "user-proof RNG poisoned".to_owned())?;
        Ok(user_proof::sign_now(
            &self.key,
            user_id,
            request,
            self.clock.now_ms(),
            &mut *rng,
        ))
    }
}

/// The path and query of an absolute URL, as its request line carries it
/// (what the proof signs): `http://h:1/v1/x?q` → `/v1/x?q`.
pub fn path_and_query(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let path = rest.find('/').map_or("/", |at| &rest[at..]);
    path.split('#').next().unwrap_or(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_signer_proves_only_its_own_account() {
        use rand::SeedableRng;
        let key = Keypair::generate(&mut ChaCha20Rng::seed_from_u64(1));
        let clock: WallClock = std::sync::Arc::new(protocol::clock::ManualClock::new(1_000));
        let signer = KeyUserSigner::new(key.clone(), clock, ChaCha20Rng::seed_from_u64(2));
        let request = ProofRequest {
            method: "POST",
            path_and_query: "/v1/jobs/commit/fast",
            body: b"{}",
        };
        for user in [
            key.address(),
            format!("eip155:1:{}", key.address().to_lowercase()),
        ] {
            let header = signer.proof_header(&user, &request).unwrap();
            let verified =
                user_proof::verify(&header, &request, 1_000, user_proof::WINDOW_MS).unwrap();
            assert_eq!(verified.account.address_hex(), key.address().to_lowercase());
        }
        let other = Keypair::generate(&mut ChaCha20Rng::seed_from_u64(3)).address();
        assert!(signer.proof_header(&other, &request).is_err());
        assert!(signer.proof_header("alice", &request).is_err());
    }

    #[test]
    fn path_and_query_of_urls() {
        assert_eq!(
            path_and_query("http://127.0.0.1:8080/v1/jobs/commit/fast"),
            "/v1/jobs/commit/fast"
        );
        assert_eq!(
            path_and_query("https://c.example/p/v1/trust/list?user_id=0xab#f"),
            "/p/v1/trust/list?user_id=0xab"
        );
        assert_eq!(path_and_query("http://host"), "/");
    }
}
