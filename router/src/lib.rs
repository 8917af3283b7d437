//! The router: the client library of spec 4.8. It runs LLM and TASK jobs on
//! a coordinator (quote, commit, pay on 402, poll, verify the receipt) and
//! falls back to hosted providers with the caller's own keys.
//!
//! Layout:
//! - [`compute_router`]: [`ComputeRouter`], the routing rules and fallback.
//! - [`breaker`]: a circuit breaker per chain's coordinator (a cooldown after repeated failures).
//! - [`request`]: [`LlmRequest`], [`TaskRequest`], [`ComputeResult`] and the [`Attempt`]s it lists.
//! - [`route`]: [`Route`], [`Chain`], [`HostedProvider`] and their wire names.
//! - [`config`]: [`RouterConfig`] and reading it from the environment.
//! - [`coordinator`]: the decentralized adapter, [`coordinator::CoordinatorClient`]; it
//!   cancels a job it gives up on before the next route runs ([`CancelOutcome`]).
//! - [`hosted`]: the OpenAI and Anthropic adapters, retry, task prompts.
//! - [`payment`]: the [`PaymentClient`] seam the x402 crate implements.
//! - [`user`]: the [`UserSigner`] that proves the user on PRIVATE commits (`X-User-Proof`).
//! - [`stream`]: streaming calls, [`ComputeRouter::stream_llm`] and the [`StreamEvent`]s it yields.
//! - [`sse`]: a bounded reader of server-sent events (coordinator job events, hosted streams).
//! - [`transport`]: [`HttpTransport`] (whole and streamed answers) and its reqwest implementation.
//! - [`error`]: [`AdapterError`] and [`RouterError`].
//!
//! ```no_run
//! use router::{ComputeRouter, LlmRequest, TaskRequest, TaskType};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let router = ComputeRouter::from_env()?;
//! let answer = router.run_llm(LlmRequest::new("Why is the sky blue?", "alice")).await?;
//! println!("{} via {}", answer.output, answer.route);
//! let json = router
//!     .run_task(TaskRequest::new(TaskType::ExtractJson, "Ada, born 1815", "alice"))
//!     .await?;
//! println!("{}", serde_json::to_string_pretty(&json)?);
//! # Ok(())
//! # }
//! ```
//!
//! Streaming ([`stream`]): text as it is made, then the same result.
//!
//! ```no_run
//! use futures_util::StreamExt;
//! use router::{ComputeRouter, LlmRequest, StreamEvent};
//!
//! # async fn demo(router: ComputeRouter) -> Result<(), router::RouterError> {
//! let mut events = router.stream_llm(LlmRequest::new("Tell me a story", "alice"));
//! while let Some(event) = events.next().await {
//!     match event? {
//!         StreamEvent::Delta(text) => print!("{text}"),
//!         StreamEvent::Restart { route, .. } => println!("\n[again, from {route}]"),
//!         StreamEvent::Done(result) => println!("\n({} via {})", result.latency_ms, result.route),
//!     }
//! }
//! # Ok(())
//! # }
//! ```
//!
//! All waiting goes through `tokio::time`, so everything runs under a paused
//! clock; the router never reads the wall clock.

pub mod breaker;
pub mod compute_router;
pub mod config;
pub mod coordinator;
pub mod error;
pub mod hosted;
pub mod payment;
pub mod request;
pub mod route;
pub mod sse;
pub mod stream;
pub mod transport;
pub mod user;

pub use breaker::BreakerConfig;
pub use compute_router::ComputeRouter;
pub use config::{
    ApiKey, ConfigError, CoordinatorUrls, HostedConfig, PaymentClients, PollConfig, RouterConfig,
    StreamConfig,
};
pub use error::{AdapterError, CancelOutcome, RouterError, Stage};
pub use hosted::{AnthropicClient, OpenAiClient, ProviderSettings, RetryPolicy};
pub use payment::{PaymentChallenge, PaymentClient, WallClock, X402Payer};
pub use request::{Attempt, AttemptOutcome, ComputeResult, LlmRequest, TaskRequest};
pub use route::{Chain, HostedProvider, Route};
pub use stream::{LlmStream, RestartReason, StreamEvent};
pub use transport::{
    BodyStream, HttpRequest, HttpResponse, HttpTransport, ReqwestTransport, StreamingResponse,
    TransportError,
};
pub use user::{KeyUserSigner, UserSigner};
// Callers build requests with these; re-exported so they need no protocol import.
pub use protocol::api::{Policy, PrivacyClass, TaskType};
