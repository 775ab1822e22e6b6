//! The transaction's lifecycle (R-3.3): which changes a transaction's state allows, what a
//! payment records, and which events each change emits (R-8). Both stores apply these rules
//! inside their write transactions, on the rows they have just locked and read; the rules
//! themselves are written here, once.
//!
//! ```
//! use checkout_engine::api::TransactionStatus;
//! use checkout_engine::lifecycle::{amount_payable, status_after};
//! use rust_decimal::Decimal;
//!
//! // JPY has no minor unit (R-1.3): 1000.4 + 2000 is paid as 3000.
//! let totals = [Decimal::new(10004, 1), Decimal::new(2000, 0)];
//! let paid = amount_payable(TransactionStatus::Pending, "JPY", totals).unwrap();
//! assert_eq!(paid.to_string(), "3000");
//!
//! // The last active item of a paid transaction cancelled: CANCELLED.
//! assert_eq!(status_after(TransactionStatus::Paid, 0), TransactionStatus::Cancelled);
//! ```

use rust_decimal::Decimal;

use crate::api::{ItemStatus, TransactionStatus};
use crate::money;

/// Why a transaction cannot be paid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotPayable {
    /// Only a PENDING transaction can be paid (R-3.3).
    Status(TransactionStatus),
    /// Every item was voided: nothing is left to pay (R-3.3).
    NoActiveItems,
    /// The stored totals do not add up within the decimal range: the stored data is corrupt.
    Overflow,
    /// A card was charged `charged`, but the items still active add up to `due` (some were
    /// voided while it was being charged): a payment records what was charged or nothing
    /// (R-3.6), so the charge is given back instead.
    AmountChanged {
        /// What the card was charged.
        charged: Decimal,
        /// What the active items add up to now.
        due: Decimal,
    },
}

impl NotPayable {
    /// The 400 message of a refused payment.
    pub fn message(&self) -> String {
        match self {
            NotPayable::Status(status) => {
                format!("contract status {} does not allow payment", status.as_str())
            }
            NotPayable::NoActiveItems => "contract has no active items to pay".to_owned(),
            NotPayable::Overflow => "the item totals overflow".to_owned(),
            NotPayable::AmountChanged { charged, due } => {
                format!("the amount due changed from {charged} to {due} during the payment")
            }
        }
    }
}

/// R-3.3: the amount a payment records — possible only in PENDING with at least one active
/// item, and then the sum of the active items' totals written at the currency's scale (R-1.4).
/// `active_totals` are the totals of the items whose status is ACTIVE.
pub fn amount_payable(
    status: TransactionStatus,
    currency: &str,
    active_totals: impl IntoIterator<Item = Decimal>,
) -> Result<Decimal, NotPayable> {
    if status != TransactionStatus::Pending {
        return Err(NotPayable::Status(status));
    }
    let mut totals = active_totals.into_iter().peekable();
    if totals.peek().is_none() {
        return Err(NotPayable::NoActiveItems);
    }
    let sum = totals.try_fold(Decimal::ZERO, |sum, total| {
        sum.checked_add(total).ok_or(NotPayable::Overflow)
    })?;
    // A stored transaction's currency is always known; 2 is the scale of the unknown codes
    // the engine never accepts.
    let scale = money::minor_units(currency).unwrap_or(2);
    Ok(money::round_to_scale(sum, scale))
}

/// [`amount_payable`] for a card already charged `charged`: the payment records exactly that,
/// or nothing ([`NotPayable::AmountChanged`] when items were voided while the card was being
/// charged); `None` records whatever is payable (the sandbox route, R-3.6).
pub fn amount_payable_as_charged(
    status: TransactionStatus,
    currency: &str,
    active_totals: impl IntoIterator<Item = Decimal>,
    charged: Option<Decimal>,
) -> Result<Decimal, NotPayable> {
    let due = amount_payable(status, currency, active_totals)?;
    match charged {
        Some(charged) if charged != due => Err(NotPayable::AmountChanged { charged, due }),
        _ => Ok(due),
    }
}

/// The totals of the items that are still ACTIVE, for [`amount_payable`].
pub fn active_totals<'a>(
    items: impl IntoIterator<Item = (ItemStatus, Decimal)> + 'a,
) -> impl Iterator<Item = Decimal> + 'a {
    items
        .into_iter()
        .filter(|(status, _)| *status == ItemStatus::Active)
        .map(|(_, total)| total)
}

