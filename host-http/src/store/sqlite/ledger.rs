//! The `ledger` refund gateway (the default; sandbox and demo): records each refund in the
//! service's own SQLite database and succeeds.
//!
//! It owns one table, `ledger_refunds`, keyed by the refund id, so that sending the same refund
//! twice records it once (the idempotency every gateway must offer, R-4.8).

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};

use futures_util::future::BoxFuture;

use crate::processors::{GatewayOutcome, RefundGateway, RefundRequest};

/// Schema of the ledger's table. Idempotent (`IF NOT EXISTS`), so the host may list it among its
/// migrations and the gateway may also apply it when it opens the database on its own.
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

/// How long a write waits for another writer before SQLite gives up with `SQLITE_BUSY`.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Failures of the ledger's own storage. Inside [`RefundGateway::send`] they become
/// [`GatewayOutcome::Unknown`], so the refund stays pending and is retried.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// SQLite refused an operation.
    #[error("ledger storage: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// The blocking task running the query did not finish (panicked or was cancelled).
    #[error("ledger task: {0}")]
    Task(String),
    /// The connection lock was poisoned by a panic on another thread.
    #[error("ledger connection lock poisoned")]
    Poisoned,
}

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

/// The `ledger` gateway over its own SQLite connection.
#[derive(Debug, Clone)]
pub struct LedgerGateway {
    connection: Arc<Mutex<Connection>>,
}

/// Per-connection settings: WAL so the ledger's writes do not block the host's readers, a busy
/// timeout so its writes wait for the host's writer instead of failing, and full durability of
/// a recorded refund.
fn configure(connection: &Connection) -> Result<(), rusqlite::Error> {
    connection.busy_timeout(BUSY_TIMEOUT)?;
    connection.pragma_update(None, "journal_mode", "WAL")?;
    connection.pragma_update(None, "synchronous", "FULL")?;
    connection.pragma_update(None, "foreign_keys", "ON")?;
    Ok(())
}

impl LedgerGateway {
    /// Opens (creating if needed) the database at `path` with its own connection and applies
    /// [`LEDGER_MIGRATION`].
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, LedgerError> {
        let path = path.as_ref().to_path_buf();
        let connection = tokio::task::spawn_blocking(move || {
            let connection = Connection::open(&path)?;
            configure(&connection)?;
            connection.execute_batch(LEDGER_MIGRATION)?;
            Ok::<_, LedgerError>(connection)
        })
        .await
        .map_err(|e| LedgerError::Task(e.to_string()))??;
        Ok(LedgerGateway {
            connection: Arc::new(Mutex::new(connection)),
        })
    }

    /// Runs `work` on the connection on a blocking thread.
    async fn with_connection<T, F>(&self, work: F) -> Result<T, LedgerError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, LedgerError> + Send + 'static,
    {
        let connection = Arc::clone(&self.connection);
        tokio::task::spawn_blocking(move || {
            let mut guard = connection.lock().map_err(|_| LedgerError::Poisoned)?;
            work(&mut guard)
        })
        .await
        .map_err(|e| LedgerError::Task(e.to_string()))?
    }

    /// Records `refund` unless its id is already recorded, and returns the entry as stored
    /// (the first one, when the id was already there).
    pub async fn record(&self, refund: &RefundRequest) -> Result<LedgerEntry, LedgerError> {
        let entry = LedgerEntry {
            refund_id: refund.refund_id.clone(),
            transaction_id: refund.transaction_id.clone(),
            amount: refund.amount.to_string(),
            currency: refund.currency.clone(),
            recorded_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        };
        self.with_connection(move |connection| {
            // One immediate transaction: the insert and the read-back see the same row even if
            // another process writes the same id at the same moment.
            let tx =
                connection.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            tx.execute(
                "INSERT INTO ledger_refunds
                     (refund_id, transaction_id, amount, currency, recorded_at)
                 VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (refund_id) DO NOTHING",
                params![
                    entry.refund_id,
                    entry.transaction_id,
                    entry.amount,
                    entry.currency,
                    entry.recorded_at
                ],
            )?;
            let stored =
                select(&tx, &entry.refund_id)?.ok_or(rusqlite::Error::QueryReturnedNoRows)?;
            tx.commit()?;
            Ok(stored)
        })
        .await
    }

