//! EVM values as the `exact` scheme carries them (addresses, `uint256`
//! decimal strings, `bytes32` nonces) and the EIP-712 digest of an EIP-3009
//! `TransferWithAuthorization`.
//!
//! Values are parsed from text once, at the edge, and compared as bytes: a
//! lowercase and a checksummed spelling of one address are the same address.

use protocol::signing::{checksum_address, keccak256};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// Why an EVM value could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EvmParseError {
    #[error("address must be 0x followed by 40 hex characters")]
    Address,
    #[error("uint256 must be a decimal string of at most 78 digits that fits 256 bits")]
    Uint256,
    #[error("bytes32 must be 0x followed by 64 hex characters")]
    Bytes32,
}

/// A 20-byte EVM address.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Address(pub [u8; 20]);

impl Address {
    pub fn as_bytes(&self) -> &[u8; 20] {
        &self.0
    }

    /// The address as a 32-byte ABI word (left-padded with zeros).
    fn word(&self) -> [u8; 32] {
        let mut w = [0u8; 32];
        w[12..].copy_from_slice(&self.0);
        w
    }
}

impl FromStr for Address {
    type Err = EvmParseError;

    /// Accepts any letter case; the EIP-55 checksum is not enforced because
    /// clients legitimately send lowercase addresses.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let h = s.strip_prefix("0x").ok_or(EvmParseError::Address)?;
        if h.len() != 40 {
            return Err(EvmParseError::Address);
        }
        let mut out = [0u8; 20];
        hex::decode_to_slice(h, &mut out).map_err(|_| EvmParseError::Address)?;
        Ok(Self(out))
    }
}

impl fmt::Display for Address {
    /// EIP-55 checksummed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&checksum_address(&self.0))
    }
}

impl fmt::Debug for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Address({self})")
    }
}

impl Serialize for Address {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Address {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// An unsigned 256-bit integer, big-endian. Only parsing, printing,
/// comparison and narrowing are needed, so no arithmetic is offered.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct U256(pub [u8; 32]);

impl U256 {
    pub const fn from_u64(v: u64) -> Self {
        let b = v.to_be_bytes();
        let mut out = [0u8; 32];
        let mut i = 0;
        while i < 8 {
            out[24 + i] = b[i];
            i += 1;
        }
        Self(out)
    }

    /// The value if it fits a `u64`.
    pub fn to_u64(&self) -> Option<u64> {
        if self.0[..24].iter().any(|&b| b != 0) {
            return None;
        }
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.0[24..]);
        Some(u64::from_be_bytes(b))
    }

    /// The value, or `u64::MAX` when it is larger (for time comparisons).
    pub fn saturating_u64(&self) -> u64 {
        self.to_u64().unwrap_or(u64::MAX)
    }
}

impl FromStr for U256 {
    type Err = EvmParseError;

    /// Decimal digits only: no sign, no `0x`, no exponent, no fraction.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.is_empty() || s.len() > 78 || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(EvmParseError::Uint256);
        }
        let mut out = [0u8; 32];
        for digit in s.bytes() {
            // out = out * 10 + digit, byte by byte from the least significant end.
            let mut carry = u32::from(digit - b'0');
            for byte in out.iter_mut().rev() {
                let v = u32::from(*byte) * 10 + carry;
                *byte = (v & 0xff) as u8;
                carry = v >> 8;
            }
            if carry != 0 {
                return Err(EvmParseError::Uint256);
            }
        }
        Ok(Self(out))
    }
}

impl fmt::Display for U256 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Repeated division by 10 over the big-endian bytes.
        let mut n = self.0;
        let mut digits = Vec::with_capacity(78);
        loop {
            let mut rem = 0u32;
            let mut all_zero = true;
            for byte in n.iter_mut() {
                let v = (rem << 8) | u32::from(*byte);
                *byte = (v / 10) as u8;
                rem = v % 10;
                all_zero &= *byte == 0;
            }
            digits.push(b'0' + rem as u8);
            if all_zero {
                break;
            }
        }
        digits.reverse();
        f.write_str(std::str::from_utf8(&digits).map_err(|_| fmt::Error)?)
    }
}

impl fmt::Debug for U256 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "U256({self})")
    }
}

/// A `bytes32` value, written as `0x` + 64 hex characters (the EIP-3009 nonce).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Bytes32(pub [u8; 32]);

