//! A memo of pure secp256k1 results, for the simulation only.
//!
//! Why: the swarm runs every world twice (under two tokio seeds) and compares
//! the transcripts, and each run signs and checks the same receipts, hellos,
//! user proofs and payment authorizations; the harness's own checks then
//! recover the signatures the coordinator already recovered, and both draw
//! the same keys from the same seeds. A quarter of the swarm's CPU was these
//! curve operations (issue 33, item 6). Each of them is a pure function of
//! its inputs: a key pair's public point of its secret scalar, RFC 6979
//! signing of (secret key, digest), recovery of (digest, signature) and the
//! parse (a square root) of a compressed public key. So the first
//! computation is always the real library call, and the memo hands back only
//! that exact result again.
//!
//! It is off unless a thread holds a [`Scope`] (the harness opens one around a
//! world's two runs; nothing in the coordinator's binary does), it lives in a
//! thread-local (each world is one single-threaded simulation; the swarm's
//! threads each have their own), it is dropped with the outermost scope, and
//! each table is bounded: past its limit a result is computed, not kept.

use crate::signing::PublicKey;
use k256::ecdsa::SigningKey;
use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::Hash;
use std::marker::PhantomData;

/// Entries kept per table (a world signs and checks a few hundred things;
/// this bounds a long run's memory).
const TABLE_LIMIT: usize = 8192;

/// A signature's inputs: the secret scalar and the digest signed.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct SignKey {
    pub secret: [u8; 32],
    pub digest: [u8; 32],
}

/// A recovery's inputs: the digest and the signature as `r || s` and `v`.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct RecoverKey {
    pub digest: [u8; 32],
    pub compact: [u8; 64],
    pub recid: u8,
}

/// A key pair's input: its secret scalar (the public point is derived).
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct KeyPairKey {
    pub secret: [u8; 32],
}

/// A public key's text form, as parsed (compressed SEC1, 33 bytes).
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct ParseKey {
    pub sec1: [u8; 33],
}

/// One bounded table of results.
struct Table<K, V> {
    entries: HashMap<K, V>,
}

impl<K: Eq + Hash, V: Clone> Table<K, V> {
    fn new() -> Self {
        Self {
            entries: HashMap::new(),
        }
    }

    fn insert(&mut self, key: K, value: V) {
        if self.entries.len() < TABLE_LIMIT {
            self.entries.insert(key, value);
        }
    }
}

struct Memo {
    /// Open scopes on this thread; the memo is dropped when the last ends.
    depth: u32,
    signatures: Table<SignKey, String>,
    recoveries: Table<RecoverKey, Option<PublicKey>>,
    key_pairs: Table<KeyPairKey, SigningKey>,
    parsed: Table<ParseKey, Option<PublicKey>>,
}

thread_local! {
    static MEMO: RefCell<Option<Box<Memo>>> = const { RefCell::new(None) };
}

/// While held, this thread's secp256k1 results are memoised. Not `Send`: it
/// must end on the thread it began on.
#[must_use = "the memo is on only while the scope is held"]
pub struct Scope {
    _this_thread: PhantomData<*const ()>,
}

/// Turns the memo on for this thread until the returned scope drops.
pub fn enable() -> Scope {
    MEMO.with_borrow_mut(|memo| {
        let memo = memo.get_or_insert_with(|| {
            Box::new(Memo {
                depth: 0,
                signatures: Table::new(),
                recoveries: Table::new(),
                key_pairs: Table::new(),
                parsed: Table::new(),
            })
        });
        memo.depth += 1;
    });
    Scope {
        _this_thread: PhantomData,
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        MEMO.with_borrow_mut(|slot| {
            if let Some(memo) = slot {
                memo.depth -= 1;
                if memo.depth == 0 {
                    *slot = None;
                }
            }
        });
    }
}

/// `compute(key)`'s result, from the memo when this thread has one and has
/// seen `key` in `table`; `compute` runs outside the memo's borrow.
fn cached<K: Eq + Hash, V: Clone>(
    table: fn(&mut Memo) -> &mut Table<K, V>,
    key: K,
    compute: impl FnOnce() -> V,
) -> V {
    let (on, hit) = MEMO.with_borrow_mut(|memo| match memo {
        Some(memo) => (true, table(memo).entries.get(&key).cloned()),
        None => (false, None),
    });
    if let Some(value) = hit {
        return value;
    }
    let value = compute();
    if on {
        MEMO.with_borrow_mut(|memo| {
            if let Some(memo) = memo {
                table(memo).insert(key, value.clone());
            }
        });
    }
    value
}

pub(crate) fn signature(key: SignKey, compute: impl FnOnce() -> String) -> String {
    cached(|m| &mut m.signatures, key, compute)
}

