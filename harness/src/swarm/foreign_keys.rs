//! A receipt of another key (sabotage `receipt-signed-by-another-key`),
//! under the `forged_receipt` kind: a worker that forges receipts
//! (`bad_signature`) may also answer a job with its own output and a
//! receipt that names another key and is signed by it
//! (`foreign_key_receipt`, a worker-sim fault): it models a worker that
//! signs with a key its owner never paired (a borrowed or stolen key, a
//! pool's shared one). The receipt verifies on its own; only its key is not
//! the session's, so the coordinator must refuse it, and
//! `receipt_key_not_holder` holds every accepted result's receipt to the
//! key of the session it was accepted from.
//!
//! Drawn from a stream of the seed's own ([`STREAM`]), after every other
//! kind, and only on workers that already forge receipts (the honest
//! workers, the heal's anchors, stay as they were); a seed without
//! `forged_receipt` keeps its world exactly.

use super::other_receipts::add_to_forgers;
use super::spec::WorldSpec;

/// The seed's ChaCha stream this draw uses (the world's is 0).
const STREAM: u64 = 28;

/// Each worker that forges receipts also signs with another key, with
/// probability 0.7, at 20 to 60 % of its jobs.
pub fn draw(world: &mut WorldSpec) {
    add_to_forgers(world, STREAM, "kind = \"foreign_key_receipt\"");
}
