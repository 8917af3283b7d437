//! What request handlers ask of the shared store in cluster mode: jobs and
//! trust held elsewhere, payments retried on another node, pairing codes,
//! and the cluster-wide rate budgets. Each does nothing outside cluster mode.

use super::ClusterLink;
use crate::cluster::ClusterError;
use crate::core::trust::LimitScope;
use crate::shell::Coordinator;
use std::sync::Arc;

/// Whether a PRIVATE submission's user has a trusted worker connected to
/// another node (and none here): then this node admits it for that one.
/// False outside cluster mode, for PUBLIC jobs, and when the shared store
/// cannot say (the job is then refused as on one node).
pub async fn trusted_elsewhere(c: &Coordinator, submission: &protocol::api::JobSubmission) -> bool {
    let Some(link) = c.cluster() else {
        return false;
    };
    if submission.privacy_class != protocol::api::PrivacyClass::Private {
        return false;
    }
    learn_trust_of(c, &submission.user_id).await;
    let (here, keys) = c.read(|core| {
        let here = core.trusted_online_here(&submission.user_id, submission.job_type);
        let keys: Vec<String> = core
            .trusted_providers(&submission.user_id)
            .into_iter()
            .map(|e| e.provider_pubkey)
            .collect();
        (here, keys)
    });
    if here || keys.is_empty() {
        return false;
    }
    match link.shared.present(&keys, submission.job_type).await {
        Ok(present) => present,
        Err(e) => {
            tracing::warn!(error = %e, "presence lookup failed");
            false
        }
    }
}

/// Workers online for `GET /v1/health`: the whole cluster's in cluster
/// mode (from the shared presence), else this coordinator's.
pub async fn workers_online(c: &Coordinator) -> u64 {
    let here = c.read(|core| core.workers_online()) as u64;
    let Some(link) = c.cluster() else {
        return here;
    };
    match link.shared.workers_online().await {
        Ok(all) => all,
        Err(e) => {
            tracing::warn!(error = %e, "presence count failed");
            here
        }
    }
}

/// A job as the shared store last committed it, for a poll on a node that
/// does not hold it; `None` outside cluster mode. With `wait_ms`, the poll
/// is held as on the job's own node (the same bounds, total and per
/// client), until the remote watch sees its status change or the wait ends.
pub async fn shared_record(
    c: &Coordinator,
    id: uuid::Uuid,
    wait_ms: Option<u64>,
    client: &str,
) -> Result<Option<protocol::api::JobRecord>, ClusterError> {
    let Some(link) = c.cluster() else {
        return Ok(None);
    };
    let Some(job) = link.shared.job(id).await? else {
        return Ok(None);
    };
    let wait_ms = wait_ms.unwrap_or(0);
    if wait_ms == 0 {
        return Ok(Some(job.record()));
    }
    let Some(held) = c.watch_remote(id, job.status, client) else {
        return Ok(Some(job.record()));
    };
    held.wait(wait_ms).await;
    Ok(link.shared.job(id).await?.map(|job| job.record()))
}

/// A job as the shared store last committed it, for a cancel on a node
/// that does not hold it; `None` outside cluster mode.
pub async fn shared_job(
    c: &Coordinator,
    id: uuid::Uuid,
) -> Result<Option<crate::core::Job>, ClusterError> {
    match c.cluster() {
        Some(link) => link.shared.job(id).await,
        None => Ok(None),
    }
}

/// The job a payment bought, from the shared store, if it is this
/// submission on this tier, with the `PAYMENT-RESPONSE` it was answered
/// with: a retry on any node gets the same answer. `None` outside cluster
/// mode.
pub async fn shared_paid_job(
    c: &Coordinator,
    nonce: x402::NonceKey,
    submission: &protocol::api::JobSubmission,
    tier: protocol::api::Tier,
) -> Option<(uuid::Uuid, String)> {
    let link = c.cluster()?;
    let job = match link.shared.paid_job(nonce).await {
        Ok(job) => job?,
        Err(e) => {
            tracing::error!(error = %e, "paid job lookup failed");
            return None;
        }
    };
    crate::core::bought_with(&job, submission, tier)
}

/// Cluster-wide rate limits (docs/cluster.md, "Limits that must be
/// global"): what one request took from the shared budgets, to give back
/// if it did not count. Empty outside cluster mode, where the core's own
/// budgets are the whole limit.
#[must_use]
pub struct Budgets {
    link: Option<Arc<ClusterLink>>,
    keys: Vec<String>,
    window_ms: i64,
}

/// Why the shared budgets refused a request.
pub enum BudgetRefused {
    /// One is used up for this window: the scope, and when it ends.
    Limited {
        scope: LimitScope,
        retry_after_ms: i64,
    },
    Unavailable(ClusterError),
}

/// Cluster mode, before a pairing claim: takes from the claim-failure
/// budgets, the client's and everyone's (a claim that succeeds gives back).
pub async fn take_claim_budgets(c: &Coordinator, client: &str) -> Result<Budgets, BudgetRefused> {
    let limits = &c.config().limits;
    let wanted = [
        (
            format!("claim_failures/client/{client}"),
            limits.claim_failures_per_client_per_minute_max,
            LimitScope::Client,
        ),
        (
            "claim_failures".to_owned(),
            limits.claim_failures_per_minute_max,
            LimitScope::Everyone,
        ),
    ];
    take_budgets(c, &wanted).await
}

