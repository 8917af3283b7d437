//! Streaming calls: [`ComputeRouter::stream_llm`] runs an LLM job route by
//! route as `run_llm` does, handing out its text as it is made.
//!
//! The consumer reads [`StreamEvent`]s: `Delta`s to append, a `Restart` to
//! drop what it holds (the coordinator retried the job, or the router fell
//! back to another route after text was shown), then one `Done` with the
//! whole [`ComputeResult`], whose output is exactly the text kept since the
//! last restart. A restart after a fallback is said just before the first
//! text of the route that took over, so it names the route the new text
//! comes from; a route that fails before any text costs the consumer
//! nothing and says nothing.

use crate::compute_router::ComputeRouter;
use crate::config::StreamConfig;
use crate::coordinator::{CoordinatorClient, CoordinatorOutcome};
use crate::error::{AdapterError, RouterError};
use crate::hosted::{AnthropicClient, OpenAiClient};
use crate::request::{ComputeResult, Job, LlmRequest};
use crate::route::{Chain, HostedProvider, Route};
use futures_util::Stream;
use protocol::api::{JobSubmission, Payload, PrivacyClass};
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// One thing a streaming call tells its consumer.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// Text to append to what the consumer holds.
    Delta(String),
    /// Drop the text held so far; what follows comes from `route`.
    Restart { route: Route, reason: RestartReason },
    /// The call's result; its output is the text held, joined.
    Done(ComputeResult),
}

/// Why a stream restarted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestartReason {
    /// The coordinator's attempt died and it runs the job again.
    JobRetried,
    /// `from` failed after text was shown (a coordinator job given up on
    /// is cancelled first); the next route took over.
    Fallback { from: Route, error: AdapterError },
}

/// The events of one streaming call; ends after `Done` or an error.
/// Dropping it stops the call, cancelling a coordinator job under way.
pub struct LlmStream {
    rx: mpsc::Receiver<Result<StreamEvent, RouterError>>,
}

impl std::fmt::Debug for LlmStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmStream").finish_non_exhaustive()
    }
}

impl Stream for LlmStream {
    type Item = Result<StreamEvent, RouterError>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx)
    }
}

/// Where adapters put a route's text: forwards it to the consumer, keeps
/// it to check against the result, and enforces the stream's bounds.
pub(crate) struct TextSink {
    tx: mpsc::Sender<Result<StreamEvent, RouterError>>,
    limits: StreamConfig,
    route: Route,
    /// The text of the current route since its last restart.
    text: String,
    /// The consumer holds text of a route given up on: said before the next text.
    owed: Option<RestartReason>,
    deltas: u32,
}

impl TextSink {
    fn new(tx: mpsc::Sender<Result<StreamEvent, RouterError>>, limits: StreamConfig) -> Self {
        Self {
            tx,
            limits,
            route: Route::Decentralized(Chain::ChainA),
            text: String::new(),
            owed: None,
            deltas: 0,
        }
    }

    pub(crate) fn limits(&self) -> &StreamConfig {
        &self.limits
    }

    /// The text of the current route so far.
    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// Resolves when the consumer has dropped the stream.
    pub(crate) fn gone(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let tx = self.tx.clone();
        async move { tx.closed().await }
    }

    fn begin(&mut self, route: Route) {
        self.route = route;
    }

    /// The current route failed: text it showed is owed a restart.
    fn abandon(&mut self, error: &AdapterError) {
        if !std::mem::take(&mut self.text).is_empty() {
            self.owed = Some(RestartReason::Fallback {
                from: self.route,
                error: error.clone(),
            });
        }
    }

    async fn send(&self, event: StreamEvent) -> Result<(), AdapterError> {
        self.tx
            .send(Ok(event))
            .await
            .map_err(|_| AdapterError::StreamDropped)
    }

    async fn pay_restart(&mut self) -> Result<(), AdapterError> {
        match self.owed.take() {
            Some(reason) => {
                let route = self.route;
                self.send(StreamEvent::Restart { route, reason }).await
            }
            None => Ok(()),
        }
    }

    /// Forwards `piece` (nothing for an empty one).
    pub(crate) async fn delta(&mut self, piece: String) -> Result<(), AdapterError> {
        if piece.is_empty() {
            return Ok(());
        }
        if self.deltas >= self.limits.deltas_max {
            let max = u64::from(self.limits.deltas_max);
            return Err(AdapterError::StreamLimit {
                what: "deltas",
                max,
            });
        }
        if self.text.len() + piece.len() > self.limits.text_bytes_max {
            let max = self.limits.text_bytes_max as u64;
            return Err(AdapterError::StreamLimit { what: "bytes", max });
        }
        self.pay_restart().await?;
        self.deltas += 1;
        self.text.push_str(&piece);
        self.send(StreamEvent::Delta(piece)).await
    }

    /// The coordinator runs the job again: drop its text so far.
    pub(crate) async fn restart(&mut self) -> Result<(), AdapterError> {
        if std::mem::take(&mut self.text).is_empty() {
            return Ok(());
        }
        let (route, reason) = (self.route, RestartReason::JobRetried);
        self.send(StreamEvent::Restart { route, reason }).await
    }