/// R-3.3: the status after a refund completes, from the status before it and the number of
/// items not yet CANCELLED. PENDING stays PENDING (a void) until nothing is left; PAID and
/// PARTIALLY_CANCELLED move to PARTIALLY_CANCELLED or CANCELLED. Items CANCELLING under another
/// refund still count as not cancelled: that refund's completion makes the last move.
pub fn status_after(status: TransactionStatus, remaining: u64) -> TransactionStatus {
    match (status, remaining) {
        (_, 0) => TransactionStatus::Cancelled,
        (TransactionStatus::Pending, _) => TransactionStatus::Pending,
        _ => TransactionStatus::PartiallyCancelled,
    }
}

/// A cancellation as its reservation re-checks it (R-3.4, R-4.1, R-4.5).
#[derive(Debug, Clone, Copy)]
pub struct Reservation<'a> {
    /// Whether the transaction was paid when the refund was computed.
    pub computed_as_paid: bool,
    /// The items to cancel, by order number (1-based), in `itemsOrder` order.
    pub orders: &'a [u32],
    /// The refund computed for them.
    pub refund: Decimal,
}

/// What a reservation re-checks inside its write transaction, the same on every store (R-3.4,
/// R-4.1, R-4.5): the transaction's status, that it was not paid in between, that every item
/// is still ACTIVE, and that Σ succeeded and pending refunds + this one ≤ paid. `items` are the
/// stored items' order numbers and statuses; `committed` is Σ of the PENDING and SUCCESS refunds.
/// `Err` holds the 400 messages.
pub fn check_reservation(
    reservation: Reservation<'_>,
    status: TransactionStatus,
    paid: Option<Decimal>,
    items: &[(u32, ItemStatus)],
    committed: Decimal,
) -> Result<(), Vec<String>> {
    if status == TransactionStatus::Cancelled {
        return Err(vec![
            "contract status CANCELLED does not allow cancellation".to_owned(),
        ]);
    }
    if paid.is_some() != reservation.computed_as_paid {
        // Paid between the computation and this transaction: the refund computed for an unpaid
        // transaction (0) no longer holds.
        return Err(vec![format!(
            "contract status changed to {} during the cancellation; retry the request",
            status.as_str()
        )]);
    }
    // R-4.1 re-checked where no concurrent request can interleave: an item reserved by a
    // pending refund counts as already cancelled (its refund is being completed).
    let mut messages = Vec::new();
    for (position, order) in reservation.orders.iter().enumerate() {
        match items.iter().find(|(stored, _)| stored == order) {
            Some((_, ItemStatus::Active)) => {}
            Some(_) => messages.push(format!(
                "itemsOrder.{position} item {order} is already cancelled"
            )),
            None => messages.push(format!("itemsOrder.{position} item {order} does not exist")),
        }
    }
    if !messages.is_empty() {
        return Err(messages);
    }
    // R-4.5: Σ succeeded and pending refunds + this ≤ paid, held by the store.
    if let Some(paid) = paid {
        let fits = committed
            .checked_add(reservation.refund)
            .is_some_and(|after| after <= paid);
        if !fits {
            return Err(vec![format!(
                "amount must not exceed the refundable amount {}",
                paid - committed
            )]);
        }
    }
    Ok(())
}

/// The event types (Standard Webhooks `type`) and which change emits which (R-8).
pub mod events {
    /// A transaction was created.
    pub const CREATED: &str = "transaction.created";
    /// Descriptive fields were replaced (R-8.6).
    pub const UPDATED: &str = "transaction.updated";
    /// A payment was recorded (R-3.6).
    pub const PAID: &str = "transaction.paid";
    /// A card was declined on the payment page.
    pub const PAYMENT_FAILED: &str = "transaction.payment_failed";
    /// A cancellation succeeded (items cancelled or voided, refund made, receipt issued).
    pub const CANCELLATION_SUCCEEDED: &str = "cancellation.succeeded";
    /// The gateway declined a cancellation's refund; nothing changed.
    pub const CANCELLATION_FAILED: &str = "cancellation.failed";
    /// The gateway's answer on a refund is unknown; it is retried until definite (R-4.8).
    pub const REFUND_PENDING: &str = "refund.pending";
    /// A refund that was pending reached its end (succeeded or declined).
    pub const REFUND_COMPLETED: &str = "refund.completed";

    /// Every type, for `--events` filters.
    pub const ALL: [&str; 8] = [
        CREATED,
        UPDATED,
        PAID,
        PAYMENT_FAILED,
        CANCELLATION_SUCCEEDED,
        CANCELLATION_FAILED,
        REFUND_PENDING,
        REFUND_COMPLETED,
    ];

