//! Pairing codes and the trusted-worker lists they build (spec 4.5-4.7).
//!
//! A code is 6 hex characters drawn from the coordinator's RNG, unique among
//! the codes it remembers, valid for one hour. Claimed and expired codes are
//! remembered for a retention period so a late claim is told `already_claimed`
//! or `expired`, not `invalid_code`. Claims are rate-limited per client
//! address: with 16^6 codes and 10 tries a minute, guessing one live code
//! within its hour takes about 28,000 addresses working together.

use rand::RngCore;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// One pairing code and what became of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pairing {
    pub code: String,
    pub user_id: String,
    pub created_at_ms: i64,
    pub expires_at_ms: i64,
    pub claimed_by: Option<String>,
    pub claimed_at_ms: Option<i64>,
}

/// A worker key a user trusts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrustEntry {
    pub user_id: String,
    pub provider_pubkey: String,
    pub paired_at_ms: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ClaimError {
    #[error("invalid_code")]
    InvalidCode,
    #[error("already_claimed")]
    AlreadyClaimed,
    #[error("expired")]
    Expired,
    #[error("too many claim attempts; retry after {retry_after_ms} ms")]
    RateLimited { retry_after_ms: i64 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("too many pairing codes outstanding")]
pub struct TooManyCodes;

const CLAIM_WINDOW_MS: i64 = 60_000;
/// Client addresses tracked by the claim limiter before stale windows are swept.
const CLAIM_CLIENTS_SWEEP_AT: usize = 10_000;

#[derive(Debug, Default)]
pub struct Trust {
    codes: HashMap<String, Pairing>,
    /// (forget_at_ms, code): when a code leaves memory.
    forget_order: BTreeSet<(i64, String)>,
    /// user -> provider key -> paired_at.
    users: BTreeMap<String, BTreeMap<String, i64>>,
    /// provider key -> users trusting it.
    trusted_by: HashMap<String, BTreeSet<String>>,
    /// client address -> (window start, claims in the window).
    claim_windows: HashMap<String, (i64, u32)>,
}

impl Trust {
    /// Issues a fresh code for `user_id`.
    pub fn create(
        &mut self,
        user_id: &str,
        now_ms: i64,
        ttl_ms: i64,
        retention_ms: i64,
        codes_max: usize,
        rng: &mut impl RngCore,
    ) -> Result<Pairing, TooManyCodes> {
        self.forget_old(now_ms);
        if self.codes.len() >= codes_max {
            return Err(TooManyCodes);
        }
        // The space holds 16.7M codes and at most `codes_max` are taken, so a
        // free one is found in very few draws.
        let code = loop {
            let mut bytes = [0u8; 3];
            rng.fill_bytes(&mut bytes);
            let code = hex::encode(bytes);
            if !self.codes.contains_key(&code) {
                break code;
            }
        };
        let pairing = Pairing {
            code: code.clone(),
            user_id: user_id.to_owned(),
            created_at_ms: now_ms,
            expires_at_ms: now_ms + ttl_ms,
            claimed_by: None,
            claimed_at_ms: None,
        };
        self.forget_order
            .insert((pairing.expires_at_ms + retention_ms, code.clone()));
        self.codes.insert(code, pairing.clone());
        Ok(pairing)
    }

    /// Claims `code` for `provider_pubkey`; on success the user trusts the key.
    pub fn claim(
        &mut self,
        code: &str,
        provider_pubkey: &str,
        client: &str,
        now_ms: i64,
        claims_per_minute_max: u32,
    ) -> Result<(Pairing, TrustEntry), ClaimError> {
        self.count_claim(client, now_ms, claims_per_minute_max)?;
        self.forget_old(now_ms);
        let code = code.trim().to_ascii_lowercase();
        let pairing = self.codes.get_mut(&code).ok_or(ClaimError::InvalidCode)?;
        if pairing.claimed_by.is_some() {
            return Err(ClaimError::AlreadyClaimed);
        }
        if now_ms >= pairing.expires_at_ms {
            return Err(ClaimError::Expired);
        }
        pairing.claimed_by = Some(provider_pubkey.to_owned());
        pairing.claimed_at_ms = Some(now_ms);
        let pairing = pairing.clone();
        let entry = TrustEntry {
            user_id: pairing.user_id.clone(),
            provider_pubkey: provider_pubkey.to_owned(),
            paired_at_ms: now_ms,
        };
        self.insert_trust(&entry);
        Ok((pairing, entry))
    }

    fn insert_trust(&mut self, entry: &TrustEntry) {
        // Pairing the same key again refreshes `paired_at`; it is one entry.
        self.users
            .entry(entry.user_id.clone())
            .or_default()
            .insert(entry.provider_pubkey.clone(), entry.paired_at_ms);
        self.trusted_by
            .entry(entry.provider_pubkey.clone())
            .or_default()
            .insert(entry.user_id.clone());
    }

    fn count_claim(&mut self, client: &str, now_ms: i64, max: u32) -> Result<(), ClaimError> {
        if self.claim_windows.len() >= CLAIM_CLIENTS_SWEEP_AT {
            self.claim_windows
                .retain(|_, (start, _)| now_ms - *start < CLAIM_WINDOW_MS);
        }
        let window = self
            .claim_windows
            .entry(client.to_owned())
            .or_insert((now_ms, 0));
        if now_ms - window.0 >= CLAIM_WINDOW_MS {
            *window = (now_ms, 0);
        }
        if window.1 >= max {
            return Err(ClaimError::RateLimited {
                retry_after_ms: window.0 + CLAIM_WINDOW_MS - now_ms,
            });
        }
        window.1 += 1;
        Ok(())
    }

    fn forget_old(&mut self, now_ms: i64) {
        while let Some((at, _)) = self.forget_order.first() {
            if *at > now_ms {
                break;
            }
            let (_, code) = self.forget_order.pop_first().expect("first exists");
            self.codes.remove(&code);
        }
    }

    /// The user's trusted keys, oldest pairing first.
    pub fn list(&self, user_id: &str) -> Vec<TrustEntry> {
        let mut out: Vec<TrustEntry> = self
            .users
            .get(user_id)
            .into_iter()
            .flatten()
            .map(|(key, at)| TrustEntry {
                user_id: user_id.to_owned(),
                provider_pubkey: key.clone(),
                paired_at_ms: *at,
            })
            .collect();
        out.sort_by(|a, b| {
            (a.paired_at_ms, &a.provider_pubkey).cmp(&(b.paired_at_ms, &b.provider_pubkey))
        });
        out
    }

    pub fn trusts(&self, user_id: &str, provider_pubkey: &str) -> bool {
        self.users
            .get(user_id)
            .is_some_and(|keys| keys.contains_key(provider_pubkey))
    }

    /// Users who trust `provider_pubkey`, in order.
    pub fn users_trusting(&self, provider_pubkey: &str) -> impl Iterator<Item = &String> {
        self.trusted_by.get(provider_pubkey).into_iter().flatten()
    }

    /// Keys `user_id` trusts, in order.
    pub fn keys_of(&self, user_id: &str) -> impl Iterator<Item = &String> {
        self.users.get(user_id).into_iter().flat_map(|m| m.keys())
    }

    /// Restores state written by a store.
    pub fn restore(&mut self, pairings: Vec<Pairing>, entries: Vec<TrustEntry>, retention_ms: i64) {
        for p in pairings {
            self.forget_order
                .insert((p.expires_at_ms + retention_ms, p.code.clone()));
            self.codes.insert(p.code.clone(), p);
        }
        for e in &entries {
            self.insert_trust(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    const HOUR: i64 = 3_600_000;

    fn trust_with_code(rng: &mut rand_chacha::ChaCha20Rng) -> (Trust, String) {
        let mut t = Trust::default();
        let p = t.create("alice", 0, HOUR, 24 * HOUR, 100, rng).unwrap();
        (t, p.code)
    }

    #[test]
    fn code_is_six_hex_and_expires_in_an_hour() {
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(1);
        let mut t = Trust::default();
        let p = t
            .create("alice", 1_000, HOUR, 24 * HOUR, 100, &mut rng)
            .unwrap();
        assert_eq!(p.code.len(), 6);
        assert!(p
            .code
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert_eq!(p.expires_at_ms, 1_000 + HOUR);
    }

    #[test]
    fn claim_lifecycle() {
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(2);
        let (mut t, code) = trust_with_code(&mut rng);
        assert_eq!(
            t.claim("zzzzzz", "0xk", "c", 5, 100).unwrap_err(),
            ClaimError::InvalidCode
        );
        let (_, entry) = t.claim(&code.to_uppercase(), "0xk", "c", 5, 100).unwrap();
        assert_eq!(entry.paired_at_ms, 5);
        assert!(t.trusts("alice", "0xk"));
        assert_eq!(
            t.claim(&code, "0xk2", "c", 6, 100).unwrap_err(),
            ClaimError::AlreadyClaimed
        );
        assert_eq!(t.users_trusting("0xk").collect::<Vec<_>>(), ["alice"]);
    }

    #[test]
    fn expiry_is_exactly_one_hour() {
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(3);
        let (mut t, code) = trust_with_code(&mut rng);
        assert_eq!(
            t.claim(&code, "0xk", "c", HOUR, 100).unwrap_err(),
            ClaimError::Expired
        );
        let (mut t, code) = trust_with_code(&mut rand_chacha::ChaCha20Rng::seed_from_u64(3));
        assert!(t.claim(&code, "0xk", "c", HOUR - 1, 100).is_ok());
    }

    #[test]
    fn rate_limit_per_client_and_window() {
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(4);
        let (mut t, _) = trust_with_code(&mut rng);
        for _ in 0..3 {
            assert_eq!(
                t.claim("000000", "k", "a", 0, 3).unwrap_err(),
                ClaimError::InvalidCode
            );
        }
        assert_eq!(
            t.claim("000000", "k", "a", 10_000, 3).unwrap_err(),
            ClaimError::RateLimited {
                retry_after_ms: 50_000
            }
        );
        // Another client is not affected; the window reopens after a minute.
        assert_eq!(
            t.claim("000000", "k", "b", 10_000, 3).unwrap_err(),
            ClaimError::InvalidCode
        );
        assert_eq!(
            t.claim("000000", "k", "a", 60_000, 3).unwrap_err(),
            ClaimError::InvalidCode
        );
    }

    #[test]
    fn old_codes_are_forgotten_after_retention() {
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(5);
        let (mut t, code) = trust_with_code(&mut rng);
        t.create("bob", 25 * HOUR, HOUR, 24 * HOUR, 100, &mut rng)
            .unwrap();
        assert_eq!(
            t.claim(&code, "k", "c", 25 * HOUR, 100).unwrap_err(),
            ClaimError::InvalidCode
        );
    }

    #[test]
    fn codes_are_capped() {
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(6);
        let mut t = Trust::default();
        t.create("a", 0, HOUR, HOUR, 1, &mut rng).unwrap();
        assert_eq!(t.create("a", 0, HOUR, HOUR, 1, &mut rng), Err(TooManyCodes));
    }
}
