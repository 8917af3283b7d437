//! The `lease_thaws` kind (judged by `assign_lost`): the `lease_stalls`
//! world with a worker that reads again before its heartbeat timeout. A
//! worker of its own ([`THAWER`]) stops reading while its leases lapse and
//! rounds of large commits refill its slots, as in [`super::lease_stalls`];
//! after 2 or 3 rounds, once its outbox passed its bound, it reads again,
//! inside the heartbeat timeout. A real worker does this after a pause of a
//! few seconds (a stop-the-world collection, a suspended laptop, a
//! congested link) that is shorter than the coordinator's patience. The
//! coordinator promises (docs/security.md, accounted memory) that a frame
//! past the outbox bound closes the session, so every frame the worker
//! reads on a session is every frame the core meant for it, in order;
//! `assign_lost` judges that from the worker's frames. Without the early
//! thaw the send deadline closes the session before the worker reads again
//! on any build, and a dropped frame is never seen.
//!
//! The kind draws from a stream of the seed's own ([`STREAM`]), after the
//! rest of the world is drawn, so a seed without it keeps its world
//! exactly.

use super::lease_stalls::{draw_sink, Sink};
use super::spec::{Kind, WorldSpec};

/// The seed's ChaCha stream this kind draws from (the world's is 0).
const STREAM: u64 = 23;
/// The worker that stops reading for a while.
pub const THAWER: &str = "thawer";

/// Draws the kind for `world` (already drawn).
pub fn draw(world: &mut WorldSpec) {
    draw_sink(
        world,
        &Sink {
            stream: STREAM,
            kind: Kind::LeaseThaws,
            name: THAWER,
            early_thaw: true,
        },
    );
}