impl FromStr for Bytes32 {
    type Err = EvmParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let h = s.strip_prefix("0x").ok_or(EvmParseError::Bytes32)?;
        if h.len() != 64 {
            return Err(EvmParseError::Bytes32);
        }
        let mut out = [0u8; 32];
        hex::decode_to_slice(h, &mut out).map_err(|_| EvmParseError::Bytes32)?;
        Ok(Self(out))
    }
}

impl fmt::Display for Bytes32 {
    /// Lowercase `0x` hex.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0x{}", hex::encode(self.0))
    }
}

impl Serialize for Bytes32 {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Bytes32 {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl fmt::Debug for Bytes32 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Bytes32({self})")
    }
}

/// The EIP-712 domain of an EIP-3009 token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eip712Domain<'a> {
    pub name: &'a str,
    pub version: &'a str,
    pub chain_id: u64,
    pub verifying_contract: Address,
}

const DOMAIN_TYPE: &str =
    "EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)";
const TRANSFER_TYPE: &str = "TransferWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)";

impl Eip712Domain<'_> {
    pub fn separator(&self) -> [u8; 32] {
        let mut enc = Vec::with_capacity(32 * 5);
        enc.extend_from_slice(&keccak256(DOMAIN_TYPE.as_bytes()));
        enc.extend_from_slice(&keccak256(self.name.as_bytes()));
        enc.extend_from_slice(&keccak256(self.version.as_bytes()));
        enc.extend_from_slice(&U256::from_u64(self.chain_id).0);
        enc.extend_from_slice(&self.verifying_contract.word());
        keccak256(&enc)
    }
}

/// The parsed EIP-3009 authorization, the message the payer signs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransferWithAuthorization {
    pub from: Address,
    pub to: Address,
    pub value: U256,
    pub valid_after: U256,
    pub valid_before: U256,
    pub nonce: Bytes32,
}

impl TransferWithAuthorization {
    pub fn struct_hash(&self) -> [u8; 32] {
        let mut enc = Vec::with_capacity(32 * 7);
        enc.extend_from_slice(&keccak256(TRANSFER_TYPE.as_bytes()));
        enc.extend_from_slice(&self.from.word());
        enc.extend_from_slice(&self.to.word());
        enc.extend_from_slice(&self.value.0);
        enc.extend_from_slice(&self.valid_after.0);
        enc.extend_from_slice(&self.valid_before.0);
        enc.extend_from_slice(&self.nonce.0);
        keccak256(&enc)
    }

    /// `keccak256(0x19 0x01 || domainSeparator || structHash)`.
    pub fn digest(&self, domain: &Eip712Domain<'_>) -> [u8; 32] {
        let mut enc = Vec::with_capacity(66);
        enc.extend_from_slice(&[0x19, 0x01]);
        enc.extend_from_slice(&domain.separator());
        enc.extend_from_slice(&self.struct_hash());
        keccak256(&enc)
    }
}

