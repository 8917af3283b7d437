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
/// The stream of [`draw_unbound`], drawn after every other kind but the
/// one that lives past the timeline, so it changes no other kind's draws.
const UNBOUND_STREAM: u64 = 46;

/// Each worker that forges receipts also binds receipts to another
/// payment, with probability 0.7, at 20 to 60 % of its jobs.
pub fn draw(world: &mut WorldSpec) {
    add_to_forgers(world, STREAM, "kind = \"other_payment_ref\"");
}

/// Each worker that forges receipts also leaves the payment out of its
/// receipts (`no_payment_ref`), with probability 0.7, at 20 to 60 % of its
/// jobs. On a paid job the receipt names no payment where the job has one,
/// so it must be refused as a receipt bound to another payment is; on an
/// unpaid job it is the honest receipt. A coordinator that compared the
/// reference only when the receipt carried one was missed by every other
/// draw (sabotage `receipt-without-payment-ref-accepted-for-a-paid-job`).
pub fn draw_unbound(world: &mut WorldSpec) {
    add_to_forgers(world, UNBOUND_STREAM, "kind = \"no_payment_ref\"");
}
