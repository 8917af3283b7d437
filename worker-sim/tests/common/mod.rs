//! A scripted fake coordinator over the in-memory transport.
#![allow(dead_code)]

use protocol::api::{JobType, Payload, PrivacyClass, TaskType};
use protocol::connection::{
    channel_connector, ChannelAcceptor, ChannelConnection, FrameConnection, Incoming, CHANNEL_URL,
};
use protocol::signing::{parse_public_key, verify_personal_sign};
use protocol::worker::{challenge_message, Assignment, CoordinatorFrame, ErrorCode, WorkerFrame};
use std::sync::Arc;
use tokio::task::JoinHandle;
use uuid::Uuid;
use worker_sim::{EventLog, TokioClock, Worker, WorkerConfig, WorkerError, WorkerExit};

pub const EPOCH_MS: i64 = 1_795_255_200_000;
pub const NETWORK: &str = "eip155:10143";
pub const NONCE: &str = "0x00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

/// The origin a worker on the in-memory connector signs.
pub fn channel_origin() -> String {
    protocol::origin::worker_origin(CHANNEL_URL).unwrap()
}

pub type RunHandle = JoinHandle<Result<WorkerExit, WorkerError>>;

pub struct Started {
    pub acceptor: ChannelAcceptor,
    pub log: EventLog,
    pub pubkey: String,
    pub handle: RunHandle,
}

/// Spawns a worker on the in-memory connector.
pub fn start(config: WorkerConfig) -> Started {
    let (connector, acceptor) = channel_connector();
    let log = EventLog::new();
    let mut worker = Worker::new(config, TokioClock::shared(EPOCH_MS))
        .unwrap()
        .with_observer(Arc::new(log.clone()));
    let pubkey = worker.public_key_hex();
    let handle = tokio::spawn(async move { worker.run(connector).await });
    Started {
        acceptor,
        log,
        pubkey,
        handle,
    }
}

pub struct FakeCoordinator {
    pub peer: ChannelConnection,
    pub hello: Option<WorkerFrame>,
}

impl FakeCoordinator {
    pub async fn accept(acceptor: &mut ChannelAcceptor) -> Self {
        let peer = acceptor.accept().await.expect("worker connects");
        Self { peer, hello: None }
    }

    pub fn send(&self, frame: &CoordinatorFrame) {
        self.peer
            .try_send(serde_json::to_string(frame).unwrap())
            .expect("worker is connected");
    }

    /// The next text frame, `None` once the worker has gone.
    pub async fn recv_text(&mut self) -> Option<String> {
        match self.peer.recv().await {
            Incoming::Text(text) => Some(text),
            Incoming::Binary(len) => panic!("the worker sent a binary frame of {len} bytes"),
            Incoming::Closed => None,
        }
    }

    pub async fn recv(&mut self) -> Option<WorkerFrame> {
        let text = self.recv_text().await?;
        Some(serde_json::from_str(&text).unwrap_or_else(|e| panic!("bad frame {text}: {e}")))
    }

    /// The next frame that is not a heartbeat.
    pub async fn recv_skip_heartbeats(&mut self) -> Option<WorkerFrame> {
        loop {
            match self.recv().await? {
                WorkerFrame::Heartbeat => continue,
                other => return Some(other),
            }
        }
    }

    /// Same, as raw text (for malformed frames).
    pub async fn recv_text_skip_heartbeats(&mut self) -> Option<String> {
        loop {
            let text = self.recv_text().await?;
            if text != r#"{"type":"heartbeat"}"# {
                return Some(text);
            }
        }
    }

    /// hello -> challenge -> auth (verified) -> welcome; returns the pubkey.
    pub async fn handshake(&mut self, heartbeat_interval_ms: u64) -> String {
        let hello = self.recv().await.expect("hello");
        let WorkerFrame::Hello {
            ref provider_pubkey,
            ref coordinator,
            ..
        } = hello
        else {
            panic!("expected hello, got {hello:?}")
        };
        assert_eq!(coordinator.as_deref(), Some(channel_origin().as_str()));
        let pubkey = provider_pubkey.clone();
        self.hello = Some(hello.clone());
        self.send(&CoordinatorFrame::Challenge {
            nonce: NONCE.into(),
            network: NETWORK.into(),
        });
        let Some(WorkerFrame::Auth { signature }) = self.recv().await else {
            panic!("expected auth")
        };
        let key = parse_public_key(&pubkey).expect("valid pubkey");
        verify_personal_sign(
            &key,
            challenge_message(&channel_origin(), NETWORK, NONCE).as_bytes(),
            &signature,
        )
        .expect("auth signature verifies");
        self.send(&CoordinatorFrame::Welcome {
            session_id: 1,
            heartbeat_interval_ms,
            heartbeat_timeout_ms: heartbeat_interval_ms * 3,
        });
        pubkey
    }

    pub fn assign(&self, assignment: Assignment) {
        self.send(&CoordinatorFrame::Assign(assignment));
    }

    pub fn error(&self, code: ErrorCode, job_id: Option<Uuid>) {
        self.send(&CoordinatorFrame::Error {
            code,
            message: format!("{code:?}"),
            job_id,
        });
    }
}

