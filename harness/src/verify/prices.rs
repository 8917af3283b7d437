//! `charged_off_price`: a paid job's payer is charged its tier's price for
//! its job type, as the instance's price table lists it (spec 2.2 and 4.2:
//! a quote and a commit's 402 name that price; `exact` moves exactly what
//! the 402 asked). Judged against the amounts the instance's settlement
//! ledger saw move (`world::settlements`), so a price looked up for the
//! wrong tier or job type, or scaled wrongly on its way into the 402, is
//! seen in the money, where a payer that signs whatever the 402 asks
//! would never notice it.

use super::safety::{SafetyKey, Violation};
use coordinator::config::PriceTable;
use coordinator::core::Job;
use protocol::api::{JobType, Tier};
use protocol::money::Price;
use std::collections::{BTreeMap, BTreeSet};

/// What one simulated paid instance charged, and what it lists.
#[derive(Debug, Clone, Copy)]
pub struct Charged<'a> {
    /// Amounts (atomic units, decimal) each authorization's settlements
    /// moved, by nonce (lowercase).
    pub values: &'a BTreeMap<String, BTreeSet<String>>,
    /// The instance's configured prices.
    pub prices: PriceTable,
}

/// Every settled payment of `jobs` moved exactly the listed price of its
/// job's tier and job type (USDC atomic units are micro-dollars, as
/// [`Price`]). A v1 payer may offer more than asked; no payer the harness
/// draws does, so more is judged as well as less.
pub fn check(instance: &str, jobs: &[Job], charged: &Charged<'_>) -> Result<(), Violation> {
    for job in jobs {
        let Some(paid) = &job.paid_with else { continue };
        let nonce = paid.nonce.nonce.to_string().to_ascii_lowercase();
        let Some(values) = charged.values.get(&nonce) else {
            continue;
        };
        let listed = listed_price(&charged.prices, job.tier, job.submission.job_type);
        let want = listed.micros().to_string();
        if let Some(moved) = values.iter().find(|v| **v != want) {
            return Err(Violation {
                invariant: SafetyKey::ChargedOffPrice,
                message: format!(
                    "{instance}: job {} ({} {}) was charged {moved} atomic units; its listed price is {want} ({listed})",
                    job.id, job.tier, job.submission.job_type
                ),
                line: None,
            });
        }
    }
    Ok(())
}

/// The table's entry, read here rather than through `PriceTable::price`:
/// the oracle must not share the lookup it judges.
fn listed_price(table: &PriceTable, tier: Tier, job_type: JobType) -> Price {
    match (tier, job_type) {
        (Tier::Fast, JobType::LlmInfer) => table.fast_llm,
        (Tier::Fast, JobType::Task) => table.fast_task,
        (Tier::Cheap, JobType::LlmInfer) => table.cheap_llm,
        (Tier::Cheap, JobType::Task) => table.cheap_task,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NONCE: &str = "0x0000000000000000000000000000000000000000000000000000000000000001";

    fn paid_job(tier: &str, job_type: &str) -> Job {
        let nonce = json!({
            "chain_id": 84532,
            "asset": "0x036cbd53842c5426634e7929541ec2318f3dcf7e",
            "from": "0x0000000000000000000000000000000000000001",
            "nonce": NONCE,
        });
        let paid_with = json!({"nonce": nonce, "response_header": ""});
        serde_json::from_value(json!({
            "id": "00000000-0000-4000-8000-000000000001",
            "submission": {
                "job_type": job_type, "user_id": "u",
                "payload": {"job_type": "TASK", "task_type": "classify", "input": "x"},
                "privacy_class": "PUBLIC",
            },
            "tier": tier, "status": "completed", "output": null, "error": null,
            "receipt": null, "created_at_ms": 0, "completed_at_ms": null,
            "attempts": 1, "payment_ref": "x402:1", "deadline_ms": 1, "seq": 1,
            "paid_with": paid_with,
        }))
        .expect("a paid job")
    }

    fn verdict(job: &Job, moved: &str) -> Option<SafetyKey> {
        let values = BTreeMap::from([(NONCE.to_owned(), BTreeSet::from([moved.to_owned()]))]);
        let charged = Charged {
            values: &values,
            prices: PriceTable::default(),
        };
        check("chain_a", std::slice::from_ref(job), &charged)
            .err()
            .map(|v| v.invariant)
    }

    #[test]
    fn a_payment_of_the_listed_price_passes_and_any_other_amount_is_caught() {
        let prices = PriceTable::default();
        let cheap_task = paid_job("CHEAP", "TASK");
        let listed = prices.cheap_task.micros();
        assert_eq!(verdict(&cheap_task, &listed.to_string()), None);
        let fast = prices.fast_task.micros().to_string();
        assert_eq!(
            verdict(&cheap_task, &fast),
            Some(SafetyKey::ChargedOffPrice)
        );
        let less = (listed - 1).to_string();
        assert_eq!(
            verdict(&cheap_task, &less),
            Some(SafetyKey::ChargedOffPrice)
        );
    }

    #[test]
    fn a_job_whose_payment_never_settled_is_not_judged() {
        let values = BTreeMap::new();
        let charged = Charged {
            values: &values,
            prices: PriceTable::default(),
        };
        let job = paid_job("FAST", "LLM_INFER");
        assert_eq!(check("chain_a", &[job], &charged), Ok(()));
    }
}
