//! Deployment settings: network id, prices, limits and timeouts. Every limit
//! the coordinator enforces is named here with its unit, and documented in
//! docs/operations.md, "Limits".

use protocol::api::{JobType, Tier};
use protocol::money::Price;

#[derive(Debug, Clone)]
pub struct Config {
    /// CAIP-2 chain id reported by health and quotes, e.g. `eip155:10143`.
    pub network: String,
    pub prices: PriceTable,
    pub limits: Limits,
    pub timing: Timing,
    /// URLs this instance is published at (e.g. `https://coordinator.example`).
    /// A worker's login must name the origin of one of them (see
    /// `protocol::origin`); when empty, the origin of the address it listens
    /// on (`Server::serve`). The first is also the base of the payment
    /// requirements' `resource`, which is otherwise taken from `Host`.
    pub public_urls: Vec<String>,
    /// Check the core's invariants after every event and panic on a breach
    /// (see `Core::check_invariants`). On by default in debug builds; the
    /// simulation turns it on in release builds too. Costs what the event
    /// changed, plus O(jobs) every 512 events and after a worker leaves or
    /// trust changes (see invariants.rs); benchmarks turn it off.
    pub check_invariants: bool,
    /// Reverse proxies whose `X-Forwarded-For` names the client for the
    /// per-client limits. Empty (the default): the header is ignored, since
    /// anyone can send it.
    pub trusted_proxies: Vec<std::net::IpAddr>,
    /// Whether acting for a user needs that user's proof (`X-User-Proof`,
    /// `protocol::user_proof`; decision 0017): on by default, so a user id
    /// alone never reaches a user's trusted workers. `Off` is the spec's
    /// literal behaviour, for closed deployments and conformance runs.
    pub user_auth: UserAuth,
    /// When a paid job's payment is settled (decision 0021).
    pub settlement: Settlement,
}

/// `--settlement on-completion|at-commit`: when a paid job's payment moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Settlement {
    /// Verified and its nonce reserved at commit; settled once a worker's
    /// result has been checked, and only then is the job `completed` and its
    /// output shown. A job that fails is never settled. The operator risks
    /// the work of a job whose payer drains the balance before settlement
    /// (that payer gets no output).
    #[default]
    OnCompletion,
    /// Settled at commit, before the job exists (the behaviour before issue
    /// 30): the operator is paid for every accepted job, and a payer pays
    /// for jobs that then fail (no eligible worker, attempts exhausted).
    AtCommit,
}

/// `--user-auth on|off`: what `trust/create`, `trust/list` and PRIVATE
/// commits need to act for a user.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UserAuth {
    /// The user's proof: a signature by the account the user id names (or,
    /// for a paid PRIVATE commit, a payment by that account's address).
    #[default]
    On,
    /// The user id alone, as the spec shows it; anyone who knows a user id
    /// acts for that user.
    Off,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            network: "eip155:84532".into(),
            prices: PriceTable::default(),
            limits: Limits::default(),
            timing: Timing::default(),
            public_urls: Vec::new(),
            check_invariants: cfg!(debug_assertions),
            trusted_proxies: Vec::new(),
            user_auth: UserAuth::On,
            settlement: Settlement::OnCompletion,
        }
    }
}

/// Price per tier and job type; the quote shows and the commit charges the same number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PriceTable {
    pub fast_llm: Price,
    pub fast_task: Price,
    pub cheap_llm: Price,
    pub cheap_task: Price,
}

impl Default for PriceTable {
    fn default() -> Self {
        Self {
            fast_llm: Price::from_micros(10_000),
            fast_task: Price::from_micros(3_000),
            cheap_llm: Price::from_micros(5_000),
            cheap_task: Price::from_micros(1_000),
        }
    }
}

impl PriceTable {
    pub fn price(&self, tier: Tier, job_type: JobType) -> Price {
        match (tier, job_type) {
            (Tier::Fast, JobType::LlmInfer) => self.fast_llm,
            (Tier::Fast, JobType::Task) => self.fast_task,
            (Tier::Cheap, JobType::LlmInfer) => self.cheap_llm,
            (Tier::Cheap, JobType::Task) => self.cheap_task,
        }
    }
}

