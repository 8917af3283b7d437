//! The node's background tasks: its lease and take-overs, its presence,
//! pool claims, the remote watch of held polls, and retention.

use super::{ClusterLink, NodeStore, CLAIM_BATCH_MAX, CLAIM_INTERVAL_MS};
use crate::buggify::{self, Site};
use crate::cluster::ClusterError;
use crate::retention::Retention;
use crate::shell::Coordinator;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Renews the lease every third of it, takes over lapsed nodes' jobs and
/// learns trust written elsewhere. Fences the node once it could not renew
/// for half its lease.
pub async fn run_lease(c: Coordinator, link: Arc<ClusterLink>, store: Arc<NodeStore>) {
    let every = Duration::from_millis((link.node_lease_ms / 3).max(1) as u64);
    let mut last_renewed_ms = c.now_ms();
    // Late by at most an eighth of the lease: with the renewal every third,
    // a late one still comes before the fence at half the lease (a fence
    // from a fault point would be a fault the oracle cannot tell apart).
    let late_max_ms = (link.node_lease_ms / 8).max(1) as u64;
    loop {
        tokio::time::sleep(every).await;
        buggify::stall(Site::ClusterLeaseLate, late_max_ms).await;
        if store.is_fenced() {
            return;
        }
        let now_ms = c.now_ms();
        match link
            .shared
            .renew(&link.node, now_ms, link.node_lease_ms)
            .await
        {
            Ok(()) => last_renewed_ms = now_ms,
            Err(e @ ClusterError::Fenced { .. }) => return store.fence(&e),
            Err(e) => {
                tracing::warn!(error = %e, "lease renewal failed");
                if now_ms - last_renewed_ms >= link.node_lease_ms / 2 {
                    return store.fence(&e);
                }
                continue;
            }
        }
        match link.shared.take_over_lapsed(&link.node, now_ms).await {
            Ok(jobs) if !jobs.is_empty() => {
                tracing::warn!(
                    jobs = jobs.len(),
                    "recovering jobs of a node whose lease lapsed"
                );
                c.with(|core, now_ms| core.recover(jobs, now_ms));
            }
            Ok(_) => {}
            Err(e @ ClusterError::Fenced { .. }) => return store.fence(&e),
            Err(e) => tracing::warn!(error = %e, "take-over failed"),
        }
    }
}

/// Writes what is connected here to the shared presence whenever a worker
/// registers or leaves (and again every lease renewal period, in case a
/// write failed).
pub async fn run_presence(c: Coordinator, link: Arc<ClusterLink>, store: Arc<NodeStore>) {
    let every = Duration::from_millis((link.node_lease_ms / 3).max(1) as u64);
    let mut written = None;
    loop {
        tokio::select! {
            biased;
            _ = link.presence_wake.notified() => {}
            _ = tokio::time::sleep(every) => {}
        }
        if store.is_fenced() {
            return;
        }
        let now = c.read(|core| core.presence());
        if written.as_ref() == Some(&now) {
            continue;
        }
        match link.shared.set_presence(&link.node, &now).await {
            Ok(()) => written = Some(now),
            Err(e) => tracing::warn!(error = %e, "presence write failed"),
        }
    }
}