    /// A change that someone outside must hear of.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Change {
        /// A transaction was created.
        Created,
        /// Descriptive fields were replaced.
        Updated,
        /// A payment was recorded.
        Paid,
        /// A card was declined on the payment page.
        PaymentFailed,
        /// A cancellation's refund reached its end.
        Settled {
            /// The refund succeeded (or was a void); otherwise the gateway declined it.
            succeeded: bool,
            /// The gateway's answer had been unknown (a `refund.pending` was sent).
            was_unknown: bool,
        },
        /// The gateway's answer on a refund is unknown, noted for the first time.
        RefundUnknown,
    }

    /// Kinds of e-mail to the checkout's recipients (R-8.4).
    pub mod mails {
        /// The contract e-mail, sent at creation.
        pub const CONTRACT: &str = "CONTRACT";
        /// A cancellation receipt (R-10.2).
        pub const RECEIPT: &str = "RECEIPT";
    }

    /// The e-mail an event sends to the checkout's recipients, if it has any: the contract
    /// with `transaction.created`, a receipt with `cancellation.succeeded`; no other event
    /// writes to the customer.
    pub fn mail_of(event_type: &str, has_recipients: bool) -> Option<&'static str> {
        match event_type {
            _ if !has_recipients => None,
            CREATED => Some(mails::CONTRACT),
            CANCELLATION_SUCCEEDED => Some(mails::RECEIPT),
            _ => None,
        }
    }

    /// The events a change emits, in the order they are written (and delivered).
    pub fn emitted(change: Change) -> &'static [&'static str] {
        match change {
            Change::Created => &[CREATED],
            Change::Updated => &[UPDATED],
            Change::Paid => &[PAID],
            Change::PaymentFailed => &[PAYMENT_FAILED],
            Change::Settled {
                succeeded: true,
                was_unknown: false,
            } => &[CANCELLATION_SUCCEEDED],
            Change::Settled {
                succeeded: false,
                was_unknown: false,
            } => &[CANCELLATION_FAILED],
            Change::Settled {
                succeeded: true,
                was_unknown: true,
            } => &[CANCELLATION_SUCCEEDED, REFUND_COMPLETED],
            Change::Settled {
                succeeded: false,
                was_unknown: true,
            } => &[CANCELLATION_FAILED, REFUND_COMPLETED],
            Change::RefundUnknown => &[REFUND_PENDING],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rust_decimal_macros::dec;

    #[test]
    fn only_a_pending_transaction_with_active_items_is_payable_r_3_3() {
        assert_eq!(
            amount_payable(TransactionStatus::Paid, "EUR", [dec!(1)]),
            Err(NotPayable::Status(TransactionStatus::Paid))
        );
        assert_eq!(
            NotPayable::Status(TransactionStatus::Cancelled).message(),
            "contract status CANCELLED does not allow payment"
        );
        assert_eq!(
            amount_payable(TransactionStatus::Pending, "EUR", []),
            Err(NotPayable::NoActiveItems)
        );
        assert_eq!(
            NotPayable::NoActiveItems.message(),
            "contract has no active items to pay"
        );
        assert_eq!(
            amount_payable(TransactionStatus::Pending, "EUR", [Decimal::MAX, dec!(1)]),
            Err(NotPayable::Overflow)
        );
    }

    #[test]
    fn a_charge_records_what_it_charged_or_nothing_r_3_6() {
        let pending = TransactionStatus::Pending;
        assert_eq!(
            amount_payable_as_charged(pending, "EUR", [dec!(100), dec!(50)], Some(dec!(150.00))),
            Ok(dec!(150.00))
        );
        // An item voided while the card was charged: the charge is not recorded.
        let changed = amount_payable_as_charged(pending, "EUR", [dec!(100)], Some(dec!(150.00)));
        assert_eq!(
            changed,
            Err(NotPayable::AmountChanged {
                charged: dec!(150.00),
                due: dec!(100.00)
            })
        );
        assert_eq!(
            changed.unwrap_err().message(),
            "the amount due changed from 150.00 to 100.00 during the payment"
        );
        // Without a charge (the sandbox route), whatever is payable; refusals come first.
        assert_eq!(
            amount_payable_as_charged(pending, "EUR", [dec!(100)], None),
            Ok(dec!(100.00))
        );
        assert_eq!(
            amount_payable_as_charged(TransactionStatus::Paid, "EUR", [dec!(1)], Some(dec!(1))),
            Err(NotPayable::Status(TransactionStatus::Paid))
        );
    }

    #[test]
    fn the_amount_paid_is_the_sum_of_active_totals_at_the_currency_scale_r_1_4() {
        let items = [
            (ItemStatus::Active, dec!(10.005)),
            (ItemStatus::Cancelled, dec!(99)),
            (ItemStatus::Active, dec!(5)),
        ];
        assert_eq!(
            amount_payable(TransactionStatus::Pending, "EUR", active_totals(items)),
            Ok(dec!(15.01))
        );
        assert_eq!(
            amount_payable(TransactionStatus::Pending, "KWD", [dec!(1.0004)]),
            Ok(dec!(1.000))
        );
        assert_eq!(
            amount_payable(TransactionStatus::Pending, "JPY", [dec!(0.5)]),
            Ok(dec!(1))
        );
    }

    #[test]
    fn statuses_after_a_refund_follow_r_3_3() {
        use TransactionStatus::*;
        assert_eq!(status_after(Pending, 2), Pending);
        assert_eq!(status_after(Pending, 0), Cancelled);
        assert_eq!(status_after(Paid, 1), PartiallyCancelled);
        assert_eq!(status_after(PartiallyCancelled, 1), PartiallyCancelled);
        assert_eq!(status_after(PartiallyCancelled, 0), Cancelled);
    }

    #[test]
    fn a_reservation_rechecks_status_items_and_the_refundable_sum_r_4_5() {
        let items = [(1, ItemStatus::Active), (2, ItemStatus::Cancelled)];
        let paid = |orders: &'static [u32], refund| Reservation {
            computed_as_paid: true,
            orders,
            refund,
        };
        assert_eq!(
            check_reservation(
                paid(&[1], dec!(5)),
                TransactionStatus::Cancelled,
                Some(dec!(10)),
                &items,
                dec!(0)
            ),
            Err(vec![
                "contract status CANCELLED does not allow cancellation".to_owned()
            ])
        );
        assert_eq!(
            check_reservation(
                paid(&[2, 3], dec!(5)),
                TransactionStatus::Paid,
                Some(dec!(10)),
                &items,
                dec!(0)
            ),
            Err(vec![
                "itemsOrder.0 item 2 is already cancelled".to_owned(),
                "itemsOrder.1 item 3 does not exist".to_owned()
            ])
        );
        assert_eq!(
            check_reservation(
                paid(&[1], dec!(5)),
                TransactionStatus::Paid,
                Some(dec!(10)),
                &items,
                dec!(6)
            ),
            Err(vec![
                "amount must not exceed the refundable amount 4".to_owned()
            ])
        );
        assert!(
            check_reservation(
                paid(&[1], dec!(4)),
                TransactionStatus::Paid,
                Some(dec!(10)),
                &items,
                dec!(6)
            )
            .is_ok()
        );
        let unpaid = Reservation {
            computed_as_paid: false,
            orders: &[1],
            refund: dec!(0),
        };
        assert_eq!(
            check_reservation(
                unpaid,
                TransactionStatus::Paid,
                Some(dec!(10)),
                &items,
                dec!(0)
            ),
            Err(vec![
                "contract status changed to PAID during the cancellation; retry the request"
                    .to_owned()
            ])
        );
    }

    #[test]
    fn a_settled_refund_whose_answer_was_unknown_also_emits_refund_completed_r_4_8() {
        use events::*;
        let settled = |succeeded, was_unknown| {
            emitted(Change::Settled {
                succeeded,
                was_unknown,
            })
        };
        assert_eq!(settled(true, false), [CANCELLATION_SUCCEEDED]);
        assert_eq!(settled(false, false), [CANCELLATION_FAILED]);
        assert_eq!(
            settled(true, true),
            [CANCELLATION_SUCCEEDED, REFUND_COMPLETED]
        );
        assert_eq!(
            settled(false, true),
            [CANCELLATION_FAILED, REFUND_COMPLETED]
        );
        assert_eq!(emitted(Change::RefundUnknown), [REFUND_PENDING]);
        assert_eq!(emitted(Change::Paid), [PAID]);
    }

    #[test]
    fn only_creation_and_a_successful_cancellation_write_to_the_customer_r_8_4() {
        use events::*;
        assert_eq!(mail_of(CREATED, true), Some(mails::CONTRACT));
        assert_eq!(mail_of(CANCELLATION_SUCCEEDED, true), Some(mails::RECEIPT));
        assert_eq!(mail_of(CREATED, false), None);
        assert_eq!(mail_of(CANCELLATION_SUCCEEDED, false), None);
        for quiet in [
            UPDATED,
            PAID,
            PAYMENT_FAILED,
            CANCELLATION_FAILED,
            REFUND_PENDING,
            REFUND_COMPLETED,
        ] {
            assert_eq!(mail_of(quiet, true), None, "{quiet}");
        }
    }
}
