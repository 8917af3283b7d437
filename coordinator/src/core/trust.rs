//! Pairing codes and the trusted-worker lists they build (spec 4.5-4.7).
//!
//! A code is 6 hex characters drawn from the coordinator's RNG, unique among
//! the codes it remembers, valid for one hour. Claimed and expired codes are
//! remembered for a retention period so a late claim is told `already_claimed`
//! or `expired`, not `invalid_code`.
//!
//! Abuse limits (docs/security.md, "Pairing abuse"): creates are rate-limited
//! per client address and per user, each user holds a few live codes, and
//! only live codes count against the global cap, so a flood of creates
//! cannot switch pairing off for everyone. Failed claims (not successful
//! ones) are limited per client address and for all clients together; the
//! global budget bounds the guessing rate however many addresses an
//! attacker has.

use crate::config::{Config, Limits};
use crate::core::rate::{Limited, Windows};
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
    /// The worker key the user named at create (canonical form): only it
    /// may claim the code. `None`: any key, first come (decision 0017).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_pubkey: Option<String>,
}

/// A worker key a user trusts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrustEntry {
    pub user_id: String,
    pub provider_pubkey: String,
    pub paired_at_ms: i64,
}

/// Who used up a rate limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitScope {
    /// The calling client address (IPv6: its /64).
    Client,
    /// The user the request names.
    User,
    /// All clients together.
    Everyone,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ClaimError {
    #[error("invalid_code")]
    InvalidCode,
    #[error("already_claimed")]
    AlreadyClaimed,
    #[error("expired")]
    Expired,
    /// Told only once the code is known good, so the spec's code errors come first.
    #[error("{0}")]
    Key(KeyNotOnCurve),
    #[error("too many failed claims; retry after {retry_after_ms} ms")]
    RateLimited {
        scope: LimitScope,
        retry_after_ms: i64,
    },
}

/// A `provider_pubkey` of the right shape that is not a curve point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("provider_pubkey is not a point on secp256k1")]
pub struct KeyNotOnCurve;

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CreateError {
    #[error("too many pairing codes created; retry after {retry_after_ms} ms")]
    RateLimited {
        scope: LimitScope,
        retry_after_ms: i64,
    },
    /// The user holds `pairing_codes_per_user_max` live codes.
    #[error(
        "too many live pairing codes for this user; claim one or retry after {retry_after_ms} ms"
    )]
    UserCodesFull { retry_after_ms: i64 },
    /// `pairing_codes_max` live codes exist.
    #[error("too many pairing codes outstanding")]
    TooManyCodes,
}

#[derive(Debug, Default)]
pub struct Trust {
    codes: HashMap<String, Pairing>,
    /// (forget_at_ms, code): when a code leaves memory.
    forget_order: BTreeSet<(i64, String)>,
    /// (expires_at_ms, code) of live codes (unclaimed, unexpired): what the
    /// global cap counts.
    live: BTreeSet<(i64, String)>,
    /// user -> (expires_at_ms, code) of the user's live codes.
    live_by_user: HashMap<String, BTreeSet<(i64, String)>>,
    /// user -> provider key -> paired_at.
    users: BTreeMap<String, BTreeMap<String, i64>>,
    /// provider key -> users trusting it.
    trusted_by: HashMap<String, BTreeSet<String>>,
    creates_by_client: Windows,
    creates_by_user: Windows,
    claim_failures_by_client: Windows,
    /// One key (`""`): failed claims of all clients together.
    claim_failures: Windows,
}

