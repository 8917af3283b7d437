//! The scenario's users (`[users]`): each a secp256k1 key derived from the
//! scenario seed and its name, its user id the key's address (or a CAIP-10
//! id), and the ledger of what the users proved: the pairing codes an
//! honest user created with its own proof and the worker keys that claimed
//! them. The safety key `private_to_unproven_pairing` judges the world's
//! PRIVATE assignments against [`Users::proven`].
//!
//! Keys and proof nonces come from hashes of the seed, not from the
//! world's master RNG: adding users shifts no other peer's seed.

use protocol::signing::Keypair;
use protocol::user_proof::{self, ProofRequest};
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};

/// One scenario user: its key and the user id it acts as.
pub struct User {
    pub key: Keypair,
    /// The key's address (lowercase), or `eip155:<chain>:<address>`.
    pub id: String,
}

/// A request as it was sent with a proof, kept for a replay.
#[derive(Clone)]
pub struct SentProof {
    /// The user id the proof names.
    pub user_id: String,
    pub method: String,
    pub path: String,
    pub body: Vec<u8>,
    pub header: String,
}

/// A pairing code created with its user's own proof: for whom, bound to
/// which worker key (if the create named one).
struct HonestCode {
    user_id: String,
    bound_to: Option<String>,
}

/// The users and their ledger.
#[derive(Default)]
pub struct Users {
    users: BTreeMap<String, User>,
    nonces: Option<ChaCha20Rng>,
    /// The last proof sent by any step (what `replay = true` sends).
    pub last_proof: Option<SentProof>,
    /// The last `trust/create` each user id sent with its own proof, by instance.
    last_create: BTreeMap<(String, String), SentProof>,
    /// The last code each user id created with its own proof, by instance.
    last_code: BTreeMap<(String, String), String>,
    /// By (instance, code in lowercase).
    honest_codes: BTreeMap<(String, String), HonestCode>,
    /// Successful claims: (instance, code in lowercase, key in lowercase).
    claims: BTreeSet<(String, String, String)>,
    /// Claims whose answer was lost (no HTTP answer: the process was
    /// killed mid-request): they may have paired, or not.
    unanswered_claims: BTreeSet<(String, String, String)>,
    /// PRIVATE commits sent with their user's own proof, whatever their
    /// answer, by (instance, user id in lowercase).
    proven_commits: BTreeMap<(String, String), usize>,
}

/// 32 bytes of SHA-256 over a domain, the seed and a name: a ChaCha seed.
fn derive(domain: &str, seed: u64, name: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(domain.as_bytes());
    h.update(seed.to_be_bytes());
    h.update(name.as_bytes());
    h.finalize().into()
}

impl Users {
    /// The users of `specs` (name -> CAIP-10 chain id, if the id is one),
    /// keyed from `seed`.
    pub fn new(seed: u64, specs: &BTreeMap<String, Option<u64>>) -> Self {
        let users = specs
            .iter()
            .map(|(name, chain)| {
                let mut rng = ChaCha20Rng::from_seed(derive("harness user key v1", seed, name));
                let key = Keypair::generate(&mut rng);
                let address = key.address().to_ascii_lowercase();
                let id = match chain {
                    Some(chain) => format!("eip155:{chain}:{address}"),
                    None => address,
                };
                (name.clone(), User { key, id })
            })
            .collect();
        Self {
            users,
            nonces: Some(ChaCha20Rng::from_seed(derive(
                "harness user nonces v1",
                seed,
                "",
            ))),
            ..Self::default()
        }
    }

    pub fn get(&self, name: &str) -> Result<&User, String> {
        self.users.get(name).ok_or_else(|| {
            let known: Vec<&str> = self.users.keys().map(String::as_str).collect();
            format!("no user {name:?} (users: {})", known.join(", "))
        })
    }

    /// `(name, id)` of every user, for the `{{user.NAME}}` variables.
    pub fn ids(&self) -> impl Iterator<Item = (&str, &str)> {
        self.users.iter().map(|(n, u)| (n.as_str(), u.id.as_str()))
    }

    /// Signs a proof for the request as user id `user_id` with `key_of`'s
    /// key at `now_ms` (the simulated clock); remembers it for a replay.
    pub fn sign(
        &mut self,
        key_of: &str,
        user_id: &str,
        request: &ProofRequest<'_>,
        now_ms: i64,
    ) -> Result<String, String> {
        self.get(key_of)?;
        let key = &self.users[key_of].key;
        let nonces = self
            .nonces
            .get_or_insert_with(|| ChaCha20Rng::seed_from_u64(0));
        let header = user_proof::sign_now(key, user_id, request, now_ms, nonces);
        self.last_proof = Some(SentProof {
            user_id: user_id.to_owned(),
            method: request.method.to_owned(),
            path: request.path_and_query.to_owned(),
            body: request.body.to_vec(),
            header: header.clone(),
        });
        Ok(header)
    }