/// Size and count limits.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest HTTP request body; larger gets 413.
    pub body_bytes_max: usize,
    /// Largest worker frame answered with a normal error frame; the WebSocket
    /// itself refuses messages over four times this size and closes.
    pub frame_bytes_max: usize,
    /// Pending jobs held at once; a commit beyond it gets 503.
    pub queue_len_max: usize,
    /// Bytes of non-terminal jobs (fixed overhead, user id, payload text);
    /// a commit that would go beyond it gets 503.
    pub queued_bytes_max: usize,
    /// Bytes of terminal jobs kept (with their outputs) until retention
    /// deletes them; while at or over it, commits get 503.
    pub kept_bytes_max: usize,
    /// Of those, the share (per cent) one client address (IPv6: one /64)
    /// may hold before its own oldest results are the first deleted, at any
    /// age, once the budget passes its high-water mark (decision 0018).
    /// A share, not bytes, so a small budget keeps the same shape.
    pub kept_share_per_client_percent: usize,
    /// A finished result younger than this is deleted for room only when
    /// its client is over `kept_bytes_per_client_max`: when the budget is
    /// full of younger results of lighter clients, commits get 503 instead.
    pub kept_min_ms: i64,
    /// Bytes of failed jobs kept (refusals and failures: no output), a
    /// ledger apart from `kept_bytes_max`, so a flood of refused commits
    /// deletes failure records (the heaviest client's first), never results.
    pub failed_kept_bytes_max: usize,
    /// Bytes of non-terminal jobs one client address may have queued; a
    /// commit beyond it gets 503.
    pub queued_bytes_per_client_max: usize,
    /// Refused commits (422, no trusted worker) one client address may make
    /// per minute; beyond it 429, and nothing is recorded. Accepted commits
    /// are bounded by the per-client byte shares instead (decision 0018).
    pub refusals_per_client_per_minute_max: u32,
    /// Largest job output (as stored, compact JSON) a result may carry;
    /// a larger one is refused as `invalid_output`. Below `frame_bytes_max`.
    pub output_bytes_max: usize,
    /// Finished jobs kept in memory, the most recent; older ones are read
    /// from the store when polled (core/ended.rs). Bounds the memory of
    /// finished jobs, which the store keeps anyway.
    pub finished_jobs_cached_max: usize,
    pub max_tokens_max: u32,
    /// `max_tokens` when an LLM payload leaves it out.
    pub max_tokens_default: u32,
    pub user_id_chars_max: usize,
    /// Most concurrent jobs one worker session may ask for.
    pub slots_max: u32,
    pub workers_max: usize,
    /// WebSocket connections still in hello/auth at once; more get 503.
    pub handshakes_max: usize,
    /// Of those, from one client address (IPv6 by /64); more get 503.
    pub handshakes_per_client_max: usize,
    /// Plain HTTP connections (not yet upgraded to a worker session) at once;
    /// beyond it a new connection is closed at accept. Each costs at most the
    /// header buffer below while its request head is read.
    pub http_connections_max: usize,
    /// Of those, from one peer address (IPv6 by /64): one address cannot take
    /// them all. Above the held polls allowed per client, so those still fit.
    pub http_connections_per_client_max: usize,
    /// Most bytes of a request's head (request line and headers): hyper's read
    /// buffer grows to this and no further (its default, ~400 KB, let 1,000
    /// unfinished heads hold 400 MB; issue 29, finding 4). Beyond: 431.
    pub http_head_bytes_max: usize,
    /// Established worker sessions from one peer address (IPv6 by /64); a
    /// login beyond it is refused (issue 29, finding 7).
    pub worker_sessions_per_client_max: usize,
    /// Slots of those sessions together, per peer address.
    pub worker_slots_per_client_max: u32,
    /// Live pairing codes (unclaimed, unexpired) at once; a create beyond it gets 503.
    pub pairing_codes_max: usize,
    /// Pairing codes remembered at once, live or dead (claimed or expired,
    /// kept for `already_claimed` / `expired` answers). Beyond it the oldest
    /// dead code is forgotten early. More than `pairing_codes_max`.
    pub pairing_codes_kept_max: usize,
    /// Live codes one user may hold; a create beyond it gets 429.
    pub pairing_codes_per_user_max: usize,
    /// Codes one client address (IPv6: one /64) may create per minute.
    pub pairing_creates_per_client_per_minute_max: u32,
    /// Codes created for one user per minute.
    pub pairing_creates_per_user_per_minute_max: u32,
    /// Failed claims one client address (IPv6: one /64) may make per
    /// minute; successful claims are not counted.
    pub claim_failures_per_client_per_minute_max: u32,
    /// Failed claims from all clients together per minute: bounds the
    /// guessing rate whatever the number of addresses.
    pub claim_failures_per_minute_max: u32,
    /// Client addresses (or users) tracked by each rate limiter at once; a
    /// new one beyond it is refused until windows expire.
    pub rate_limited_keys_max: usize,
    /// Largest `wait_ms` a job poll may ask for; larger gets 400.
    pub poll_wait_ms_max: u64,
    /// Job polls held open at once (`wait_ms`); a poll beyond it is
    /// answered at once, never refused.
    pub held_polls_max: usize,
    /// Job polls one client address (IPv6: one /64) may hold open at once;
    /// beyond it its polls are answered at once.
    pub held_polls_per_client_max: usize,
    /// `delta` frames one assignment may carry (decision 0023); one more
    /// fails the attempt as `invalid_output`. Their joined text is bounded
    /// by `output_bytes_max`, as the result is.
    pub deltas_per_job_max: u32,
    /// `delta` frames one worker session may send per second, all its jobs
    /// together: a delta costs a lock and a wake of every reader of its job.
    pub deltas_per_session_per_second_max: u32,
    /// Job event streams (`GET /v1/jobs/{id}/events`, streamed chat
    /// completions) held open at once; beyond it a stream gets 503.
    pub held_streams_max: usize,
    /// Job event streams one client address (IPv6: one /64) may hold open.
    pub held_streams_per_client_max: usize,
    /// Longest a job event stream stays open; it then ends with an `end`
    /// event (reason `stream_time_limit`) and the client may resume.
    pub stream_ms_max: u64,
    /// User-proof nonces remembered at once (each for the proof window);
    /// a new proof beyond it gets 503 rather than a nonce being forgotten
    /// early, which would let its proof be replayed.
    pub user_proof_nonces_max: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            body_bytes_max: 256 * 1024,
            frame_bytes_max: 1024 * 1024,
            queue_len_max: 100_000,
            queued_bytes_max: 256 * 1024 * 1024,
            kept_bytes_max: 1024 * 1024 * 1024,
            kept_share_per_client_percent: 12,
            kept_min_ms: 120_000,
            failed_kept_bytes_max: 64 * 1024 * 1024,
            queued_bytes_per_client_max: 32 * 1024 * 1024,
            refusals_per_client_per_minute_max: 600,
            output_bytes_max: 256 * 1024,
            finished_jobs_cached_max: 256,
            max_tokens_max: 32_768,
            max_tokens_default: 256,
            user_id_chars_max: 256,
            slots_max: 64,
            workers_max: 100_000,
            handshakes_max: 1_024,
            handshakes_per_client_max: 16,
            http_connections_max: 12_288,
            http_connections_per_client_max: 1_100,
            http_head_bytes_max: 16_384,
            worker_sessions_per_client_max: 64,
            worker_slots_per_client_max: 1_024,
            pairing_codes_max: 100_000,
            pairing_codes_kept_max: 200_000,
            pairing_codes_per_user_max: 5,
            pairing_creates_per_client_per_minute_max: 10,
            pairing_creates_per_user_per_minute_max: 5,
            claim_failures_per_client_per_minute_max: 10,
            claim_failures_per_minute_max: 60,
            rate_limited_keys_max: 100_000,
            poll_wait_ms_max: 30_000,
            held_polls_max: 10_000,
            held_polls_per_client_max: 1_000,
            deltas_per_job_max: 4_096,
            deltas_per_session_per_second_max: 1_000,
            held_streams_max: 1_000,
            held_streams_per_client_max: 32,
            stream_ms_max: 600_000,
            user_proof_nonces_max: 100_000,
        }
    }
}

