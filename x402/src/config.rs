//! What a deployment accepts as payment: one asset on one network, paid to
//! one address.

use crate::evm::{Address, Eip712Domain};

/// Why a payment configuration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("network must be a CAIP-2 identifier such as eip155:84532")]
    Network,
    #[error(
        "networks other than eip155:* can only be verified by a facilitator; set a facilitator URL"
    )]
    NeedsFacilitator,
    #[error("only eip155:* and solana:* networks are supported (the replay guard must know a payment's identity)")]
    UnsupportedNamespace,
    #[error("the asset's EIP-712 domain name and version must not be empty")]
    Domain,
    #[error("max_timeout_seconds must be more than the 6 s settlement margin")]
    Timeout,
    #[error("no payment asset is known for network {network}; set the asset, its EIP-712 name and version")]
    UnknownAsset { network: String },
    #[error(
        "asset {asset} is not the known asset of {network}; set its EIP-712 name and version too"
    )]
    AssetDomainNeeded { network: String, asset: Address },
}

/// Payment settings of a deployment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaymentConfig {
    /// CAIP-2 network, e.g. `eip155:84532` (Base Sepolia).
    pub network: String,
    pub pay_to: Address,
    /// The token contract (for EIP-3009, also the EIP-712 `verifyingContract`).
    pub asset: Address,
    /// EIP-712 domain `name` of the asset (`USDC` on Base Sepolia, `USD Coin` on Base).
    pub asset_name: String,
    /// EIP-712 domain `version` of the asset (`2` for USDC).
    pub asset_version: String,
    pub max_timeout_seconds: u64,
    /// Without one, payments are verified locally and no money moves.
    pub facilitator_url: Option<String>,
}

/// USDC on Base Sepolia.
pub const BASE_SEPOLIA_USDC: &str = "0x036CbD53842c5426634e7929541eC2318f3dCF7e";
/// USDC on Base mainnet.
pub const BASE_USDC: &str = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913";

/// The token a network pays in by default, with its EIP-712 domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KnownAsset {
    pub network: &'static str,
    pub address: &'static str,
    pub name: &'static str,
    pub version: &'static str,
}

/// Default assets, from coinbase/x402 `DEFAULT_STABLECOINS`
/// (typescript/packages/mechanisms/evm/src/shared/defaultAssets.ts), keeping
/// only USDC with EIP-3009 and 6 decimals: prices become atomic amounts at 6
/// decimals, and `exact` here is EIP-3009 only. A network not listed (Monad
/// testnet `eip155:10143` among them: no authoritative address) needs the
/// asset configured explicitly.
pub const KNOWN_ASSETS: &[KnownAsset] = &[
    KnownAsset {
        network: "eip155:84532",
        address: BASE_SEPOLIA_USDC,
        name: "USDC",
        version: "2",
    },
    KnownAsset {
        network: "eip155:8453",
        address: BASE_USDC,
        name: "USD Coin",
        version: "2",
    },
    KnownAsset {
        network: "eip155:143",
        address: "0x754704Bc059F8C67012fEd69BC8A327a5aafb603",
        name: "USD Coin",
        version: "2",
    },
    KnownAsset {
        network: "eip155:137",
        address: "0x3c499c542cEF5E3811e1192ce70d8cC03d5c3359",
        name: "USD Coin",
        version: "2",
    },
    KnownAsset {
        network: "eip155:42161",
        address: "0xaf88d065e77c8cC2239327C5EDb3A432268e5831",
        name: "USD Coin",
        version: "2",
    },
    KnownAsset {
        network: "eip155:421614",
        address: "0x75faf114eafb1BDbe2F0316DF893fd58CE46AA4d",
        name: "USD Coin",
        version: "2",
    },
];

/// The default asset of a CAIP-2 network, if we know one.
pub fn known_asset(network: &str) -> Option<&'static KnownAsset> {
    KNOWN_ASSETS.iter().find(|a| a.network == network)
}

/// The asset a deployment charges in and its EIP-712 domain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssetTerms {
    pub asset: Address,
    pub name: String,
    pub version: String,
}