/// The address that signed `digest`, or `None` for a malformed or
/// malleable (high-s) signature.
pub fn recover_address(digest: &[u8; 32], signature: &str) -> Option<Address> {
    let key = protocol::signing::recover_prehash(digest, signature).ok()?;
    key.address().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> Address {
        s.parse().unwrap()
    }

    const BASE_SEPOLIA_USDC: &str = "0x036CbD53842c5426634e7929541eC2318f3dCF7e";
    const BASE_USDC: &str = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913";

    fn spec_v1_example() -> TransferWithAuthorization {
        TransferWithAuthorization {
            from: addr("0x857b06519E91e3A54538791bDbb0E22373e36b66"),
            to: addr("0x209693Bc6afc0C5328bA36FaF03C514EF312287C"),
            value: "10000".parse().unwrap(),
            valid_after: "1740672089".parse().unwrap(),
            valid_before: "1740672154".parse().unwrap(),
            nonce: "0xf3746613c2d920b5fdabc0856f2aeb2d4f88ee6037b8cc5d04a71a4462f13480"
                .parse()
                .unwrap(),
        }
    }

    const SPEC_V1_SIGNATURE: &str = "0x2d6a7588d6acca505cbf0d9a4a227e0c52c6c34008c8e8986a1283259764173608a2ce6496642e377d6da8dbbf5836e9bd15092f9ecab05ded3d6293af148b571c";

    fn base_sepolia(name: &str) -> Eip712Domain<'_> {
        Eip712Domain {
            name,
            version: "2",
            chain_id: 84532,
            verifying_contract: addr(BASE_SEPOLIA_USDC),
        }
    }

    #[test]
    fn domain_separator_base_sepolia_usdc() {
        assert_eq!(
            hex::encode(base_sepolia("USDC").separator()),
            "71f17a3b2ff373b803d70a5a07c046c1a2bc8e89c09ef722fcb047abe94c9818"
        );
    }

    #[test]
    fn domain_separator_base_mainnet_usd_coin() {
        let d = Eip712Domain {
            name: "USD Coin",
            version: "2",
            chain_id: 8453,
            verifying_contract: addr(BASE_USDC),
        };
        assert_eq!(
            hex::encode(d.separator()),
            "02fa7265e7c5d81118673727957699e4d68f74cd74b7db77da710fe8a2c7834f"
        );
    }

    #[test]
    fn spec_v1_example_digest() {
        assert_eq!(
            hex::encode(spec_v1_example().digest(&base_sepolia("USDC"))),
            "f256992871671abcb27ff92885a7afa46218724e5fc0bac35d050115aa1d22e6"
        );
    }

    #[test]
    fn spec_v1_example_recovers_to_from() {
        let auth = spec_v1_example();
        let digest = auth.digest(&base_sepolia("USDC"));
        assert_eq!(recover_address(&digest, SPEC_V1_SIGNATURE), Some(auth.from));
    }

    #[test]
    fn spec_v1_example_under_usd_coin_does_not_recover_to_from() {
        let auth = spec_v1_example();
        let digest = auth.digest(&base_sepolia("USD Coin"));
        let recovered = recover_address(&digest, SPEC_V1_SIGNATURE);
        // Well-formed, so it recovers, but to somebody else.
        assert!(recovered.is_some());
        assert_ne!(recovered, Some(auth.from));
    }

    #[test]
    fn signing_vector() {
        let key = protocol::signing::Keypair::from_secret_hex(
            "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80",
        )
        .unwrap();
        let auth = TransferWithAuthorization {
            from: key.address().parse().unwrap(),
            to: addr("0x70997970C51812dc3A010C7d01b50e0d17dc79C8"),
            value: "1000000".parse().unwrap(),
            valid_after: "0".parse().unwrap(),
            valid_before: "9999999999".parse().unwrap(),
            nonce: "0x0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f20"
                .parse()
                .unwrap(),
        };
        let sig = key.sign_prehash(&auth.digest(&base_sepolia("USDC")));
        assert_eq!(
            sig,
            "0x6d92aa87ba7a3e985953a3189173285bd9e9556353fed62d0ce84856461dba9d72f88dd1c39c7d88af0b6a11912dd801541288c26879b8f801180ddd928cd20c1c"
        );
    }

    #[test]
    fn address_parsing_ignores_case_and_prints_checksummed() {
        let a = addr("0x036cbd53842c5426634e7929541ec2318f3dcf7e");
        assert_eq!(a, addr(BASE_SEPOLIA_USDC));
        assert_eq!(a.to_string(), BASE_SEPOLIA_USDC);
        for bad in [
            "",
            "0x",
            "036cbd53842c5426634e7929541ec2318f3dcf7e",
            "0x036c",
            "0xzz6cbd53842c5426634e7929541ec2318f3dcf7e",
        ] {
            assert!(bad.parse::<Address>().is_err(), "{bad}");
        }
    }

    #[test]
    fn u256_round_trips_and_bounds() {
        for s in [
            "0",
            "1",
            "255",
            "256",
            "10000",
            "18446744073709551615",
            "18446744073709551616",
        ] {
            assert_eq!(s.parse::<U256>().unwrap().to_string(), s);
        }
        let max = "115792089237316195423570985008687907853269984665640564039457584007913129639935";
        assert_eq!(max.parse::<U256>().unwrap().to_string(), max);
        assert_eq!(max.parse::<U256>().unwrap().0, [0xff; 32]);
        let over = "115792089237316195423570985008687907853269984665640564039457584007913129639936";
        assert!(over.parse::<U256>().is_err());
        for bad in ["", "-1", "1.0", "0x10", "1e3", " 1", "+1"] {
            assert!(bad.parse::<U256>().is_err(), "{bad}");
        }
        assert_eq!("10000".parse::<U256>().unwrap().to_u64(), Some(10_000));
        assert_eq!(
            "18446744073709551616".parse::<U256>().unwrap().to_u64(),
            None
        );
        assert_eq!(U256::from_u64(42).to_string(), "42");
        assert!(U256::from_u64(9) < U256::from_u64(10));
    }
}