/// Timeouts and retry bounds of the job lifecycle and worker sessions.
#[derive(Debug, Clone)]
pub struct Timing {
    /// A job waiting this long for an eligible worker fails with `no_eligible_worker`.
    pub pending_timeout_ms: i64,
    /// A worker must deliver a result this long after the assign, or the job is requeued.
    pub lease_ms: i64,
    /// Assignments a job may get before it fails with the last attempt's reason.
    pub attempts_max: u32,
    pub heartbeat_interval_ms: u64,
    /// A worker silent this long is dropped and its jobs requeued.
    pub heartbeat_timeout_ms: u64,
    /// Time a new connection has to send hello.
    pub hello_timeout_ms: u64,
    /// Time an HTTP connection has to send a whole request head, from its
    /// first byte (hyper's `header_read_timeout`); then it is closed.
    pub http_head_timeout_ms: u64,
    /// Time a request has to send its whole body once its head is read;
    /// then it is answered 408 (a body dribbled a byte at a time would
    /// otherwise hold its buffer for ever).
    pub http_body_timeout_ms: u64,
    /// Time a new connection has to complete hello and auth.
    pub auth_timeout_ms: u64,
    pub pairing_code_ttl_ms: i64,
    /// Expired or claimed codes are remembered this long after expiry, so
    /// claims answer `expired` / `already_claimed` rather than `invalid_code`.
    pub pairing_code_retention_ms: i64,
    /// How far a user proof's issue time may lie from the coordinator's
    /// clock, either way; its nonce is remembered that long after it.
    pub user_proof_window_ms: i64,
    /// Settling on completion: a paid job must be settled this long before
    /// its authorization's `validBefore`; from then on it fails unpaid
    /// (`payment_expired`) rather than completing unpaid. At least the
    /// facilitator's timeout, so that no settlement is sent that could
    /// land after the job failed.
    pub settle_margin_ms: i64,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            pending_timeout_ms: 30_000,
            lease_ms: 60_000,
            attempts_max: 3,
            heartbeat_interval_ms: 5_000,
            heartbeat_timeout_ms: 15_000,
            hello_timeout_ms: 2_000,
            http_head_timeout_ms: 10_000,
            http_body_timeout_ms: 30_000,
            auth_timeout_ms: 10_000,
            pairing_code_ttl_ms: 3_600_000,
            pairing_code_retention_ms: 24 * 3_600_000,
            user_proof_window_ms: protocol::user_proof::WINDOW_MS,
            settle_margin_ms: 60_000,
        }
    }
}

