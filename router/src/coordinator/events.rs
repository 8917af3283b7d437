//! A streaming call's coordinator flow: quote and commit as `run` does,
//! then read the job's server-sent events (`GET /v1/jobs/{id}/events`,
//! decision 0023) instead of polling. A cut connection is resumed with
//! `Last-Event-ID`, a bounded number of times in a row without a new event;
//! then, as at the deadline, the job is cancelled before the caller moves
//! on, so one prompt is not paid for twice (decision 0022). The stream's
//! last event, the job's record, is checked as a poll's is, and its output
//! must be the text the deltas joined to.

use super::RawJobRecord;
use super::{completed, failed, status_error, Cancelled, CoordinatorClient, CoordinatorOutcome};
use crate::error::{AdapterError, Stage};
use crate::sse::{SseError, SseReader};
use crate::stream::TextSink;
use crate::transport::{join_url, HttpRequest};
use protocol::api::{JobStatus, JobSubmission, Tier};
use protocol::money::Price;
use protocol::receipt::Receipt;
use std::time::Duration;
use tokio::time::Instant;
use uuid::Uuid;

/// Bytes of a non-200 answer to the events request kept for its error.
const ERROR_BODY_MAX: usize = 16 * 1024;

/// How following a job's events ended without its result.
enum Gave {
    /// The job ended (failed, or its record does not check out): there is
    /// nothing to cancel.
    Ended(AdapterError),
    /// The router gives the job up (events lost, a bound broken, the
    /// caller gone): it is cancelled before the next route runs.
    Up(AdapterError),
}

/// How one connection to the events ended.
enum Read {
    Done(serde_json::Value, Receipt),
    /// Cut before the job's record: reconnect.
    Cut(AdapterError),
}

impl CoordinatorClient {
    /// Quote, commit, then follow the job's events into `sink` until its
    /// verified result, the deadline, or reconnects run out.
    pub(crate) async fn run_streaming(
        &self,
        submission: &JobSubmission,
        tier: Tier,
        max_price: Option<Price>,
        sink: &mut TextSink,
    ) -> Result<CoordinatorOutcome, AdapterError> {
        let (job_id, price) = self.quote_and_commit(submission, tier, max_price).await?;
        let timeout_ms = self.timeout_ms(submission.job_type);
        let deadline = Instant::now() + Duration::from_millis(timeout_ms);
        // A caller that drops the stream stops the job at once, not at the
        // next delta, which may never come.
        let gone = sink.gone();
        let follow = tokio::time::timeout_at(deadline, self.follow(job_id, sink, deadline));
        let followed = tokio::select! {
            followed = follow => followed,
            () = gone => Ok(Err(Gave::Up(AdapterError::StreamDropped))),
        };
        let given_up = match followed {
            Ok(Ok(done)) => Ok(done),
            Ok(Err(Gave::Ended(error))) => return Err(error),
            Ok(Err(Gave::Up(error))) => Err(error),
            // `give_up` puts in how its cancel went.
            Err(_) => Err(AdapterError::PollTimeout {
                job_id: job_id.to_string(),
                timeout_ms,
                cancel: crate::error::CancelOutcome::Cancelled,
            }),
        };
        let (output, receipt) = match given_up {
            Ok(done) => done,
            Err(error) => self.give_up(job_id, submission, sink, error).await?,
        };
        Ok(CoordinatorOutcome {
            job_id,
            output,
            price: price.to_string(),
            receipt,
        })
    }

    /// Cancels a job given up on for `error`. One that completed meanwhile
    /// is paid for: its result is used (its text not shown yet goes to the
    /// sink), unless the caller is gone.
    async fn give_up(
        &self,
        job_id: Uuid,
        submission: &JobSubmission,
        sink: &mut TextSink,
        error: AdapterError,
    ) -> Result<(serde_json::Value, Receipt), AdapterError> {
        let cancel = match self.cancel(job_id, submission).await {
            Cancelled::Completed(_) if error == AdapterError::StreamDropped => return Err(error),
            Cancelled::Completed(done) => {
                let (output, receipt) = done?;
                let text = output
                    .as_str()
                    .ok_or_else(|| AdapterError::StreamMismatch {
                        job_id: job_id.to_string(),
                    })?;
                sink.finish(text).await?;
                return Ok((output, receipt));
            }
            Cancelled::Not(cancel) => cancel,
        };
        Err(match error {
            AdapterError::StreamDropped => error,
            AdapterError::PollTimeout {
                job_id, timeout_ms, ..
            } => AdapterError::PollTimeout {
                job_id,
                timeout_ms,
                cancel,
            },
            other => AdapterError::StreamBroken {
                job_id: job_id.to_string(),
                message: other.to_string(),
                cancel,
            },
        })
    }

