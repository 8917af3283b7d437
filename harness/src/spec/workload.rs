//! `[[workloads]]` (schema version 2) as data: the commit streams a
//! scenario declares. How they run: `run/background/workload.rs`.

use super::SimDuration;
use serde::Deserialize;
use std::time::Duration;

/// Commits of one workload at most.
pub const COMMITS_MAX: u32 = 100_000;
/// Commits per simulated second at most.
pub const RATE_MAX: u32 = 10_000;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadSpec {
    pub name: String,
    /// Instances the commits go to, one drawn per commit.
    #[serde(default = "chain_a_only")]
    pub instances: Vec<String>,
    pub count: u32,
    /// Commits per simulated second; or `over`.
    pub rate: Option<u32>,
    /// The `count` commits spread evenly over this time; or `rate`.
    pub over: Option<SimDuration>,
    /// When the first commit goes, from the start of the run (default: with
    /// the first step, at +0.001s).
    pub start: Option<SimDuration>,
    #[serde(default)]
    pub tiers: TierMix,
    #[serde(default)]
    pub job_types: JobTypeMix,
    #[serde(default)]
    pub privacy: PrivacyMix,
    #[serde(default)]
    pub payers: PayerMix,
    /// The `user_id` of every commit (PRIVATE jobs go to workers this user
    /// trusts); by default the workload's name.
    pub user: Option<String>,
    /// When the workload is finished: every commit `answered`, or every
    /// accepted job also `terminal` (polled).
    #[serde(default)]
    pub until: Until,
    /// One transcript line per commit, answer and job end; or only refusals
    /// and the totals.
    #[serde(default = "yes")]
    pub trace: bool,
}

fn chain_a_only() -> Vec<String> {
    vec![super::names::chain_a()]
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Until {
    Answered,
    #[default]
    Terminal,
}

/// Weights of the commit tiers (`/v1/jobs/commit/{tier}`); only FAST by default.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TierMix {
    #[serde(default)]
    pub fast: u32,
    #[serde(default)]
    pub cheap: u32,
}

impl Default for TierMix {
    fn default() -> Self {
        Self { fast: 1, cheap: 0 }
    }
}

/// Weights of the job types; only LLM_INFER by default.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobTypeMix {
    #[serde(default, rename = "LLM_INFER")]
    pub llm_infer: u32,
    #[serde(default, rename = "TASK")]
    pub task: u32,
}

impl Default for JobTypeMix {
    fn default() -> Self {
        Self {
            llm_infer: 1,
            task: 0,
        }
    }
}

/// Weights of the privacy classes; only PUBLIC by default.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrivacyMix {
    #[serde(default, rename = "PUBLIC")]
    pub public: u32,
    #[serde(default, rename = "PRIVATE")]
    pub private: u32,
}

impl Default for PrivacyMix {
    fn default() -> Self {
        Self {
            public: 1,
            private: 0,
        }
    }
}

/// Weights of paying and non-paying commits; none pays by default. A
/// paying commit answers the instance's 402 with the scenario payer.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PayerMix {
    #[serde(default)]
    pub paid: u32,
    #[serde(default)]
    pub unpaid: u32,
}

impl Default for PayerMix {
    fn default() -> Self {
        Self { paid: 0, unpaid: 1 }
    }
}

impl WorkloadSpec {
    /// The mixes by name, with their total weights (each must be positive).
    pub fn mix_totals(&self) -> [(&'static str, u32); 4] {
        [
            ("tiers", self.tiers.fast + self.tiers.cheap),
            ("job_types", self.job_types.llm_infer + self.job_types.task),
            ("privacy", self.privacy.public + self.privacy.private),
            ("payers", self.payers.paid + self.payers.unpaid),
        ]
    }

    /// When commit `i` is due, from the workload's start.
    pub fn offset(&self, i: u32) -> Duration {
        let i = u64::from(i);
        match (self.rate, &self.over) {
            (Some(rate), _) => Duration::from_micros(i * 1_000_000 / u64::from(rate.max(1))),
            (None, Some(over)) => {
                let over_us = u64::try_from(over.duration.as_micros()).unwrap_or(u64::MAX);
                Duration::from_micros(over_us / u64::from(self.count.max(1)) * i)
            }
            (None, None) => Duration::ZERO,
        }
    }

    pub fn user(&self) -> &str {
        self.user.as_deref().unwrap_or(&self.name)
    }
}
