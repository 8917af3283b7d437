//! Configuration of one simulated worker, deserialisable from the harness's
//! scenario files, and the seed-derived pieces (keys, latency draws).

use crate::fault::FaultPlan;
use protocol::api::JobType;
use protocol::signing::Keypair;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::PathBuf;
use std::str::FromStr;

/// Independent ChaCha streams of one worker seed, so a new draw in one
/// concern (say an extra latency sample) does not shift the others (the key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stream {
    Key = 0,
    Latency = 1,
    Faults = 2,
    WrongKey = 3,
    Backoff = 4,
}

pub(crate) fn rng_for(seed: u64, stream: Stream) -> ChaCha20Rng {
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    rng.set_stream(stream as u64);
    rng
}

/// The seed of worker `index` of a fleet started with `base_seed`.
pub fn worker_seed(base_seed: u64, index: u32) -> u64 {
    let digest = Sha256::digest(format!("worker-sim/{base_seed}/{index}").as_bytes());
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&digest[..8]);
    u64::from_le_bytes(bytes)
}

/// How long a simulated job takes, in integer milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Latency {
    Fixed {
        ms: u64,
    },
    Uniform {
        min_ms: u64,
        max_ms: u64,
    },
    /// Roughly normal (Irwin–Hall sum of 12 uniforms), clamped at 0.
    Normal {
        mean_ms: u64,
        stddev_ms: u64,
    },
}

impl Default for Latency {
    fn default() -> Self {
        Latency::Fixed { ms: 50 }
    }
}

impl Latency {
    pub fn sample_ms(&self, rng: &mut impl Rng) -> u64 {
        match *self {
            Latency::Fixed { ms } => ms,
            Latency::Uniform { min_ms, max_ms } => {
                if max_ms <= min_ms {
                    min_ms
                } else {
                    rng.gen_range(min_ms..=max_ms)
                }
            }
            Latency::Normal { mean_ms, stddev_ms } => {
                // Integer arithmetic only: 12 draws in [0, 1000) sum to mean 6000,
                // variance 12 * 1000^2 / 12, so (sum - 6000) / 1000 ~ N(0, 1).
                let sum: i64 = (0..12).map(|_| rng.gen_range(0..1000i64)).sum();
                let offset = (sum - 6000) * stddev_ms as i64 / 1000;
                (mean_ms as i64 + offset).max(0) as u64
            }
        }
    }
}

/// `"50"` fixed, `"20..80"` uniform, `"100~20"` normal (mean~stddev); each
/// number in milliseconds, optionally written `50ms`, or in seconds as `2s`.
impl FromStr for Latency {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        // Each part: a whole number of milliseconds, with or without `ms`,
        // or of seconds with `s` (the scenario files' one duration syntax).
        let num = |s: &str| {
            let s = s.trim();
            let (digits, scale) = match (s.strip_suffix("ms"), s.strip_suffix('s')) {
                (Some(ms), _) => (ms, 1),
                (None, Some(secs)) => (secs, 1_000),
                (None, None) => (s, 1),
            };
            digits.parse::<u64>().map(|n| n * scale).map_err(|_| {
                format!("bad latency {text:?}: want MS, MIN..MAX or MEAN~STDDEV (e.g. 50ms, 20ms..200ms, 1s)")
            })
        };
        if let Some((a, b)) = text.split_once("..") {
            let (min_ms, max_ms) = (num(a)?, num(b)?);
            if max_ms < min_ms {
                return Err(format!("bad latency {text:?}: max below min"));
            }
            Ok(Latency::Uniform { min_ms, max_ms })
        } else if let Some((a, b)) = text.split_once('~') {
            Ok(Latency::Normal {
                mean_ms: num(a)?,
                stddev_ms: num(b)?,
            })
        } else {
            Ok(Latency::Fixed { ms: num(text)? })
        }
    }
}

/// Capped exponential backoff between connection attempts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ReconnectPolicy {
    /// Reconnect at all after the connection is lost.
    pub enabled: bool,
    pub initial_ms: u64,
    pub max_ms: u64,
    /// Up to this many extra milliseconds, drawn from the seed, so a fleet
    /// does not reconnect in lockstep.
    pub jitter_ms: u64,
    /// Give up after this many consecutive failed attempts (`None`: never).
    pub max_attempts: Option<u32>,
}

impl Default for ReconnectPolicy {
    fn default() -> Self {
        Self {
            enabled: true,
            initial_ms: 100,
            max_ms: 30_000,
            jitter_ms: 0,
            max_attempts: None,
        }
    }
}

impl ReconnectPolicy {
    /// Delay before attempt `attempt` (1 = first retry), without jitter.
    pub fn delay_ms(&self, attempt: u32) -> u64 {
        let shift = attempt.saturating_sub(1).min(32);
        self.initial_ms
            .saturating_mul(1u64 << shift)
            .min(self.max_ms)
    }
}

/// Where the worker's secp256k1 key comes from.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeySource {
    /// Derived from the worker seed.
    #[default]
    Seed,
    /// A file holding the secret as hex (first non-empty line).
    File(PathBuf),
}

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("reading key file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("key file {0} does not hold a 32-byte hex secret")]
    Invalid(PathBuf),
}

impl KeySource {
    pub fn load(&self, seed: u64) -> Result<Keypair, KeyError> {
        match self {
            KeySource::Seed => Ok(Keypair::generate(&mut rng_for(seed, Stream::Key))),
            KeySource::File(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| KeyError::Read {
                    path: path.clone(),
                    source,
                })?;
                let line = text.lines().map(str::trim).find(|l| !l.is_empty());
                line.and_then(Keypair::from_secret_hex)
                    .ok_or_else(|| KeyError::Invalid(path.clone()))
            }
        }
    }
}