/// Cluster mode, before a pairing create: takes from the create budgets,
/// the user's and the client's.
pub async fn take_create_budgets(
    c: &Coordinator,
    user_id: &str,
    client: &str,
) -> Result<Budgets, BudgetRefused> {
    let limits = &c.config().limits;
    let wanted = [
        (
            format!("pairing_creates/user/{user_id}"),
            limits.pairing_creates_per_user_per_minute_max,
            LimitScope::User,
        ),
        (
            format!("pairing_creates/client/{client}"),
            limits.pairing_creates_per_client_per_minute_max,
            LimitScope::Client,
        ),
    ];
    take_budgets(c, &wanted).await
}

/// Cluster mode: takes one from each budget in `wanted` ((key, max per
/// minute, scope), in order) for the current minute, or none of them if
/// one is used up. Outside cluster mode takes nothing.
async fn take_budgets(
    c: &Coordinator,
    wanted: &[(String, u32, LimitScope)],
) -> Result<Budgets, BudgetRefused> {
    let now_ms = c.now_ms();
    let window_ms = now_ms - now_ms.rem_euclid(crate::cluster::BUDGET_WINDOW_MS);
    let mut taken = Budgets {
        link: c.cluster().cloned(),
        keys: Vec::with_capacity(wanted.len()),
        window_ms,
    };
    let Some(link) = taken.link.clone() else {
        return Ok(taken);
    };
    for (key, max, scope) in wanted {
        let took = link
            .shared
            .take_budget(&link.node, key, window_ms, u64::from(*max))
            .await;
        let refused = match took {
            Ok(true) => {
                taken.keys.push(key.clone());
                continue;
            }
            Ok(false) => BudgetRefused::Limited {
                scope: *scope,
                retry_after_ms: window_ms + crate::cluster::BUDGET_WINDOW_MS - now_ms,
            },
            Err(e) => BudgetRefused::Unavailable(e),
        };
        taken.give_back().await;
        return Err(refused);
    }
    Ok(taken)
}

impl Budgets {
    /// Gives back what was taken (best effort: a failed give-back leaves
    /// the budget one lower until its window ends).
    pub async fn give_back(self) {
        let Some(link) = self.link else {
            return;
        };
        for key in &self.keys {
            let given = link
                .shared
                .give_back_budget(&link.node, key, self.window_ms)
                .await;
            if let Err(e) = given {
                tracing::warn!(error = %e, "giving back a rate-limit budget failed");
            }
        }
    }
}

/// Cluster mode, after a created code is written: whether the shared store
/// holds it for `user_id`. Nodes draw codes independently, so two may draw
/// the same one; the store keeps the first user's (the write is
/// conditional on the user), and the second must not hand it out: its
/// user's worker would be paired to the first user. `true` outside
/// cluster mode.
pub async fn pairing_is_ours(
    c: &Coordinator,
    pairing: &crate::core::trust::Pairing,
) -> Result<bool, ClusterError> {
    let Some(link) = c.cluster() else {
        return Ok(true);
    };
    let stored = link.shared.pairing(&pairing.code).await?;
    Ok(stored.is_some_and(|stored| stored.user_id == pairing.user_id))
}

/// Cluster mode, before a pairing claim: makes the code's stored state the
/// one this node's core judges, and claims it in the shared store first
/// (compare-and-set), so of two nodes claiming one code only one succeeds.
/// Returns the pairing for the core to learn in the same event as its
/// claim (`None`: nothing to learn, outside cluster mode too). A client
/// over its failure budget is left to the core's 429.
pub async fn pairing_for_claim(
    c: &Coordinator,
    code: &str,
    provider_pubkey: Option<&str>,
    client: &str,
) -> Result<Option<crate::core::trust::Pairing>, ClusterError> {
    let Some(link) = c.cluster() else {
        return Ok(None);
    };
    if !c.with(|core, now_ms| core.claim_allowed(client, now_ms)) {
        return Ok(None);
    }
    let code = code.trim().to_ascii_lowercase();
    let Some(stored) = link.shared.pairing(&code).await? else {
        return Ok(None);
    };
    let now_ms = c.now_ms();
    let (Some(key), None, true) = (
        provider_pubkey,
        &stored.claimed_by,
        now_ms < stored.expires_at_ms,
    ) else {
        return Ok(Some(stored));
    };
    // A code bound to another key is not claimed: the core answers
    // `invalid_code` and the code stays claimable.
    if stored
        .provider_pubkey
        .as_deref()
        .is_some_and(|bound| bound != key)
    {
        return Ok(Some(stored));
    }
    let mut claimed = stored.clone();
    claimed.claimed_by = Some(key.to_owned());
    claimed.claimed_at_ms = Some(now_ms);
    if link
        .shared
        .swap_pairing(&link.node, &stored, &claimed)
        .await?
    {
        // Won: the core claims the unclaimed code in its event.
        return Ok(Some(stored));
    }
    // Another node claimed it first: the core answers `already_claimed`.
    link.shared.pairing(&code).await
}

/// Cluster mode: brings in the user's trust entries as the shared store
/// holds them now, so a pairing claimed on another node a moment ago
/// counts here at once (the notification-driven sync may not have run
/// yet). Does nothing outside cluster mode; a store error leaves the
/// synced state.
pub async fn learn_trust_of(c: &Coordinator, user_id: &str) {
    let Some(link) = c.cluster() else {
        return;
    };
    match link.shared.trust_of(user_id).await {
        Ok(entries) if !entries.is_empty() => c.with(|core, _| core.learn_trust(entries)),
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "trust lookup failed"),
    }
}
