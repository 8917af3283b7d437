//! The payment seam: after a 402 from a commit endpoint, a chain's payment
//! client turns the challenge into one request header (for x402, `X-PAYMENT`).
//! The router knows nothing about signing; the `x402` crate implements this.

use crate::route::Chain;
use crate::transport::find_header;

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
