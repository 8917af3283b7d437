//! What a world could not do. The message is the step failure's text in
//! the transcript, so each variant prints as the harness always has.

/// A world operation that failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorldError {
    #[error("no worker {0:?}")]
    NoWorker(String),
    #[error("no instance {0:?}")]
    NoInstance(String),
    #[error("worker {0} is already running")]
    WorkerRunning(String),
    #[error("worker {0} is not running")]
    WorkerNotRunning(String),
    #[error("worker {0} has stopped")]
    WorkerStopped(String),
    #[error("instance {name} has no node {node}")]
    NoNode { name: String, node: u32 },
    #[error("instance {0} is a single node")]
    SingleNode(String),
    /// The core's own check failed on the state the run ended with.
    #[error("core invariant broken at the end of the run: {0}")]
    CoreBroken(coordinator::core::InvariantViolation),
    /// What a live world cannot do: `faults run`, `idle sockets`, ...
    #[error("{0} only in the simulation")]
    SimulationOnly(&'static str),
    /// An instance, a worker's key or a receipt failed, in its own words.
    #[error("{0}")]
    Failed(String),
}

impl From<String> for WorldError {
    fn from(message: String) -> Self {
        WorldError::Failed(message)
    }
}

impl From<&str> for WorldError {
    fn from(message: &str) -> Self {
        WorldError::Failed(message.to_owned())
    }
}

/// The runner's steps still report failures as text.
impl From<WorldError> for String {
    fn from(e: WorldError) -> Self {
        e.to_string()
    }
}
