//! The payment seam: after a 402 from a commit endpoint, a chain's payment
//! client turns the challenge into one request header (for x402, `X-PAYMENT`).
//! [`X402Payer`] is the implementation for x402 with a local key.

use crate::route::Chain;
use crate::transport::find_header;
use rand_chacha::ChaCha20Rng;
use std::sync::Mutex;
use x402::{LocalEvmSigner, PaymentRequired, PaymentSigner};

/// Everything the coordinator said in its 402 answer.
#[derive(Debug, Clone, PartialEq)]
pub struct PaymentChallenge {
    pub chain: Chain,
    /// The commit URL that asked for payment, to be retried with the header.
    pub url: String,
    pub status: u16,
    pub headers: Vec<(String, String)>,
    /// The JSON body (`{error, accepts: [...]}`), `Null` if it was not JSON.
    pub body: serde_json::Value,
}

impl PaymentChallenge {
    /// A header of the 402 answer, ignoring case.
    pub fn header(&self, name: &str) -> Option<&str> {
        find_header(&self.headers, name)
    }

    /// The `PAYMENT-REQUIRED` header, if the coordinator sent one.
    pub fn payment_required_header(&self) -> Option<&str> {
        self.header("payment-required")
    }

    /// The `accepts` array of the body, empty when absent.
    pub fn accepts(&self) -> &[serde_json::Value] {
        self.body
            .get("accepts")
            .and_then(|a| a.as_array())
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }
}

/// Signs a payment for a 402 challenge.
///
/// Returns the header to add to the retried commit as `(name, value)`, or a
/// human-readable reason why it cannot pay (unsupported scheme or network,
/// price above a cap, ...). The reason ends up in the adapter failure.
pub trait PaymentClient: Send + Sync {
    fn payment_header(&self, challenge: &PaymentChallenge) -> Result<(String, String), String>;
}

/// Unix milliseconds; injected so the simulation controls payment times.
/// Any `Fn() -> i64` closure is one.
pub type WallClock = protocol::clock::SharedClock;

/// Pays x402 challenges (scheme `exact`, EIP-3009) from a local key, like
/// the official client: the v2 `PAYMENT-REQUIRED` header when present, else
/// the v1 body. Refuses to pay more than `max_price_micros` when set.
pub struct X402Payer {
    signer: LocalEvmSigner,
    clock: WallClock,
    rng: Mutex<ChaCha20Rng>,
    max_price_micros: Option<u64>,
}

impl X402Payer {
    /// `rng` draws the authorization nonces: seed it from the OS in real use.
    pub fn new(signer: LocalEvmSigner, clock: WallClock, rng: ChaCha20Rng) -> Self {
        Self {
            signer,
            clock,
            rng: Mutex::new(rng),
            max_price_micros: None,
        }
    }

    /// Refuse challenges asking more than `price` (in the asset's 6-decimal units).
    pub fn with_max_price(mut self, price: protocol::money::Price) -> Self {
        self.max_price_micros = Some(price.micros());
        self
    }

    pub fn address(&self) -> String {
        self.signer.address().to_string()
    }
}

impl std::fmt::Debug for X402Payer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("X402Payer")
            .field("address", &self.address())
            .field("max_price_micros", &self.max_price_micros)
            .finish_non_exhaustive()
    }
}

impl PaymentClient for X402Payer {
    fn payment_header(&self, challenge: &PaymentChallenge) -> Result<(String, String), String> {
        let body = serde_json::to_vec(&challenge.body).unwrap_or_default();
        let required = PaymentRequired::from_response(
            challenge.payment_required_header().map(str::as_bytes),
            Some(&body),
        )
        .map_err(|e| format!("cannot read the payment requirements: {e}"))?;
        if let Some(cap) = self.max_price_micros {
            let asked = required
                .accepts
                .iter()
                .filter_map(|a| {
                    a.get("amount")
                        .or_else(|| a.get("maxAmountRequired"))
                        .and_then(|v| v.as_str())
                        .and_then(|v| v.parse::<u64>().ok())
                })
                .min()
                .ok_or("the payment requirements name no amount")?;
            if asked > cap {
                return Err(format!(
                    "asked {asked} atomic units, above the cap of {cap}"
                ));
            }
        }
        let now_seconds = u64::try_from(self.clock.now_ms() / 1000).unwrap_or(0);
        let mut rng = self
            .rng
            .lock()
            .map_err(|_| "payment RNG poisoned".to_owned())?;
        let header = self
            .signer
            .pay(&required, now_seconds, &mut *rng)
            .map_err(|e| e.to_string())?;
        Ok((header.name.to_owned(), header.value))
    }
}