/// Learns trust entries other nodes wrote, then claims pool jobs for the
/// node's idle workers. The pool may hold
/// something after a notification, after a claim that got all it asked
/// for, and at every interval (which also fails due pool jobs).
pub async fn run_claims(c: Coordinator, link: Arc<ClusterLink>, store: Arc<NodeStore>) {
    let mut pool = link.shared.pool_changed();
    let mut maybe_more = true;
    let mut trust_version = 0;
    let interval = Duration::from_millis(CLAIM_INTERVAL_MS);
    let mut last_due_ms = c.now_ms();
    // Until then a pool notification claims nothing: set when a claimed
    // job went back to the pool because no idle worker here may take it
    // (each failed it). Its own return notifies the pool, and claiming it
    // again at once spun without time passing (swarm seeds 94 and 234); it
    // is tried again at the next interval instead.
    let mut hold_until_ms = i64::MIN;
    loop {
        tokio::select! {
            biased;
            changed = pool.changed() => {
                if changed.is_err() {
                    // The notifications ended; the interval still claims.
                    pool = watch::channel(0).1;
                }
                maybe_more = c.now_ms() >= hold_until_ms;
            }
            _ = link.claim_wake.notified() => {}
            _ = tokio::time::sleep(interval) => maybe_more = true,
        }
        // Every interval, however busy: notifications that keep coming
        // must not starve the due jobs and the pool length.
        let now_ms = c.now_ms();
        let due = now_ms - last_due_ms >= CLAIM_INTERVAL_MS as i64;
        if due {
            last_due_ms = now_ms;
        }
        if store.is_fenced() {
            return;
        }
        if !maybe_more && !due {
            continue;
        }
        // Trust first: a pairing made on another node names new PRIVATE
        // jobs this node's workers may claim.
        learn_trust(&c, &link, &mut trust_version).await;
        if due {
            if let Err(e) = due_round(&c, &link).await {
                return store.fence(&e);
            }
        }
        let want = c.read(|core| core.want(CLAIM_BATCH_MAX));
        if want.max == 0 {
            continue;
        }
        let now_ms = c.now_ms();
        match link.shared.claim(&link.node, &want, now_ms).await {
            Ok(jobs) => {
                let claimed = jobs.len();
                let returned = adopt_claimed(&c, jobs).await;
                // More may wait only if the batch was full and every job
                // found a worker here.
                maybe_more = claimed == want.max && returned == 0;
                if returned > 0 {
                    hold_until_ms = c.now_ms() + CLAIM_INTERVAL_MS as i64;
                }
            }
            Err(e @ ClusterError::Fenced { .. }) => return store.fence(&e),
            Err(e) => tracing::warn!(error = %e, "claim failed"),
        }
    }
}

/// Hands claimed jobs to the core; how many went back to the pool.
async fn adopt_claimed(c: &Coordinator, jobs: Vec<crate::core::Job>) -> usize {
    if jobs.is_empty() {
        return 0;
    }
    // A window where the jobs are this node's in the store and not yet in
    // its core.
    buggify::stall(Site::ClusterClaimSlow, 200).await;
    c.with(|core, now_ms| core.adopt(jobs, now_ms))
}

/// Learns the trust entries other nodes wrote since `version`.
async fn learn_trust(c: &Coordinator, link: &ClusterLink, version: &mut u64) {
    match link.shared.trust_after(*version).await {
        Ok((entries, latest)) => {
            *version = latest;
            if !entries.is_empty() {
                c.with(|core, _| core.learn_trust(entries));
            }
        }
        Err(e) => tracing::warn!(error = %e, "trust sync failed"),
    }
}

/// What a claim loop does every interval: fails its due pool jobs and
/// reads the pool's length. `Err` only when the node is fenced.
async fn due_round(c: &Coordinator, link: &ClusterLink) -> Result<(), ClusterError> {
    if let Err(e) = fail_due(c, link).await {
        if matches!(e, ClusterError::Fenced { .. }) {
            return Err(e);
        }
        tracing::warn!(error = %e, "claim of due jobs failed");
    }
    // The pool counts against `queue_len_max` cluster-wide.
    match link.shared.pool_len(&link.node).await {
        Ok(n) => c.with(|core, _| core.set_pool_len(n as usize)),
        Err(e) => tracing::warn!(error = %e, "reading the pool length failed"),
    }
    Ok(())
}

