//! The `ledger` refund gateway (the default; sandbox and demo): records each refund in the
//! service's own SQLite database and succeeds.
//!
//! It owns one table, `ledger_refunds`, keyed by the refund id, so that sending the same refund
//! twice records it once (the idempotency every gateway must offer, R-4.8). A refund is
//! recorded by the store's writer, in the batch of whatever else is being committed: the
//! ledger shares the database file, and a connection of its own would take the file's write
//! lock and fsync once per refund, beside the writer and in turns with it.

use std::sync::Arc;

use rusqlite::{Connection, OptionalExtension, params};

use futures_util::future::BoxFuture;

use super::SqliteStore;
use crate::processors::{GatewayOutcome, RefundGateway, RefundRequest};
use crate::store::StoreError;

/// Schema of the ledger's table. Idempotent (`IF NOT EXISTS`); the store's migrations list it.
pub const LEDGER_MIGRATION: &str = "\
CREATE TABLE IF NOT EXISTS ledger_refunds (
    refund_id      TEXT PRIMARY KEY NOT NULL,
    transaction_id TEXT NOT NULL,
    amount         TEXT NOT NULL,
    currency       TEXT NOT NULL,
    recorded_at    TEXT NOT NULL
) STRICT;
CREATE INDEX IF NOT EXISTS ledger_refunds_by_transaction ON ledger_refunds (transaction_id);
";

/// One refund as the ledger recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerEntry {
    /// The refund id (idempotency key).
    pub refund_id: String,
    /// The transaction refunded.
    pub transaction_id: String,
    /// The amount's text, exactly as sent (scale kept).
    pub amount: String,
    /// ISO 4217 code.
    pub currency: String,
    /// When it was first recorded, RFC 3339 UTC.
    pub recorded_at: String,
}

/// The `ledger` gateway on the SQLite store: written by its writer, read by its readers.
#[derive(Debug, Clone)]
pub struct LedgerGateway {
    store: Arc<SqliteStore>,
}

impl LedgerGateway {
    /// The ledger of `store`'s database (whose migrations created its table).
    pub fn new(store: Arc<SqliteStore>) -> LedgerGateway {
        LedgerGateway { store }
    }

    /// Records `refund` unless its id is already recorded, and returns the entry as stored
    /// (the first one, when the id was already there), once it is committed.
    pub async fn record(&self, refund: &RefundRequest) -> Result<LedgerEntry, StoreError> {
        let entry = LedgerEntry {
            refund_id: refund.refund_id.clone(),
            transaction_id: refund.transaction_id.clone(),
            amount: refund.amount.to_string(),
            currency: refund.currency.clone(),
            recorded_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        };
        // The one writer runs the insert and the read-back one after the other with no other
        // write between them: the row read back is the one that stays.
        self.store
            .writer
            .execute(move |conn| {
                conn.prepare_cached(
                    "INSERT INTO ledger_refunds
                         (refund_id, transaction_id, amount, currency, recorded_at)
                     VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT (refund_id) DO NOTHING",
                )?
                .execute(params![
                    entry.refund_id,
                    entry.transaction_id,
                    entry.amount,
                    entry.currency,
                    entry.recorded_at
                ])?;
                select(conn, &entry.refund_id)?.ok_or_else(|| StoreError::Corrupt {
                    column: "ledger_refunds",
                    detail: format!("refund {} not found after its insert", entry.refund_id),
                })
            })
            .await
    }

    /// The entry recorded for `refund_id`, if any.
    pub fn lookup(&self, refund_id: &str) -> Result<Option<LedgerEntry>, StoreError> {
        self.store
            .read_statement(|conn| Ok(select(conn, refund_id)?))
    }

