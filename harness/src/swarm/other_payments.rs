//! Another payment's receipt, under the `forged_receipt` kind: a worker
//! that forges receipts (`bad_signature`) may also answer a job with its
//! own output and a correctly signed receipt for that job bound to another
//! payment (`other_payment_ref`, a worker-sim fault: the reference of the
//! last paid job it was given, or one it made up). Only the receipt's
//! `payment_ref` is wrong, so the coordinator must refuse it, and
//! `receipt_invalid` (`check_store`) holds every stored receipt to its own
//! job's payment reference (none for an unpaid job).
//!
//! Drawn from a stream of the seed's own ([`STREAM`]), after every other
//! kind, and only on workers that already forge receipts (the honest
//! workers, the heal's anchors, stay as they were); a seed without
//! `forged_receipt` keeps its world exactly. It models a hostile worker,
//! not the patch: the fault fires on paid and unpaid jobs alike.

use super::other_receipts::add_to_forgers;
use super::spec::WorldSpec;

/// The seed's ChaCha stream this draw uses (the world's is 0).
const STREAM: u64 = 26;

/// Each worker that forges receipts also binds receipts to another
/// payment, with probability 0.7, at 20 to 60 % of its jobs.
pub fn draw(world: &mut WorldSpec) {
    add_to_forgers(world, STREAM, "kind = \"other_payment_ref\"");
}