    /// A whole `output` that came other than by deltas (a job polled, or
    /// found completed when cancelled): the part not shown yet, or, when
    /// it does not follow what was shown, a restart and all of it.
    pub(crate) async fn finish(&mut self, output: &str) -> Result<(), AdapterError> {
        match output.strip_prefix(self.text.as_str()) {
            Some(rest) => self.delta(rest.to_owned()).await,
            None => {
                self.restart().await?;
                self.delta(output.to_owned()).await
            }
        }
    }

    async fn done(mut self, result: ComputeResult) {
        if self.pay_restart().await.is_ok() {
            let _ = self.send(StreamEvent::Done(result)).await;
        }
    }
}

impl ComputeRouter {
    /// Runs an LLM job as [`ComputeRouter::run_llm`] does (same routes, same
    /// breakers, the same receipt check), streaming its text: see
    /// [`StreamEvent`]. The call runs on a task of its own (so this must be
    /// called within a Tokio runtime); the stream holds at most
    /// `StreamConfig::buffer` events ahead of the consumer.
    pub fn stream_llm(&self, request: LlmRequest) -> LlmStream {
        let job = Job::from_llm(request, self.config().default_max_tokens);
        let limits = self.config().stream;
        let (tx, rx) = mpsc::channel(limits.buffer.max(1));
        let router = self.clone();
        tokio::spawn(async move {
            let mut sink = TextSink::new(tx.clone(), limits);
            match router.stream_run(&job, &mut sink).await {
                Ok(result) => sink.done(result).await,
                Err(error) => {
                    let _ = tx.send(Err(error)).await;
                }
            }
        });
        LlmStream { rx }
    }

    async fn stream_run(
        &self,
        job: &Job,
        sink: &mut TextSink,
    ) -> Result<ComputeResult, RouterError> {
        let started = Instant::now();
        let mut failures = Vec::new();
        for route in self.route_order(job) {
            sink.begin(route);
            let attempt = match route {
                Route::Decentralized(chain) => self.stream_decentralized(job, chain, sink).await,
                Route::Hosted(provider) => self.stream_hosted(provider, job, sink).await,
            };
            match attempt {
                Ok((output, outcome)) => {
                    let latency_ms =
                        u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
                    return Ok(ComputeResult {
                        output: serde_json::Value::String(output),
                        route,
                        price: outcome.as_ref().map(|o| o.price.clone()),
                        latency_ms,
                        receipt: outcome.map(|o| o.receipt),
                        attempts: crate::compute_router::attempts(failures, route),
                    });
                }
                Err(error) => {
                    tracing::warn!(%route, %error, "compute adapter failed mid-stream");
                    let dropped = error == AdapterError::StreamDropped;
                    sink.abandon(&error);
                    failures.push((route, error));
                    if dropped {
                        break;
                    }
                }
            }
        }
        Err(RouterError::AllAdaptersFailed { failures })
    }

    /// `chain`'s coordinator, unless its breaker is open: the job's text
    /// and its verified outcome.
    async fn stream_decentralized(
        &self,
        job: &Job,
        chain: Chain,
        sink: &mut TextSink,
    ) -> Result<(String, Option<CoordinatorOutcome>), AdapterError> {
        let client: CoordinatorClient = self.coordinator_client(chain)?;
        let submission = JobSubmission {
            job_type: job.payload.job_type(),
            user_id: job.user_id.clone(),
            payload: job.payload.clone(),
            privacy_class: job.privacy,
        };
        let outcome = client
            .run_streaming(&submission, job.tier, job.max_price, sink)
            .await;
        // The caller going away says nothing about the coordinator.
        if outcome.as_ref().err() != Some(&AdapterError::StreamDropped) {
            self.record_breaker(chain, outcome.as_ref().map(|_| ()));
        }
        let outcome = outcome?;
        Ok((sink.text().to_owned(), Some(outcome)))
    }

    async fn stream_hosted(
        &self,
        provider: HostedProvider,
        job: &Job,
        sink: &mut TextSink,
    ) -> Result<(String, Option<CoordinatorOutcome>), AdapterError> {
        if job.privacy == PrivacyClass::Private && !self.config().allow_private_hosted {
            return Err(AdapterError::PrivateNotAllowed);
        }
        let Payload::Llm {
            prompt, max_tokens, ..
        } = &job.payload
        else {
            unreachable!("stream_llm makes LLM jobs only");
        };
        let hosted = &self.config().hosted;
        let settings = hosted.settings(provider).clone();
        let transport = self.transport();
        let text = match provider {
            HostedProvider::ProviderA => {
                OpenAiClient::new(transport, settings)
                    .with_retry(hosted.retry)
                    .chat_stream(None, prompt, *max_tokens, sink)
                    .await?
            }
            HostedProvider::ProviderB => {
                AnthropicClient::new(transport, settings)
                    .with_retry(hosted.retry)
                    .chat_stream(None, prompt, *max_tokens, sink)
                    .await?
            }
        };
        Ok((text, None))
    }
}