    /// Every entry of one transaction, oldest first.
    pub fn entries_for(&self, transaction_id: &str) -> Result<Vec<LedgerEntry>, StoreError> {
        self.store.read_statement(|conn| {
            let mut statement = conn.prepare_cached(
                "SELECT refund_id, transaction_id, amount, currency, recorded_at
                 FROM ledger_refunds WHERE transaction_id = ?1
                 ORDER BY recorded_at, refund_id",
            )?;
            let rows = statement.query_map([transaction_id], entry_from_row)?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }
}

fn entry_from_row(row: &rusqlite::Row<'_>) -> Result<LedgerEntry, rusqlite::Error> {
    Ok(LedgerEntry {
        refund_id: row.get(0)?,
        transaction_id: row.get(1)?,
        amount: row.get(2)?,
        currency: row.get(3)?,
        recorded_at: row.get(4)?,
    })
}

fn select(
    connection: &Connection,
    refund_id: &str,
) -> Result<Option<LedgerEntry>, rusqlite::Error> {
    connection
        .prepare_cached(
            "SELECT refund_id, transaction_id, amount, currency, recorded_at
             FROM ledger_refunds WHERE refund_id = ?1",
        )?
        .query_row([refund_id], entry_from_row)
        .optional()
}

/// The answer to a refund once its entry is recorded: the same id with other details means the
/// caller reused a key for a different refund, and refusing it is the only answer that cannot
/// pay out twice. Shared with the PostgreSQL ledger.
pub(crate) fn outcome_of(stored: &LedgerEntry, refund: &RefundRequest) -> GatewayOutcome {
    if stored.transaction_id != refund.transaction_id
        || stored.amount != refund.amount.to_string()
        || stored.currency != refund.currency
    {
        GatewayOutcome::Declined {
            reason: format!(
                "refund id {} was already used for a different refund",
                refund.refund_id
            ),
        }
    } else {
        GatewayOutcome::Succeeded {
            gateway_reference: Some(format!("ledger:{}", stored.refund_id)),
        }
    }
}

impl RefundGateway for LedgerGateway {
    fn name(&self) -> &'static str {
        "ledger"
    }

    fn send<'a>(&'a self, refund: &'a RefundRequest) -> BoxFuture<'a, GatewayOutcome> {
        Box::pin(async move {
            match self.record(refund).await {
                Ok(stored) => outcome_of(&stored, refund),
                Err(error) => GatewayOutcome::Unknown {
                    detail: error.to_string(),
                },
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use rust_decimal::Decimal;

    use super::*;
    use crate::store::Store;

    fn refund(id: &str, cents: i64) -> RefundRequest {
        RefundRequest {
            refund_id: id.into(),
            transaction_id: "0190a0a0-0000-7000-8000-000000000001".into(),
            payment_reference: Some("pay-1".into()),
            amount: Decimal::new(cents, 2),
            currency: "EUR".into(),
        }
    }

    fn ledger_at(path: &std::path::Path) -> LedgerGateway {
        LedgerGateway::new(SqliteStore::open(path).unwrap())
    }

    #[tokio::test]
    async fn records_a_refund_once_and_succeeds_every_time_r_4_8() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = ledger_at(&dir.path().join("checkout.db"));

        let first = ledger.send(&refund("rf-1", 12_000)).await;
        let second = ledger.send(&refund("rf-1", 12_000)).await;
        let expected = GatewayOutcome::Succeeded {
            gateway_reference: Some("ledger:rf-1".into()),
        };
        assert_eq!(first, expected);
        assert_eq!(second, expected);

        let entries = ledger
            .entries_for("0190a0a0-0000-7000-8000-000000000001")
            .unwrap();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].amount, "120.00", "scale kept (R-1.4)");
        assert_eq!(entries[0].currency, "EUR");
    }

    #[tokio::test]
    async fn a_recorded_refund_is_committed_and_survives_reopening_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("checkout.db");
        let first = ledger_at(&path);
        assert!(matches!(
            first.send(&refund("rf-1", 500)).await,
            GatewayOutcome::Succeeded { .. }
        ));
        // Committed when answered: another connection sees it before the store closes.
        let raw = Connection::open(&path).unwrap();
        let count = || -> i64 {
            raw.query_row("SELECT count(*) FROM ledger_refunds", [], |r| r.get(0))
                .unwrap()
        };
        assert_eq!(count(), 1);
        first.store.close().await;

        let reopened = ledger_at(&path);
        let outcome = reopened.send(&refund("rf-1", 500)).await;
        assert!(matches!(outcome, GatewayOutcome::Succeeded { .. }));
        assert_eq!(count(), 1, "sent again after a restart: still one row");
        let mode: String = raw
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
    }

    #[tokio::test]
    async fn concurrent_sends_of_one_refund_record_it_once() {
        let dir = tempfile::tempdir().unwrap();
        let a = ledger_at(&dir.path().join("checkout.db"));
        let b = a.clone();
        let r = refund("rf-race", 999);
        let others: Vec<RefundRequest> = (0..50)
            .map(|n| refund(&format!("rf-{n}"), 100 + n))
            .collect();
        let (x, y, rest) = tokio::join!(
            a.send(&r),
            b.send(&r),
            futures_util::future::join_all(others.iter().map(|o| a.send(o)))
        );
        assert!(x.is_definite() && matches!(x, GatewayOutcome::Succeeded { .. }));
        assert!(matches!(y, GatewayOutcome::Succeeded { .. }));
        assert!(
            rest.iter()
                .all(|o| matches!(o, GatewayOutcome::Succeeded { .. })),
            "{rest:?}"
        );
        let entries = a.entries_for(&r.transaction_id).unwrap();
        assert_eq!(entries.len(), 51, "one row for each refund id");
        assert_eq!(
            entries.iter().filter(|e| e.refund_id == "rf-race").count(),
            1
        );
    }

    #[tokio::test]
    async fn a_reused_refund_id_with_other_details_is_declined() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = ledger_at(&dir.path().join("db"));
        ledger.send(&refund("rf-1", 100)).await;
        let outcome = ledger.send(&refund("rf-1", 200)).await;
        assert!(matches!(outcome, GatewayOutcome::Declined { .. }));
        let stored = ledger.lookup("rf-1").unwrap().unwrap();
        assert_eq!(stored.amount, "1.00");
        assert_eq!(ledger.lookup("rf-2").unwrap(), None);
    }

    #[tokio::test]
    async fn a_storage_failure_is_unknown_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let ledger = ledger_at(&path);
        // Dropping the table behind the gateway's back makes its insert fail.
        Connection::open(&path)
            .unwrap()
            .execute_batch("DROP TABLE ledger_refunds")
            .unwrap();
        let outcome = ledger.send(&refund("rf-1", 100)).await;
        assert!(
            matches!(outcome, GatewayOutcome::Unknown { .. }),
            "{outcome:?}"
        );
    }

    #[test]
    fn the_migration_is_valid_and_repeatable() {
        let connection = Connection::open_in_memory().unwrap();
        connection.execute_batch(LEDGER_MIGRATION).unwrap();
        connection.execute_batch(LEDGER_MIGRATION).unwrap();
    }
}