    /// The entry recorded for `refund_id`, if any.
    pub async fn lookup(&self, refund_id: &str) -> Result<Option<LedgerEntry>, LedgerError> {
        let refund_id = refund_id.to_owned();
        self.with_connection(move |connection| Ok(select(connection, &refund_id)?))
            .await
    }

    /// Every entry of one transaction, oldest first.
    pub async fn entries_for(&self, transaction_id: &str) -> Result<Vec<LedgerEntry>, LedgerError> {
        let transaction_id = transaction_id.to_owned();
        self.with_connection(move |connection| {
            let mut statement = connection.prepare(
                "SELECT refund_id, transaction_id, amount, currency, recorded_at
                 FROM ledger_refunds WHERE transaction_id = ?1
                 ORDER BY recorded_at, refund_id",
            )?;
            let rows = statement.query_map([transaction_id], entry_from_row)?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
        .await
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
        .query_row(
            "SELECT refund_id, transaction_id, amount, currency, recorded_at
             FROM ledger_refunds WHERE refund_id = ?1",
            [refund_id],
            entry_from_row,
        )
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

    fn refund(id: &str, cents: i64) -> RefundRequest {
        RefundRequest {
            refund_id: id.into(),
            transaction_id: "0190a0a0-0000-7000-8000-000000000001".into(),
            payment_reference: Some("pay-1".into()),
            amount: Decimal::new(cents, 2),
            currency: "EUR".into(),
        }
    }

    #[tokio::test]
    async fn records_a_refund_once_and_succeeds_every_time_r_4_8() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("checkout.db");
        let ledger = LedgerGateway::open(&path).await.unwrap();

        let first = ledger.send(&refund("rf-1", 12_000)).await;
        let second = ledger.send(&refund("rf-1", 12_000)).await;
        let expected = GatewayOutcome::Succeeded {
            gateway_reference: Some("ledger:rf-1".into()),
        };
        assert_eq!(first, expected);
        assert_eq!(second, expected);

        let entries = ledger
            .entries_for("0190a0a0-0000-7000-8000-000000000001")
            .await
            .unwrap();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].amount, "120.00", "scale kept (R-1.4)");
        assert_eq!(entries[0].currency, "EUR");
    }

    #[tokio::test]
    async fn survives_reopening_the_file_and_is_visible_to_another_connection() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("checkout.db");
        {
            let ledger = LedgerGateway::open(&path).await.unwrap();
            ledger.send(&refund("rf-1", 500)).await;
        }
        let reopened = LedgerGateway::open(&path).await.unwrap();
        let outcome = reopened.send(&refund("rf-1", 500)).await;
        assert!(matches!(outcome, GatewayOutcome::Succeeded { .. }));

        let raw = Connection::open(&path).unwrap();
        let count: i64 = raw
            .query_row("SELECT count(*) FROM ledger_refunds", [], |r| r.get(0))
            .unwrap();
        assert_eq!(count, 1);
        let mode: String = raw
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
    }

    #[tokio::test]
    async fn concurrent_sends_of_one_refund_record_it_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("checkout.db");
        let a = LedgerGateway::open(&path).await.unwrap();
        let b = LedgerGateway::open(&path).await.unwrap();
        let r = refund("rf-race", 999);
        let (x, y) = tokio::join!(a.send(&r), b.send(&r));
        assert!(x.is_definite() && matches!(x, GatewayOutcome::Succeeded { .. }));
        assert!(matches!(y, GatewayOutcome::Succeeded { .. }));
        assert_eq!(
            a.entries_for(&r.transaction_id).await.unwrap().len(),
            1,
            "one row for one refund id"
        );
    }

    #[tokio::test]
    async fn a_reused_refund_id_with_other_details_is_declined() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = LedgerGateway::open(dir.path().join("db")).await.unwrap();
        ledger.send(&refund("rf-1", 100)).await;
        let outcome = ledger.send(&refund("rf-1", 200)).await;
        assert!(matches!(outcome, GatewayOutcome::Declined { .. }));
        let stored = ledger.lookup("rf-1").await.unwrap().unwrap();
        assert_eq!(stored.amount, "1.00");
    }

    #[tokio::test]
    async fn a_storage_failure_is_unknown_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let ledger = LedgerGateway::open(&path).await.unwrap();
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