/// Settles the asset from what the operator set and the network's default:
/// no asset set takes the network's known one (an unknown network is an
/// error, never another network's token); a set asset that is not the known
/// one needs its EIP-712 name and version, since a wrong domain makes every
/// payment fail to verify. A set name or version always wins.
pub fn resolve_asset(
    network: &str,
    asset: Option<Address>,
    name: Option<String>,
    version: Option<String>,
) -> Result<AssetTerms, ConfigError> {
    let known = known_asset(network).map(|k| {
        let address: Address = k.address.parse().expect("constant address");
        (address, k)
    });
    let (asset, default_domain) = match (asset, known) {
        (None, None) => {
            return Err(ConfigError::UnknownAsset {
                network: network.to_owned(),
            })
        }
        (None, Some((address, k))) => (address, Some(k)),
        (Some(asset), Some((address, k))) if asset == address => (asset, Some(k)),
        (Some(asset), _) => (asset, None),
    };
    let domain_needed = || ConfigError::AssetDomainNeeded {
        network: network.to_owned(),
        asset,
    };
    let name = name
        .or_else(|| default_domain.map(|k| k.name.to_owned()))
        .ok_or_else(domain_needed)?;
    let version = version
        .or_else(|| default_domain.map(|k| k.version.to_owned()))
        .ok_or_else(domain_needed)?;
    Ok(AssetTerms {
        asset,
        name,
        version,
    })
}

/// The chain id of an `eip155:<id>` network.
pub fn eip155_chain_id(network: &str) -> Option<u64> {
    let id = network.strip_prefix("eip155:")?;
    // Reject `+1`, ` 1` and leading zeros so one chain has one spelling.
    if id.is_empty()
        || !id.bytes().all(|b| b.is_ascii_digit())
        || (id.len() > 1 && id.starts_with('0'))
    {
        return None;
    }
    id.parse().ok()
}

/// The x402 v1 name of an EVM chain (`base-sepolia`), as v1 clients expect
/// in the `network` field.
pub fn v1_network_name(chain_id: u64) -> Option<&'static str> {
    V1_NETWORKS
        .iter()
        .find(|(_, id)| *id == chain_id)
        .map(|(name, _)| *name)
}

/// The chain id of an x402 v1 network name.
pub fn v1_network_chain_id(name: &str) -> Option<u64> {
    V1_NETWORKS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, id)| *id)
}

// From @x402/evm 2.27 (EVM_NETWORK_CHAIN_ID_MAP).
const V1_NETWORKS: &[(&str, u64)] = &[
    ("ethereum", 1),
    ("sepolia", 11155111),
    ("abstract", 2741),
    ("abstract-testnet", 11124),
    ("base-sepolia", 84532),
    ("base", 8453),
    ("avalanche-fuji", 43113),
    ("avalanche", 43114),
    ("iotex", 4689),
    ("sei", 1329),
    ("sei-testnet", 1328),
    ("polygon", 137),
    ("polygon-amoy", 80002),
    ("peaq", 3338),
    ("story", 1514),
    ("educhain", 41923),
    ("skale-base-sepolia", 324705682),
    ("megaeth", 4326),
    ("monad", 143),
    ("stable", 988),
    ("stable-testnet", 2201),
    ("celo", 42220),
    ("flare", 14),
];

impl PaymentConfig {
    /// USDC on Base Sepolia (`USDC` / `2`), a 300 s authorization window,
    /// local verification.
    pub fn base_sepolia_usdc(pay_to: Address) -> Self {
        Self {
            network: "eip155:84532".to_owned(),
            pay_to,
            asset: BASE_SEPOLIA_USDC.parse().expect("constant address"),
            asset_name: "USDC".to_owned(),
            asset_version: "2".to_owned(),
            max_timeout_seconds: 300,
            facilitator_url: None,
        }
    }

    /// The EVM chain id, `None` for non-EVM networks.
    pub fn chain_id(&self) -> Option<u64> {
        eip155_chain_id(&self.network)
    }

    /// The network name a v1 client understands: the v1 name when there is
    /// one, otherwise the CAIP-2 identifier.
    pub fn v1_network(&self) -> &str {
        self.chain_id()
            .and_then(v1_network_name)
            .unwrap_or(&self.network)
    }

    /// Whether `network` (CAIP-2 or a v1 name) is our network.
    pub fn is_our_network(&self, network: &str) -> bool {
        if network == self.network {
            return true;
        }
        match (self.chain_id(), v1_network_chain_id(network)) {
            (Some(ours), Some(theirs)) => ours == theirs,
            _ => false,
        }
    }