impl Trust {
    /// Issues a fresh code for `user_id`, asked by `client`.
    pub fn create(
        &mut self,
        user_id: &str,
        bound_to: Option<&str>,
        client: &str,
        now_ms: i64,
        config: &Config,
        rng: &mut impl RngCore,
    ) -> Result<Pairing, CreateError> {
        let (limits, timing) = (&config.limits, &config.timing);
        self.forget_old(now_ms);
        self.expire_live(now_ms);
        let keys_max = limits.rate_limited_keys_max;
        let limited = |scope| {
            move |l: Limited| CreateError::RateLimited {
                scope,
                retry_after_ms: l.retry_after_ms,
            }
        };
        self.creates_by_client
            .check(
                client,
                now_ms,
                limits.pairing_creates_per_client_per_minute_max,
                keys_max,
            )
            .map_err(limited(LimitScope::Client))?;
        self.creates_by_user
            .check(
                user_id,
                now_ms,
                limits.pairing_creates_per_user_per_minute_max,
                keys_max,
            )
            .map_err(limited(LimitScope::User))?;
        if let Some(user_live) = self.live_by_user.get(user_id) {
            if user_live.len() >= limits.pairing_codes_per_user_max {
                let (first_expiry_ms, _) = user_live.first().expect("non-empty");
                return Err(CreateError::UserCodesFull {
                    retry_after_ms: first_expiry_ms - now_ms,
                });
            }
        }
        if self.live.len() >= limits.pairing_codes_max {
            return Err(CreateError::TooManyCodes);
        }
        self.creates_by_client.add(client, now_ms);
        self.creates_by_user.add(user_id, now_ms);
        self.make_room(limits.pairing_codes_kept_max);
        let pairing = Pairing {
            code: self.fresh_code(rng),
            user_id: user_id.to_owned(),
            created_at_ms: now_ms,
            expires_at_ms: now_ms + timing.pairing_code_ttl_ms,
            claimed_by: None,
            claimed_at_ms: None,
            provider_pubkey: bound_to.map(str::to_owned),
        };
        self.remember(pairing.clone(), timing.pairing_code_retention_ms, now_ms);
        Ok(pairing)
    }

    fn fresh_code(&self, rng: &mut impl RngCore) -> String {
        // The space holds 16.7M codes and at most `pairing_codes_kept_max`
        // are taken, so a free one is found in very few draws.
        loop {
            let mut bytes = [0u8; 3];
            rng.fill_bytes(&mut bytes);
            let code = hex::encode(bytes);
            if !self.codes.contains_key(&code) {
                return code;
            }
        }
    }

    /// Keeps a code in memory, and among the live ones when it is live.
    fn remember(&mut self, pairing: Pairing, retention_ms: i64, now_ms: i64) {
        let code = pairing.code.clone();
        self.forget_order
            .insert((pairing.expires_at_ms + retention_ms, code.clone()));
        if pairing.claimed_by.is_none() && now_ms < pairing.expires_at_ms {
            let entry = (pairing.expires_at_ms, code.clone());
            self.live.insert(entry.clone());
            self.live_by_user
                .entry(pairing.user_id.clone())
                .or_default()
                .insert(entry);
        }
        self.codes.insert(code, pairing);
    }

    /// Forgets the oldest codes early while `kept_max` are remembered. Live
    /// codes are at most `pairing_codes_max`, fewer than `kept_max`, and a
    /// code is forgotten after every code that expired before it, so the
    /// codes forgotten here are dead: a late claim of one answers
    /// `invalid_code` instead of `expired` or `already_claimed`.
    fn make_room(&mut self, kept_max: usize) {
        while self.codes.len() >= kept_max.max(1) {
            let Some((_, code)) = self.forget_order.pop_first() else {
                break;
            };
            self.drop_live(&code);
            self.codes.remove(&code);
        }
    }

    /// Claims `code` for `provider_pubkey`; on success the user trusts the
    /// key. The code is judged first (spec 4.6), then the key, which the
    /// caller parsed; every refusal counts against the failure budgets.
    pub fn claim(
        &mut self,
        code: &str,
        provider_pubkey: Result<&str, KeyNotOnCurve>,
        client: &str,
        now_ms: i64,
        limits: &Limits,
    ) -> Result<(Pairing, TrustEntry), ClaimError> {
        self.forget_old(now_ms);
        self.expire_live(now_ms);
        self.claim_allowed(client, now_ms, limits)?;
        let claimed = self.try_claim(code, provider_pubkey, now_ms);
        if claimed.is_err() {
            self.claim_failures_by_client.add(client, now_ms);
            self.claim_failures.add("", now_ms);
        }
        claimed
    }

    /// Whether `client` may try a claim now: neither its failure budget
    /// nor everyone's is used up. Counts nothing.
    pub fn claim_allowed(
        &mut self,
        client: &str,
        now_ms: i64,
        limits: &Limits,
    ) -> Result<(), ClaimError> {
        let keys_max = limits.rate_limited_keys_max;
        let limited = |scope| {
            move |l: Limited| ClaimError::RateLimited {
                scope,
                retry_after_ms: l.retry_after_ms,
            }
        };
        self.claim_failures_by_client
            .check(
                client,
                now_ms,
                limits.claim_failures_per_client_per_minute_max,
                keys_max,
            )
            .map_err(limited(LimitScope::Client))?;
        self.claim_failures
            .check("", now_ms, limits.claim_failures_per_minute_max, 1)
            .map_err(limited(LimitScope::Everyone))
    }