    /// Reads the job's events, reconnecting after a cut with the last
    /// event id; polls instead when the coordinator has no events for it.
    async fn follow(
        &self,
        job_id: Uuid,
        sink: &mut TextSink,
        deadline: Instant,
    ) -> Result<(serde_json::Value, Receipt), Gave> {
        let url = join_url(&self.base_url, &format!("/v1/jobs/{job_id}/events"));
        let mut last_id: Option<String> = None;
        let mut misses = 0u32;
        loop {
            let mut request = HttpRequest::get(url.clone()).header("accept", "text/event-stream");
            if let Some(id) = &last_id {
                request = request.header("last-event-id", id.clone());
            }
            let cut = match self.transport.send_streaming(request).await {
                Err(source) => AdapterError::Transport {
                    stage: Stage::Events,
                    source,
                },
                Ok(response) if response.status == 200 => {
                    let limit = self.stream.event_bytes_max;
                    let mut reader = SseReader::new(response.body, limit);
                    let read = read_events(job_id, &mut reader, sink, &mut last_id, &mut misses);
                    match read.await? {
                        Read::Done(output, receipt) => return Ok((output, receipt)),
                        Read::Cut(error) => error,
                    }
                }
                // A coordinator without the endpoint (before decision 0023)
                // or with every held stream taken: poll, as `run` does.
                Ok(response) if last_id.is_none() && matches!(response.status, 404 | 405 | 503) => {
                    return self.polled(job_id, sink, deadline).await;
                }
                Ok(response) => match response.collect(ERROR_BODY_MAX).await {
                    Ok(whole) => status_error(Stage::Events, &whole),
                    Err(source) => AdapterError::Transport {
                        stage: Stage::Events,
                        source,
                    },
                },
            };
            misses += 1;
            if misses > self.stream.reconnects_max {
                return Err(Gave::Up(cut));
            }
            tracing::debug!(%job_id, error = %cut, misses, "job events cut; resuming");
            tokio::time::sleep(Duration::from_millis(self.stream.reconnect_delay_ms)).await;
        }
    }

    /// The job polled to its end; its output goes to the sink whole.
    async fn polled(
        &self,
        job_id: Uuid,
        sink: &mut TextSink,
        deadline: Instant,
    ) -> Result<(serde_json::Value, Receipt), Gave> {
        let (output, receipt) = self
            .poll_until_done(job_id, deadline)
            .await
            .map_err(Gave::Ended)?;
        let text = output.as_str().ok_or_else(|| {
            Gave::Ended(AdapterError::StreamMismatch {
                job_id: job_id.to_string(),
            })
        })?;
        sink.finish(text).await.map_err(Gave::Up)?;
        Ok((output, receipt))
    }
}

/// Reads one connection's events into `sink` until the job's record or a
/// cut. `last_id` follows the events' ids; a new one resets `misses`.
async fn read_events(
    job_id: Uuid,
    reader: &mut SseReader,
    sink: &mut TextSink,
    last_id: &mut Option<String>,
    misses: &mut u32,
) -> Result<Read, Gave> {
    let malformed = |message: String| AdapterError::MalformedResponse {
        stage: Stage::Events,
        message,
    };
    loop {
        let event = match reader.next().await {
            Ok(Some(event)) => event,
            Ok(None) => {
                let message = "the stream ended before the job's record".to_owned();
                return Ok(Read::Cut(malformed(message)));
            }
            Err(SseError::Transport(source)) => {
                return Ok(Read::Cut(AdapterError::Transport {
                    stage: Stage::Events,
                    source,
                }))
            }
            Err(e) => return Err(Gave::Up(malformed(e.to_string()))),
        };
        if reader.last_event_id() != last_id.as_deref() {
            *last_id = reader.last_event_id().map(str::to_owned);
            *misses = 0;
        }
        // Only the events read are parsed: `status` and events of later
        // versions pass whatever their data.
        let data = || -> Result<serde_json::Value, Gave> {
            serde_json::from_str(&event.data)
                .map_err(|e| Gave::Up(malformed(format!("{} event: {e}", event.event))))
        };
        match event.event.as_str() {
            "delta" => {
                let delta = data()?;
                let text = delta.get("text").and_then(|t| t.as_str());
                let text =
                    text.ok_or_else(|| Gave::Up(malformed("a delta event without text".into())))?;
                sink.delta(text.to_owned()).await.map_err(Gave::Up)?;
            }
            "restart" => sink.restart().await.map_err(Gave::Up)?,
            "job" => {
                let (output, receipt) = checked_record(job_id, data()?, sink.text())?;
                return Ok(Read::Done(output, receipt));
            }
            "end" => {
                let end = data().unwrap_or_default();
                let reason = end.get("reason").and_then(|r| r.as_str()).unwrap_or("");
                let message = format!("the coordinator ended the stream: {reason}");
                return Ok(Read::Cut(malformed(message)));
            }
            // `status`, and events of later versions.
            _ => {}
        }
    }
}

/// The job's final record, checked as a poll's is (receipt over the
/// output), and its output the text the deltas joined to.
fn checked_record(
    job_id: Uuid,
    data: serde_json::Value,
    streamed: &str,
) -> Result<(serde_json::Value, Receipt), Gave> {
    let malformed = |message: String| AdapterError::MalformedResponse {
        stage: Stage::Events,
        message,
    };
    let record: RawJobRecord =
        serde_json::from_value(data).map_err(|e| Gave::Ended(malformed(e.to_string())))?;
    if record.id != job_id {
        let message = format!("asked for job {job_id}, got {}", record.id);
        return Err(Gave::Ended(malformed(message)));
    }
    match record.status {
        JobStatus::Completed => {
            let (output, receipt) = completed(job_id, record).map_err(Gave::Ended)?;
            if output.as_str() != Some(streamed) {
                return Err(Gave::Ended(AdapterError::StreamMismatch {
                    job_id: job_id.to_string(),
                }));
            }
            Ok((output, receipt))
        }
        JobStatus::Failed => Err(Gave::Ended(failed(job_id, &record))),
        status => Err(Gave::Ended(malformed(format!(
            "the last event's job is {status}"
        )))),
    }
}
