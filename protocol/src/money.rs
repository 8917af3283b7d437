//! Prices: USD held as integer micro-dollars (6 decimals, the unit of USDC),
//! parsed from and printed as decimal strings. No floats anywhere.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// Decimal places of a [`Price`]'s unit (micro-dollars; USDC has 6 decimals).
pub const DECIMALS: u32 = 6;
const UNIT: u64 = 10u64.pow(DECIMALS);

/// A USD amount in micro-dollars.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Price(pub u64);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("price must look like $0.010: a dollar amount with at most 6 fraction digits")]
pub struct PriceParseError;

impl Price {
    pub const fn from_micros(micros: u64) -> Self {
        Self(micros)
    }

    /// The amount in the asset's atomic units, for an asset with 6 decimals.
    pub fn micros(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Price {
    /// `$` + dollars + at least three fraction digits (`$0.010`), more only
    /// when the amount needs them (`$0.0105`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whole = self.0 / UNIT;
        let mut frac = format!("{:06}", self.0 % UNIT);
        while frac.len() > 3 && frac.ends_with('0') {
            frac.pop();
        }
        write!(f, "${whole}.{frac}")
    }
}

/// On the wire a price is its decimal string (`$0.010`).
#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for Price {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .pattern(Some(r"^\$[0-9]+\.[0-9]{3,6}$"))
            .description(Some(
                "USD: a dollar sign and a decimal with 3 to 6 fraction digits",
            ))
            .examples([serde_json::json!("$0.010")])
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for Price {}

impl FromStr for Price {
    type Err = PriceParseError;

    /// Accepts `$0.010`, `0.010`, `1` and `$1.5`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let s = s.strip_prefix('$').unwrap_or(s);
        let (whole, frac) = s.split_once('.').unwrap_or((s, ""));
        let digits = |t: &str| t.bytes().all(|b| b.is_ascii_digit());
        if whole.is_empty() || !digits(whole) || !digits(frac) || frac.len() > DECIMALS as usize {
            return Err(PriceParseError);
        }
        let whole: u64 = whole.parse().map_err(|_| PriceParseError)?;
        let frac_micros: u64 = if frac.is_empty() {
            0
        } else {
            frac.parse::<u64>().map_err(|_| PriceParseError)?
                * 10u64.pow(DECIMALS - frac.len() as u32)
        };
        whole
            .checked_mul(UNIT)
            .and_then(|w| w.checked_add(frac_micros))
            .map(Price)
            .ok_or(PriceParseError)
    }
}

impl Serialize for Price {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Price {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_exactly() {
        assert_eq!("$0.010".parse(), Ok(Price(10_000)));
        assert_eq!("4.02".parse(), Ok(Price(4_020_000)));
        assert_eq!("1".parse(), Ok(Price(1_000_000)));
        assert_eq!("$0.000001".parse(), Ok(Price(1)));
        for bad in ["", "$", "abc", "1.0000001", "-1", "1.2.3", ".5", "1e3"] {
            assert_eq!(bad.parse::<Price>(), Err(PriceParseError), "{bad}");
        }
    }

    #[test]
    fn prints_three_fraction_digits() {
        assert_eq!(Price(10_000).to_string(), "$0.010");
        assert_eq!(Price(1_000).to_string(), "$0.001");
        assert_eq!(Price(2_500_000).to_string(), "$2.500");
        assert_eq!(Price(10_500).to_string(), "$0.0105");
        assert_eq!(Price(0).to_string(), "$0.000");
    }

    #[test]
    fn round_trips() {
        for m in [0, 1, 999, 1_000, 10_000, 123_456_789] {
            assert_eq!(Price(m).to_string().parse(), Ok(Price(m)));
        }
    }
}