    /// The EIP-712 domain the payer must have signed under. It always comes
    /// from here, never from the payment, so a payer cannot pick a domain.
    pub fn domain(&self) -> Option<Eip712Domain<'_>> {
        Some(Eip712Domain {
            name: &self.asset_name,
            version: &self.asset_version,
            chain_id: self.chain_id()?,
            verifying_contract: self.asset,
        })
    }

    /// Checks the settings once at startup.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let (namespace, reference) = self.network.split_once(':').ok_or(ConfigError::Network)?;
        if namespace.is_empty() || reference.is_empty() {
            return Err(ConfigError::Network);
        }
        if namespace == "eip155" {
            if self.chain_id().is_none() {
                return Err(ConfigError::Network);
            }
        } else if namespace != crate::svm::NAMESPACE {
            return Err(ConfigError::UnsupportedNamespace);
        } else if self.facilitator_url.is_none() {
            return Err(ConfigError::NeedsFacilitator);
        }
        if self.asset_name.is_empty() || self.asset_version.is_empty() {
            return Err(ConfigError::Domain);
        }
        if self.max_timeout_seconds <= crate::verify::VALID_BEFORE_MARGIN_SECONDS {
            return Err(ConfigError::Timeout);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_id_from_caip2() {
        assert_eq!(eip155_chain_id("eip155:84532"), Some(84532));
        assert_eq!(eip155_chain_id("eip155:8453"), Some(8453));
        for bad in [
            "eip155:",
            "eip155:+1",
            "eip155:01",
            "eip155: 1",
            "solana:mainnet",
            "84532",
            "eip155:99999999999999999999",
        ] {
            assert_eq!(eip155_chain_id(bad), None, "{bad}");
        }
    }

    #[test]
    fn v1_names() {
        let c = PaymentConfig::base_sepolia_usdc(Address([1; 20]));
        assert_eq!(c.v1_network(), "base-sepolia");
        assert!(c.is_our_network("eip155:84532"));
        assert!(c.is_our_network("base-sepolia"));
        assert!(!c.is_our_network("base"));
        assert!(!c.is_our_network("eip155:8453"));
        assert!(c.validate().is_ok());
    }

    #[test]
    fn asset_defaults_follow_the_network() {
        // Issue 16 finding 10: the asset defaulted to Base Sepolia USDC
        // whatever the network.
        let base = resolve_asset("eip155:8453", None, None, None).unwrap();
        assert_eq!(base.asset, BASE_USDC.parse().unwrap());
        assert_eq!(
            (base.name.as_str(), base.version.as_str()),
            ("USD Coin", "2")
        );
        let sepolia = resolve_asset("eip155:84532", None, None, None).unwrap();
        assert_eq!(sepolia.asset, BASE_SEPOLIA_USDC.parse().unwrap());
        assert_eq!(sepolia.name, "USDC");
        assert_eq!(
            resolve_asset("eip155:10143", None, None, None),
            Err(ConfigError::UnknownAsset {
                network: "eip155:10143".into()
            })
        );
        assert!(resolve_asset("solana:mainnet", None, None, None).is_err());
    }

    #[test]
    fn a_set_asset_needs_its_domain_unless_it_is_the_known_one() {
        let other = Address([7; 20]);
        assert_eq!(
            resolve_asset("eip155:10143", Some(other), Some("USDC".into()), None),
            Err(ConfigError::AssetDomainNeeded {
                network: "eip155:10143".into(),
                asset: other
            })
        );
        let set = resolve_asset(
            "eip155:10143",
            Some(other),
            Some("USDC".into()),
            Some("2".into()),
        )
        .unwrap();
        assert_eq!(set.asset, other);
        // Another token on a known network does not borrow the known domain.
        assert!(resolve_asset("eip155:8453", Some(other), None, None).is_err());
        // The known token named explicitly keeps its domain; a set name wins.
        let known = resolve_asset(
            "eip155:8453",
            Some(BASE_USDC.parse().unwrap()),
            Some("Custom".into()),
            None,
        )
        .unwrap();
        assert_eq!(
            (known.name.as_str(), known.version.as_str()),
            ("Custom", "2")
        );
    }

    #[test]
    fn validation() {
        let ok = PaymentConfig::base_sepolia_usdc(Address([1; 20]));
        let mut c = ok.clone();
        c.network = "solana:mainnet".into();
        assert_eq!(c.validate(), Err(ConfigError::NeedsFacilitator));
        c.facilitator_url = Some("http://f".into());
        assert_eq!(c.validate(), Ok(()));
        let mut c = ok.clone();
        c.network = "cosmos:cosmoshub-4".into();
        c.facilitator_url = Some("http://f".into());
        assert_eq!(c.validate(), Err(ConfigError::UnsupportedNamespace));
        let mut c = ok.clone();
        c.network = "eip155:x".into();
        assert_eq!(c.validate(), Err(ConfigError::Network));
        let mut c = ok.clone();
        c.asset_name.clear();
        assert_eq!(c.validate(), Err(ConfigError::Domain));
        let mut c = ok;
        c.max_timeout_seconds = 6;
        assert_eq!(c.validate(), Err(ConfigError::Timeout));
    }
}