pub fn job_id(n: u128) -> Uuid {
    Uuid::from_u128(n)
}

pub fn llm(n: u128, prompt: &str) -> Assignment {
    Assignment {
        job_id: job_id(n),
        job_type: JobType::LlmInfer,
        payload: Payload::Llm {
            prompt: prompt.into(),
            max_tokens: 32,
            model: None,
        },
        privacy_class: PrivacyClass::Public,
        payment_ref: Some(format!("x402:0xpay{n}")),
        lease_ms: 30_000,
    }
}

pub fn task(n: u128, task_type: TaskType, input: &str) -> Assignment {
    Assignment {
        job_id: job_id(n),
        job_type: JobType::Task,
        payload: Payload::Task {
            task_type,
            input: input.into(),
        },
        privacy_class: PrivacyClass::Public,
        payment_ref: None,
        lease_ms: 30_000,
    }
}

/// A config with fixed latency, serving [`NETWORK`].
pub fn config(seed: u64) -> WorkerConfig {
    WorkerConfig {
        latency: worker_sim::Latency::Fixed { ms: 100 },
        network: NETWORK.into(),
        ..WorkerConfig::with_seed(seed)
    }
}

/// Polls `base`'s job `id` over HTTP until it is completed or failed
/// (10 s at most), and returns the record.
pub async fn wait_terminal(http: &reqwest::Client, base: &str, id: &str) -> serde_json::Value {
    for _ in 0..400 {
        let record: serde_json::Value = http
            .get(format!("{base}/v1/jobs/{id}"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if record["status"] == "completed" || record["status"] == "failed" {
            return record;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    panic!("job {id} never finished");
}

/// A pairing code for `user_id` from the coordinator at `base`.
pub async fn pairing_code(http: &reqwest::Client, base: &str, user_id: &str) -> String {
    let created: serde_json::Value = http
        .post(format!("{base}/v1/trust/create"))
        .json(&serde_json::json!({ "user_id": user_id }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    created["pairing_code"].as_str().unwrap().to_owned()
}

/// The real coordinator on `network`, seeded and under a Tokio clock at
/// [`EPOCH_MS`], taking worker sessions over the in-memory transport: the
/// coordinator and a connector that dials it.
pub async fn real_coordinator(
    network: &str,
) -> (
    coordinator::Coordinator,
    protocol::connection::ChannelConnector,
) {
    use coordinator::server::{self, Parts, Settings};
    use rand::SeedableRng;
    let config = coordinator::config::Config {
        network: network.into(),
        // Workers reach it over the in-memory connector.
        public_urls: vec![CHANNEL_URL.into()],
        ..coordinator::config::Config::default()
    };
    let parts = Parts::new(
        Arc::new(coordinator::TokioClock::new(EPOCH_MS)),
        rand_chacha::ChaCha20Rng::seed_from_u64(1),
    );
    let settings = Settings {
        config,
        ..Settings::default()
    };
    let server = server::start(settings, parts).await.unwrap();
    let c = server.coordinator().clone();
    // Runs to the end of the test: a dropped `Server` stops its tasks.
    std::mem::forget(server);
    let (connector, mut acceptor) = channel_connector();
    let sessions = c.clone();
    tokio::spawn(async move {
        while let Some(peer) = acceptor.accept().await {
            tokio::spawn(coordinator::worker::session::run(sessions.clone(), peer));
        }
    });
    (c, connector)
}