/// Claims pool jobs past their pending deadline, whatever their kind, in
/// batches until none is left, and fails them (`Core::adopt`): the pool's
/// pending timers, fired by whichever node looks first.
async fn fail_due(c: &Coordinator, link: &ClusterLink) -> Result<(), ClusterError> {
    let due_only = crate::cluster::Want {
        max: CLAIM_BATCH_MAX,
        ..Default::default()
    };
    loop {
        let jobs = link.shared.claim(&link.node, &due_only, c.now_ms()).await?;
        let full = jobs.len() == CLAIM_BATCH_MAX;
        if !jobs.is_empty() {
            c.with(|core, now_ms| core.adopt(jobs, now_ms));
        }
        if !full {
            return Ok(());
        }
    }
}

/// How often the remote watch reads the jobs held polls wait on that other
/// nodes hold.
pub const REMOTE_POLL_INTERVAL_MS: u64 = 100;

/// Jobs the remote watch reads in one query; a node holds at most
/// `held_polls_max` polls, so at most that many / this queries a round.
pub const REMOTE_WATCH_BATCH_MAX: usize = 1_000;

/// Every [`REMOTE_POLL_INTERVAL_MS`], reads the status of the jobs held
/// polls here wait on that other nodes hold, a batch per query, and wakes
/// the polls whose job changed: the store's load is a few queries a round
/// however many polls are held (one read per poll per round made 10,000
/// held polls 100,000 queries a second).
pub async fn run_remote_watch(c: Coordinator, link: Arc<ClusterLink>, store: Arc<NodeStore>) {
    let every = Duration::from_millis(REMOTE_POLL_INTERVAL_MS);
    let rounds_max = c.config().limits.held_polls_max / REMOTE_WATCH_BATCH_MAX + 1;
    loop {
        tokio::time::sleep(every).await;
        if store.is_fenced() {
            return;
        }
        let mut after = None;
        for _ in 0..rounds_max {
            let ids = c.remote_watched(after, REMOTE_WATCH_BATCH_MAX);
            let Some(&last) = ids.last() else {
                break;
            };
            match link.shared.job_statuses(&ids).await {
                Ok(statuses) => c.wake_remote(&statuses),
                Err(e) => tracing::warn!(error = %e, "reading watched jobs failed"),
            }
            if ids.len() < REMOTE_WATCH_BATCH_MAX {
                break;
            }
            after = Some(last);
        }
    }
}

/// Retention in cluster mode, as [`Retention`] says: forgets the jobs
/// this node's ledger says to and deletes exactly those from the shared
/// store, never another node's (issue 29: one node's size cut deleted
/// every node's rows, and the others then answered 404 for jobs they still
/// counted). Each age pass also deletes orphans, finished rows created an
/// hour before the age cut, which no live node's ledger counts any more
/// (their node restarted), and expired payment nonces.
pub async fn run_retention(c: Coordinator, link: Arc<ClusterLink>, hours: u64) {
    let mut retention = Retention::new(hours);
    let mut every = Retention::ticks();
    loop {
        every.tick().await;
        buggify::stall(Site::RetentionPurgeLate, 1_000).await;
        let now_ms = c.now_ms();
        let age = retention.age_cut(now_ms);
        let forgotten = c.with(|core, now_ms| core.retention_pass(now_ms, age));
        if forgotten.ids.is_empty() && age.is_none() {
            continue;
        }
        let orphans_before_ms = age.map(|cut| cut.saturating_sub(ORPHAN_GRACE_MS));
        let now_s = u64::try_from(now_ms / 1000).unwrap_or(0);
        let ids = forgotten.ids.clone();
        match link.shared.purge(ids, orphans_before_ms, now_s).await {
            Ok(_) if !forgotten.ids.is_empty() => crate::retention::report(&c, &forgotten),
            Ok(_) => {}
            Err(e) => tracing::error!(error = %e, "retention purge failed"),
        }
    }
}

/// How long before the age cut a finished row counts as an orphan: every
/// job ends within minutes of its creation (pending timeout, leases), and
/// a live node's own age pass forgets it within `AGE_INTERVAL_MS` of the
/// cut, so no live node still counts a row this old.
const ORPHAN_GRACE_MS: i64 = 3_600_000;
