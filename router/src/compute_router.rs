//! [`ComputeRouter`]: the routing rules of spec 4.8 over the adapters.

use crate::breaker::Breakers;
use crate::config::{ConfigError, RouterConfig};
use crate::coordinator::CoordinatorClient;
use crate::error::{AdapterError, RouterError};
use crate::hosted::{prompts, AnthropicClient, OpenAiClient};
use crate::request::{Attempt, AttemptOutcome, ComputeResult, Job, LlmRequest, TaskRequest};
use crate::route::{Chain, HostedProvider, Route};
use crate::transport::{HttpTransport, ReqwestTransport};
use protocol::api::{JobSubmission, Payload, PrivacyClass};
use std::sync::Arc;
use tokio::time::Instant;

/// Runs LLM and TASK jobs: the selected chain's coordinator first, then the
/// preferred hosted provider, then the other one.
#[derive(Clone)]
pub struct ComputeRouter {
    config: RouterConfig,
    transport: Arc<dyn HttpTransport>,
    /// Shared by clones: a coordinator that keeps failing is skipped by all.
    breakers: Arc<Breakers>,
}

impl std::fmt::Debug for ComputeRouter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ComputeRouter")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl ComputeRouter {
    /// A router speaking real HTTP ([`ReqwestTransport`]).
    pub fn new(config: RouterConfig) -> Self {
        Self::with_transport(config, Arc::new(ReqwestTransport::default()))
    }

    /// A router whose HTTP goes through `transport` (in-process in the
    /// simulation, a double in tests).
    pub fn with_transport(config: RouterConfig, transport: Arc<dyn HttpTransport>) -> Self {
        let breakers = Arc::new(Breakers::new(config.breaker));
        Self {
            config,
            transport,
            breakers,
        }
    }

    /// [`ComputeRouter::new`] with [`RouterConfig::from_env`].
    pub fn from_env() -> Result<Self, ConfigError> {
        RouterConfig::from_env().map(Self::new)
    }

    pub fn config(&self) -> &RouterConfig {
        &self.config
    }

    pub async fn run_llm(&self, request: LlmRequest) -> Result<ComputeResult, RouterError> {
        self.run(Job::from_llm(request, self.config.default_max_tokens))
            .await
    }

    pub async fn run_task(&self, request: TaskRequest) -> Result<ComputeResult, RouterError> {
        self.run(Job::from_task(request)).await
    }

    async fn run(&self, job: Job) -> Result<ComputeResult, RouterError> {
        let started = Instant::now();
        let elapsed_ms = || u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let mut failures = Vec::new();
        for route in self.route_order(&job) {
            let attempt = match route {
                Route::Decentralized(chain) => self
                    .run_decentralized(&job, chain)
                    .await
                    .map(|outcome| (outcome.output, Some(outcome.price), Some(outcome.receipt))),
                Route::Hosted(provider) => {
                    if job.privacy == PrivacyClass::Private && !self.config.allow_private_hosted {
                        Err(AdapterError::PrivateNotAllowed)
                    } else {
                        self.run_hosted(provider, &job)
                            .await
                            .map(|output| (output, None, None))
                    }
                }
            };
            match attempt {
                Ok((output, price, receipt)) => {
                    return Ok(ComputeResult {
                        output,
                        route,
                        price,
                        latency_ms: elapsed_ms(),
                        receipt,
                        attempts: attempts(failures, route),
                    })
                }
                Err(error) => {
                    tracing::warn!(%route, %error, "compute adapter failed");
                    failures.push((route, error));
                }
            }
        }
        Err(RouterError::AllAdaptersFailed { failures })
    }

    /// The routes of a call in the order they are tried: the selected
    /// chain's coordinator (then the other's, when configured), then the
    /// preferred hosted provider, then the other one.
    pub(crate) fn route_order(&self, job: &Job) -> Vec<Route> {
        let mut routes = vec![Route::Decentralized(job.chain)];
        if self.config.try_other_chain {
            routes.push(Route::Decentralized(job.chain.other()));
        }
        let preferred = self.config.preferred_hosted;
        routes.push(Route::Hosted(preferred));
        routes.push(Route::Hosted(preferred.other()));
        routes
    }

    pub(crate) fn transport(&self) -> Arc<dyn HttpTransport> {
        self.transport.clone()
    }

    /// The client of `chain`'s coordinator, unless its breaker is open.
    pub(crate) fn coordinator_client(
        &self,
        chain: Chain,
    ) -> Result<CoordinatorClient, AdapterError> {
        if let Err(remaining_ms) = self.breakers.check(chain) {
            return Err(AdapterError::CoolingDown {
                chain,
                remaining_ms,
            });
        }
        let client = CoordinatorClient::new(
            self.transport.clone(),
            chain,
            self.config.coordinator_urls.get(chain),
            self.config.payment_clients.get(chain).cloned(),
            self.config.poll,
        )
        .with_user_signer(self.config.user_signer.clone())
        .with_stream(self.config.stream);
        Ok(client)
    }

    pub(crate) fn record_breaker(&self, chain: Chain, outcome: Result<(), &AdapterError>) {
        self.breakers.record(chain, outcome);
    }

    /// `chain`'s coordinator, unless its breaker is open.
    async fn run_decentralized(
        &self,
        job: &Job,
        chain: Chain,
    ) -> Result<crate::coordinator::CoordinatorOutcome, AdapterError> {
        let client = self.coordinator_client(chain)?;
        let submission = JobSubmission {
            job_type: job.payload.job_type(),
            user_id: job.user_id.clone(),
            payload: job.payload.clone(),
            privacy_class: job.privacy,
        };
        let outcome = client.run(&submission, job.tier, job.max_price).await;
        self.breakers.record(chain, outcome.as_ref().map(|_| ()));
        outcome
    }

    async fn run_hosted(
        &self,
        provider: HostedProvider,
        job: &Job,
    ) -> Result<serde_json::Value, AdapterError> {
        let hosted = &self.config.hosted;
        let (system, prompt, max_tokens) = match &job.payload {
            Payload::Llm {
                prompt, max_tokens, ..
            } => (None, prompt.clone(), *max_tokens),
            Payload::Task { task_type, input } => {
                let chat = prompts::task_prompt(*task_type, input);
                (Some(chat.system), chat.user, hosted.task_max_tokens)
            }
        };
        let settings = hosted.settings(provider).clone();
        let text = match provider {
            HostedProvider::ProviderA => {
                OpenAiClient::new(self.transport.clone(), settings)
                    .with_retry(hosted.retry)
                    .chat(system, &prompt, max_tokens)
                    .await?
            }
            HostedProvider::ProviderB => {
                AnthropicClient::new(self.transport.clone(), settings)
                    .with_retry(hosted.retry)
                    .chat(system, &prompt, max_tokens)
                    .await?
            }
        };
        match &job.payload {
            Payload::Llm { .. } => Ok(serde_json::Value::String(text)),
            Payload::Task { task_type, .. } => prompts::task_output(*task_type, &text),
        }
    }
}

/// The attempts of a call that `answered` on after `failures`.
pub(crate) fn attempts(failures: Vec<(Route, AdapterError)>, answered: Route) -> Vec<Attempt> {
    let failed = failures.into_iter().map(|(route, error)| Attempt {
        route,
        outcome: AttemptOutcome::Failed(error),
    });
    let last = Attempt {
        route: answered,
        outcome: AttemptOutcome::Answered,
    };
    failed.chain(std::iter::once(last)).collect()
}
