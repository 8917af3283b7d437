//! Per-instance commercial terms (version 2): prices per tier and job type,
//! the asset a payment is made in, and the x402 version a paying step uses.

use crate::spec::PaymentSpec;
use coordinator::config::PriceTable;
use protocol::money::Price;
use serde::{de, Deserialize, Deserializer};

/// `prices = { fast_llm = "$0.02", cheap_task = "$0.0005" }`; names as in
/// `coordinator::config::PriceTable`, values as the quote shows them.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriceOverrides {
    pub fast_llm: Option<Price>,
    pub fast_task: Option<Price>,
    pub cheap_llm: Option<Price>,
    pub cheap_task: Option<Price>,
}

impl PriceOverrides {
    pub fn is_set(&self) -> bool {
        self.fast_llm.is_some()
            || self.fast_task.is_some()
            || self.cheap_llm.is_some()
            || self.cheap_task.is_some()
    }

    pub fn apply(&self, table: &mut PriceTable) {
        let pairs = [
            (self.fast_llm, &mut table.fast_llm),
            (self.fast_task, &mut table.fast_task),
            (self.cheap_llm, &mut table.cheap_llm),
            (self.cheap_task, &mut table.cheap_task),
        ];
        for (set, price) in pairs {
            if let Some(set) = set {
                *price = set;
            }
        }
    }
}

impl PaymentSpec {
    /// Sets the asset, its EIP-712 domain and the authorization window the
    /// scenario names; the rest keep USDC on Base Sepolia.
    pub fn apply_asset(&self, config: &mut x402::PaymentConfig) -> Result<(), String> {
        if let Some(asset) = &self.asset {
            config.asset = asset
                .parse()
                .map_err(|e| format!("payment.asset {asset:?}: {e}"))?;
        }
        if let Some(name) = &self.asset_name {
            config.asset_name = name.clone();
        }
        if let Some(version) = &self.asset_version {
            config.asset_version = version.clone();
        }
        if let Some(seconds) = self.max_timeout_seconds {
            config.max_timeout_seconds = seconds;
        }
        Ok(())
    }
}

/// The x402 version a `pay` option pays with: `1` or `2`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayVersion {
    /// `X-PAYMENT`, from the v1 body of the 402 answer.
    V1,
    /// `PAYMENT-SIGNATURE`, from the `PAYMENT-REQUIRED` header.
    V2,
}

impl<'de> Deserialize<'de> for PayVersion {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match u8::deserialize(deserializer)? {
            1 => Ok(PayVersion::V1),
            2 => Ok(PayVersion::V2),
            n => Err(de::Error::custom(format!(
                "pay version {n}: x402 versions are 1 (X-PAYMENT) or 2 (PAYMENT-SIGNATURE)"
            ))),
        }
    }
}