    /// Takes a pairing as another node stored it (cluster mode): it
    /// replaces what was known of the code.
    pub fn learn(&mut self, pairing: Pairing, retention_ms: i64, now_ms: i64) {
        self.drop_live(&pairing.code);
        self.remember(pairing, retention_ms, now_ms);
    }

    fn try_claim(
        &mut self,
        code: &str,
        provider_pubkey: Result<&str, KeyNotOnCurve>,
        now_ms: i64,
    ) -> Result<(Pairing, TrustEntry), ClaimError> {
        let code = code.trim().to_ascii_lowercase();
        let pairing = self.codes.get(&code).ok_or(ClaimError::InvalidCode)?;
        if pairing.claimed_by.is_some() {
            return Err(ClaimError::AlreadyClaimed);
        }
        if now_ms >= pairing.expires_at_ms {
            return Err(ClaimError::Expired);
        }
        let provider_pubkey = provider_pubkey.map_err(ClaimError::Key)?;
        // A code bound to a key is no code at all for any other key: the
        // same answer as an unknown code, and it stays claimable.
        if pairing
            .provider_pubkey
            .as_deref()
            .is_some_and(|bound| bound != provider_pubkey)
        {
            return Err(ClaimError::InvalidCode);
        }
        self.drop_live(&code);
        let pairing = self.codes.get_mut(&code).expect("looked up above");
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

    /// Removes `code` from the live sets, if it is there.
    fn drop_live(&mut self, code: &str) {
        let Some(p) = self.codes.get(code) else {
            return;
        };
        let entry = (p.expires_at_ms, p.code.clone());
        if self.live.remove(&entry) {
            if let Some(user_live) = self.live_by_user.get_mut(&p.user_id) {
                user_live.remove(&entry);
                if user_live.is_empty() {
                    self.live_by_user.remove(&p.user_id);
                }
            }
        }
    }

    /// Moves codes that expired by `now_ms` out of the live sets.
    fn expire_live(&mut self, now_ms: i64) {
        while let Some((expires_at_ms, code)) = self.live.first().cloned() {
            if expires_at_ms > now_ms {
                break;
            }
            self.drop_live(&code);
        }
    }

    /// Live codes (unclaimed, unexpired) at `now_ms`.
    pub fn live_codes(&mut self, now_ms: i64) -> usize {
        self.expire_live(now_ms);
        self.live.len()
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

    fn forget_old(&mut self, now_ms: i64) {
        while let Some((at, _)) = self.forget_order.first() {
            if *at > now_ms {
                break;
            }
            let (_, code) = self.forget_order.pop_first().expect("first exists");
            self.drop_live(&code);
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
    pub fn restore(
        &mut self,
        pairings: Vec<Pairing>,
        entries: Vec<TrustEntry>,
        retention_ms: i64,
        now_ms: i64,
    ) {
        for p in pairings {
            self.remember(p, retention_ms, now_ms);
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
    use rand_chacha::ChaCha20Rng;

    const HOUR: i64 = 3_600_000;
    const MINUTE: i64 = 60_000;
    const KEY: Result<&str, KeyNotOnCurve> = Ok("0xk");

    fn config() -> Config {
        let mut c = Config::default();
        c.limits.pairing_codes_max = 100;
        c.limits.pairing_codes_kept_max = 200;
        c
    }

    fn rng(seed: u64) -> ChaCha20Rng {
        ChaCha20Rng::seed_from_u64(seed)
    }

    fn trust_with_code(rng: &mut ChaCha20Rng) -> (Trust, String) {
        let mut t = Trust::default();
        let p = t.create("alice", None, "c", 0, &config(), rng).unwrap();
        (t, p.code)
    }

    fn claim(
        t: &mut Trust,
        code: &str,
        client: &str,
        now_ms: i64,
    ) -> Result<TrustEntry, ClaimError> {
        t.claim(code, KEY, client, now_ms, &config().limits)
            .map(|(_, e)| e)
    }

    #[test]
    fn code_is_six_hex_and_expires_in_an_hour() {
        let mut t = Trust::default();
        let p = t
            .create("alice", None, "c", 1_000, &config(), &mut rng(1))
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
        let (mut t, code) = trust_with_code(&mut rng(2));
        assert_eq!(
            claim(&mut t, "zzzzzz", "c", 5),
            Err(ClaimError::InvalidCode)
        );
        let entry = claim(&mut t, &code.to_uppercase(), "c", 5).unwrap();
        assert_eq!(entry.paired_at_ms, 5);
        assert!(t.trusts("alice", "0xk"));
        assert_eq!(
            claim(&mut t, &code, "c", 6),
            Err(ClaimError::AlreadyClaimed)
        );
        assert_eq!(t.users_trusting("0xk").collect::<Vec<_>>(), ["alice"]);
    }

    /// Issue 28: a code bound to a key is `invalid_code` for any other key
    /// and stays live, so whoever reads it first cannot take it.
    #[test]
    fn a_bound_code_is_claimed_only_by_its_key() {
        let mut t = Trust::default();
        let code = t
            .create("0xuser", Some("0xk"), "c", 0, &config(), &mut rng(9))
            .unwrap()
            .code;
        let limits = config().limits;
        assert_eq!(
            t.claim(&code, Ok("0xother"), "c", 1, &limits).unwrap_err(),
            ClaimError::InvalidCode
        );
        assert!(!t.trusts("0xuser", "0xother"));
        let (pairing, entry) = t.claim(&code, KEY, "c", 2, &limits).unwrap();
        assert_eq!(pairing.provider_pubkey.as_deref(), Some("0xk"));
        assert_eq!(entry.provider_pubkey, "0xk");
        assert!(t.trusts("0xuser", "0xk"));
    }

    #[test]
    fn expiry_is_exactly_one_hour() {
        let (mut t, code) = trust_with_code(&mut rng(3));
        assert_eq!(claim(&mut t, &code, "c", HOUR), Err(ClaimError::Expired));
        let (mut t, code) = trust_with_code(&mut rng(3));
        assert!(claim(&mut t, &code, "c", HOUR - 1).is_ok());
    }

    #[test]
    fn the_code_is_judged_before_the_key() {
        // Issue 16 finding 9: the key was judged first, so an unknown code
        // with a bad key was not `invalid_code`.
        let (mut t, code) = trust_with_code(&mut rng(4));
        let limits = config().limits;
        let bad = Err(KeyNotOnCurve);
        assert_eq!(
            t.claim("000000", bad, "c", 1, &limits).unwrap_err(),
            ClaimError::InvalidCode
        );
        assert_eq!(
            t.claim(&code, bad, "c", 1, &limits).unwrap_err(),
            ClaimError::Key(KeyNotOnCurve)
        );
        // The refused key left the code claimable.
        assert!(claim(&mut t, &code, "c", 2).is_ok());
        assert_eq!(
            t.claim(&code, bad, "c", 3, &limits).unwrap_err(),
            ClaimError::AlreadyClaimed
        );
        assert_eq!(
            t.claim(&code, bad, "c", HOUR, &limits).unwrap_err(),
            ClaimError::AlreadyClaimed
        );
    }

    #[test]
    fn only_failed_claims_count_per_client() {
        // Issue 16 finding 5: successful claims used up the budget too.
        let mut t = Trust::default();
        let mut r = rng(5);
        let mut cfg = config();
        cfg.limits.claim_failures_per_client_per_minute_max = 3;
        cfg.limits.pairing_creates_per_client_per_minute_max = 100;
        cfg.limits.pairing_creates_per_user_per_minute_max = 100;
        cfg.limits.pairing_codes_per_user_max = 100;
        for i in 0..5 {
            let code = t.create("alice", None, "c", 0, &cfg, &mut r).unwrap().code;
            let key = format!("0xk{i}");
            assert!(t.claim(&code, Ok(&key), "a", 0, &cfg.limits).is_ok());
        }
        for _ in 0..3 {
            assert_eq!(
                t.claim("000000", KEY, "a", 0, &cfg.limits).unwrap_err(),
                ClaimError::InvalidCode
            );
        }
        let limited = |retry_after_ms| {
            Err(ClaimError::RateLimited {
                scope: LimitScope::Client,
                retry_after_ms,
            })
        };
        assert_eq!(
            t.claim("000000", KEY, "a", 10_000, &cfg.limits).map(|_| ()),
            limited(50_000)
        );
        // Another client is not affected; the window reopens after a minute.
        assert_eq!(
            t.claim("000000", KEY, "b", 10_000, &cfg.limits)
                .unwrap_err(),
            ClaimError::InvalidCode
        );
        assert_eq!(
            t.claim("000000", KEY, "a", MINUTE, &cfg.limits)
                .unwrap_err(),
            ClaimError::InvalidCode
        );
    }

    #[test]
    fn failed_claims_have_a_global_budget() {
        // Issue 16 finding 5: every address had its own budget and nothing
        // bounded the total, so guessing scaled with addresses.
        let mut t = Trust::default();
        let mut cfg = config();
        cfg.limits.claim_failures_per_minute_max = 20;
        for i in 0..20 {
            let client = format!("client-{i}");
            assert_eq!(
                t.claim("000000", KEY, &client, 0, &cfg.limits).unwrap_err(),
                ClaimError::InvalidCode
            );
        }
        assert_eq!(
            t.claim("000000", KEY, "fresh", 1_000, &cfg.limits)
                .unwrap_err(),
            ClaimError::RateLimited {
                scope: LimitScope::Everyone,
                retry_after_ms: 59_000
            }
        );
        assert_eq!(
            t.claim("000000", KEY, "fresh", MINUTE, &cfg.limits)
                .unwrap_err(),
            ClaimError::InvalidCode
        );
    }

    #[test]
    fn old_codes_are_forgotten_after_retention() {
        let mut r = rng(6);
        let (mut t, code) = trust_with_code(&mut r);
        t.create("bob", None, "c", 25 * HOUR, &config(), &mut r)
            .unwrap();
        assert_eq!(
            claim(&mut t, &code, "c", 25 * HOUR),
            Err(ClaimError::InvalidCode)
        );
    }

    #[test]
    fn only_live_codes_count_against_the_cap() {
        // Issue 16 finding 2: codes counted against the cap until 24 h after
        // they expired, so one flood switched pairing off for a day.
        let mut r = rng(7);
        let mut cfg = config();
        cfg.limits.pairing_codes_max = 2;
        cfg.limits.pairing_codes_kept_max = 4;
        let mut t = Trust::default();
        t.create("a", None, "c1", 0, &cfg, &mut r).unwrap();
        let b = t.create("b", None, "c2", 0, &cfg, &mut r).unwrap().code;
        assert_eq!(
            t.create("c", None, "c3", 0, &cfg, &mut r),
            Err(CreateError::TooManyCodes)
        );
        // A claimed code is no longer live.
        t.claim(&b, KEY, "c2", 1, &cfg.limits).unwrap();
        t.create("c", None, "c3", 1, &cfg, &mut r).unwrap();
        // Expired codes are not live either, though still remembered.
        let later = HOUR + 1;
        assert_eq!(t.live_codes(later), 0);
        t.create("d", None, "c4", later, &cfg, &mut r).unwrap();
        t.create("e", None, "c5", later, &cfg, &mut r).unwrap();
        // Remembered codes are bounded: the oldest dead ones go first.
        assert!(t.codes.len() <= 4);
        assert_eq!(t.live_codes(later), 2);
    }

    #[test]
    fn creates_are_limited_per_client_and_per_user() {
        let mut r = rng(8);
        let mut cfg = config();
        cfg.limits.pairing_creates_per_client_per_minute_max = 2;
        cfg.limits.pairing_creates_per_user_per_minute_max = 2;
        cfg.limits.pairing_codes_per_user_max = 3;
        let mut t = Trust::default();
        t.create("u1", None, "a", 0, &cfg, &mut r).unwrap();
        t.create("u2", None, "a", 0, &cfg, &mut r).unwrap();
        assert_eq!(
            t.create("u3", None, "a", 10_000, &cfg, &mut r),
            Err(CreateError::RateLimited {
                scope: LimitScope::Client,
                retry_after_ms: 50_000
            })
        );
        t.create("u1", None, "b", 0, &cfg, &mut r).unwrap();
        assert_eq!(
            t.create("u1", None, "c", 0, &cfg, &mut r),
            Err(CreateError::RateLimited {
                scope: LimitScope::User,
                retry_after_ms: MINUTE
            })
        );
        // Two live codes for u1 plus one a minute later: the cap of three.
        t.create("u1", None, "c", MINUTE, &cfg, &mut r).unwrap();
        assert_eq!(
            t.create("u1", None, "d", MINUTE, &cfg, &mut r),
            Err(CreateError::UserCodesFull {
                retry_after_ms: HOUR - MINUTE
            })
        );
        // Other users are not affected.
        t.create("u9", None, "d", MINUTE, &cfg, &mut r).unwrap();
    }
}