/// Checks the CAIP-2 form `namespace:reference`: namespace `[-a-z0-9]{3,8}`,
/// reference `[-_a-zA-Z0-9]{1,32}`.
pub fn is_caip2(network: &str) -> bool {
    let Some((ns, reference)) = network.split_once(':') else {
        return false;
    };
    (3..=8).contains(&ns.len())
        && ns
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && (1..=32).contains(&reference.len())
        && reference
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caip2_forms() {
        assert!(is_caip2("eip155:10143"));
        assert!(is_caip2("solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1"));
        for bad in [
            "",
            "eip155",
            "eip155:",
            "EIP155:1",
            "ab:1",
            "eip155:1:2",
            "eip155:a b",
        ] {
            assert!(!is_caip2(bad), "{bad}");
        }
    }

    #[test]
    fn default_prices_match_the_issue() {
        let p = PriceTable::default();
        assert_eq!(p.price(Tier::Fast, JobType::LlmInfer).to_string(), "$0.010");
        assert_eq!(p.price(Tier::Fast, JobType::Task).to_string(), "$0.003");
        assert_eq!(
            p.price(Tier::Cheap, JobType::LlmInfer).to_string(),
            "$0.005"
        );
        assert_eq!(p.price(Tier::Cheap, JobType::Task).to_string(), "$0.001");
    }
}