    /// Whether `key_of`'s key is the key of the account `user_id` names:
    /// the proof is the user's own.
    pub fn is_own(&self, key_of: &str, user_id: &str) -> bool {
        let (Ok(user), Some(id)) = (self.get(key_of), user_proof::normalize_user_id(user_id))
        else {
            return false;
        };
        user_proof::normalize_user_id(&user.id).is_some_and(|own| {
            user_proof::Account::parse(&own).map(|a| a.address_hex())
                == user_proof::Account::parse(&id).map(|a| a.address_hex())
        })
    }

    /// An honest `trust/create` answered with `code`: the user proved it.
    pub fn record_create(
        &mut self,
        instance: &str,
        user_id: &str,
        code: &str,
        bound_to: Option<&str>,
        sent: SentProof,
    ) {
        let user_id = normal(user_id);
        let code = code.to_ascii_lowercase();
        self.last_create
            .insert((instance.to_owned(), user_id.clone()), sent);
        self.last_code
            .insert((instance.to_owned(), user_id.clone()), code.clone());
        self.honest_codes.insert(
            (instance.to_owned(), code),
            HonestCode {
                user_id,
                bound_to: bound_to.map(str::to_ascii_lowercase),
            },
        );
    }

    /// A `trust/claim` answered 2xx (`answered`), or whose answer was lost.
    pub fn record_claim(&mut self, instance: &str, code: &str, key: &str, answered: bool) {
        let claims = match answered {
            true => &mut self.claims,
            false => &mut self.unanswered_claims,
        };
        claims.insert((
            instance.to_owned(),
            code.to_ascii_lowercase(),
            key.to_ascii_lowercase(),
        ));
    }

    /// The last `trust/create` `user_id` sent with its own proof on `instance`.
    pub fn last_create(&self, instance: &str, user_id: &str) -> Option<&SentProof> {
        self.last_create
            .get(&(instance.to_owned(), normal(user_id)))
    }

    /// The last code `user_id` created with its own proof on `instance`.
    pub fn last_code(&self, instance: &str, user_id: &str) -> Option<&str> {
        self.last_code
            .get(&(instance.to_owned(), normal(user_id)))
            .map(String::as_str)
    }

    /// The pairings each instance's users proved: (user id in normal form,
    /// worker key in lowercase) for every claim of a code its user created
    /// with its own proof, and, when the create named a worker key, only
    /// that key's claim.
    pub fn proven(&self) -> BTreeMap<String, BTreeSet<(String, String)>> {
        self.pairings_of(&self.claims)
    }

    /// Notes a PRIVATE commit to `instance` sent with the own proof of
    /// `user_id` (the id its body names).
    pub fn note_proven_commit(&mut self, instance: &str, user_id: &str) {
        let key = (instance.to_owned(), user_id.to_ascii_lowercase());
        *self.proven_commits.entry(key).or_default() += 1;
    }

    /// The PRIVATE commits sent with their user's own proof to `instance`,
    /// by user id in lowercase.
    pub fn proven_commits(&self, instance: &str) -> BTreeMap<String, usize> {
        (self.proven_commits.iter())
            .filter(|((i, _), _)| i == instance)
            .map(|((_, user), n)| (user.clone(), *n))
            .collect()
    }

    /// The pairings whose claim's answer was lost, as [`Self::proven`]
    /// (swarm seed 3764: a claim cut by a crash at its store write was
    /// committed): the user proved them, so a PRIVATE job may go there,
    /// but nobody was told they exist, so they need not survive.
    pub fn unanswered(&self) -> BTreeMap<String, BTreeSet<(String, String)>> {
        self.pairings_of(&self.unanswered_claims)
    }

    fn pairings_of(
        &self,
        claims: &BTreeSet<(String, String, String)>,
    ) -> BTreeMap<String, BTreeSet<(String, String)>> {
        let mut out: BTreeMap<String, BTreeSet<(String, String)>> = BTreeMap::new();
        for (instance, code, key) in claims {
            let Some(honest) = self.honest_codes.get(&(instance.clone(), code.clone())) else {
                continue;
            };
            if honest.bound_to.as_ref().is_some_and(|b| b != key) {
                continue;
            }
            out.entry(instance.clone())
                .or_default()
                .insert((honest.user_id.clone(), key.clone()));
        }
        out
    }
}

/// A user id in the form the coordinator keys it by (accounts in
/// lowercase; a plain name as it is).
pub fn normal(user_id: &str) -> String {
    user_proof::normalize_user_id(user_id).unwrap_or_else(|| user_id.to_owned())
}