/// Everything that makes one simulated worker behave the way it does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct WorkerConfig {
    /// Names the worker in events and logs.
    pub name: String,
    pub seed: u64,
    pub capabilities: Vec<JobType>,
    pub slots: u32,
    pub latency: Latency,
    pub faults: FaultPlan,
    pub agent: String,
    pub key: KeySource,
    pub reconnect: ReconnectPolicy,
    /// The CAIP-2 network the worker serves; a challenge for another is
    /// refused and the worker stops.
    pub network: String,
    /// Announce the `deltas` feature and send text outputs as deltas as
    /// they are made (decision 0023): the simulated backend's spread over
    /// the job's latency, a streaming backend's as they arrive. Off unless
    /// asked: the simulation's workers keep the transcripts they had.
    pub stream: bool,
}

/// The network a worker expects unless configured: the coordinator's default.
pub const DEFAULT_NETWORK: &str = "eip155:84532";

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            name: "worker-0".to_owned(),
            seed: 0,
            capabilities: vec![JobType::LlmInfer, JobType::Task],
            slots: 4,
            latency: Latency::default(),
            faults: FaultPlan::default(),
            agent: concat!("worker-sim/", env!("CARGO_PKG_VERSION")).to_owned(),
            key: KeySource::Seed,
            reconnect: ReconnectPolicy::default(),
            network: DEFAULT_NETWORK.to_owned(),
            stream: false,
        }
    }
}

impl WorkerConfig {
    pub fn with_seed(seed: u64) -> Self {
        Self {
            seed,
            ..Self::default()
        }
    }

    /// Worker `index` of a fleet started with `base_seed`: named
    /// `worker-{index}`, seeded with [`worker_seed`].
    pub fn for_index(base_seed: u64, index: u32) -> Self {
        Self {
            name: format!("worker-{index}"),
            seed: worker_seed(base_seed, index),
            ..Self::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_parses_and_samples_deterministically() {
        assert_eq!("50".parse::<Latency>(), Ok(Latency::Fixed { ms: 50 }));
        assert_eq!(
            "20..80".parse::<Latency>(),
            Ok(Latency::Uniform {
                min_ms: 20,
                max_ms: 80
            })
        );
        assert_eq!(
            "100~20".parse::<Latency>(),
            Ok(Latency::Normal {
                mean_ms: 100,
                stddev_ms: 20
            })
        );
        assert_eq!("50ms".parse::<Latency>(), Ok(Latency::Fixed { ms: 50 }));
        assert_eq!(
            "20ms..2s".parse::<Latency>(),
            Ok(Latency::Uniform {
                min_ms: 20,
                max_ms: 2_000
            })
        );
        assert!("5m".parse::<Latency>().is_err());
        assert!("80..20".parse::<Latency>().is_err());
        assert!("fast".parse::<Latency>().is_err());

        let l = Latency::Normal {
            mean_ms: 100,
            stddev_ms: 20,
        };
        let a: Vec<u64> = {
            let mut r = rng_for(7, Stream::Latency);
            (0..20).map(|_| l.sample_ms(&mut r)).collect()
        };
        let b: Vec<u64> = {
            let mut r = rng_for(7, Stream::Latency);
            (0..20).map(|_| l.sample_ms(&mut r)).collect()
        };
        assert_eq!(a, b);
        assert!(a.iter().all(|&ms| (20..=180).contains(&ms)));
        let u = Latency::Uniform {
            min_ms: 20,
            max_ms: 80,
        };
        let mut r = rng_for(7, Stream::Latency);
        assert!((0..100)
            .map(|_| u.sample_ms(&mut r))
            .all(|ms| (20..=80).contains(&ms)));
    }

    #[test]
    fn backoff_is_capped_exponential() {
        let p = ReconnectPolicy {
            initial_ms: 100,
            max_ms: 1_000,
            ..ReconnectPolicy::default()
        };
        let delays: Vec<u64> = (1..=6).map(|a| p.delay_ms(a)).collect();
        assert_eq!(delays, vec![100, 200, 400, 800, 1_000, 1_000]);
        assert_eq!(p.delay_ms(200), 1_000);
    }

    #[test]
    fn keys_follow_the_seed_and_files_load() {
        let a = KeySource::Seed.load(1).unwrap().public_key_hex();
        assert_eq!(a, KeySource::Seed.load(1).unwrap().public_key_hex());
        assert_ne!(a, KeySource::Seed.load(2).unwrap().public_key_hex());
        assert_ne!(worker_seed(1, 0), worker_seed(1, 1));

        let dir = std::env::temp_dir().join(format!("worker-sim-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("key.hex");
        let secret = KeySource::Seed.load(3).unwrap().secret_hex();
        std::fs::write(&path, format!("\n{secret}\n")).unwrap();
        let loaded = KeySource::File(path.clone()).load(99).unwrap();
        assert_eq!(
            loaded.public_key_hex(),
            KeySource::Seed.load(3).unwrap().public_key_hex()
        );
        std::fs::write(&path, "nope").unwrap();
        assert!(matches!(
            KeySource::File(path).load(0),
            Err(KeyError::Invalid(_))
        ));
    }

    #[test]
    fn config_from_toml() {
        let c: WorkerConfig = toml::from_str(
            r#"
name = "w1"
seed = 9
capabilities = ["TASK"]
slots = 2
latency = { kind = "uniform", min_ms = 10, max_ms = 20 }
[faults]
heartbeat = { kind = "slow", interval_ms = 20000 }
"#,
        )
        .unwrap();
        assert_eq!(c.capabilities, vec![JobType::Task]);
        assert_eq!(c.slots, 2);
        assert!(c.reconnect.enabled);
    }
}