pub(crate) fn recovery(
    key: RecoverKey,
    compute: impl FnOnce() -> Option<PublicKey>,
) -> Option<PublicKey> {
    cached(|m| &mut m.recoveries, key, compute)
}

pub(crate) fn key_pair(key: KeyPairKey, compute: impl FnOnce() -> SigningKey) -> SigningKey {
    cached(|m| &mut m.key_pairs, key, compute)
}

pub(crate) fn parsed(
    key: ParseKey,
    compute: impl FnOnce() -> Option<PublicKey>,
) -> Option<PublicKey> {
    cached(|m| &mut m.parsed, key, compute)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn counted<'a>(calls: &'a Cell<u32>, value: &str) -> impl FnOnce() -> String + 'a {
        let value = value.to_owned();
        move || {
            calls.set(calls.get() + 1);
            value
        }
    }

    fn input(n: u8) -> SignKey {
        SignKey {
            secret: [n; 32],
            digest: [n; 32],
        }
    }

    #[test]
    fn without_a_scope_every_call_computes() {
        let calls = Cell::new(0);
        for _ in 0..3 {
            signature(input(1), counted(&calls, "1"));
        }
        assert_eq!(calls.get(), 3);
    }

    #[test]
    fn within_a_scope_a_result_is_computed_once_and_forgotten_after() {
        let calls = Cell::new(0);
        {
            let _outer = enable();
            {
                let _inner = enable();
                assert_eq!(signature(input(2), counted(&calls, "2")), "2");
            }
            // The inner scope's end keeps the memo: the outer still holds it.
            assert_eq!(signature(input(2), counted(&calls, "9")), "2");
            assert_eq!(calls.get(), 1);
        }
        signature(input(2), counted(&calls, "2"));
        assert_eq!(calls.get(), 2, "the memo ended with the last scope");
    }

    #[test]
    fn a_full_table_keeps_what_it_has() {
        let _scope = enable();
        let calls = Cell::new(0);
        for n in 0..=TABLE_LIMIT {
            let key = SignKey {
                secret: [0; 32],
                digest: {
                    let mut d = [0; 32];
                    d[..8].copy_from_slice(&(n as u64).to_le_bytes());
                    d
                },
            };
            signature(key, counted(&calls, "0"));
        }
        let size = MEMO.with_borrow(|m| m.as_ref().map(|m| m.signatures.entries.len()));
        assert_eq!(size, Some(TABLE_LIMIT));
        assert_eq!(calls.get() as usize, TABLE_LIMIT + 1);
    }

    /// A memoised key pair and a memoised parse are the library's: the
    /// same secret, public key and address, the same point.
    #[test]
    fn memoised_key_pairs_and_parses_equal_the_real_ones() {
        use crate::signing::{parse_public_key, Keypair};
        use rand_chacha::rand_core::SeedableRng;
        let draw = || {
            let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(7);
            (0..3)
                .map(|_| Keypair::generate(&mut rng))
                .collect::<Vec<_>>()
        };
        let text = |k: &Keypair| (k.secret_hex(), k.public_key_hex(), k.address());
        let real: Vec<_> = draw().iter().map(text).collect();
        let parsed: Vec<_> = real.iter().map(|t| parse_public_key(&t.1)).collect();
        let _scope = enable();
        for _ in 0..2 {
            assert_eq!(draw().iter().map(text).collect::<Vec<_>>(), real);
            for (t, p) in real.iter().zip(&parsed) {
                assert_eq!(&parse_public_key(&t.1), p);
                let again = Keypair::from_secret_hex(&t.0).map(|k| text(&k));
                assert_eq!(again.as_ref(), Some(t));
            }
        }
        let sizes = MEMO.with_borrow(|m| {
            m.as_ref()
                .map(|m| (m.key_pairs.entries.len(), m.parsed.entries.len()))
        });
        assert_eq!(sizes, Some((3, 3)), "each key and each parse kept once");
    }

    /// Memoised results are the library's: the same signature string and
    /// the same recovered key, with the memo on and off.
    #[test]
    fn memoised_signatures_and_recoveries_equal_the_real_ones() {
        use crate::signing::{eip191_hash, parse_public_key, recover_prehash, Keypair};
        use rand_chacha::rand_core::SeedableRng;
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(12);
        let keys: Vec<Keypair> = (0..4).map(|_| Keypair::generate(&mut rng)).collect();
        let real: Vec<String> = keys.iter().map(|k| k.personal_sign(b"m")).collect();
        let _scope = enable();
        for _ in 0..2 {
            for (key, sig) in keys.iter().zip(&real) {
                assert_eq!(&key.personal_sign(b"m"), sig);
                let recovered = recover_prehash(&eip191_hash(b"m"), sig).unwrap();
                assert_eq!(recovered, parse_public_key(&key.public_key_hex()).unwrap());
            }
        }
    }
}
