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
            RECORDED.with(|r| {
                if let Ok(mut r) = r.try_borrow_mut() {
                    // The first panic is the run's failure; a world that
                    // panics in a loop keeps only the first few.
                    if let Some(list) = r.as_mut().filter(|l| l.len() < PANICS_MAX) {
                        list.push(Panic {
                            message: format!("{message}{at}"),
                            core,
                        });
                    }
                }
            });
            if !QUIET.with(Cell::get) {
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
