//! Panics of the world's tasks, recorded per thread: tokio catches a task's
//! panic, so without this a coordinator that panicked would only show as
//! steps failing later for unrelated-looking reasons.

use coordinator::core::InvariantViolation;
use std::cell::{Cell, RefCell};
use std::sync::Once;

/// One recorded panic.
#[derive(Debug, Clone)]
pub struct Panic {
    /// Its message, with where it happened (`... at FILE:LINE`).
    pub message: String,
    /// The core invariant it broke, when it is the core's own check.
    pub core: Option<InvariantViolation>,
}

/// Panics kept per run.
const PANICS_MAX: usize = 16;

thread_local! {
    static RECORDED: RefCell<Option<Vec<Panic>>> = const { RefCell::new(None) };
    static QUIET: Cell<bool> = const { Cell::new(false) };
    /// Woken at each panic of this thread's world.
    static PANICKED: std::sync::Arc<tokio::sync::Notify> = Default::default();
}

/// Waits until this thread's world records a panic: the run has failed
/// then (its first panic decides the key), and a world whose core broke
/// may never end (`harness/src/run/limits.rs`).
pub async fn panicked() {
    let notify = PANICKED.with(std::sync::Arc::clone);
    loop {
        // `notify_one` keeps a permit, so a panic before the wait counts;
        // one left from an earlier run on this thread does not.
        if RECORDED.with(|r| {
            r.try_borrow()
                .is_ok_and(|r| r.as_ref().is_some_and(|l| !l.is_empty()))
        }) {
            return;
        }
        notify.notified().await;
    }
}

/// Keeps the default panic output off stderr on this thread (the swarm
/// runs thousands of worlds; their panics are reported as failures).
pub fn set_quiet(quiet: bool) {
    QUIET.with(|q| q.set(quiet));
}

/// Starts recording this thread's panics (and installs the hook once).
pub fn start_recording() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let message = info
                .payload()
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            let at = info
                .location()
                .map_or(String::new(), |l| format!(" at {}:{}", l.file(), l.line()));
            let core = InvariantViolation::take_last_broken();
            // The first panic is the run's failure; a world that panics in
            // a loop keeps (and prints) only the first few.
            let over = RECORDED.with(|r| {
                let Ok(mut r) = r.try_borrow_mut() else {
                    return false;
                };
                let Some(list) = r.as_mut() else {
                    return false;
                };
                if list.len() >= PANICS_MAX {
                    return true;
                }
                list.push(Panic {
                    message: format!("{message}{at}"),
                    core,
                });
                false
            });
            PANICKED.with(|p| p.notify_one());
            if !QUIET.with(Cell::get) && !over {
                previous(info);
            }
        }));
    });
    RECORDED.with(|r| *r.borrow_mut() = Some(Vec::new()));
    // A violation left by a panic outside any recording is not this run's.
    let _ = InvariantViolation::take_last_broken();
}

/// The panics recorded since `start_recording`, in order; stops recording.
pub fn take() -> Vec<Panic> {
    RECORDED.with(|r| r.borrow_mut().take().unwrap_or_default())
}
